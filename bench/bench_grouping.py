"""The grouping step on the GPU: a warm k-means refresh call (step 4 of a
40-step schedule) against a plain call (step 5, permutation reused), and the
refresh call's device time per kernel (bench_attention.kernel_ms: each
kernel's CUPTI span after the operations before it ended, over 3 calls).

With several builds (--libs A,B,...) every build runs on the same inputs in
one process and the refresh calls' outputs are compared bit for bit with the
first build's: a change that keeps every sum in its order must give the same
bits (docs/perf-notes.md, 2026-12-03).

    python bench/bench_grouping.py [--libs build/libvcattn.so,other.so] [--shapes wan2.2-720p,seq-32k]
                                   [--probe-rows N] [--order-rows N]
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from needs import torch_or_exit  # noqa: E402

torch = torch_or_exit("bench_grouping")
from bench_attention import SHAPES, Vcattn, kernel_ms, time_ms  # noqa: E402

REFRESH_STEP, PLAIN_STEP = 4, 5  # of a 40-step schedule: in the window, a refresh step / a reuse step


def bench_build(vc, label, q, k, v, method, reps, probe_rows=0, order_rows=0):
    cfg, layer, out = vc.config(method), vc.layer(40), torch.empty_like(q)
    cfg.vsmooth_probe_rows, cfg.vsmooth_order_rows = probe_rows, order_rows

    def at_step(step):
        vc.lib.vcattn_layer_set_step(layer, step)
        vc(q, k, v, out, cfg, layer)
    at_step(0)  # the cold grouping that gives the refresh its centroids
    refresh_ms = time_ms(lambda: at_step(REFRESH_STEP), reps)
    plain_ms = time_ms(lambda: at_step(PLAIN_STEP), reps)
    at_step(REFRESH_STEP)
    torch.cuda.synchronize()
    refreshed = out.clone()
    attention_ms, per = kernel_ms(lambda: at_step(REFRESH_STEP), 3)
    vc.lib.vcattn_layer_destroy(layer)
    print("  %-28s refresh call %8.2f ms, plain call %8.2f ms: grouping adds %+.0f%%" %
          (label, refresh_ms, plain_ms, 100.0 * (refresh_ms / plain_ms - 1.0)))
    print("      %9.3f ms  vc_attention kernel (median)" % attention_ms)
    for key, ms in sorted(per.items(), key=lambda x: -x[1])[:12]:
        print("      %9.3f ms  %s" % (ms, key))
    return refreshed


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--libs", default="", help="comma-separated libvcattn.so paths (default: the one found)")
    ap.add_argument("--shapes", default="wan2.2-720p,seq-32k")
    ap.add_argument("--method", default="vc")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--probe-rows", type=int, default=0, help="V-Smooth's attention probe rows")
    ap.add_argument("--order-rows", type=int, default=0, help="sampled rows of the order chosen per key head")
    args = ap.parse_args()
    libs = [p for p in args.libs.split(",") if p] or [None]
    builds = [(p or "default library", Vcattn(p)) for p in libs]
    for name in args.shapes.split(","):
        if name not in SHAPES:
            ap.error("unknown shape '%s' (known: %s)" % (name, ", ".join(SHAPES)))
        b, h, n, d = SHAPES[name]
        print("%s (B %d, H %d, N %d, D %d), method %s" % (name, b, h, n, d, args.method))
        torch.manual_seed(0)
        q, k, v = (torch.randn(b, h, n, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
        outputs = [bench_build(vc, label, q, k, v, args.method, args.reps, args.probe_rows, args.order_rows)
                   for label, vc in builds]
        for (label, _), out in zip(builds[1:], outputs[1:]):
            print("  %s against %s: refresh outputs bit-identical: %s" %
                  (label, builds[0][0], torch.equal(out, outputs[0])))
        del q, k, v, outputs
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
