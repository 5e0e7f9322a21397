"""Attention speed on the GPU: vcattn against the peers timed in the same
process (torch SDPA with the cuDNN and flash backends in BF16; SageAttention2
and FlashAttention-3, BF16 and FP8 (the cast to FP8 timed with the call), when
importable: built from their source in the git-ignored peers/ folder, never
committed: put the built package on PYTHONPATH, e.g. peers/sage2_pkg;
FlashAttention-4 BF16 (the paper's baseline; its CuTe DSL kernels compile at
the first call) when its package `flash_attn.cute` is importable). Peers are
timed as whole calls (CUDA events); "vc kernel" is our kernel's CUPTI time.
Effective TFLOP/s = 4 B H Nq Nk D / t; medians of CUDA-event timings after
warm-up. Inputs are far larger than the 60 MB L2 at every shape, so no input
rotation is needed for the long sequences.

Columns: vc kernel = the attention kernel alone (its CUPTI span from the
torch profiler, quantized inputs ready, from the end of the kernel before it:
a chained launch starts early and waits); vc call = the whole call on a plain
step (grouping reused: quantization + attention); grouping = a call that runs
k-means from the previous centroids (warm, 5 iterations); drop-in = a call
without a layer state (V-Smooth's blocks in the principal order, no k-means);
public = vcattn.attention(q, k, v) as a user calls it (the drop-in call with
the input checks on, through the Python front), with its GPU time (every kernel and copy of one
call, summed) and the time per call of 20 back-to-back calls with one
synchronisation at the end (equal to the GPU time when the host never
leaves the GPU idle).

    python bench/bench_attention.py [--shapes wan,longcat,...] [--json F] [--reps N]
"""
import argparse
import ctypes
import json
import os
import re
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from needs import torch_or_exit  # noqa: E402

torch = torch_or_exit("bench_attention")
from vcattn import _capi  # noqa: E402
from timing import (gpu_gaps, median_ms, medians_interleaved_ms, own_spans, paired_ratio, ratio_text,  # noqa: E402
                    round_order, times_interleaved_ms)

SHAPES = {  # name: (B, H, N, D)
    "wan2.2-720p": (1, 40, 75600, 128),
    "longcat-480p": (1, 32, 37400, 128),
    "hunyuan-720p": (1, 16, 111700, 128),
    "seq-32k": (1, 32, 32768, 128),
    "d64-32k": (1, 32, 32768, 64),
    "flux-4608": (1, 24, 4608, 128),
    "seq-8k": (1, 32, 8192, 128),
    "batch4-2k": (4, 32, 2048, 128),
}


def shape_of(name):
    """A named shape, or one written BxHxNxD (e.g. 1x24x4608x128)."""
    if name in SHAPES:
        return SHAPES[name]
    try:
        b, h, n, d = (int(x) for x in name.split("x"))
    except ValueError:
        raise SystemExit("unknown shape %r: one of %s, or BxHxNxD" % (name, ", ".join(SHAPES)))
    return b, h, n, d


def checkout_commit():
    """The commit of this checkout (with -dirty when it has changes), or None;
    $VCATTN_COMMIT instead where the tree is a copy whose git is not current."""
    if os.environ.get("VCATTN_COMMIT"):
        return os.environ["VCATTN_COMMIT"]
    try:
        return subprocess.run(["git", "describe", "--always", "--dirty"], capture_output=True, text=True,
                              cwd=os.path.dirname(os.path.abspath(__file__)), check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None


def first_line(e):
    """The first non-empty line of an exception's message, or its type's name."""
    return next((line for line in str(e).splitlines() if line.strip()), type(e).__name__)


def tflops(shape, ms):
    b, h, n, d = shape
    return 4.0 * b * h * n * n * d / (ms * 1e-3) / 1e12


def time_ms(fn, reps, warmup=1):
    return median_ms(fn, reps, "cuda", warmup)


class Vcattn:
    def __init__(self, lib_path=None):
        self.lib = _capi.load(lib_path)
        self.ctx = ctypes.c_void_p()
        st = self.lib.vcattn_create(ctypes.byref(self.ctx), _capi.BACKEND_CUDA)
        if st:
            raise RuntimeError("vcattn: no CUDA context (status %d)" % st)

    def view(self, t):
        b, h, n, d = t.shape
        s = t.stride()
        dt = {torch.bfloat16: _capi.BF16, torch.float16: _capi.F16, torch.float32: _capi.F32}[t.dtype]
        return _capi.Tensor(t.data_ptr(), dt, b, h, n, d, s[0], s[1], s[2])

    def config(self, method, check_finite=0):
        cfg = _capi.Config()
        if self.lib.vcattn_config_from_method(method.encode(), ctypes.byref(cfg)):
            raise ValueError(method)
        cfg.check_finite = check_finite
        return cfg

    def layer(self, steps=40):
        layer = ctypes.c_void_p()
        self.lib.vcattn_layer_create(ctypes.byref(layer), steps)
        return layer

    def __call__(self, q, k, v, out, cfg, layer=None):
        self.lib.vcattn_set_cuda_stream(self.ctx, ctypes.c_void_p(torch.cuda.current_stream().cuda_stream))
        tq, tk, tv, to = self.view(q), self.view(k), self.view(v), self.view(out)
        st = self.lib.vcattn_attention(self.ctx, ctypes.byref(cfg), ctypes.byref(tq), ctypes.byref(tk),
                                       ctypes.byref(tv), ctypes.byref(to), None, None, layer)
        if st:
            raise RuntimeError(self.lib.vcattn_last_error(self.ctx).decode())


def profiled(fn, reps, warmup=True):
    """The CUPTI events of reps calls of fn, after one call outside the profile (with warmup)."""
    from torch.profiler import ProfilerActivity, profile
    if warmup:
        fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(reps):
            fn()
        torch.cuda.synchronize()
    return prof.events()


def kernel_ms(fn, reps, name="vc_attention"):
    """Median own time (own_spans) of the kernels whose name contains
    `name`, and the mean own time per call of every other operation by kind."""
    spans = own_spans(profiled(fn, reps))
    times = [t / 1e3 for e, t in spans if name in e.name]
    pre = {}
    for e, t in spans:
        if name not in e.name:
            found = re.findall(r"(\w+_kernel|Memcpy \w+|Memset)", e.name)
            pre.setdefault(found[0] if found else e.name[:40], []).append(t / 1e3)
    return (statistics.median(times) if times else float("nan")), {k: sum(v) / reps for k, v in pre.items()}


def gpu_ms(fn, reps, warmup=True):
    """The GPU time of one call: every kernel, copy and set it runs (CUPTI), summed, averaged over reps."""
    from torch.autograd import DeviceType
    return sum(e.device_time for e in profiled(fn, reps, warmup) if e.device_type == DeviceType.CUDA) / 1e3 / reps


def gpu_ms_interleaved(fns, reps):
    """The GPU time of each callable (every kernel, copy and set of one call,
    CUPTI, summed), one profiled call of each in turn, round by round (each
    round in its own order): the median of each. For A/B ratios of GPU work,
    as medians_interleaved_ms is for wall time (a run's clock drift reaches
    both sides alike)."""
    for fn in fns:
        fn()
    sums = [[] for _ in fns]
    for r in range(reps):
        for i in round_order(len(fns), r):
            sums[i].append(gpu_ms(fns[i], 1, warmup=False))
    return [statistics.median(t) for t in sums]


def bench_shape(vc, name, shape, reps, check_finite=0, method="vc", probe_rows=0):
    from torch.nn.attention import SDPBackend, sdpa_kernel
    import torch.nn.functional as F
    b, h, n, d = shape
    torch.manual_seed(0)
    q, k, v = (torch.randn(b, h, n, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    out = torch.empty_like(q)
    row = {"shape": name, "B": b, "H": h, "N": n, "D": d}

    def sdpa(backend):
        with sdpa_kernel([backend]):
            return time_ms(lambda: F.scaled_dot_product_attention(q, k, v), reps)
    for label, backend in (("cudnn", SDPBackend.CUDNN_ATTENTION), ("flash", SDPBackend.FLASH_ATTENTION)):
        try:
            row[label + "_ms"] = sdpa(backend)
        except RuntimeError as e:
            row[label + "_ms"] = None
            print("  %s unavailable: %s" % (label, first_line(e)), file=sys.stderr)
    try:
        from sageattention import sageattn
        row["sage2_ms"] = time_ms(lambda: sageattn(q, k, v, tensor_layout="HND"), reps)
    except ImportError:
        row["sage2_ms"] = None
    row["fa3_ms"] = row["fa3_fp8_ms"] = row["fa4_ms"] = None
    try:
        import flash_attn_interface as fa3  # FlashAttention-3 (hopper/), when built
    except ImportError:
        fa3 = None
    try:
        from flash_attn.cute import flash_attn_func as fa4  # FlashAttention-4 (CuTe DSL, BF16 on sm_90)
    except ImportError:
        fa4 = None
    except Exception as e:  # installed but broken (a DSL or driver mismatch): time the others
        print("  FlashAttention-4 not usable: %s" % first_line(e), file=sys.stderr)
        fa4 = None
    if fa3 is not None or fa4 is not None:  # their layout is [B, N, H, D]
        qn, kn, vn = (x.transpose(1, 2).contiguous() for x in (q, k, v))
        calls = []
        if fa3 is not None:
            def fp8_call():  # the cast is part of the call, as quantization is in ours
                fa3.flash_attn_func(*(x.to(torch.float8_e4m3fn) for x in (qn, kn, vn)))
            calls += [("fa3_ms", lambda: fa3.flash_attn_func(qn, kn, vn)), ("fa3_fp8_ms", fp8_call)]
        if fa4 is not None:  # the first call compiles the kernel: time_ms's warm-up takes it
            calls += [("fa4_ms", lambda: fa4(qn, kn, vn))]
        for key, fn in calls:
            try:
                row[key] = time_ms(fn, reps)
            except Exception as e:  # a build without FP8 or this head dim, a failed JIT, out of memory
                print("  %s failed: %s" % (key, first_line(e)), file=sys.stderr)
                torch.cuda.synchronize()  # a fault that broke the context stops the bench here, not later
        del qn, kn, vn

    cfg = vc.config(method, check_finite)
    layer = vc.layer(40)
    vc(q, k, v, out, cfg, layer)                 # step 0: cold grouping
    vc.lib.vcattn_layer_set_step(layer, 1)       # plain step: permutation reused
    # the plain step and the drop-in call (no layer state) in turn, round by
    # round: their ratio is the principal order's cost, not the machine's drift
    row["vc_call_ms"], row["vc_dropin_ms"] = medians_interleaved_ms(
        [lambda: vc(q, k, v, out, cfg, layer), lambda: vc(q, k, v, out, cfg)], reps, "cuda")
    row["vc_kernel_ms"], row["vc_preprocess_ms"] = kernel_ms(lambda: vc(q, k, v, out, cfg, layer), reps)

    def warm_group():
        vc.lib.vcattn_layer_set_step(layer, 4)   # in the window, refresh step: warm k-means
        vc(q, k, v, out, cfg, layer)
    # As many calls as the plain step: a median of two read +18% over it at
    # Wan2.2 where bench_grouping.py's five calls read +10% (2026-12-03).
    row["vc_grouping_ms"] = time_ms(warm_group, reps)
    if probe_rows:  # the attention probe's cost: with and without it, plain step and drop-in, in turn
        cfg_0, cfg_p = vc.config(method, check_finite), vc.config(method, check_finite)
        cfg_0.vsmooth_probe_rows, cfg_p.vsmooth_probe_rows = 0, probe_rows
        vc.lib.vcattn_layer_set_step(layer, 1)
        times = times_interleaved_ms(
            [lambda: vc(q, k, v, out, cfg_0, layer), lambda: vc(q, k, v, out, cfg_p, layer),
             lambda: vc(q, k, v, out, cfg_0), lambda: vc(q, k, v, out, cfg_p)], reps, "cuda")
        (row["vc_call_again_ms"], row["vc_probe_call_ms"], row["vc_dropin_again_ms"],
         row["vc_probe_dropin_ms"]) = (statistics.median(t) for t in times)
        # with the probe over without, round by round: the median ratio and its interval
        row["vc_probe_call_ratio"] = paired_ratio(times[0], times[1])
        row["vc_probe_dropin_ratio"] = paired_ratio(times[2], times[3])
        # the GPU time the probe adds (every kernel summed): its work, free of the host's share
        (row["vc_call_gpu_ms"], row["vc_probe_call_gpu_ms"], row["vc_dropin_gpu_ms"],
         row["vc_probe_dropin_gpu_ms"]) = gpu_ms_interleaved(
            [lambda: vc(q, k, v, out, cfg_0, layer), lambda: vc(q, k, v, out, cfg_p, layer),
             lambda: vc(q, k, v, out, cfg_0), lambda: vc(q, k, v, out, cfg_p)], reps)
    cfg2 = vc.config("sage2", check_finite)
    row["sage2_ours_call_ms"] = time_ms(lambda: vc(q, k, v, out, cfg2), reps)
    vc.lib.vcattn_layer_destroy(layer)
    row.update(bench_public(q, k, v, reps, method))
    return row


def bench_public(q, k, v, reps, method):
    """The public call: its time, its GPU time, 20 back-to-back calls."""
    import vcattn
    def call():
        return vcattn.attention(q, k, v, method=method)
    row = {"public_ms": time_ms(call, reps)}
    row["public_gpu_ms"] = gpu_ms(call, reps)
    def burst():
        for _ in range(20):
            call()
    row["public_burst20_ms"] = time_ms(burst, reps) / 20
    # The same burst under CUPTI: its GPU work against the span it took on
    # the GPU. Idle time inside the span is what the host left the GPU
    # waiting (a stall); the GPU time is the burst's own, at the clocks the
    # burst ran at, where one profiled call may have run faster.
    from torch.autograd import DeviceType
    events = profiled(burst, 1)
    timed, span = gpu_gaps(events)
    row["public_burst20_gpu_ms"] = sum(e.device_time for e in events if e.device_type == DeviceType.CUDA) / 1e3 / 20
    row["public_burst20_idle_pct"] = 100.0 * sum(gap for _, gap in timed) / span if span else float("nan")
    return row


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shapes", default=",".join(SHAPES))
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--json", default=None)
    ap.add_argument("--lib", default=None)
    ap.add_argument("--check-finite", action="store_true",
                    help="time calls with the input checks on (the library's default; off here by default)")
    ap.add_argument("--method", default="vc", help="the method timed as 'vc' (e.g. vc+qsmooth)")
    ap.add_argument("--probe-rows", type=int, default=0,
                    help="also time vc with V-Smooth's attention probe of this many rows against vc without it "
                         "(plain step, drop-in; vc itself probes 32 rows)")
    args = ap.parse_args()
    vc = Vcattn(args.lib)
    meta = {"torch": torch.__version__, "device": torch.cuda.get_device_name(),
            "vcattn": vc.lib.vcattn_version_string().decode(), "date": time.strftime("%Y-%m-%d"),
            "commit": checkout_commit(), "lib": args.lib or os.environ.get("VCATTN_LIB", "default")}
    rows = []
    for name in args.shapes.split(","):
        print("bench %s ..." % name, file=sys.stderr)
        rows.append(bench_shape(vc, name, shape_of(name), args.reps, int(args.check_finite), args.method,
                                args.probe_rows))
        torch.cuda.empty_cache()
        if args.json:  # after every shape: a run stopped by a time limit keeps the shapes it timed
            with open(args.json, "w") as f:
                json.dump({"meta": meta, "rows": rows}, f, indent=1)
    print("TFLOP/s (ratio to cuDNN BF16), medians of %d runs" % args.reps)
    peers = [(k, label) for k, label in (("sage2_ms", "SA2 call"), ("fa3_ms", "FA3 bf16"),
                                         ("fa3_fp8_ms", "FA3 fp8"), ("fa4_ms", "FA4 bf16"))
             if any(r.get(k) for r in rows)]
    print(("%-14s" + " %12s" * (7 + len(peers))) % (("shape", "cuDNN", "flash", "vc kernel", "vc call",
                                                     "grouping", "drop-in", "sage2*") +
                                                    tuple(l for _, l in peers)))
    for r in rows:
        shape = (r["B"], r["H"], r["N"], r["D"])
        base = r["cudnn_ms"]

        def cell(ms):
            if ms is None or ms != ms:
                return "%12s" % "-"
            return "%5.0f (%.2fx)" % (tflops(shape, ms), base / ms if base else float("nan"))
        print(" ".join(["%-14s" % r["shape"]] + [cell(r[k]) for k in (
            "cudnn_ms", "flash_ms", "vc_kernel_ms", "vc_call_ms", "vc_grouping_ms", "vc_dropin_ms",
            "sage2_ours_call_ms")] +
                       [cell(r[k]) for k, _ in peers]))
        print("%-14s drop-in call time / plain step time: %.3f" % ("", r["vc_dropin_ms"] / r["vc_call_ms"]))
        print("%-14s public call %.3f ms: %.2fx cuDNN; GPU time %.3f ms; 20 back-to-back: %.3f ms a call "
              "(%.3f x the GPU time; %.3f x its own GPU time, the GPU idle %.2f%% of its span)" % (
                  "", r["public_ms"], base / r["public_ms"] if base else 0, r["public_gpu_ms"], r["public_burst20_ms"],
                  r["public_burst20_ms"] / r["public_gpu_ms"], r["public_burst20_ms"] / r["public_burst20_gpu_ms"],
                  r["public_burst20_idle_pct"]))
        if r.get("vc_probe_call_ms"):  # each against its own run, timed in turn with it
            print("%-14s with the attention probe: plain step %.3f ms (%+.2f%% over %.3f), drop-in %.3f ms "
                  "(%+.2f%% over %.3f)" % (
                      "", r["vc_probe_call_ms"], 100 * (r["vc_probe_call_ms"] / r["vc_call_again_ms"] - 1),
                      r["vc_call_again_ms"], r["vc_probe_dropin_ms"],
                      100 * (r["vc_probe_dropin_ms"] / r["vc_dropin_again_ms"] - 1), r["vc_dropin_again_ms"]))
            print("%-14s the probe round by round: plain step %s, drop-in %s" % (
                "", ratio_text(r["vc_probe_call_ratio"]), ratio_text(r["vc_probe_dropin_ratio"])))
            print("%-14s GPU time with the probe: plain step %+.2f%% (%.3f over %.3f ms), drop-in %+.2f%% "
                  "(%.3f over %.3f)" % (
                      "", 100 * (r["vc_probe_call_gpu_ms"] / r["vc_call_gpu_ms"] - 1), r["vc_probe_call_gpu_ms"],
                      r["vc_call_gpu_ms"], 100 * (r["vc_probe_dropin_gpu_ms"] / r["vc_dropin_gpu_ms"] - 1),
                      r["vc_probe_dropin_gpu_ms"], r["vc_dropin_gpu_ms"]))
        if r.get("sage2_ms"):
            print("%-14s vc call speed / SageAttention2 call speed: %.2fx (drop-in %.2fx)" %
                  ("", r["sage2_ms"] / r["vc_call_ms"], r["sage2_ms"] / r["vc_dropin_ms"]))
        if r.get("fa4_ms"):  # the paper's H200 claim: the vc kernel 1.46x BF16 FlashAttention-4
            print("%-14s vc kernel / vc call speed over FlashAttention-4 BF16: %.2fx / %.2fx" %
                  ("", r["fa4_ms"] / r["vc_kernel_ms"], r["fa4_ms"] / r["vc_call_ms"]))
    def found(key):
        return "timed" if any(r[key] for r in rows) else "not importable here"
    print("sage2* = our sage2 variant (exp-then-cast, no V-Smooth); SageAttention2: %s; FlashAttention-3: %s; "
          "FlashAttention-4: %s" % (found("sage2_ms"), found("fa3_ms"), found("fa4_ms")))


if __name__ == "__main__":
    main()
