#!/usr/bin/env bash
# A change on the GPU in one run: builds a base tree and a changed tree side
# by side, checks the changed one (test_cuda, compute-sanitizer memcheck,
# racecheck and synccheck over the GQA and probe cases, test_extreme,
# test_concurrency), then times it against the base in one process
# (bench/ab_builds.py: plain step and drop-in call, round by round, outputs
# compared bit for bit), each build's kernels in one LongCat step, and a
# burst of public calls. Logs go to OUT_DIR (ab.log streams as it runs:
# what ran before a time limit stays).
#   bash tools/gpu_ab.sh BASE_TREE CHANGED_TREE [OUT_DIR]
# Trees are source folders, e.g. from `git archive main | tar -x -C /tmp/base`.
set -uo pipefail
base=$(cd "$1" && pwd) changed=$(cd "$2" && pwd)
out=${3:-gpu-ab}
mkdir -p "$out" && out=$(cd "$out" && pwd)
shapes=${AB_SHAPES:-flux-4608,seq-8k,longcat-480p,wan2.2-720p}
reps=${AB_REPS:-21}
jobs=$(( $(nproc) / 2 ))

build() {  # tree targets...
    local tree=$1; shift
    cmake -S "$tree" -B "$tree/build" -DCMAKE_BUILD_TYPE=Release -DVCATTN_CUDA=ON >/dev/null &&
        cmake --build "$tree/build" -j "$jobs" --target "$@" >/dev/null
}

main() {
    nvidia-smi -L; date -u
    local t0=$SECONDS B="$base/build" C="$changed/build"
    build "$base" vcattn >"$out/build-base.log" 2>&1 & local pb=$!
    build "$changed" vcattn test_cuda test_extreme test_concurrency >"$out/build-changed.log" 2>&1
    local rc=$?
    wait $pb || { echo "base build failed (build-base.log)"; return 1; }
    [ $rc -eq 0 ] || { echo "changed build failed (build-changed.log)"; return 1; }
    echo "== built in $((SECONDS - t0)) s"
    echo "== test_cuda (quick)"
    VCATTN_TEST_QUICK=1 "$C/test_cuda" >"$out/test_cuda.log" 2>&1; echo "rc=$?"; tail -1 "$out/test_cuda.log"
    echo "== test_cuda -k probe"; "$C/test_cuda" -k probe 2>&1 | tail -1
    echo "== A/B (B: the changed tree; checks on)"
    python3 "$changed/bench/ab_builds.py" "$B/libvcattn.so" "$C/libvcattn.so" --shapes "$shapes" --reps "$reps" 2>&1 |
        grep -v Warn
    for b in "$B" "$C"; do
        echo "== kernels of a LongCat plain step: $b"
        python3 "$changed/bench/profile_call.py" --shape longcat-480p --lib "$b/libvcattn.so" --kernels 2>&1 | grep -v Warn
    done
    echo "== burst of 20 public calls at 4,608 tokens: changed"
    python3 "$changed/bench/profile_call.py" --shape flux-4608 --lib "$C/libvcattn.so" --drop-in --check-finite \
        --burst 20 2>&1 | grep -v Warn | tail -12
    for k in GQA probe; do
        for tool in memcheck racecheck synccheck; do
            echo "== compute-sanitizer $tool -k $k"
            VCATTN_TEST_QUICK=1 compute-sanitizer --tool "$tool" --error-exitcode 3 "$C/test_cuda" -k "$k" 2>&1 |
                grep -E "ERROR SUMMARY|RACECHECK SUMMARY|passed" | tail -2
        done
    done
    echo "== test_extreme, test_concurrency"; "$C/test_extreme" 2>&1 | tail -1; "$C/test_concurrency" 2>&1 | tail -1
    echo "== done in $((SECONDS - t0)) s"
}
main 2>&1 | tee "$out/ab.log"
