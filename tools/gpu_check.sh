#!/usr/bin/env bash
# Everything the GPU side promises, on a machine with an sm_90 GPU, in one
# run: the test suite (GPU tests included), test_cuda on its own, the SASS
# facts of the vc kernel, the four compute-sanitizer tools over test_cuda's
# small cases (every kernel and variant), memcheck over test_extreme's
# boundary values, and the benchmark. Logs and JSON go
# to $1 (default gpu-check/). Where Python lacks diffusers, wheels in .whl
# (tools/device_wheels.sh) are installed into a folder of its own first, so
# the diffusers GPU tests run instead of skipping.
#   bash tools/gpu_check.sh [OUT_DIR] [--quick|--sanitizers]
#   --quick: no sanitizers, no benchmark; --sanitizers: build, sanitizers only
set -uo pipefail
cd "$(dirname "$0")/.."
out=${1:-gpu-check}
quick=${2:-}
mkdir -p "$out"
BUILD=${BUILD:-build}
status=0
step() { echo "== $1"; }

if ! python3 -c "import diffusers" 2>/dev/null && ls .whl/*.whl >/dev/null 2>&1; then
    site=$(mktemp -d)
    python3 -m pip install -q --no-index --no-deps --target "$site" .whl/*.whl &&
        export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}"
fi
python3 -c "import diffusers; print('diffusers', diffusers.__version__)" 2>/dev/null ||
    echo "no diffusers: the diffusers GPU tests skip (bash tools/device_wheels.sh, then carry .whl)"

step "build"
make build BUILD="$BUILD" >"$out/build.log" 2>&1 || { echo "build failed (see $out/build.log)"; exit 1; }

if [ "$quick" != "--sanitizers" ]; then
step "make test"
(cd "$BUILD" && ctest --output-on-failure -j 4) >"$out/ctest.log" 2>&1 || status=1
grep -E "tests passed|Failed|Skipped" "$out/ctest.log"

step "test_cuda"
"./$BUILD/test_cuda" >"$out/test_cuda.log" 2>&1 || status=1
tail -1 "$out/test_cuda.log"

step "SASS of the vc kernel (D 128, bf16 out)"
cuobjdump --dump-sass "$BUILD/libvcattn.so" |
    awk '/Function : .*vc_attention_kernelILi128ELb1ELb1ELb0E13__nv_bfloat16/{f=1; next} f && /Function : /{f=0} f' |
    grep -oE "IGMMA|QGMMA|MUFU\.[A-Z0-9]+|F2I[A-Z0-9.]*|I2F[A-Z0-9.]*|FFMA\.SAT|PRMT|LDL|STL" | sort | uniq -c |
    tee "$out/sass.txt"
python3 tools/sass_tile_step.py "$BUILD/libvcattn.so" | tee -a "$out/sass.txt"
python3 tools/sass_tile_step.py --check "$BUILD/libvcattn.so" | tee -a "$out/sass.txt"
[ "${PIPESTATUS[0]}" -eq 0 ] || status=1
fi

if [ "$quick" != "--quick" ]; then
    for tool in memcheck racecheck initcheck synccheck; do
        step "compute-sanitizer $tool over test_cuda's small cases"
        VCATTN_TEST_QUICK=1 compute-sanitizer --tool "$tool" --error-exitcode 3 "./$BUILD/test_cuda" \
            >"$out/sanitizer_$tool.log" 2>&1 || status=1
        grep -E "ERROR SUMMARY|RACECHECK SUMMARY|test_cuda:" "$out/sanitizer_$tool.log" | tail -2
    done
    step "compute-sanitizer memcheck over test_extreme (the boundary values on the GPU)"
    compute-sanitizer --tool memcheck --error-exitcode 3 "./$BUILD/test_extreme" \
        >"$out/sanitizer_extreme.log" 2>&1 || status=1
    grep -E "ERROR SUMMARY|test_extreme:" "$out/sanitizer_extreme.log" | tail -2
fi

if [ -z "$quick" ]; then
    step "benchmark"
    VCATTN_LIB="$BUILD/libvcattn.so" python3 bench/bench_attention.py --reps 3 --json "$out/bench.json" \
        >"$out/bench.log" 2>&1 || status=1
    grep -v Warn "$out/bench.log" | tail -9
fi
exit $status
