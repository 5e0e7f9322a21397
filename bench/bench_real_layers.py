"""Fidelity on captured layers of trained transformers, on the GPU: q, k, v
from .npy files ([1, H, N, D], head-major), as BF16 on the CUDA device, each
method's SNR (dB) against softmax(q k^T / sqrt(D)) v in FP64 of the same BF16
inputs. Methods: SageAttention2 (when importable), our sage2, and vc as the
drop-in call (principal order) and as a grouping step (k-means), each with
and without V-Smooth's attention probe (32 rows), the grouping step also
with the order chosen per key head on 256 sampled rows; then vc minus
SageAttention2 (or our sage2 when it is not importable) per layer, and the
geometric-mean margin.

    python bench/bench_real_layers.py [--dir tests/data] [--dir DIR ...] [--json F]
    python bench/bench_real_layers.py --device cpu     # the CPU backend (smoke run of the script)
"""
import argparse
import glob
import json
import math
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "python"))
sys.path.insert(0, os.path.join(ROOT, "bench"))

from needs import cuda_or_exit, torch_or_exit  # noqa: E402

torch = torch_or_exit("bench_real_layers", cuda=False)
import numpy as np  # noqa: E402

import vcattn  # noqa: E402

PROBE_ROWS = 32
ORDER_ROWS = 256


def layers(dirs):
    found = []
    for d in dirs:
        found += sorted(f[:-len("-q.npy")] for f in glob.glob(os.path.join(d, "*-q.npy")))
    return found


def snr_db(ref, x):
    err = ((ref - x.double()) ** 2).sum().item()
    return 10 * math.log10((ref ** 2).sum().item() / err) if err > 0 else float("inf")


def methods(sageattn):
    def vc(probe, grouped, order=0):
        def run(q, k, v):
            state = vcattn.LayerState(40) if grouped else None  # step 0 of a fresh state: a k-means grouping step
            return vcattn.attention(q, k, v, state=state, vsmooth_probe_rows=probe, vsmooth_order_rows=order)
        return run
    table = []
    if sageattn is not None:
        table.append(("SageAttention2", lambda q, k, v: sageattn(q, k, v, tensor_layout="HND", is_causal=False)))
    table += [("sage2 (ours)", lambda q, k, v: vcattn.attention(q, k, v, method="sage2")),
              ("vc drop-in", vc(0, False)), ("vc drop-in + probe", vc(PROBE_ROWS, False)),
              ("vc k-means", vc(0, True)), ("vc k-means + probe", vc(PROBE_ROWS, True)),
              ("vc k-means + probe + order", vc(PROBE_ROWS, True, ORDER_ROWS))]
    return table


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dir", action="append", default=None, help="folder of <layer>-{q,k,v}.npy (repeatable)")
    ap.add_argument("--json", default=None)
    ap.add_argument("--device", default="cuda")
    args = ap.parse_args()
    cuda_or_exit("bench_real_layers", args.device)
    sageattn = None
    if args.device == "cuda":
        try:
            from sageattention import sageattn
        except ImportError:
            pass
    table = methods(sageattn)
    names = [n for n, _ in table]
    base = "SageAttention2" if sageattn is not None else "sage2 (ours)"
    results = {}
    for path in layers(args.dir or [os.path.join(ROOT, "tests", "data")]):
        name = os.path.basename(path)
        q, k, v = (torch.from_numpy(np.load(path + s).astype(np.float32)).to(args.device, torch.bfloat16)
                   for s in ("-q.npy", "-k.npy", "-v.npy"))
        d = q.shape[-1]
        qd, kd, vd = (x.double() for x in (q, k, v))
        ref = torch.softmax(qd @ kd.transpose(-1, -2) / math.sqrt(d), dim=-1) @ vd
        row = {}
        for label, fn in table:
            try:
                row[label] = snr_db(ref, fn(q, k, v))
            except Exception as e:  # a head dim a backend does not take
                print("  %s on %s: %s" % (label, name, str(e).splitlines()[0]), file=sys.stderr)
                row[label] = None
        results[name] = row
    device = torch.cuda.get_device_name() if args.device == "cuda" else "cpu"
    print("SNR in dB against FP64 (BF16 inputs), %s, torch %s" % (device, torch.__version__))
    print(("%-24s" + " %18s" * len(names)) % (("layer",) + tuple(names)))
    margins = {n: [] for n in names if n.startswith("vc")}
    for name, row in results.items():
        cells = []
        for n in names:
            x = row[n]
            if x is None:
                cells.append("%18s" % "-")
            elif n.startswith("vc") and row.get(base) is not None:
                cells.append("%10.2f (%+.2f)" % (x, x - row[base]))
                margins[n].append(x - row[base])
            else:
                cells.append("%18.2f" % x)
        print("%-24s %s" % (name, " ".join(cells)))
    for n, m in margins.items():
        if m:
            print("%-20s minus %s: mean %+.2f dB, worst %+.2f dB, %d of %d layers below" %
                  (n, base, sum(m) / len(m), min(m), sum(x < 0 for x in m), len(m)))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": device, "date": time.strftime("%Y-%m-%d"), "base": base,
                       "layers": results}, f, indent=1)


if __name__ == "__main__":
    main()
