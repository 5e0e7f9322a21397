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
for bench in "bench_transformer.py --tiny --device cpu --reps 1 --steps 8" \
             "bench_compile.py --tiny --device cpu --reps 1 --steps 8" \
             "bench_real_layers.py --device cpu --dir $src/tests/data"; do
    name=${bench%% *}
    # shellcheck disable=SC2086
    if OMP_NUM_THREADS=2 "$py" "$src/bench/"$bench --json "$tmp/$name.json" >"$tmp/log" 2>&1 &&
            "$py" -c "import json, sys; json.load(open(sys.argv[1]))" "$tmp/$name.json"; then
        passed=$((passed + 1))
        echo "ok   $name"
    else
        failed=$((failed + 1))
        echo "FAIL $name"
        tail -15 "$tmp/log"
    fi
done
# The A/B's interval: the median of 41 rounds' ratios lies between the 14th
# and the 28th of them at 95% (binomial order statistics); 5 rounds give none.
if "$py" - "$src/bench" <<'PY'
import math, sys
sys.path.insert(0, sys.argv[1])
from timing import paired_ratio
mid, lo, hi = paired_ratio([2.0] * 41, [2.0 + r / 50 for r in range(41, 0, -1)])
assert all(abs(a - b) < 1e-9 for a, b in zip((mid, lo, hi), (1.21, 1.14, 1.28))), (mid, lo, hi)
assert math.isnan(paired_ratio([1.0] * 5, [1.1] * 5)[1])
PY
then
    passed=$((passed + 1))
    echo "ok   timing.paired_ratio"
else
    failed=$((failed + 1))
    echo "FAIL timing.paired_ratio"
fi
echo "bench_smoke: $passed passed, $failed failed"
[ $failed = 0 ]
