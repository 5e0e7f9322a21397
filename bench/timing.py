"""Median wall time of a callable: CUDA events on the GPU, perf_counter on the CPU."""
import statistics
import time

import torch


def _once(fn, device):
    if device == "cuda":
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        return start.elapsed_time(end)
    t0 = time.perf_counter()
    fn()
    return 1e3 * (time.perf_counter() - t0)


def median_ms(fn, reps, device="cuda", warmup=1):
    for _ in range(warmup):
        fn()
    return statistics.median(_once(fn, device) for _ in range(reps))


def medians_interleaved_ms(fns, reps, device="cuda", warmup=1):
    """The median of each callable, timed in turn round by round, so a drift
    of the machine (clocks, heat) reaches each alike: for ratios of two ways
    to do one thing."""
    for fn in fns:
        for _ in range(warmup):
            fn()
    times = [[] for _ in fns]
    for _ in range(reps):
        for fn, t in zip(fns, times):
            t.append(_once(fn, device))
    return [statistics.median(t) for t in times]
