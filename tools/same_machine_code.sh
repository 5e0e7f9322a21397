#!/usr/bin/env bash
# Whether a change to the CUDA sources leaves the machine code as it was:
# compiles every src/cuda .cu file at REF (default HEAD) and in the working
# tree to sm_90a cubins, with the build's flags less -lineinfo (line numbers
# move with any edit), and compares them byte for byte. Needs nvcc, no GPU.
# A refactor that passes cannot change an output bit or a timing.
#   bash tools/same_machine_code.sh [REF]
set -uo pipefail
cd "$(dirname "$0")/.."
ref=${1:-HEAD}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
flags=(-O3 -DNDEBUG -arch=sm_90a -fmad=false -DVCATTN_WITH_CUDA=1 -cubin -Iinclude -Isrc)
jobs=${JOBS:-2}
# Both trees are compiled in one folder, one after the other: an anonymous
# namespace's mangled name hashes the source file's path.
compile_tree() {  # out_dir
    mkdir -p "$1"
    for f in $(cd "$tmp/tree" && find src/cuda -name '*.cu' | sort); do
        (cd "$tmp/tree" && nvcc "${flags[@]}" "$f" -o "$1/$(echo "$f" | tr / +).cubin") || echo "failed:  $f" &
        while [ "$(jobs -r | wc -l)" -ge "$jobs" ]; do wait -n; done
    done
    wait
}
mkdir "$tmp/tree"
git archive "$ref" src include | tar -x -C "$tmp/tree" || { echo "no such ref: $ref"; exit 2; }
compile_tree "$tmp/before"
rm -rf "$tmp/tree" && mkdir "$tmp/tree" && cp -r src include "$tmp/tree/"
compile_tree "$tmp/after"
status=0
for c in $( (ls "$tmp/before"; ls "$tmp/after") | sort -u); do
    f=$(echo "${c%.cubin}" | tr + /)
    if [ ! -f "$tmp/before/$c" ]; then echo "new:     $f"; status=1
    elif [ ! -f "$tmp/after/$c" ]; then echo "gone:    $f"; status=1
    elif cmp -s "$tmp/before/$c" "$tmp/after/$c"; then echo "same:    $f"
    else echo "differs: $f"; status=1; fi
done
exit $status
