#!/usr/bin/env bash
# What each preprocessing kernel of a call waits on: Nsight Compute over one
# plain step at a benchmark shape (bench/profile_call.py: the first call
# groups, the later ones are plain steps), one group of kernels at a time:
# speed of light, issue slots and the busiest pipe, warp stall reasons,
# occupancy, memory traffic, instruction counts. The report streams to
# OUT_DIR/ncu.log, so a time limit keeps what ran.
#   bash tools/ncu_chain.sh [LIB] [SHAPE] [OUT_DIR]
# LIB defaults to build/libvcattn.so, SHAPE to longcat-480p (bench/bench_attention.py's names);
# NCU_KERNELS overrides the groups: regular expressions separated by spaces.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
lib=${1:-$root/build/libvcattn.so}
shape=${2:-longcat-480p}
out=${3:-ncu-chain}
mkdir -p "$out"
groups=${NCU_KERNELS:-"v_stats|v_encode|v_scales quantize_rows k_mean_partial probe_tile|probe_rows"}
[ -f "$lib" ] || { echo "no library at $lib: build it first (make build)"; exit 1; }
for group in $groups; do
    echo "== ncu: $group ($shape)"
    # the last call's kernels alone (a plain step): profile_call's NVTX range
    ncu --clock-control none --nvtx --nvtx-include "last call/" -k "regex:$group" \
        --section SpeedOfLight --section ComputeWorkloadAnalysis --section WarpStateStats --section Occupancy \
        --section MemoryWorkloadAnalysis --section LaunchStats --section InstructionStats \
        python3 "$root/bench/profile_call.py" --shape "$shape" --lib "$lib" --calls 3 2>&1 | grep -v "^==PROF=="
done 2>&1 | tee "$out/ncu.log"
