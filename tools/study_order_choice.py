"""The token order chosen per head by the output's error on sampled query
rows (docs/fidelity.md, "Which order"): for each layer or preset, vc after
a k-means grouping step and vc in the principal order (both with the
attention probe's centres), then per (batch, head) the order whose quantized
output is closer to the exact one on `rows` sampled query rows (the probe's
Weyl rows), and the same choice made from every row (the best per head).
Prints SNR against the exact output; for real layers, minus sage2's.

    python tools/study_order_choice.py --layers DIR_OR_PREFIX... --rows 64,256
    python tools/study_order_choice.py --presets small,wan2.2-small --cli build/vcattn

Real layers are q/k/v .npy triples (`<prefix>-q.npy`, ...; a folder means
every triple in it); presets run through the command line (`vcattn run
--workload P --out`), the exact output being its run with every format
exact and V-Smooth off. CPU backend; a few minutes for the twelve layers of
tests/data and the DINOv2 captures.
"""
import argparse
import glob
import os
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))


def weyl_rows(n, count):
    """vsmooth_probe_row(s, n) for s < count, without repeats."""
    return sorted({((s * 2654435769) % 2 ** 32) * n >> 32 for s in range(count)})


def snr(out, ref):
    return 10 * np.log10((ref ** 2).sum() / ((out - ref) ** 2).sum())


def choose(outs, ref, rows):
    """kmeans output with each [b, h] taken from principal where, on `rows`
    (None: every row), its error is smaller."""
    chosen = outs["kmeans"].copy()
    for b in range(ref.shape[0]):
        for h in range(ref.shape[1]):
            sel = slice(None) if rows is None else rows
            err = {o: ((outs[o][b, h, sel] - ref[b, h, sel]) ** 2).sum() for o in ("kmeans", "principal")}
            if err["principal"] < err["kmeans"]:
                chosen[b, h] = outs["principal"][b, h]
    return chosen


def table_row(name, outs, ref, counts, base, approx=None):
    """approx: a cheaper reference the choice may be made against instead
    (the SNR is still against ref)."""
    cols = {"kmeans": outs["kmeans"], "principal": outs["principal"]}
    n = ref.shape[2]
    for c in counts:
        cols["%d rows" % c] = choose(outs, ref, weyl_rows(n, c))
        if approx is not None:
            cols["%d, bf16 P" % c] = choose(outs, approx, weyl_rows(n, c))
    cols["every row"] = choose(outs, ref, None)
    return name, {k: snr(v, ref) - base for k, v in cols.items()}


def bf16_p_reference(q, k, v):
    """Attention as a tensor-core kernel with FP32 scores and accumulators
    would form it from BF16 inputs: q, k, v rounded to BF16, the unnormalized
    probabilities exp(s - max) rounded to BF16 before P V, the row sum of
    the unrounded ones."""
    import torch
    bf = lambda x: x.to(torch.bfloat16).float()  # noqa: E731
    s = bf(q) @ bf(k).transpose(-1, -2) * q.shape[-1] ** -0.5
    e = torch.exp(s - s.amax(-1, keepdim=True))
    return ((bf(e) @ bf(v)) / e.sum(-1, keepdim=True)).double().numpy()


def real_layer(prefix, probe_rows, counts, approx):
    import torch
    import vcattn
    q, k, v = (torch.from_numpy(np.load("%s-%s.npy" % (prefix, x)).astype(np.float32)) for x in "qkv")
    ref = torch.nn.functional.scaled_dot_product_attention(q.double(), k.double(), v.double()).numpy()
    state = vcattn.LayerState(40)  # step 0: a cold k-means grouping
    outs = {"kmeans": vcattn.attention(q, k, v, state=state, vsmooth_probe_rows=probe_rows).numpy(),
            "principal": vcattn.attention(q, k, v, vsmooth_probe_rows=probe_rows).numpy()}
    base = snr(vcattn.attention(q, k, v, method="sage2").numpy(), ref)
    return table_row(os.path.basename(prefix), outs, ref, counts, base, bf16_p_reference(q, k, v) if approx else None)


def preset(cli, name, probe_rows, counts, tmp, approx):
    def run(tag, *args):
        path = os.path.join(tmp, "%s-%s.npy" % (name, tag))
        subprocess.run([cli, "run", "--workload", name, "--out", path, *args], check=True, capture_output=True)
        return np.load(path).astype(np.float64)
    ref = run("exact", "--qk", "exact", "--p", "exact", "--v", "exact", "--no-vsmooth")
    outs = {"kmeans": run("kmeans", "--method", "vc", "--probe-rows", str(probe_rows)),
            "principal": run("principal", "--method", "vc", "--grouping", "principal",
                             "--probe-rows", str(probe_rows))}
    near = run("bf16p", "--qk", "exact", "--p", "bf16", "--v", "exact", "--no-vsmooth") if approx else None
    return table_row(name, outs, ref, counts, 0.0, near)


def prefixes(paths):
    """Each layer once, by file name (tests/data keeps a copy of one capture)."""
    found = {}
    for p in paths:
        for f in sorted(glob.glob(os.path.join(p, "*-q.npy"))) if os.path.isdir(p) else [p + "-q.npy"]:
            found.setdefault(os.path.basename(f), f[:-len("-q.npy")])
    return list(found.values())


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--layers", nargs="*", default=[], help="q/k/v .npy prefixes or folders of them")
    ap.add_argument("--presets", default="", help="comma-separated workload presets (needs --cli)")
    ap.add_argument("--cli", default="build/vcattn")
    ap.add_argument("--rows", default="64,256", help="sampled query rows the choice is made on")
    ap.add_argument("--probe-rows", type=int, default=32, help="the attention probe's rows for the centres")
    ap.add_argument("--bf16-p-reference", action="store_true",
                    help="also choose against a reference with BF16 inputs and BF16 probabilities (as a "
                         "tensor-core kernel would form it); the SNR stays against the exact output")
    args = ap.parse_args()
    counts = [int(c) for c in args.rows.split(",") if c]
    approx = args.bf16_p_reference
    results = [real_layer(p, args.probe_rows, counts, approx) for p in prefixes(args.layers)]
    if results:
        print("real layers: vc minus sage2, dB (SNR against FP64)")
    with tempfile.TemporaryDirectory() as tmp:
        presets = [preset(args.cli, n, args.probe_rows, counts, tmp, approx) for n in args.presets.split(",") if n]
    for title, rows in (("", results), ("presets: SNR against the exact output, dB", presets)):
        if not rows:
            continue
        if title:
            print(title)
        keys = list(rows[0][1])
        print("%-26s" % "" + "".join("%12s" % k for k in keys))
        for name, cols in rows:
            print("%-26s" % name + "".join("%12.2f" % cols[k] for k in keys))
        if rows is results:
            print("%-26s" % "worst" + "".join("%12.2f" % min(c[k] for _, c in rows) for k in keys))
            print("%-26s" % "mean" + "".join("%12.2f" % np.mean([c[k] for _, c in rows]) for k in keys))


if __name__ == "__main__":
    main()
