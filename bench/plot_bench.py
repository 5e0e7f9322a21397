"""Bar chart of a bench_attention.py JSON: speed ratio to cuDNN BF16 SDPA per
shape for every timed column (vc kernel, vc call, grouping call, drop-in
call, peers).

    python bench/plot_bench.py bench.json -o docs/bench.png
"""
import argparse
import json

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

COLUMNS = [("flash_ms", "torch flash (BF16)"), ("fa3_ms", "FlashAttention-3 BF16"),
           ("fa3_fp8_ms", "FlashAttention-3 FP8"), ("fa4_ms", "FlashAttention-4 BF16"),
           ("sage2_ms", "SageAttention2 call"),
           ("sage2_ours_call_ms", "vcattn sage2 call"), ("vc_grouping_ms", "vc grouping call"),
           ("vc_dropin_ms", "vc drop-in call (no state)"),
           ("vc_call_ms", "vc call"), ("vc_kernel_ms", "vc kernel")]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("json")
    ap.add_argument("-o", "--out", default="bench.png")
    args = ap.parse_args()
    data = json.load(open(args.json))
    rows = data["rows"]
    cols = [(k, label) for k, label in COLUMNS if any(r.get(k) for r in rows)]
    width = 0.8 / len(cols)
    fig, ax = plt.subplots(figsize=(1.6 * len(rows) + 3, 4))
    for i, (key, label) in enumerate(cols):
        ratios = [r["cudnn_ms"] / r[key] if r.get(key) else 0.0 for r in rows]
        xs = [j + (i - (len(cols) - 1) / 2) * width for j in range(len(rows))]
        ax.bar(xs, ratios, width, label=label)
    top = max(r["cudnn_ms"] / r[k] for r in rows for k, _ in cols if r.get(k))
    ax.set_ylim(0, top * 1.35)  # room for the legend
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_xticks(range(len(rows)))
    ax.set_xticklabels(["%s\nH%d N%d D%d" % (r["shape"], r["H"], r["N"], r["D"]) for r in rows], fontsize=8)
    ax.set_ylabel("speed / cuDNN BF16 SDPA")
    meta = data.get("meta", {})
    run = ", ".join(meta[k] for k in ("date", "commit") if meta.get(k))
    ax.set_title("%s, torch %s, vcattn %s%s (medians)" % (meta.get("device", "?"), meta.get("torch", "?"),
                                                         meta.get("vcattn", "?"), ", " + run if run else ""),
                 fontsize=9)
    ax.legend(fontsize=7, loc="upper left", ncol=3)
    fig.tight_layout()
    fig.savefig(args.out, dpi=120)


if __name__ == "__main__":
    main()
