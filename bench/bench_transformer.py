"""One denoising forward of a diffusers WanTransformer3DModel at the published
Wan2.1-1.3B or Wan2.2-14B (A14B expert) config, random BF16 weights made on
the GPU (no download), 720p / 81 frames (21 x 45 x 80 = 75,600 tokens):
timed with SDPA (cuDNN), with vcattn on a grouping step and on a plain step,
and with SageAttention2 when importable; prints the per-step speedups, the
speedup averaged over the 40-step schedule (grouping on steps 0, 4, 8), and
the attention share of the SDPA forward. The plain step is timed again with
Wan's RoPE on the other side (in PyTorch when it is fused, and the reverse),
so the fused RoPE's gain is measured in the same process.

    python bench/bench_transformer.py --config wan2.2-14b [--layers N] [--json F]
    python bench/bench_transformer.py --tiny --device cpu      # smoke run of the script itself
"""
import argparse
import json
import os
import statistics
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from needs import cuda_or_exit, torch_or_exit  # noqa: E402

torch = torch_or_exit("bench_transformer", cuda=False)
import vcattn.diffusers  # noqa: E402
from timing import median_ms  # noqa: E402

CONFIGS = {  # published transformer configs (diffusers naming)
    "wan2.1-1.3b": dict(num_attention_heads=12, attention_head_dim=128, ffn_dim=8960, num_layers=30),
    "wan2.2-14b": dict(num_attention_heads=40, attention_head_dim=128, ffn_dim=13824, num_layers=40),
    "tiny": dict(num_attention_heads=2, attention_head_dim=64, ffn_dim=256, num_layers=2),
}
COMMON = dict(patch_size=(1, 2, 2), in_channels=16, out_channels=16, text_dim=4096, freq_dim=256,
              cross_attn_norm=True, qk_norm="rms_norm_across_heads", eps=1e-6, rope_max_seq_len=1024)


def build(name, device, num_layers=None):
    """(model, latents, text embeddings, tokens) of config name with random
    weights, BF16 on the GPU (float32 on the CPU), 720p / 81 frames (small
    latents for "tiny"); num_layers overrides the config's block count."""
    tiny = name == "tiny"
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    latent = (1, 16, 3, 16, 16) if tiny else (1, 16, 21, 90, 160)  # 720p, 81 frames
    config = dict(CONFIGS[name], **({"num_layers": num_layers} if num_layers else {}))
    from diffusers import WanTransformer3DModel
    torch.manual_seed(0)
    with torch.device(device):
        model = WanTransformer3DModel(**config, **COMMON).to(dtype).eval()
        # as from_pretrained(torch_dtype=...) does: these stay in float32
        for module_name, module in model.named_modules():
            if any(k in module_name.split(".") for k in model._keep_in_fp32_modules):
                module.float()
        x = torch.randn(latent, dtype=dtype)
        text = torch.randn(1, 64 if tiny else 512, 4096, dtype=dtype)
    return model, x, text, latent[2] * (latent[3] // 2) * (latent[4] // 2)


def timed(fn, device, reps):
    return median_ms(fn, reps, device, warmup=0)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", default="wan2.2-14b", choices=[c for c in CONFIGS if c != "tiny"])
    ap.add_argument("--tiny", action="store_true", help="a 2-block model on small latents (script check)")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--method", default="vc")
    ap.add_argument("--fuse-rope", type=int, default=1, choices=(0, 1),
                    help="1: Wan's RoPE inside vcattn's quantizers (enable()'s default); 0: in PyTorch")
    ap.add_argument("--layers", type=int, default=None, help="blocks (default: the config's)")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    cuda_or_exit("bench_transformer", args.device)
    from torch.nn.attention import SDPBackend, sdpa_kernel

    name = "tiny" if args.tiny else args.config
    model, x, text, tokens = build(name, args.device, args.layers)

    def forward(t=500.0):
        with torch.no_grad():
            return model(x, timestep=torch.tensor([t], device=args.device), encoder_hidden_states=text,
                         return_dict=False)[0]

    backends = [SDPBackend.CUDNN_ATTENTION] if args.device == "cuda" else [SDPBackend.MATH]
    with sdpa_kernel(backends):
        forward()
        sdpa_ms = timed(forward, args.device, args.reps)
        attention_share = None
        if args.device == "cuda":
            from torch.profiler import ProfilerActivity, profile
            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                forward()
                torch.cuda.synchronize()
            events = [e for e in prof.events() if e.device_time > 0]
            total = sum(e.device_time for e in events)
            attn = sum(e.device_time for e in events if any(s in e.name.lower() for s in ("fmha", "flash", "cudnn", "attention")))
            attention_share = attn / total if total else None

        def plain_step_ms():
            # timestep 1000 starts a generation; 999 is step 1, a plain step
            plain = []
            for _ in range(args.reps):
                forward(1000.0)
                plain.append(timed(lambda: forward(999.0), args.device, 1))
            return statistics.median(plain)

        session = vcattn.diffusers.enable(model, num_inference_steps=args.steps, method=args.method,
                                          fuse_rope=bool(args.fuse_rope))
        try:
            # timestep 1000 starts a generation (step 0: cold k-means, then warm from the
            # previous centroids); 999 is step 1, which reuses the permutation (a plain
            # step). Repeating 1000 would not regroup: passes of one step share its grouping.
            forward(1000.0)
            grouped = []
            for _ in range(args.reps):
                forward(999.0)
                grouped.append(timed(lambda: forward(1000.0), args.device, 1))
            group_ms = statistics.median(grouped)
            plain_ms = plain_step_ms()
            last_step = session.step
        finally:
            vcattn.diffusers.disable(model)
        vcattn.diffusers.enable(model, num_inference_steps=args.steps, method=args.method,
                                fuse_rope=not args.fuse_rope)
        try:
            other_rope_ms = plain_step_ms()
        finally:
            vcattn.diffusers.disable(model)

        sage_ms = None
        try:
            import sageattention  # noqa: F401 (diffusers' 'sage' backend needs it)
            model.set_attention_backend("sage")  # diffusers' SageAttention dispatcher backend
            try:
                forward()
                sage_ms = timed(forward, args.device, args.reps)
            finally:
                model.set_attention_backend("native")
        except ImportError:
            pass

    grouping_steps = len(range(0, (args.steps + 3) // 4, 4))  # steps 0, 4, 8 of 40 group
    avg_ms = (grouping_steps * group_ms + (args.steps - grouping_steps) * plain_ms) / args.steps
    row = {"config": name, "tokens": tokens, "device": args.device, "sdpa_ms": sdpa_ms,
           "vc_grouping_ms": group_ms, "vc_plain_ms": plain_ms, "vc_schedule_avg_ms": avg_ms,
           "speedup_plain": sdpa_ms / plain_ms, "speedup_grouping": sdpa_ms / group_ms,
           "speedup_schedule": sdpa_ms / avg_ms, "attention_share_sdpa": attention_share,
           "sage2_ms": sage_ms, "method": args.method, "last_step": last_step, "fuse_rope": args.fuse_rope,
           "layers": args.layers or CONFIGS[name]["num_layers"],
           "vc_plain_rope_fused_ms": plain_ms if args.fuse_rope else other_rope_ms,
           "vc_plain_rope_pytorch_ms": other_rope_ms if args.fuse_rope else plain_ms}
    print("%s, %d tokens, %s: SDPA %.1f ms; vcattn grouping step %.1f ms (%.2fx), plain step %.1f ms (%.2fx), "
          "schedule average %.2fx; attention share of the SDPA forward %s" % (
              name, tokens, args.device, sdpa_ms, group_ms, row["speedup_grouping"], plain_ms,
              row["speedup_plain"], row["speedup_schedule"],
              "%.0f%%" % (100 * attention_share) if attention_share is not None else "n/a"))
    print("plain step with Wan's RoPE fused into the quantizers %.1f ms, applied in PyTorch %.1f ms (%.3fx)" % (
        row["vc_plain_rope_fused_ms"], row["vc_plain_rope_pytorch_ms"],
        row["vc_plain_rope_pytorch_ms"] / row["vc_plain_rope_fused_ms"]))
    if sage_ms:
        print("SageAttention2 (diffusers 'sage' backend): %.1f ms (%.2fx SDPA)" % (sage_ms, sdpa_ms / sage_ms))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(row, f, indent=1)


if __name__ == "__main__":
    main()
