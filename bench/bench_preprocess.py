"""The preprocessing of one plain `vc` call (quantized operands from bf16 Q, K,
V with the layer's permutation) three ways, timed in one process:

  fused:   vcattn's kernels (K channel mean, Q/K rows, V statistics, V scales,
           V records), their summed CUPTI durations inside a real call;
  unfused: the same steps as separate torch operations, each writing its
           full-size intermediate to memory (K mean, gather, subtraction,
           scale search, rounding; V gather, block means, residual, channel
           scales, E4M3 cast, transposed copy) -- the ladder's other end;
  bytes:   the least the chain must read and write, at 4.16 TB/s.

The unfused chain mirrors the formats' granularities (docs/formats.md) but is
a timing reference, not a second implementation: its codes are not compared.

    python bench/bench_preprocess.py [--shapes wan2.2-720p,...] [--reps N] [--json F]
    python bench/bench_preprocess.py --device cpu   # the torch chain only, tiny shape
"""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from needs import cuda_or_exit, torch_or_exit  # noqa: E402

torch = torch_or_exit("bench_preprocess", cuda=False)
from timing import median_ms  # noqa: E402

SHAPES = {"tiny": (1, 2, 1000, 128)}
HBM_BYTES_PER_S = 4.16e12
TILE = 128


def unfused_chain(q, k, v, perm):
    """Quantized operands of one call, one torch operation per step."""
    b, h, n, d = k.shape
    tiles = -(-n // TILE)
    pad = tiles * TILE - n
    # Q: INT8, one scale per token.
    qf = q.float()
    q_scale = qf.abs().amax(-1, keepdim=True).clamp_min(1e-30) / 127.0
    q8 = (qf / q_scale).round().clamp(-127, 127).to(torch.int8)
    # K: channel mean out, gathered by the permutation, INT8 per 128-key tile
    # and lane group (keys with the same (key mod 8) / 2).
    k_mean = k.float().mean(2, keepdim=True)
    kp = k.index_select(2, perm)
    ks = torch.nn.functional.pad(kp.float() - k_mean, (0, 0, 0, pad))
    groups = ks.view(b, h, tiles, TILE // 8, 4, 2, d)
    k_scale = groups.abs().amax(dim=(3, 5, 6), keepdim=True).clamp_min(1e-30) / 127.0
    k8 = (groups / k_scale).round().clamp(-127, 127).to(torch.int8)
    # V: gathered, 128-row block means out, residual E4M3 with per-channel
    # scales, stored transposed per tile (the PV operand's layout).
    vp = torch.nn.functional.pad(v.index_select(2, perm).float(), (0, 0, 0, pad))
    blocks = vp.view(b, h, tiles, TILE, d)
    v_mean = blocks.mean(3, keepdim=True)
    resid = blocks - v_mean
    v_scale = resid.abs().amax(dim=(2, 3), keepdim=True).clamp_min(1e-30) / 448.0
    v8 = (resid / v_scale).to(torch.float8_e4m3fn)
    vt = v8.transpose(3, 4).contiguous()
    return q8, k8, vt, v_mean, q_scale, k_scale, v_scale


def fused_bytes(b, h, n, d):
    """The floor: bf16 Q, K, V each read once, INT8 Q and K and E4M3 V
    written once, with their scales and the float32 block means (the tile
    padding, the ones rows and the permutation's reads, under 1% at D 128,
    left out). Our kernels read K and V twice: the mean or statistics pass,
    then the encoding."""
    elems = b * h * n * d
    tiles = -(-n // TILE)
    return 3 * 2 * elems + 3 * elems + b * h * (n * 4 + tiles * 4 * 4 + tiles * d * 4 + d * 4)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shapes", default=None, help="default: the paper shapes on cuda, tiny on cpu")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    ap.add_argument("--json", default=None)
    ap.add_argument("--lib", default=None)
    args = ap.parse_args()
    cuda_or_exit("bench_preprocess", args.device)
    if args.device == "cuda":
        from bench_attention import SHAPES as GPU_SHAPES, Vcattn, kernel_ms
        SHAPES.update(GPU_SHAPES)
        vc = Vcattn(args.lib)
    shapes = args.shapes or ("wan2.2-720p,longcat-480p,hunyuan-720p,seq-32k,d64-32k"
                             if args.device == "cuda" else "tiny")
    rows = []
    for name in shapes.split(","):
        b, h, n, d = SHAPES[name]
        torch.manual_seed(0)
        q, k, v = (torch.randn(b, h, n, d, device=args.device, dtype=torch.bfloat16) for _ in range(3))
        perm = torch.randperm(n, device=args.device)
        row = {"shape": name, "B": b, "H": h, "N": n, "D": d,
               "unfused_ms": median_ms(lambda: unfused_chain(q, k, v, perm), args.reps, args.device),
               "bytes_ms": 1e3 * fused_bytes(b, h, n, d) / HBM_BYTES_PER_S}
        if args.device == "cuda":
            out = torch.empty_like(q)
            cfg, layer = vc.config("vc"), vc.layer(40)
            vc(q, k, v, out, cfg, layer)              # step 0 groups
            vc.lib.vcattn_layer_set_step(layer, 1)    # plain steps reuse its permutation
            _, pre = kernel_ms(lambda: vc(q, k, v, out, cfg, layer), args.reps)
            row["fused_ms"] = sum(pre.values())
            row["fused_kernels_ms"] = pre
            vc.lib.vcattn_layer_destroy(layer)
        rows.append(row)
        del q, k, v
        if args.device == "cuda":
            torch.cuda.empty_cache()
    print("%-14s %12s %12s %12s %10s" % ("shape", "unfused ms", "fused ms", "bytes ms", "fused/bytes"))
    for r in rows:
        fused = r.get("fused_ms")
        print("%-14s %12.2f %12s %12.2f %10s" % (r["shape"], r["unfused_ms"],
                                                 "%.2f" % fused if fused else "-", r["bytes_ms"],
                                                 "%.1fx" % (fused / r["bytes_ms"]) if fused else "-"))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"rows": rows, "device": args.device}, f, indent=1)


if __name__ == "__main__":
    main()
