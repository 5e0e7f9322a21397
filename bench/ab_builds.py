"""Two builds of libvcattn timed in one process: a change's A/B.

Both libraries load side by side (each its own copy: give two files), run
the same inputs, and each call is timed in turn, round by round in shuffled
orders (CUDA events; medians, and B over A round by round with its 95%
interval): a plain step (a layer state past its grouping step) and a
drop-in call (no layer state), with the input checks on as in the public
call. The outputs of the two builds are compared bit for bit: a
change that keeps every sum in its order must give the same bits.

Build the base in another folder first, e.g.

    git worktree add /tmp/base main && make -C /tmp/base build
    python bench/ab_builds.py /tmp/base/build/libvcattn.so build/libvcattn.so \\
        --shapes flux-4608,seq-8k,longcat-480p --reps 21

A setting's cost, one build copied to a second file:

    cp build/libvcattn.so /tmp/same.so
    python bench/ab_builds.py build/libvcattn.so /tmp/same.so --set-a vsmooth_probe_rows=0 \
        --shapes longcat-480p,wan2.2-720p --reps 41
"""
import argparse
import ctypes
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from needs import torch_or_exit  # noqa: E402

torch = torch_or_exit("ab_builds")
from bench_attention import Vcattn, checkout_commit, shape_of  # noqa: E402
import statistics  # noqa: E402

from timing import paired_ratio, ratio_text, times_interleaved_ms  # noqa: E402


def config_of(vc, method, check, settings):
    """The method's config with settings ("field=value" strings) applied."""
    cfg = vc.config(method, int(check))
    for item in settings:
        field, _, value = item.partition("=")
        if field not in dict(cfg._fields_):
            sys.exit("ab_builds: the config has no field %r" % field)
        setattr(cfg, field, type(getattr(cfg, field))(float(value)))
    return cfg


def calls_of(vc, cfg, q, k, v):
    """The build's plain step and drop-in call on q, k, v, and their outputs."""
    layer = vc.layer(40)
    plain_out, drop_out = torch.empty_like(q), torch.empty_like(q)
    vc.lib.vcattn_layer_set_step(layer, 0)
    vc(q, k, v, plain_out, cfg, layer)  # the grouping step the plain steps reuse
    vc.lib.vcattn_layer_set_step(layer, 1)
    return (lambda: vc(q, k, v, plain_out, cfg, layer), lambda: vc(q, k, v, drop_out, cfg, None),
            plain_out, drop_out)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("base", help="the base build's libvcattn.so (A)")
    ap.add_argument("change", help="the changed build's libvcattn.so (B)")
    ap.add_argument("--shapes", default="flux-4608,seq-8k,longcat-480p", help="named shapes or BxHxNxD")
    ap.add_argument("--reps", type=int, default=21)
    ap.add_argument("--method", default="vc")
    ap.add_argument("--no-check", action="store_true", help="calls without the input checks")
    ap.add_argument("--set-a", action="append", default=[], metavar="FIELD=VALUE",
                    help="a config field set for A alone (repeatable): with one build in two files, the A/B of a "
                         "setting, e.g. --set-a vsmooth_probe_rows=0 times the attention probe's cost")
    ap.add_argument("--set-b", action="append", default=[], metavar="FIELD=VALUE", help="the same for B")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    if os.path.realpath(args.base) == os.path.realpath(args.change):
        ap.error("base and change are one file: the two builds must be two libraries")
    builds = [Vcattn(args.base), Vcattn(args.change)]
    entry = [ctypes.cast(vc.lib.vcattn_attention, ctypes.c_void_p).value for vc in builds]
    if entry[0] == entry[1]:
        sys.exit("ab_builds: the two libraries loaded as one (copy one to another file name)")
    rows = []
    print("A = %s %s, B = %s %s; %s, checks %s; %s, %d rounds" % (
        args.base, " ".join(args.set_a), args.change, " ".join(args.set_b), args.method,
        "off" if args.no_check else "on", torch.cuda.get_device_name(), args.reps))
    for name in args.shapes.split(","):
        b, h, n, d = shape_of(name)
        torch.manual_seed(0)
        q, k, v = (torch.randn(b, h, n, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
        (a_plain, a_drop, a_po, a_do), (b_plain, b_drop, b_po, b_do) = (
            calls_of(vc, config_of(vc, args.method, not args.no_check, settings), q, k, v)
            for vc, settings in zip(builds, (args.set_a, args.set_b)))
        times = times_interleaved_ms([a_plain, b_plain, a_drop, b_drop], args.reps)
        torch.cuda.synchronize()
        ms = [statistics.median(t) for t in times]
        row = {"shape": name, "B": b, "H": h, "N": n, "D": d,
               "plain_ms": [ms[0], ms[1]], "dropin_ms": [ms[2], ms[3]],
               "plain_ratio": paired_ratio(times[0], times[1]), "dropin_ratio": paired_ratio(times[2], times[3]),
               "plain_equal": torch.equal(a_po, b_po), "dropin_equal": torch.equal(a_do, b_do)}
        rows.append(row)
        print("%-14s plain step A %.4f B %.4f ms, B over A %s; drop-in A %.4f B %.4f ms, B over A %s; "
              "outputs bit-identical: plain %s, drop-in %s" % (
                  name, ms[0], ms[1], ratio_text(row["plain_ratio"]), ms[2], ms[3], ratio_text(row["dropin_ratio"]),
                  row["plain_equal"], row["dropin_equal"]))
        del q, k, v, a_po, a_do, b_po, b_do
        torch.cuda.empty_cache()
    if args.json:
        meta = {"device": torch.cuda.get_device_name(), "commit": checkout_commit(), "base": args.base,
                "change": args.change, "set_a": args.set_a, "set_b": args.set_b, "method": args.method,
                "check": not args.no_check, "reps": args.reps}
        with open(args.json, "w") as f:
            json.dump({"meta": meta, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
