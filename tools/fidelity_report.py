"""Regenerates the measured part of docs/fidelity.md: runs every study on the
CPU-size presets and writes their JSON, the plots and one markdown file of
tables (paste-ready for the report). The method tables are seed 0 alone
(`--draws 1`), as docs/fidelity.md records them.

    python tools/fidelity_report.py --out docs/figures              # minutes on 2 cores
    python tools/fidelity_report.py --out /tmp/f --skip schedule,network   # about a minute

Needs build/vcattn (make) and matplotlib; the network study needs torch and diffusers.
"""
import argparse
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PRESETS = ["small", "wan2.2-small", "longcat-small", "hunyuan-small", "minimax-small"]
METHODS = ["fp8-naive", "sage2", "sage2+hadamard", "vsmooth", "vc", "sage3-4bit", "sage3-4bit+hadamard",
           "vsmooth-4bit"]
HADAMARD_PAIRS = ["sage2", "vsmooth", "vc"]  # each with and without the QK Hadamard (study 2)
CAPTURED = ["minilm-l0", "minilm-l3", "minilm-l5"]  # tests/data, from tools/capture_minilm.py


def cli(args, out_json):
    exe = os.path.join(ROOT, "build", "vcattn")
    text = subprocess.run([exe] + args + ["--json"], check=True, capture_output=True, text=True).stdout
    with open(out_json, "w") as f:
        f.write(text)
    return json.loads(text)


def plot(script, *args):
    subprocess.run([sys.executable, os.path.join(ROOT, "tools", script)] + list(args), check=True)


def hadamard_study(out):
    """Study 2: the eq. 2 split with and without the QK Hadamard, per preset."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    methods = [m + h for m in HADAMARD_PAIRS for h in ("", "+hadamard")]
    rows = {}
    for preset in PRESETS:
        table = cli(["eval", "--workload", preset, "--backend", "cpu", "--draws", "1",
                     "--methods", ",".join(methods)],
                    os.path.join(out, "hadamard-%s.json" % preset))
        rows[preset] = {m["method"]: m for m in table["methods"]}
    md = ["", "## QK Hadamard: probability / value terms and total (relative L2, %)", "",
          "| preset | " + " | ".join("%s | +H" % m for m in HADAMARD_PAIRS) + " |",
          "|---" * (1 + len(methods)) + "|"]
    for preset in PRESETS:
        cells = ["%.3f / %.3f (%.3f)" % (100 * rows[preset][m]["prob_term"], 100 * rows[preset][m]["value_term"],
                                         100 * rows[preset][m]["metrics"]["rel_l2"]) for m in methods]
        md.append("| `%s` | %s |" % (preset, " | ".join(cells)))
    fig, axes = plt.subplots(1, len(HADAMARD_PAIRS), figsize=(4.2 * len(HADAMARD_PAIRS), 3.6), sharey=True)
    x = range(len(PRESETS))
    for ax, m in zip(axes, HADAMARD_PAIRS):
        for k, (suffix, label) in enumerate((("", "no Hadamard"), ("+hadamard", "QK Hadamard"))):
            prob = [100 * rows[p][m + suffix]["prob_term"] for p in PRESETS]
            value = [100 * rows[p][m + suffix]["value_term"] for p in PRESETS]
            xs = [i + (k - 0.5) * 0.38 for i in x]
            ax.bar(xs, prob, 0.36, color="C%d" % (2 * k), label=label + ": probability term")
            ax.bar(xs, value, 0.36, bottom=prob, color="C%d" % (2 * k + 1), alpha=0.6, label=label + ": value term")
        ax.set_title(m)
        ax.set_xticks(list(x))
        ax.set_xticklabels([p.replace("-small", "") for p in PRESETS], rotation=30, fontsize=8)
    axes[0].set_ylabel("error term, % of |O_ref| (stacked)")
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=4, fontsize=7)
    fig.tight_layout(rect=(0, 0.07, 1, 1))
    fig.savefig(os.path.join(out, "study-hadamard.png"), dpi=120)
    return md


def stats_row(name, studies):
    st, ex, orders = studies["stats"], studies["expcast_rows"], {o["order"].split(" (")[0]: o for o in studies["orders"]}
    return "| %s | %.1f%% | %.2f | %.2f | %.3f%% | %.3f | %.1f%% / %.1f%% |" % (
        name, 100 * st["k_mean_share"], st["k_channel_peak"], st["v_token_peak"], 100 * st["v_outlier_frac"],
        ex["entropy_mean"], 100 * orders["sequence"]["energy_share"], 100 * orders["k-means"]["energy_share"])


def captured_study(out, presets):
    """Real tensors against the synthetic presets: statistics, then methods."""
    md = ["", "## Captured tensors (all-MiniLM-L6-v2) against the synthetic presets", "",
          "| inputs | K mean share | K channel peak | V token peak | V tokens > 3x median | entropy | "
          "energy share seq / k-means |", "|---|---|---|---|---|---|---|"]
    md += [stats_row("`%s`" % p["workload"], p["studies"]) for p in presets]
    tables = {}
    for name in CAPTURED:
        files = []
        for x in "qkv":
            files += ["--" + x, os.path.join(ROOT, "tests", "data", "%s-%s.npy" % (name, x))]
        md.append(stats_row("%s (captured)" % name, cli(["eval", "--study", "studies"] + files,
                                                          os.path.join(out, "captured-%s-studies.json" % name))))
        tables[name] = cli(["eval", "--backend", "cpu"] + files, os.path.join(out, "captured-%s.json" % name))
    shown = ["fp8-naive", "sage2", "vsmooth", "vc", "sage3-4bit", "vsmooth-4bit"]
    md += ["", "| layer | " + " | ".join(shown) + " |", "|---" * (1 + len(shown)) + "|"]
    for name in CAPTURED:
        rows = {m["method"]: m for m in tables[name]["methods"]}
        md.append("| %s | %s |" % (name, " | ".join(
            "%.3f%% (worst row %.3f)" % (100 * rows[m]["metrics"]["rel_l2"], rows[m]["metrics"]["worst_row_rel_l2"])
            for m in shown)))
    return md


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=os.path.join(ROOT, "docs", "figures"))
    ap.add_argument("--skip", default="", help="comma list of: methods, hadamard, schedule, network (a skipped "
                    "study's table comes from its JSON in --out, when there)")
    args = ap.parse_args()
    skip = set(filter(None, args.skip.split(",")))
    os.makedirs(args.out, exist_ok=True)
    md = []

    studies = cli(["eval", "--study", "all"], os.path.join(args.out, "studies.json"))
    plot("plot_studies.py", os.path.join(args.out, "studies.json"), "-o", os.path.join(args.out, "studies.png"))
    md += ["## V error by token order (FP8 / NVFP4 error, energy share)", "",
           "| preset | " + " | ".join(o["order"].split(" (")[0] for o in studies["presets"][0]["studies"]["orders"]) + " |",
           "|---" * (1 + len(studies["presets"][0]["studies"]["orders"])) + "|"]
    for p in studies["presets"]:
        cells = []
        for o in p["studies"]["orders"]:
            share = "" if o["energy_share"] is None else " / %.1f%%" % (100 * o["energy_share"])
            cells.append("%.3f%% / %.3f%%%s" % (100 * o["v_err_fp8"], 100 * o["v_err_fp4"], share))
        md.append("| `%s` | %s |" % (p["workload"], " | ".join(cells)))
    md += ["", "## ExpCast rows", "", "| preset | rows | TV mean ExpCast / cast | max | over the bound |",
           "|---|---|---|---|---|"]
    for p in studies["presets"]:
        e = p["studies"]["expcast_rows"]
        md.append("| `%s` | %d | %.3f%% / %.3f%% | %.3f%% | %d |" % (
            p["workload"], e["rows"], 100 * e["tv_mean_expcast"], 100 * e["tv_mean_cast"], 100 * e["tv_max_expcast"],
            e["violations"]))

    md += captured_study(args.out, studies["presets"])

    if "methods" not in skip:
        md += ["", "## Output SNR (dB) by method", "", "| preset | " + " | ".join(METHODS) + " |",
               "|---" * (1 + len(METHODS)) + "|"]
        for preset in PRESETS:
            table = cli(["eval", "--workload", preset, "--backend", "cpu", "--draws", "1"],
                        os.path.join(args.out, "methods-%s.json" % preset))
            snr = {m["method"]: m["metrics"]["snr_db"] for m in table["methods"]}
            md.append("| `%s` | %s |" % (preset, " | ".join("%.2f" % snr[m] for m in METHODS)))

    if "hadamard" not in skip:
        md += hadamard_study(args.out)

    sched_json = os.path.join(args.out, "schedule.json")
    if "schedule" not in skip or os.path.exists(sched_json):  # a skipped study keeps its last results
        if "schedule" not in skip:
            cli(["eval", "--study", "schedule", "--workload", "small"], sched_json)
        with open(sched_json) as f:
            sched = json.load(f)
        md += ["", "## Grouping schedule, %d steps (`small`)" % sched["steps"], "",
               "| variant | mean | window | after | groupings |", "|---|---|---|---|---|"]
        for r in sched["schedule"]:
            md.append("| %s | %.3f%% | %.3f%% | %.3f%% | %d |" % (r["variant"], 100 * r["err_mean"],
                                                                 100 * r["err_window"], 100 * r["err_after"],
                                                                 r["groupings"]))

    net_json = os.path.join(args.out, "study-network.json")
    if "network" not in skip or os.path.exists(net_json):
        if "network" not in skip:
            plot("study_network.py", "--json", net_json, "-o", os.path.join(args.out, "study-network.png"))
        with open(net_json) as f:
            net = json.load(f)
        md += ["", "## Through a random Wan transformer (%d tokens)" % net["tokens"], "",
               "| method | PSNR dB | displacement error |", "|---|---|---|"]
        for r in net["rows"]:
            md.append("| %s | %.2f | %.3f%% |" % (r["method"], r["psnr_db"], 100 * r["displacement_rel_l2"]))

    with open(os.path.join(args.out, "tables.md"), "w") as f:
        f.write("\n".join(md) + "\n")
    print("wrote %s" % os.path.join(args.out, "tables.md"))


if __name__ == "__main__":
    main()
