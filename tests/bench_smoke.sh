#!/bin/sh
# The GPU benchmarks' own code on the CPU, on tiny models, so a run of record
# on the device does not find them broken: bench_transformer.py and
# bench_compile.py with --tiny --device cpu, bench_real_layers.py on the
# captured layers of tests/data on the CPU, and the A/B's interval. Skips
# (77) without torch and diffusers. Usage: sh tests/bench_smoke.sh SOURCE_DIR PYTHON
src=${1:?usage: sh tests/bench_smoke.sh SOURCE_DIR PYTHON}
py=${2:-python3}
if ! "$py" -c "import torch, diffusers" >/dev/null 2>&1; then
    echo "bench_smoke: SKIPPED, needs torch and diffusers"
    exit 77
fi
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT
passed=0
failed=0
tally() {  # NAME STATUS [LOG]: counts a check and says how it went
    if [ "$2" = 0 ]; then
        passed=$((passed + 1))
        echo "ok   $1"
    else
        failed=$((failed + 1))
        echo "FAIL $1"
        [ -z "${3:-}" ] || tail -15 "$3"
    fi
}
for bench in "bench_transformer.py --tiny --device cpu --reps 1 --steps 8" \
             "bench_compile.py --tiny --device cpu --reps 1 --steps 8" \
             "bench_real_layers.py --device cpu --dir $src/tests/data"; do
    name=${bench%% *}
    # shellcheck disable=SC2086
    OMP_NUM_THREADS=2 "$py" "$src/bench/"$bench --json "$tmp/$name.json" >"$tmp/log" 2>&1 &&
        "$py" -c "import json, sys; json.load(open(sys.argv[1]))" "$tmp/$name.json"
    tally "$name" $? "$tmp/log"
done
# The whole step's form: the repeated blocks compiled (regional), the backends' rows only.
OMP_NUM_THREADS=2 "$py" "$src/bench/bench_compile.py" --tiny --device cpu --reps 1 --regional --backends native,vcattn \
    --no-schedule --json "$tmp/regional.json" >"$tmp/log" 2>&1 &&
    "$py" -c "import json, sys; r = json.load(open(sys.argv[1])); assert r['regional'] and r['vcattn compiled_ms'] > 0, r" \
        "$tmp/regional.json"
tally "bench_compile.py --regional" $? "$tmp/log"
# The A/B's interval: the median of 41 rounds' ratios lies between the 14th
# and the 28th of them at 95% (binomial order statistics); 5 rounds give none.
"$py" - "$src/bench" <<'PY'
import math, sys
sys.path.insert(0, sys.argv[1])
from timing import paired_ratio
mid, lo, hi = paired_ratio([2.0] * 41, [2.0 + r / 50 for r in range(41, 0, -1)])
assert all(abs(a - b) < 1e-9 for a, b in zip((mid, lo, hi), (1.21, 1.14, 1.28))), (mid, lo, hi)
assert math.isnan(paired_ratio([1.0] * 5, [1.1] * 5)[1])
PY
tally timing.paired_ratio $?
# The byte model behind profile_call's share of the bound: at 4,608 tokens
# (H 24, D 128, BF16, 32 probe rows) K is 28.3 MB, its pass 42.5, the probe's
# tiles 17.7, V statistics 31.9 (perf-notes' count), and kernels by name.
"$py" - "$src/bench" <<'PY'
import sys
sys.path.insert(0, sys.argv[1])
from byte_bound import kernel_bytes, match, peak_tbps
t = kernel_bytes(1, 24, 24, 4608, 128)
mb = lambda name: round(match(name, t)[1] / 1e6, 1)
k = "void (anonymous namespace)::quantize_rows_kernel<128, true, false>((anonymous namespace)::row_args)"
got = (mb("k_mean_partial_kernel<128>"), mb(k), mb(k.replace("true", "false", 1)), mb("probe_tile_kernel<128, 32>"),
       mb("v_stats_kernel<true>"))
assert got == (28.3, 42.5, 42.5, 17.7, 31.9), got
assert match("vc_attention_kernel<128>", t) is None and peak_tbps("NVIDIA H200") == 4.8 and peak_tbps("A100") is None
PY
tally byte_bound $?
# One sweep of a profile: a chained kernel's own time counts from the end of
# what ran before it (here the attention kernel starts at 50, its
# predecessor ends at 100: 900 of its 950), an operation inside another's
# span adds nothing; the idle gaps (200 before the second attention kernel)
# and the span come from the same sweep.
"$py" - "$src/bench" <<'PY'
import sys, types
sys.path.insert(0, sys.argv[1])
from torch.autograd import DeviceType
from timing import gpu_gaps, own_spans
op = lambda name, a, b: types.SimpleNamespace(name=name, device_type=DeviceType.CUDA, device_time=b - a,
                                              time_range=types.SimpleNamespace(start=a, end=b))
events = [op("vc_attention_kernel", 50, 1000), op("v_encode_kernel", 0, 100), op("reset_call_kernel", 900, 910),
          op("vc_attention_kernel", 1200, 2000)]
got = [(e.name, t) for e, t in own_spans(events)]
assert got == [("v_encode_kernel", 100), ("vc_attention_kernel", 900), ("reset_call_kernel", 0),
               ("vc_attention_kernel", 800)], got
timed, span = gpu_gaps(events)
assert [gap for _, gap in timed] == [0, 0, 0, 200] and span == 2000, (timed, span)
PY
tally timing.gpu_sweep $?
echo "bench_smoke: $passed passed, $failed failed"
[ $failed = 0 ]
