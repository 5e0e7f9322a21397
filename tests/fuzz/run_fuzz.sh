#!/usr/bin/env bash
# Fuzz smoke test (part of make test): builds the libFuzzer harnesses with
# clang, AddressSanitizer and UndefinedBehaviorSanitizer, runs each for a
# fixed number of inputs from its seed corpus with a fixed seed (the same
# inputs on every machine), and fails on any finding. Skips (exit 77) where
# clang's libFuzzer is missing.
#   tests/fuzz/run_fuzz.sh [OUT_DIR] [SECONDS]
# With SECONDS, each harness runs that long instead (a local campaign:
# tests/fuzz/run_fuzz.sh build/fuzz 600); new inputs land in OUT_DIR/corpus_*.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
out=${1:-$root/build/fuzz}
secs=${2:-}
cc=${CLANG:-clang}
mkdir -p "$out"
flags=(-g -O1 -std=c11 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined
       -ffp-contract=off -fopenmp -I "$root/include" -I "$root/src" -I "$root/src/inspect" -I "$root/lab")

echo 'int LLVMFuzzerTestOneInput(const unsigned char *d, unsigned long n) { return 0; }' >"$out/probe.c"
if ! command -v "$cc" >/dev/null || ! "$cc" "${flags[@]}" "$out/probe.c" -o "$out/probe" 2>"$out/probe.log"; then
    echo "fuzz: skipped: no clang with libFuzzer, ASan and OpenMP here (see $out/probe.log)"
    exit 77
fi

# the CPU-only library: every C layer, and the CUDA backend stub of such builds
lib=("$root"/src/core/*.c "$root"/src/vsmooth/*.c "$root"/src/cpu/*.c "$root"/src/api/*.c "$root"/src/cuda/unavailable.c)
"$cc" "${flags[@]}" "${lib[@]}" "$here/fuzz_attention.c" -lm -o "$out/fuzz_attention"
"$cc" "${flags[@]}" "$root/lab/npy.c" "$here/fuzz_npy.c" -lm -o "$out/fuzz_npy"

status=0
declare -A runs=([attention]=2000 [npy]=30000)
for name in attention npy; do
    mkdir -p "$out/corpus_$name"
    if [ -n "$secs" ]; then budget=(-max_total_time="$secs"); else budget=(-runs="${runs[$name]}" -max_total_time=120); fi
    echo "fuzz_$name: ${budget[*]}"
    if ! OMP_NUM_THREADS=1 "$out/fuzz_$name" -seed=1 "${budget[@]}" -max_len=4096 -timeout=20 -rss_limit_mb=2048 \
            -artifact_prefix="$out/crash_${name}_" "$out/corpus_$name" "$here/corpus/$name" \
            >"$out/fuzz_$name.log" 2>&1; then
        echo "fuzz_$name: FOUND a failure (input saved under $out/crash_${name}_*):"
        grep -E "ERROR|broken promise|runtime error|SUMMARY" "$out/fuzz_$name.log" | head -10
        status=1
    fi
    grep -E "^Done|stat::number_of_executed_units" "$out/fuzz_$name.log" | tail -1
done
exit $status
