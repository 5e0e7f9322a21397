"""Median wall time of a callable: CUDA events on the GPU, perf_counter on the CPU."""
import random
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


def round_order(n, r):
    """Round r's order of n callables timed in turn: shuffled with the round
    as the seed, so that none always follows the same one (a call may run at
    the clocks its predecessor left) and a run repeats its orders."""
    order = list(range(n))
    random.Random(r).shuffle(order)
    return order


def medians_interleaved_ms(fns, reps, device="cuda", warmup=1):
    """The median of each callable, timed in turn round by round (each round
    in its own order), so a drift of the machine (clocks, heat) reaches
    each alike: for ratios of two ways to do one thing."""
    for fn in fns:
        for _ in range(warmup):
            fn()
    times = [[] for _ in fns]
    for r in range(reps):
        for i in round_order(len(fns), r):
            times[i].append(_once(fns[i], device))
    return [statistics.median(t) for t in times]
