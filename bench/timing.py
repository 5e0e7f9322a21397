"""Median wall time of a callable: CUDA events on the GPU, perf_counter on the CPU;
two ways to do one thing timed in turn, and their ratio round by round; each
GPU operation's own time in a profile."""
import math
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


def times_interleaved_ms(fns, reps, device="cuda", warmup=1):
    """Each callable's times, timed in turn round by round (each round in its
    own order), so a drift of the machine (clocks, heat) reaches each alike:
    times[i][r] is callable i in round r."""
    for fn in fns:
        for _ in range(warmup):
            fn()
    times = [[] for _ in fns]
    for r in range(reps):
        for i in round_order(len(fns), r):
            times[i].append(_once(fns[i], device))
    return times


def medians_interleaved_ms(fns, reps, device="cuda", warmup=1):
    """The median of each callable, timed as times_interleaved_ms times them:
    for ratios of two ways to do one thing."""
    return [statistics.median(t) for t in times_interleaved_ms(fns, reps, device, warmup)]


def paired_ratio(base, change, confidence=0.95):
    """change / base round by round (two lists of times from one
    times_interleaved_ms): the median of the rounds' ratios and a
    distribution-free confidence interval of that median (order statistics
    of the sorted ratios, from the binomial distribution with p = 1/2).
    A round's two calls ran next to each other, so its ratio cancels the
    drift that moves both; the interval says whether a difference of a
    percent is one. (nan, nan) for the interval with too few rounds."""
    ratios = sorted(c / b for b, c in zip(base, change))
    n = len(ratios)
    if n == 0:
        return math.nan, math.nan, math.nan
    tail, below, j = (1.0 - confidence) / 2.0, 0.0, 0
    # the largest j with P(X < j) <= tail, X ~ Binomial(n, 1/2): the interval
    # [ratios[j - 1], ratios[n - j]] holds the median with the confidence asked
    while below + math.comb(n, j) / 2.0 ** n <= tail:
        below += math.comb(n, j) / 2.0 ** n
        j += 1
    if j == 0:
        return statistics.median(ratios), math.nan, math.nan
    return statistics.median(ratios), ratios[j - 1], ratios[n - j]


def ratio_text(ratio):
    """A paired_ratio as '+0.85% (95% interval +0.41 to +1.30%)'."""
    mid, lo, hi = ratio
    if math.isnan(lo):
        return "%+.2f%% (too few rounds for an interval)" % (100 * (mid - 1))
    return "%+.2f%% (95%% interval %+.2f to %+.2f%%)" % (100 * (mid - 1), 100 * (lo - 1), 100 * (hi - 1))


def gpu_sweep(events, leave_out=()):
    """The GPU operations among events (but those named in leave_out) in
    start order, each with the idle time before it (0 where another still
    runs: side streams overlap) and its own time: the part of its CUPTI span
    after every operation that started before it has ended. Also the span in
    µs from the first start to the last end; the GPU was busy for the span
    less the gaps."""
    ops = sorted((e for e in events if e.device_type == torch.autograd.DeviceType.CUDA and e.name not in leave_out),
                 key=lambda e: e.time_range.start)
    if not ops:
        return [], 0.0
    covered, rows = ops[0].time_range.start, []
    for e in ops:
        start, end = e.time_range.start, e.time_range.end
        rows.append((e, max(0.0, start - covered), max(0.0, end - max(start, covered))))
        covered = max(covered, end)
    return rows, covered - ops[0].time_range.start


def gpu_gaps(events, leave_out=()):
    """gpu_sweep's operations with the idle time before each, and the span."""
    rows, span = gpu_sweep(events, leave_out)
    return [(e, gap) for e, gap, _ in rows], span


def own_spans(events):
    """Each GPU operation with its own time in µs (gpu_sweep). A chained
    launch (programmatic dependent launch) starts early and waits for the
    kernel before it, so its whole span overstates what it adds."""
    return [(e, own) for e, _, own in gpu_sweep(events)[0] if e.device_time > 0]
