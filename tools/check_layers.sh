#!/bin/sh
# The folders of src/ must include each other one way only: prints the
# include edges between folders and their order, and fails on a circle.
# Usage: sh tools/check_layers.sh [path/to/src]
src=${1:-$(dirname "$0")/../src}
edges=$(
    find "$src" -type f \( -name '*.c' -o -name '*.h' -o -name '*.cu' -o -name '*.cuh' \) | while read -r f; do
        from=$(echo "${f#"$src"/}" | cut -d/ -f1)
        dir=$(dirname "$f")
        sed -n 's/^#include "\(.*\)".*/\1/p' "$f" | while read -r inc; do
            # resolve against the file's folder, then against src/ (the -Isrc include path)
            if [ -e "$dir/$inc" ]; then target=$(cd "$(dirname "$dir/$inc")" && pwd)
            elif [ -e "$src/$inc" ]; then target=$(cd "$(dirname "$src/$inc")" && pwd)
            else continue; fi  # the public header or a system one
            to=$(echo "${target#"$(cd "$src" && pwd)"/}" | cut -d/ -f1)
            [ "$to" != "$from" ] && echo "$from $to"
        done
    done | sort -u
)
echo "$edges" | sed 's/^/include: /'
if order=$(echo "$edges" | tsort 2>&1) && ! echo "$order" | grep -q "loop"; then
    echo "layers: no circle; from the top: $(echo "$order" | tr '\n' ' ')"
else
    echo "layers: CIRCLE between src/ folders"
    echo "$order"
    exit 1
fi
