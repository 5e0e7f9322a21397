"""Plots of `vcattn eval --study studies --json` (one JSON object on stdin or a
file): V quantization error and block-mean energy share per token order, and
the ExpCast row statistics against the bound.

    build/vcattn eval --study studies --workload small --json | python tools/plot_studies.py -o docs/figures/studies-small.png
    build/vcattn eval --study all --json > docs/figures/studies.json   # every -small preset
    python tools/plot_studies.py docs/figures/studies.json   # docs/figures/studies-<preset>.png
"""
import argparse
import json
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def plot(data, out):
    orders = data["orders"]
    fig, (ax1, ax2, ax3) = plt.subplots(1, 3, figsize=(14, 4), gridspec_kw={"width_ratios": [3, 3, 2]})
    names = [o["order"] for o in orders]
    xs = range(len(orders))
    ax1.bar([x - 0.2 for x in xs], [100 * o["v_err_fp8"] for o in orders], 0.4, label="FP8 (E4M3)")
    ax1.bar([x + 0.2 for x in xs], [100 * o["v_err_fp4"] / 4 for o in orders], 0.4, label="NVFP4 / 4")
    ax1.set_xticks(list(xs))
    ax1.set_xticklabels(names, rotation=30, ha="right", fontsize=7)
    ax1.set_ylabel("relative V error (%)")
    ax1.set_title("V quantization error by token order", fontsize=9)
    ax1.legend(fontsize=7)
    shares = [(o["order"], o["energy_share"]) for o in orders if o["energy_share"] is not None]
    ax2.bar(range(len(shares)), [100 * s for _, s in shares], color="tab:green")
    ax2.set_xticks(range(len(shares)))
    ax2.set_xticklabels([n for n, _ in shares], rotation=30, ha="right", fontsize=7)
    ax2.set_ylabel("block-mean energy share (%)")
    ax2.set_title("energy the 128-row block means remove (eq. 5)", fontsize=9)
    ex = data.get("expcast_rows")
    if ex:
        vals = [100 * ex["tv_mean_expcast"], 100 * ex["tv_max_expcast"], 100 * ex["tv_mean_cast"],
                100 * ex["tv_max_cast"]]
        ax3.bar(range(4), vals, color=["tab:red", "tab:red", "tab:gray", "tab:gray"])
        ax3.axhline(100 * ex["tv_bound"], color="black", linestyle="--", linewidth=1,
                    label="bound %.2f%% (+ tau)" % (100 * ex["tv_bound"]))
        ax3.set_xticks(range(4))
        ax3.set_xticklabels(["ExpCast\nmean", "ExpCast\nmax", "cast\nmean", "cast\nmax"], fontsize=7)
        ax3.set_ylabel("total variation to softmax (%)")
        ax3.set_title("P per row: %d rows, %d over the bound" % (ex["rows"], ex["violations"]), fontsize=9)
        ax3.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out, dpi=110)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("json", nargs="?", default="-")
    ap.add_argument("-o", "--out", default=None,
                    help="PNG (default: the JSON file's name with .png, or studies.png from stdin); with "
                         "--study all output, one file per preset (NAME inserted before .png)")
    args = ap.parse_args()
    if args.out is None:
        args.out = "studies.png" if args.json == "-" else os.path.splitext(args.json)[0] + ".png"
    data = json.load(sys.stdin if args.json == "-" else open(args.json))
    if "presets" in data:
        for p in data["presets"]:
            plot(p["studies"], args.out.replace(".png", "-%s.png" % p["workload"]))
    else:
        plot(data, args.out)


if __name__ == "__main__":
    main()
