#!/usr/bin/env bash
# Changes on the GPU in one run: builds a base tree and one or more changed
# trees side by side, checks the last (or the AB_CHECK-th, from 0: test_cuda,
# test_python_gpu with its torch.compile and CUDA-graph captures,
# compute-sanitizer memcheck, racecheck and synccheck over the GQA and probe
# cases, test_extreme, test_concurrency), then times each tree against the one
# before it in one process (bench/ab_builds.py: plain step and drop-in call,
# round by round, outputs compared bit for bit), each build's kernels in one
# LongCat plain step and one 4,608-token drop-in call (from a second build
# with plain launches, -DVCATTN_PLAIN_LAUNCHES: a chained kernel's span
# would include its wait), and a burst of public calls at 4,608 tokens.
# Several changed trees (a change in steps) cost one machine start instead
# of one each. Each check runs under a 5-minute limit (rc 124: a hang, e.g.
# a kernel waiting on a barrier that never completes).
# Logs go to OUT_DIR (ab.log streams as it runs: what ran before a time
# limit stays).
#   bash tools/gpu_ab.sh BASE_TREE CHANGED_TREE [MORE_CHANGED_TREES...] [OUT_DIR]
# AB_KERNELS_ONLY=N: only the attention kernel of each tree (the "split:"
# line of one profiled call, a LongCat plain step and a 4,608-token drop-in
# call), the trees in turn for N rounds, from the plain-launch builds alone:
# five trees in about four minutes, to pick which changes deserve the whole run.
# With AB_KERNELS="V statistics|K rows" (bench/byte_bound.py's labels) also
# those preprocessing kernels' lines of the same profiles.
# Trees are source folders, e.g. from `git archive main | tar -x -C /tmp/base`;
# a last argument that is not one (no CMakeLists.txt) names OUT_DIR.
set -uo pipefail
trees=()
out=gpu-ab
for arg in "$@"; do
    if [ -f "$arg/CMakeLists.txt" ]; then trees+=("$(cd "$arg" && pwd)"); else out=$arg; fi
done
[ ${#trees[@]} -ge 2 ] || { echo "usage: gpu_ab.sh BASE_TREE CHANGED_TREE [MORE_CHANGED_TREES...] [OUT_DIR]"; exit 2; }
mkdir -p "$out" && out=$(cd "$out" && pwd)
shapes=${AB_SHAPES:-flux-4608,seq-8k,longcat-480p,wan2.2-720p}
reps=${AB_REPS:-21}
jobs=$(( $(nproc) / (2 * ${#trees[@]}) )); [ "$jobs" -ge 1 ] || jobs=1
checked=${trees[${AB_CHECK:-${#trees[@]}-1}]}  # the tree the checks run on

build() {  # tree build_dir cuda_flags targets...
    local tree=$1 dir=$2 flags=$3; shift 3
    cmake -S "$tree" -B "$tree/$dir" -DCMAKE_BUILD_TYPE=Release -DVCATTN_CUDA=ON -DCMAKE_CUDA_FLAGS="$flags" \
        >/dev/null && cmake --build "$tree/$dir" -j "$jobs" --target "$@" >/dev/null
}

build_trees() {  # full: each tree's regular build too (the checked tree with its tests), beside the plain-launch one
    local full=$1 t0=$SECONDS pids=() logs=() i
    for i in "${!trees[@]}"; do
        if [ "$full" = 1 ]; then
            local targets=vcattn
            [ "${trees[$i]}" = "$checked" ] && targets="vcattn test_cuda test_extreme test_concurrency"
            build "${trees[$i]}" build "" $targets >"$out/build-$i.log" 2>&1 & pids+=($!) logs+=("build-$i.log")
        fi
        build "${trees[$i]}" build-plain -DVCATTN_PLAIN_LAUNCHES vcattn >"$out/build-plain-$i.log" 2>&1 &
        pids+=($!) logs+=("build-plain-$i.log")
    done
    for i in "${!pids[@]}"; do
        wait "${pids[$i]}" || { echo "a build failed (${logs[$i]})"; return 1; }
    done
    echo "== built in $((SECONDS - t0)) s"
}

kernels_only() {
    nvidia-smi -L; date -u
    local t0=$SECONDS round tree shape
    build_trees 0 || return 1
    for ((round = 1; round <= AB_KERNELS_ONLY; round++)); do
        for tree in "${trees[@]}"; do
            for shape in longcat-480p flux-4608; do
                local extra="" log; [ "$shape" = flux-4608 ] && extra=--drop-in
                log=$(python3 "$checked/bench/profile_call.py" --shape "$shape" $extra \
                    --lib "$tree/build-plain/libvcattn.so" --kernels 2>&1)
                echo "round $round $shape $tree: $(grep '^split:' <<<"$log")"
                # the µs of the preprocessing kernels named (byte_bound.py's labels), e.g. "V statistics|K rows"
                [ -z "${AB_KERNELS:-}" ] || grep -E "^(${AB_KERNELS}):" <<<"$log" | awk '{printf "    %s\n", $0}'
            done
        done
    done
    echo "== done in $((SECONDS - t0)) s"
}

main() {
    nvidia-smi -L; date -u
    local t0=$SECONDS C="$checked/build" i
    build_trees 1 || return 1
    echo "== test_cuda (quick)"
    VCATTN_TEST_QUICK=1 timeout 300 "$C/test_cuda" >"$out/test_cuda.log" 2>&1; echo "rc=$?"; tail -1 "$out/test_cuda.log"
    echo "== test_cuda -k probe"; timeout 300 "$C/test_cuda" -k probe 2>&1 | tail -1
    # torch.compile and CUDA-graph capture and replay of the call (a launch change must capture)
    echo "== test_python_gpu"
    (cd "$checked" && VCATTN_LIB="$C/libvcattn.so" timeout 300 python3 python/tests/test_python_gpu.py 2>&1 | tail -1)
    for ((i = 1; i < ${#trees[@]}; i++)); do
        echo "== A/B (A: ${trees[$i - 1]}, B: ${trees[$i]}; checks on)"
        python3 "$checked/bench/ab_builds.py" "${trees[$i - 1]}/build/libvcattn.so" "${trees[$i]}/build/libvcattn.so" \
            --shapes "$shapes" --reps "$reps" 2>&1 | grep -v Warn
    done
    for tree in "${trees[@]}"; do
        echo "== kernels of a LongCat plain step (plain launches): $tree"
        python3 "$checked/bench/profile_call.py" --shape longcat-480p --lib "$tree/build-plain/libvcattn.so" --kernels \
            2>&1 | grep -v Warn
        echo "== kernels of a 4,608-token drop-in call (plain launches): $tree"
        python3 "$checked/bench/profile_call.py" --shape flux-4608 --drop-in --lib "$tree/build-plain/libvcattn.so" \
            --kernels 2>&1 | grep -v Warn
    done
    for tree in "${trees[@]}"; do
        echo "== burst of 20 public calls at 4,608 tokens: $tree"
        python3 "$checked/bench/profile_call.py" --shape flux-4608 --lib "$tree/build/libvcattn.so" --drop-in \
            --check-finite --burst 20 2>&1 | grep -v Warn | grep "^burst" | grep -v "gap "
    done
    for k in GQA probe; do
        for tool in memcheck racecheck synccheck; do
            echo "== compute-sanitizer $tool -k $k"
            VCATTN_TEST_QUICK=1 timeout 300 compute-sanitizer --tool "$tool" --error-exitcode 3 "$C/test_cuda" -k "$k" 2>&1 |
                grep -E "ERROR SUMMARY|RACECHECK SUMMARY|passed" | tail -2
        done
    done
    echo "== test_extreme, test_concurrency"; timeout 300 "$C/test_extreme" 2>&1 | tail -1
    timeout 300 "$C/test_concurrency" 2>&1 | tail -1
    echo "== done in $((SECONDS - t0)) s"
}
if [ "${AB_KERNELS_ONLY:-0}" -gt 0 ]; then
    jobs=$(( $(nproc) / ${#trees[@]} )); [ "$jobs" -ge 1 ] || jobs=1
    kernels_only 2>&1 | tee "$out/ab.log"
else
    main 2>&1 | tee "$out/ab.log"
fi
