#!/bin/sh
# The C and CUDA code's folders include each other one way only.
#   src/: its folders form layers (the include edges between them have no
#   circle); src/inspect/ is the one door into them from outside src/.
#   lab/, tools/, tests/: include the public header, src/inspect/, their own
#   folder, and below them only lab/ (tools and tests measure with the lab).
# Prints the edges and the order; fails on a circle or a door gone round.
# Usage: sh tools/check_layers.sh [ROOT]   (ROOT: the repository, default ..)
#        sh tools/check_layers.sh --self-test   (a planted include must fail)
set -u
if [ "${1:-}" = "--self-test" ]; then
    t=$(mktemp -d)
    trap 'rm -rf "$t"' EXIT
    mkdir -p "$t/src/cpu" "$t/src/inspect" "$t/tools" "$t/include"
    echo '#include "../cpu/cpu.h"' >"$t/src/inspect/vcattn_inspect.h"
    : >"$t/src/cpu/cpu.h"
    echo '#include "vcattn_inspect.h"' >"$t/tools/good.c"
    sh "$0" "$t" >/dev/null || { echo "self-test: a clean tree failed"; exit 1; }
    echo '#include "cpu/cpu.h"' >"$t/tools/planted.c"
    if sh "$0" "$t" >"$t/log"; then echo "self-test: the planted include passed"; exit 1; fi
    grep -q "tools/planted.c" "$t/log" || { echo "self-test: the failure does not name the file"; exit 1; }
    echo "self-test: a planted include from tools/ into src/cpu/ fails the check"
    exit 0
fi
root=$(cd "${1:-$(dirname "$0")/..}" && pwd)
src=$root/src

# resolve FILE INCLUDE: the included file's absolute path, or nothing (a
# system header); searched as the builds do: the file's folder, then the
# include paths (src/ too, so that a door gone round is found, not missed)
resolve() {
    for base in "$(dirname "$1")" "$root/include" "$src/inspect" "$root/lab" "$root/tests" "$root/tools" "$src"; do
        [ -e "$base/$2" ] && { echo "$(cd "$(dirname "$base/$2")" && pwd)/$(basename "$2")"; return; }
    done
}
sources() { find "$@" -type f \( -name '*.c' -o -name '*.h' -o -name '*.cu' -o -name '*.cuh' \) 2>/dev/null; }

edges=$(
    sources "$src" | while read -r f; do
        from=$(echo "${f#"$src"/}" | cut -d/ -f1)
        sed -n 's/^#include "\(.*\)".*/\1/p' "$f" | while read -r inc; do
            target=$(resolve "$f" "$inc")
            case "$target" in "$src"/*) ;; *) continue ;; esac  # the public header or a system one
            to=$(echo "${target#"$src"/}" | cut -d/ -f1)
            [ "$to" != "$from" ] && echo "$from $to"
        done
    done | sort -u
)
echo "$edges" | sed 's/^/include: /'
status=0
if order=$(echo "$edges" | tsort 2>&1) && ! echo "$order" | grep -q "loop"; then
    echo "layers: no circle in src/; from the top: $(echo "$order" | tr '\n' ' ')"
else
    echo "layers: CIRCLE between src/ folders"
    echo "$order"
    status=1
fi

up=$(
    sources "$src" | while read -r f; do
        sed -n 's/^#include "\(.*\)".*/\1/p' "$f" | while read -r inc; do
            target=$(resolve "$f" "$inc")
            case "$target" in "" | "$root/include/"* | "$src/"*) ;; *) echo "${f#"$root"/} includes ${target#"$root"/}" ;; esac
        done
    done
)
if [ -n "$up" ]; then
    echo "layers: src/ reaches up into the code built on it:"
    echo "$up" | sed 's/^/  /'
    status=1
fi

bad=$(
    sources "$root/lab" "$root/tools" "$root/tests" | while read -r f; do
        folder=$(echo "${f#"$root"/}" | cut -d/ -f1)
        sed -n 's/^#include "\(.*\)".*/\1/p' "$f" | while read -r inc; do
            target=$(resolve "$f" "$inc")
            case "$target" in
                "" | "$root/include/"* | "$src/inspect/"* | "$root/$folder/"* | "$root/lab/"*) ;;
                *) echo "${f#"$root"/} includes ${target#"$root"/}" ;;
            esac
        done
    done
)
if [ -n "$bad" ]; then
    echo "layers: code outside src/ goes round src/inspect/ (include vcattn_inspect.h instead):"
    echo "$bad" | sed 's/^/  /'
    status=1
else
    echo "layers: lab/, tools/ and tests/ reach src/ only through src/inspect/"
fi
exit $status
