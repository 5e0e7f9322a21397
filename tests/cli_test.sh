#!/bin/sh
# The vcattn CLI as a user runs it: exit codes and the key lines of output.
# Usage: sh tests/cli_test.sh path/to/vcattn
# Prints one line per check and a final "cli: N passed, N failed".

VCATTN=${1:?usage: sh tests/cli_test.sh path/to/vcattn}
if [ ! -x "$VCATTN" ]; then
    echo "cli: $VCATTN is not an executable" >&2
    exit 1
fi
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT
trap 'exit 1' HUP INT TERM
passed=0
failed=0

# check NAME EXPECTED_RC [PATTERN...] -- ARGS: runs vcattn ARGS, wants exit
# status EXPECTED_RC and every fixed-string PATTERN in stdout+stderr.
check() {
    name=$1
    want=$2
    shift 2
    patterns=
    while [ "$1" != "--" ]; do
        patterns="$patterns$1
"
        shift
    done
    shift
    OMP_NUM_THREADS=2 "$VCATTN" "$@" >"$tmp/out" 2>&1
    rc=$?
    why=
    [ "$rc" -eq "$want" ] || why="exit $rc, want $want"
    # A here-document, not a pipe: the loop must run in this shell.
    while IFS= read -r p; do
        [ -n "$p" ] || continue
        grep -qF -e "$p" "$tmp/out" || why="${why:+$why; }no '$p' in output"
    done <<EOF
$patterns
EOF
    if [ -z "$why" ]; then
        passed=$((passed + 1))
        echo "ok   $name"
    else
        failed=$((failed + 1))
        echo "FAIL $name: $why"
        sed 's/^/     | /' "$tmp/out" | head -n 20
    fi
}

check "help exits 0" 0 "Usage: vcattn" -- --help
check "run --help exits 0" 0 "--workload" -- run --help
check "eval --help exits 0" 0 "Usage: vcattn eval" -- eval --help
check "expcast --help exits 0" 0 "--beta" -- expcast --help
check "no command exits 2" 2 "Usage:" --
check "unknown command exits 2" 2 "unknown command 'frobnicate'" "--help" -- frobnicate
check "unknown option exits 2" 2 "unknown option '--frobnicate'" "--help" -- run --frobnicate
check "missing value exits 2" 2 "needs a value" -- run --threads
check "bad number exits 2" 2 "--threads" -- run --threads 2x
check "out-of-range number exits 2" 2 "--beta" -- expcast --beta 1.5
check "expcast figures" 0 "79.6%" "byte 107" "= 88" -- expcast
check "expcast --json" 0 '"same_byte_fraction"' '"byte": 107' -- expcast --json
check "run tiny vc" 0 "cosine" "LSE max abs error" -- run --workload tiny --method vc
check "run --json" 0 '"metrics": {"cosine"' -- run --workload tiny --json
check "run --grouping principal" 0 "V-Smooth in principal order" -- run --workload tiny --grouping principal
check "run --grouping kmeans --json" 0 '"grouping": "kmeans"' -- run --workload tiny --grouping kmeans --json
check "eval --grouping principal" 0 "V-Smooth in principal order" "in principal order" -- \
    eval --workload tiny --draws 1 --methods sage2,vc --grouping principal
check "eval --probe-rows" 0 "V-Smooth in principal order" -- \
    eval --workload tiny --draws 1 --methods sage2,vc --grouping principal --probe-rows 64 --backend cpu
check "eval --probe-rows past 256" 2 "--probe-rows" -- eval --workload tiny --probe-rows 257
check "run --progress" 0 "vc: 100% of the rows" -- run --workload tiny --backend cpu --progress
check "eval --progress" 0 "sage2: 100% of the rows" -- eval --workload tiny --backend cpu --draws 1 --methods sage2 --progress
check "bad --grouping exits 2" 2 "--grouping: unknown value 'random'" "kmeans, principal" -- \
    run --workload tiny --grouping random
check "unknown workload exits 2" 2 "unknown workload 'nosuch'" -- run --workload nosuch
check "unknown method exits 2" 2 "unknown method 'nosuch'" "+hadamard, then +qsmooth" -- run --method nosuch
check "names whatever their case" 0 "cosine" -- run --workload TINY --method VC+Hadamard --backend CPU
check "unknown switch value exits 2" 2 "--qk" -- run --qk int4
check "missing .npy exits 1" 1 "i/o error" -- \
    run --q "$tmp/missing.npy" --k "$tmp/missing.npy" --v "$tmp/missing.npy"
printf 'this is not a numpy file at all, only garbage bytes\n' >"$tmp/garbage.npy"
check "malformed .npy exits 1" 1 "bad file format" -- \
    run --q "$tmp/garbage.npy" --k "$tmp/garbage.npy" --v "$tmp/garbage.npy"
check "run --out" 0 "cosine" -- run --workload tiny --out "$tmp/o.npy"
if [ "$(dd if="$tmp/o.npy" bs=1 skip=1 count=5 2>/dev/null)" = "NUMPY" ]; then
    passed=$((passed + 1))
    echo "ok   run --out wrote a .npy file"
else
    failed=$((failed + 1))
    echo "FAIL run --out wrote a .npy file: $tmp/o.npy missing or not .npy"
fi
# A write past the file-size limit (SIGXFSZ): a message and exit 1, the
# temporary file removed, nothing left at the path (it once killed the CLI
# and left the temporary file behind).
if [ -n "${VCATTN_TSAN:-}" ]; then
    # ThreadSanitizer's runtime itself faults (SIGBUS) under a file-size limit
    echo "skip run --out past the file-size limit: not under ThreadSanitizer (its runtime faults under ulimit -f)"
else
    mkdir "$tmp/limited"
    (ulimit -f 1 && OMP_NUM_THREADS=2 "$VCATTN" run --workload tiny --out "$tmp/limited/o.npy") >"$tmp/out" 2>&1
    rc=$?
    if [ $rc = 1 ] && grep -q "o.npy" "$tmp/out" && [ -z "$(ls -A "$tmp/limited")" ]; then
        passed=$((passed + 1))
        echo "ok   run --out past the file-size limit: exit 1, no file left"
    else
        failed=$((failed + 1))
        echo "FAIL run --out past the file-size limit: exit $rc, left: $(ls -A "$tmp/limited" | tr '\n' ' ')"
        tail -3 "$tmp/out"
    fi
fi
check "output reads back as input" 0 "cosine" -- \
    run --q "$tmp/o.npy" --k "$tmp/o.npy" --v "$tmp/o.npy" --method sage2
check "eval --study studies" 0 "balanced k-means" "rows over the bound 3.6368% + tau: 0" -- \
    eval --study studies --workload tiny
check "eval --study json" 0 '"violations": 0' '"order": "k-means' -- eval --study studies --workload tiny --json
check "eval --study all --size small" 0 "== hunyuan-small ==" "rows over the bound 3.6368% + tau: 0" \
    "K channel-mean energy share" -- eval --study all --size small
check "eval --size full" 2 "only the small presets" -- eval --study all --size full
check "eval --study unknown" 2 "unknown study 'table1'" -- eval --study table1
check "run --study" 2 "--study belongs to eval" -- run --study orders
check "eval --methods" 0 "vc+hadamard" "sage2 " -- eval --workload tiny --methods sage2,vc+hadamard
check "eval --draws" 0 "seeds 5..6 pooled" "Per draw, rel L2 (seeds 5..6)" "vc below sage2 on" \
    -- eval --workload tiny --seed 5 --draws 2 --methods sage2,vc --backend cpu
check "eval --draws json" 0 '"draws": 2' '"rel_l2_per_draw": [' -- \
    eval --workload tiny --draws 2 --methods sage2,vc --backend cpu --json
check "eval --draws 0" 2 "--draws: '0' is not an integer in [1, 64]" -- eval --draws 0
check "eval --draws 65" 2 "--draws: '65' is not an integer in [1, 64]" -- eval --draws 65
check "eval --draws past the last seed" 2 "with 2 draws runs past the last seed" -- \
    eval --seed 18446744073709551615 --draws 2
check "eval past the last seed" 2 "with 4 draws runs past the last seed" -- eval --seed 18446744073709551613
check "eval --draws 1 at the last seed" 0 "seed 18446744073709551615," -- \
    eval --workload tiny --seed 18446744073709551615 --draws 1 --methods sage2 --backend cpu
check "run --draws" 2 "--draws belongs to eval" -- run --draws 2
check "eval --draws --study" 2 "--draws applies to the method table" -- eval --study orders --draws 2
check "eval --methods unknown" 2 "unknown method 'nope'" -- eval --methods sage2,nope
check "eval ends with a conclusion" 0 "In short: vc, the default, is" "the most faithful 8-bit method here is" -- \
    eval --workload tiny --draws 1 --methods sage2,vsmooth,vc
check "run --methods" 2 "--methods belongs to eval" -- run --methods sage2
check "eval --q-smoothing" 0 '"q_smoothing": true' -- run --workload tiny --method vc --q-smoothing --backend cpu --json
check "run --sink-guard" 0 '"sink_guard": 0' -- run --workload tiny --sink-guard 0 --backend cpu --json
check "run --sink-guard out of range" 2 "--sink-guard" -- run --workload tiny --sink-guard 2
check "run: ExpCast falls back below 1024 keys" 0 "p fp8-cast (ExpCast from 1024 keys)" -- \
    run --workload tiny --backend cpu
check "run --expcast-min-keys 0" 0 '"p": "expcast"' '"expcast_min_keys": 0' -- \
    run --workload tiny --expcast-min-keys 0 --backend cpu --json
check "run --expcast-min-keys -1" 2 "--expcast-min-keys: '-1' is not an integer in [0," -- \
    run --workload tiny --expcast-min-keys -1
check "run --iters past the bound" 2 "--iters: '1001' is not an integer in [1, 1000]" -- run --iters 1001
check "run --threads past the bound" 2 "--threads: '100000'" -- run --threads 100000
check "run --sm-scale past the bound" 2 "--sm-scale: '1e30'" -- run --sm-scale 1e30

# Captured tensors of a pretrained transformer (tools/capture_minilm.py):
# eval and the studies on .npy inputs; the ExpCast bound holds on every row.
data=$(dirname "$0")/data
for layer in 0 3 5; do
    files="--q $data/minilm-l$layer-q.npy --k $data/minilm-l$layer-k.npy --v $data/minilm-l$layer-v.npy"
    # shellcheck disable=SC2086
    check "captured layer $layer: studies" 0 '"violations": 0' '"k_mean_share"' -- eval --study studies --json $files
done
# shellcheck disable=SC2086
check "captured layer 5: eval" 0 "Nk=512 D=32" "vsmooth " -- eval --backend cpu --methods sage2,vsmooth $files
check "eval: files and --workload" 2 "not both" -- eval --workload tiny --q "$data/minilm-l0-q.npy" \
    --k "$data/minilm-l0-k.npy" --v "$data/minilm-l0-v.npy"
check "eval: files and --draws" 2 "--draws applies to built-in workloads" -- eval --draws 2 \
    --q "$data/minilm-l0-q.npy" --k "$data/minilm-l0-k.npy" --v "$data/minilm-l0-v.npy"

# Mismatched .npy shapes: refused before any computation (the FP64
# reference once ran first and read past v). npy_f32 FILE SHAPE COUNT
# [BYTES] writes a float32 .npy of COUNT zeros, or COUNT copies of the
# printf escapes BYTES.
npy_f32() {
    h="{'descr': '${NPY_DESCR:-<f4}', 'fortran_order': False, 'shape': ($2), }"
    while [ $(( (10 + ${#h} + 1) % 64 )) -ne 0 ]; do h="$h "; done
    len=$(( ${#h} + 1 ))
    {
        printf '\223NUMPY\001\000'
        printf "\\$(printf %o $((len % 256)))\\$(printf %o $((len / 256)))"
        printf '%s\n' "$h"
        if [ -z "$4" ]; then
            head -c $(( $3 * ${NPY_SIZE:-4} )) /dev/zero
        else
            i=0
            while [ $i -lt "$3" ]; do printf "$4"; i=$((i + 1)); done
        fi
    } >"$1"
}
npy_f32 "$tmp/q.npy" "1, 2, 4000, 32" 256000
npy_f32 "$tmp/k.npy" "1, 2, 4000, 32" 256000
npy_f32 "$tmp/v1.npy" "1, 2, 1, 32" 64
npy_f32 "$tmp/v1h.npy" "1, 1, 4000, 32" 128000
npy_f32 "$tmp/q2.npy" "2, 2, 4000, 32" 512000
for bad in "v with one token:--v $tmp/v1.npy --k $tmp/k.npy --q $tmp/q.npy" \
           "v with fewer heads:--v $tmp/v1h.npy --k $tmp/k.npy --q $tmp/q.npy" \
           "q batch 2, k batch 1:--v $tmp/k.npy --k $tmp/k.npy --q $tmp/q2.npy" \
           "NHD mismatch:--layout NHD --v $tmp/v1h.npy --k $tmp/k.npy --q $tmp/q.npy"; do
    # shellcheck disable=SC2086
    check "eval refuses ${bad%%:*}" 1 "shape mismatch" -- eval --backend cpu --methods sage2 ${bad#*:}
    if grep -qF "fp64 reference" "$tmp/out"; then
        failed=$((failed + 1))
        echo "FAIL eval refuses ${bad%%:*}: the reference ran before the shape check"
    else
        passed=$((passed + 1))
        echo "ok   eval refuses ${bad%%:*} before computing"
    fi
    # shellcheck disable=SC2086
    check "study refuses ${bad%%:*}" 1 "shape mismatch" -- eval --study studies ${bad#*:}
done

# Finite values past float16's maximum with --dtype f16: named as such,
# not as NaN or Inf (1e5 as little-endian float32 bytes).
npy_f32 "$tmp/big.npy" "1, 1, 8, 8" 64 '\000\120\303\107'
check "run --dtype f16 past 65504" 1 "100000 is outside the float16 range" -- \
    run --q "$tmp/big.npy" --k "$tmp/big.npy" --v "$tmp/big.npy" --dtype f16 --backend cpu
npy_f32 "$tmp/z.npy" "1, 1, 8, 8" 64
check "run on V of 1e5 as float32" 0 "cosine" -- \
    run --q "$tmp/z.npy" --k "$tmp/z.npy" --v "$tmp/big.npy" --backend cpu

# The label says the files' dtype; float64 (numpy's default) is read as
# float32 with a note; more heads than tokens hints at the other layout.
check "eval labels float32 files" 0 "float32 inputs" -- \
    eval --backend cpu --methods sage2 --q "$tmp/z.npy" --k "$tmp/z.npy" --v "$tmp/z.npy"
NPY_DESCR='<f8' NPY_SIZE=8 npy_f32 "$tmp/z64.npy" "1, 2, 16, 8" 256
check "run reads float64 files" 0 "is float64: read as float32" "cosine" -- \
    run --backend cpu --method sage2 --q "$tmp/z64.npy" --k "$tmp/z64.npy" --v "$tmp/z64.npy"
npy_f32 "$tmp/nhd.npy" "1, 16, 2, 8" 256
check "warns on more heads than tokens" 0 "more heads than tokens suggests NHD" -- \
    run --backend cpu --method sage2 --q "$tmp/nhd.npy" --k "$tmp/nhd.npy" --v "$tmp/nhd.npy"

# A CPU call of over 10^11 multiply-adds starts with an estimate of its
# time (one head of 32768 zero tokens; stopped after 10 s, its estimate out).
npy_f32 "$tmp/long.npy" "1, 1, 32768, 128" 4194304
OMP_NUM_THREADS=2 timeout 10 "$VCATTN" run --backend cpu --method sage2 --threads 2 \
    --q "$tmp/long.npy" --k "$tmp/long.npy" --v "$tmp/long.npy" >"$tmp/out" 2>&1
rc=$?
if { [ "$rc" -eq 0 ] || [ "$rc" -eq 124 ]; } && grep -qF "[estimate] about" "$tmp/out"; then
    passed=$((passed + 1))
    echo "ok   long CPU run prints an estimate"
else
    failed=$((failed + 1))
    echo "FAIL long CPU run prints an estimate: exit $rc"
    sed 's/^/     /' "$tmp/out"
fi

# Options as --name=value too, and names in any case.
check "--name=value options" 0 "cosine" -- run --workload=tiny --method=sage2 --backend=cpu
check "lower-case layout name" 0 "cosine" -- \
    run --backend cpu --method sage2 --layout nhd --q "$tmp/z.npy" --k "$tmp/z.npy" --v "$tmp/z.npy"
check "--json=1 refused" 2 "takes no value" -- run --workload tiny --json=1

echo "cli: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
