"""Study 7: error through a whole network. A small WanTransformer3DModel with
random weights (diffusers, no download) runs a short flow-matching denoising
loop once with PyTorch SDPA (the reference) and once per vcattn method on
every self-attention (vcattn.diffusers; CPU backend on CPU tensors); the
final latents are compared by PSNR and relative L2, per method.

    python tools/study_network.py --json study-network.json -o docs/figures/study-network.png
"""
import argparse
import json
import math
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import vcattn.diffusers  # noqa: E402

METHODS = ["bf16", "fp8-naive", "sage2", "sage2+hadamard", "vsmooth", "vc", "sage3-4bit",
           "sage3-4bit+hadamard", "vsmooth-4bit"]


def build(args):
    from diffusers import WanTransformer3DModel
    torch.manual_seed(args.seed)
    model = WanTransformer3DModel(patch_size=(1, 2, 2), num_attention_heads=args.heads,
                                  attention_head_dim=args.head_dim, in_channels=16, out_channels=16,
                                  text_dim=64, freq_dim=64, ffn_dim=4 * args.heads * args.head_dim,
                                  num_layers=args.layers, cross_attn_norm=True,
                                  qk_norm="rms_norm_across_heads", rope_max_seq_len=256).eval()
    # diffusers zero-initialises some output projections; random weights everywhere
    # make every block matter, as in a trained model.
    # The modulation tables start near zero too; at unit scale the attention
    # output reaches the residual stream with a weight of order one.
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "scale_shift_table" in name:
                torch.nn.init.normal_(p, std=1.0)
            elif p.dim() >= 2:
                torch.nn.init.normal_(p, std=p.shape[-1] ** -0.5)
    return model


def denoise(model, args):
    g = torch.Generator().manual_seed(args.seed + 1)
    x = torch.randn(1, 16, args.frames, args.height, args.width, generator=g)
    start = x.clone()
    text = torch.randn(1, 16, 64, generator=g)
    sigmas = torch.linspace(1.0, 0.0, args.steps + 1)
    with torch.no_grad():
        for i in range(args.steps):
            t = torch.tensor([1000.0 * float(sigmas[i])])
            v = model(x, timestep=t, encoder_hidden_states=text, return_dict=False)[0]
            x = x + (sigmas[i + 1] - sigmas[i]) * v
    return x, start


def displacement_error(out, ref, start):
    """|out - ref| relative to how far the loop moved the latents (|ref - start|):
    the noise both runs share does not dilute the error."""
    return ((out - ref).norm() / (ref - start).norm()).item()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--head-dim", type=int, default=64)
    ap.add_argument("--frames", type=int, default=5)
    ap.add_argument("--height", type=int, default=32)
    ap.add_argument("--width", type=int, default=48)
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--methods", default=",".join(METHODS))
    ap.add_argument("--json", default=None)
    ap.add_argument("-o", "--out", default=None, help="PNG plot")
    args = ap.parse_args()
    model = build(args)
    tokens = args.frames * (args.height // 2) * (args.width // 2)
    print("network: %d blocks, %d heads x %d, %d tokens, %d steps" % (args.layers, args.heads, args.head_dim,
                                                                      tokens, args.steps), file=sys.stderr)
    ref, start = denoise(model, args)
    peak = ref.abs().max().item()
    rows = []
    for method in args.methods.split(","):
        vcattn.diffusers.enable(model, num_inference_steps=args.steps, method=method)
        try:
            out, _ = denoise(model, args)
        finally:
            vcattn.diffusers.disable(model)
        mse = torch.mean((out - ref) ** 2).item()
        rows.append({"method": method, "psnr_db": 10 * math.log10(peak * peak / mse) if mse > 0 else float("inf"),
                     "rel_l2": ((out - ref).norm() / ref.norm()).item(),
                     "displacement_rel_l2": displacement_error(out, ref, start)})
        print("%-22s PSNR %6.2f dB  rel L2 %.2e  displacement error %.3f%%" % (
            method, rows[-1]["psnr_db"], rows[-1]["rel_l2"], 100 * rows[-1]["displacement_rel_l2"]))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"config": vars(args), "tokens": tokens, "rows": rows}, f, indent=1)
    if args.out:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        fig, ax = plt.subplots(figsize=(8, 3.5))
        ax.bar(range(len(rows)), [r["psnr_db"] for r in rows],
               color=["tab:red" if r["method"] in ("vc", "vsmooth", "vsmooth-4bit") else "tab:gray" for r in rows])
        ax.set_xticks(range(len(rows)))
        ax.set_xticklabels([r["method"] for r in rows], rotation=30, ha="right", fontsize=8)
        ax.set_ylabel("PSNR of final latents vs SDPA (dB)")
        ax.set_title("%d-step denoising, random %d-block Wan transformer, %d tokens" % (args.steps, args.layers, tokens),
                     fontsize=9)
        fig.tight_layout()
        fig.savefig(args.out, dpi=110)


if __name__ == "__main__":
    main()
