"""A few vc calls at one benchmark shape and nothing else, for profilers
(ncu, compute-sanitizer): the first call groups, the others are plain steps
(with --drop-in: every call is a call without a layer state).

    ncu --clock-control none --nvtx --nvtx-include "last call/" -k regex:vc_attention \\
        --set full -o prof python3 bench/profile_call.py --shape seq-32k

The last of the --calls calls runs inside an NVTX range named "last call"
(a plain step, or a drop-in call with --drop-in), so a profiler can take
that call's kernels alone, however many the grouping call launched
(tools/ncu_chain.sh).
"""
import argparse
import contextlib
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from needs import torch_or_exit  # noqa: E402

torch = torch_or_exit("profile_call")
from bench_attention import SHAPES, Vcattn, profiled  # noqa: E402
from timing import gpu_gaps  # noqa: E402


def print_timeline(prof):
    """Start offset, duration and the idle gap before each GPU operation (µs),
    the span against the busy time, then the host's CUDA runtime calls on the
    same clock from the call's start: the time before the first launch and
    between launches is the call's own host work."""
    from torch.autograd import DeviceType
    events = prof.events()
    timed, span = gpu_gaps(events, leave_out=("vcattn call",))  # its range on the GPU's row would hide every gap
    if not timed:
        print("timeline: no GPU operations recorded")
        return
    t0 = timed[0][0].time_range.start
    print(f"{'start':>10} {'dur':>10} {'gap':>8}  operation (µs)")
    for e, gap in timed:
        print(f"{e.time_range.start - t0:10.1f} {e.time_range.end - e.time_range.start:10.1f} {gap:8.1f}  {e.name[:90]}")
    idle = sum(gap for _, gap in timed)
    print(f"timeline: span {span:.1f} µs, busy {span - idle:.1f} µs, idle {idle:.1f} µs, {len(timed)} operations")
    api = sorted((e for e in events if e.device_type != DeviceType.CUDA and e.name.startswith("cuda")),
                 key=lambda e: e.time_range.start)
    call = [e for e in events if e.name == "vcattn call"]
    if api and call:
        h0 = call[0].time_range.start
        print(f"{'host at':>10} {'dur':>10}  runtime call (µs, from the call's start)")
        for e in api:
            print(f"{e.time_range.start - h0:10.1f} {e.time_range.end - e.time_range.start:10.1f}  {e.name[:60]}")
        print(f"timeline: the call's host time {call[0].time_range.end - h0:.1f} µs, its first runtime call at "
              f"{api[0].time_range.start - h0:.1f}, its first GPU operation at {t0 - h0:.1f}, its last ends at "
              f"{t0 + span - h0:.1f}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shape", default="seq-32k", choices=list(SHAPES))
    ap.add_argument("--method", default="vc")
    ap.add_argument("--calls", type=int, default=4)
    ap.add_argument("--lib", default=None)
    ap.add_argument("--probe-rows", type=int, default=None,
                    help="V-Smooth's attention probe rows (0: off; default: the method's, 32 for vc)")
    ap.add_argument("--drop-in", action="store_true", help="calls without a layer state (the public call's path)")
    ap.add_argument("--check-finite", action="store_true", help="with the finite check (the public call's default)")
    ap.add_argument("--kernels", action="store_true",
                    help="then print each kernel's GPU time in one more plain step (torch.profiler, CUPTI)")
    ap.add_argument("--timeline", action="store_true",
                    help="with --kernels: every GPU operation of that step in start order, with the idle gaps "
                         "between them, and the step's span against the GPU's busy time")
    ap.add_argument("--host", action="store_true",
                    help="then the host's time a call (median perf_counter of 50 calls, each after a "
                         "synchronization): without the finite check it is the call's own host work; with it, "
                         "also the wait for the preprocessing's flag")
    ap.add_argument("--burst", type=int, default=0,
                    help="then N calls back to back under CUPTI, one synchronization at the end: the GPU's busy "
                         "time against the span, and the largest idle gaps with the operation each one delays")
    args = ap.parse_args()
    vc = Vcattn(args.lib)
    b, h, n, d = SHAPES[args.shape]
    torch.manual_seed(0)
    q, k, v = (torch.randn(b, h, n, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    out = torch.empty_like(q)
    cfg, layer = vc.config(args.method, int(args.check_finite)), None if args.drop_in else vc.layer(40)
    if args.probe_rows is not None:
        cfg.vsmooth_probe_rows = args.probe_rows
    for call in range(args.calls):
        if layer:
            vc.lib.vcattn_layer_set_step(layer, min(call, 1))
        with torch.cuda.nvtx.range("last call") if call == args.calls - 1 else contextlib.nullcontext():
            vc(q, k, v, out, cfg, layer)
    torch.cuda.synchronize()
    if args.kernels:
        from torch.profiler import ProfilerActivity, profile
        from torch.profiler import record_function
        with profile(activities=[ProfilerActivity.CUDA] + ([ProfilerActivity.CPU] if args.timeline else [])) as prof:
            with record_function("vcattn call"):
                vc(q, k, v, out, cfg, layer)
            torch.cuda.synchronize()
        print(prof.key_averages().table(sort_by="cuda_time_total", row_limit=40))
        print_byte_bound(prof, b, h, n, d, args.probe_rows if args.probe_rows is not None else cfg.vsmooth_probe_rows)
        print_split(prof, b, h, n, d)
        if args.timeline:
            print_timeline(prof)
    if args.burst:
        print_burst(lambda: vc(q, k, v, out, cfg, layer), args.burst)
    if args.host:
        print("host: %.1f µs a call (%s, finite check %s); torch SDPA %.1f µs" % (
            host_us(lambda: vc(q, k, v, out, cfg, layer)), "drop-in" if args.drop_in else "plain step",
            "on" if args.check_finite else "off",
            host_us(lambda: torch.nn.functional.scaled_dot_product_attention(q, k, v))))
    if layer:
        vc.lib.vcattn_layer_destroy(layer)


def print_byte_bound(prof, b, h, n, d, probe_rows):
    """Each preprocessing kernel's time against the bytes it must move (byte_bound.py) at the card's peak."""
    from byte_bound import kernel_bytes, match, peak_tbps
    tbps = peak_tbps(torch.cuda.get_device_name())
    if tbps is None:
        print("byte bound: no peak bandwidth known for %s" % torch.cuda.get_device_name())
        return
    table = kernel_bytes(b, h, h, n, d, probe_rows=probe_rows)  # the bench shapes: as many key heads as query heads
    print(f"{'kernel':<48} {'µs':>9} {'MB':>8} {'bound µs':>9} {'share':>6}  (at {tbps} TB/s)")
    for e in prof.key_averages():
        found = match(e.key, table)
        time_us = e.device_time_total / max(e.count, 1)
        if found and time_us > 0:
            label, nbytes = found
            bound = nbytes / (tbps * 1e6)
            print(f"{(label + ': ' + e.key)[:48]:<48} {time_us:9.1f} {nbytes / 1e6:8.1f} {bound:9.1f} "
                  f"{100 * bound / time_us:5.0f}%")


def print_split(prof, b, h, n, d):
    """One line: the attention kernel's time and rate, and the rest of the call's kernels (an A/B's log reads it)."""
    attention = other = 0.0
    for e in prof.key_averages():
        if e.device_time_total > 0:
            if "attention_kernel" in e.key or "attention_wg_kernel" in e.key:
                attention += e.device_time_total
            else:
                other += e.device_time_total
    if attention > 0:
        print("split: attention kernel %.1f µs (%.0f TFLOP/s), the other kernels %.1f µs, %.1f µs in all"
              % (attention, 4.0 * b * h * n * n * d / (attention * 1e6), other, attention + other))


def print_burst(fn, calls, shown=8):
    """Idle time inside a burst of calls: where the host leaves the GPU waiting."""
    timed, span = gpu_gaps(profiled(lambda: [fn() for _ in range(calls)], 1))
    gaps = sorted(((gap, e.name) for e, gap in timed if gap > 0), reverse=True)
    idle = sum(gap for gap, _ in gaps)
    print(f"burst: {calls} calls, span {span:.1f} µs, busy {span - idle:.1f} µs, idle {idle:.1f} µs "
          f"({100 * idle / span if span else 0:.2f}%) in {len(gaps)} gaps")
    for gap, name in gaps[:shown]:
        print(f"burst: gap {gap:8.1f} µs before {name[:80]}")
    # the idle time by the operation it precedes, summed over the burst: which
    # step of a call the GPU waits for (a copy on the stream, a launch)
    by_op = {}
    for gap, name in gaps:
        by_op[name] = by_op.get(name, 0.0) + gap
    for name, total in sorted(by_op.items(), key=lambda x: -x[1])[:shown]:
        print(f"burst: {total:8.1f} µs idle in all ({100 * total / span if span else 0:.2f}% of the span) "
              f"before {name[:80]}")


def host_us(fn, reps=50):
    """Median host time of fn (µs), each call after a synchronization."""
    import statistics
    import time
    fn()
    times = []
    for _ in range(reps):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        times.append(1e6 * (time.perf_counter() - t0))
    return statistics.median(times)


if __name__ == "__main__":
    main()
