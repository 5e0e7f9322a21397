"""The principal order's direction from one read of V (a design for the GPU,
emulated here) against today's two reads, both against the CPU oracle's
direction in double (src/vsmooth/principal.c).

Today the GPU reads V once for the mean and the largest |v| (the scale),
then again for the Gram matrix of the scaled, centred rows in half
precision (float sums per split, the splits added in double). The one-read
design centres each split by its own shift, the mean of its first 128-row
tile, and scales it by that tile's power of two; it keeps the split's
column sums, and a combine step forms the centred matrix by the
parallel-axis rule in double:
    C = sum_s [G_s - n_s d_s d_s^T] / sc_s^2 + n_s (m_s - mu)(m_s - mu)^T,
d_s the split's mean minus its shift (scaled), m_s its mean. Both then take
VSMOOTH_PRINCIPAL_ITERS power steps from mu / |mu| and sort the keys.
Prints per layer the largest 1 - |cos(u, u_CPU)| over the heads and the
share of tokens whose place differs from the CPU's order.

    python tools/study_principal_onepass.py [--layers DIR_OR_PREFIX...]

Layers are `<prefix>-v.npy` files ([..., N, D]; a folder means every one
in it; default tests/data), then random sets of 4,608 tokens (plain, a
large mean, a drifting mean, four sink rows 300x the rest). Seconds.
"""
import argparse
import glob
import math
import os

import numpy as np

ITERS = 4           # VSMOOTH_PRINCIPAL_ITERS
SPLIT_ROWS = 128    # principal.cu: kSplitRows
TARGET_BLOCKS = 256  # principal.cu: kTargetBlocks


def pow2_scale(amax):
    """principal_scale_exp: the power of two that brings amax into [0.5, 1)."""
    if not amax > 0 or not math.isfinite(amax):
        return 1.0
    return 2.0 ** -max(-126, min(126, math.frexp(amax)[1]))


def splits(n, heads):
    """principal.cu's split_rows: whole 128-row tiles spread over the splits."""
    tiles = (n + SPLIT_ROWS - 1) // SPLIT_ROWS
    count = max(1, min(tiles, TARGET_BLOCKS // max(1, heads)))
    return [(i * tiles // count * SPLIT_ROWS, min((i + 1) * tiles // count * SPLIT_ROWS, n)) for i in range(count)]


def power_steps(c, mu):
    u = mu / np.linalg.norm(mu)
    for _ in range(ITERS):
        w = c @ u
        norm = np.sqrt(w @ w)
        if norm > 0:
            u = w / norm
    return u


def half_gram(y):
    """Y^T Y of rows rounded to half, summed exactly and stored as float
    (the tensor cores' float sums round less than this in a different order)."""
    h = y.astype(np.float16).astype(np.float64)
    return (h.T @ h).astype(np.float32).astype(np.float64)


def oracle(x):
    mu = x.mean(0)
    xc = x - mu
    return power_steps(xc.T @ xc, mu)


def two_reads(x, heads):
    sc = np.float32(pow2_scale(float(np.abs(x).max())))
    mu = x.mean(0)
    mu_scaled = (mu * sc).astype(np.float32)
    c = sum(half_gram(x[a:b].astype(np.float32) * sc - mu_scaled) for a, b in splits(len(x), heads))
    return power_steps(c.astype(np.float32).astype(np.float64), mu)


def one_read(x, heads):
    parts = []
    for a, b in splits(len(x), heads):
        first = x[a:min(a + SPLIT_ROWS, b)]
        sc = float(np.float32(pow2_scale(float(np.abs(first).max()))))
        shift = (first.mean(0) * sc).astype(np.float32)
        y = (x[a:b].astype(np.float32) * np.float32(sc) - shift).astype(np.float32)
        n = b - a
        mean = shift + y.astype(np.float64).sum(0) / n  # the split's mean, scaled
        d = mean - shift
        parts.append((sc, n, mean / sc, (half_gram(y) - n * np.outer(d, d)) / (sc * sc)))
    mu = sum(n * m for _, n, m, _ in parts) / len(x)
    c = sum(g + n * np.outer(m - mu, m - mu) for _, n, m, g in parts)
    return power_steps(c.astype(np.float32).astype(np.float64), mu)


def order(x, u):
    return np.argsort((x @ u).astype(np.float32), kind="stable")


def study(name, v):
    heads = v.reshape(-1, v.shape[-2], v.shape[-1]).astype(np.float32).astype(np.float64)
    rows = []
    for x in heads:
        u = oracle(x)
        ref = order(x, u)
        row = []
        for method in (two_reads, one_read):
            w = method(x, len(heads))
            row += [1 - abs(u @ w), np.mean(order(x, w) != ref)]
        rows.append(row)
    r = np.array(rows)
    print("%-34s %3d heads  1-cos: two reads %.1e, one read %.1e   tokens placed differently: %.3f, %.3f"
          % (name, len(r), r[:, 0].max(), r[:, 2].max(), r[:, 1].mean(), r[:, 3].mean()))


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--layers", nargs="*", default=[os.path.join(here, "..", "tests", "data")])
    args = ap.parse_args()
    for spec in args.layers:
        files = sorted(glob.glob(os.path.join(spec, "*-v.npy"))) if os.path.isdir(spec) else [spec + "-v.npy"]
        for f in files:
            v = np.load(f)
            study(os.path.basename(f)[:-len("-v.npy")] + " " + "x".join(map(str, v.shape)), v)
    rng = np.random.default_rng(0)
    n, d = 4608, 128
    plain = rng.standard_normal((4, n, d))
    sinks = plain.copy()
    sinks[:, 1000:1004] *= 300
    study("random 4x4608x128", plain)
    study("random, large mean", plain + 20 * rng.standard_normal(d))
    study("random, drifting mean", plain + np.linspace(0, 8, n)[None, :, None] * rng.standard_normal(d))
    study("random, four sink rows x300", sinks)


if __name__ == "__main__":
    main()
