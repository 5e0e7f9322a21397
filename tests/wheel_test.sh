#!/bin/sh
# The wheel as pip builds it (CPU-only, the quick build): one py3-none
# platform wheel, one copy of the library inside, the package importable
# from it. Skips (77) where pip cannot fetch the build backend.
# Usage: sh tests/wheel_test.sh SOURCE_DIR [PYTHON]   (PYTHON: python3 by default)
src=${1:?usage: sh tests/wheel_test.sh SOURCE_DIR [PYTHON]}
py=${2:-python3}
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT
if ! "$py" -m pip download -q --no-deps -d "$tmp/probe" scikit-build-core >/dev/null 2>&1; then
    echo "wheel: SKIPPED, pip cannot fetch scikit-build-core here"
    exit 77
fi
if ! "$py" -m pip wheel -q --no-deps "$src" -Ccmake.define.VCATTN_CUDA=OFF \
        -Cbuild-dir="$tmp/build" -w "$tmp/wheel" >"$tmp/log" 2>&1; then
    tail -20 "$tmp/log"
    echo "wheel: FAILED, pip wheel did not build"
    exit 1
fi
status=0
whl=$(ls "$tmp"/wheel/vcattn-*.whl)
case "$whl" in
    *-py3-none-*.whl) echo "ok: tag $(basename "$whl")" ;;
    *) echo "FAIL: wheel tag is not py3-none-<platform>: $(basename "$whl")"; status=1 ;;
esac
libs=$("$py" -c "import sys, zipfile; print(sum('libvcattn' in n for n in zipfile.ZipFile(sys.argv[1]).namelist()))" "$whl")
if [ "$libs" = 1 ]; then echo "ok: one library file"; else echo "FAIL: $libs library files in the wheel"; status=1; fi
mkdir "$tmp/site" && "$py" -c "import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extractall(sys.argv[2])" "$whl" "$tmp/site"
# The library loads from the wheel; with numpy there, a call runs too
# (without it that part says so: numpy is optional for the package).
if (cd "$tmp" && env -u VCATTN_LIB PYTHONPATH="$tmp/site" "$py" -c "
import vcattn
assert vcattn._capi.find_library().startswith('$tmp/site'), vcattn._capi.find_library()
assert vcattn.version()
try:
    import numpy as np
except ImportError:
    print('wheel: no numpy here: the library loaded, the call check skipped')
else:
    q = np.random.default_rng(0).standard_normal((1, 2, 64, 64)).astype(np.float32)
    assert vcattn.attention(q, q, q).shape == q.shape
"); then echo "ok: the package runs from the wheel"; else echo "FAIL: the package does not run from the wheel"; status=1; fi
[ $status = 0 ] && echo "wheel: passed" || echo "wheel: FAILED"
exit $status
