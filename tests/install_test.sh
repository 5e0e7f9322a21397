#!/bin/sh
# What a C user gets from `cmake --install`: the header, the shared library,
# find_package(vcattn) and pkg-config. Installs the build into a temporary
# prefix, then builds and runs a small program against it both ways.
# Usage: sh tests/install_test.sh BUILD_DIR
build=${1:?usage: sh tests/install_test.sh BUILD_DIR}
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT
prefix="$tmp/prefix"
status=0
if ! cmake --install "$build" --prefix "$prefix" >"$tmp/log" 2>&1; then
    cat "$tmp/log"
    echo "install: FAILED, cmake --install"
    exit 1
fi
pc=$(find "$prefix" -name vcattn.pc | head -1)
libdir=$(dirname "$(dirname "$pc")")
for f in "$prefix/include/vcattn.h" "$pc" "$libdir/cmake/vcattn/vcattnConfig.cmake" "$prefix/bin/vcattn"; do
    if [ -e "$f" ]; then echo "ok: ${f#"$prefix"/}"; else echo "FAIL: ${f#"$prefix"/} not installed"; status=1; fi
done
# The CUDA runtime is linked into the library: a user's program needs the
# driver, not a libcudart on its library path.
lib=$(find "$libdir" -maxdepth 1 -name 'libvcattn.so*' -type f | head -1)
if ! command -v readelf >/dev/null; then
    echo "skipped: no readelf to list what the installed library needs"
elif ! needed=$(readelf -d "$lib" | sed -n 's/.*NEEDED.*\[\(.*\)\]/\1/p' | tr '\n' ' ') || [ -z "$needed" ]; then
    echo "FAIL: readelf read no dependencies of ${lib:-the installed library}"; status=1
else
    case "$needed" in
        *libcudart*) echo "FAIL: the installed library needs the CUDA runtime at run time ($needed)"; status=1 ;;
        *) echo "ok: the installed library needs $needed(no libcudart)" ;;
    esac
fi
mkdir "$tmp/app"
cat >"$tmp/app/main.c" <<'C'
#include <stdio.h>
#include <vcattn.h>
int main(void) {
    enum { N = 64, D = 64 };
    static float q[N * D], out[N * D];
    for (int i = 0; i < N * D; i++) q[i] = (float)((i * 37) % 17) / 17.0f - 0.5f;
    vcattn_context *ctx;
    if (vcattn_create(&ctx, VCATTN_BACKEND_CPU)) return 1;
    vcattn_config cfg = vcattn_config_default();
    vcattn_tensor t = vcattn_tensor_bhnd(q, VCATTN_DTYPE_F32, 1, 1, N, D);
    vcattn_tensor o = vcattn_tensor_bhnd(out, VCATTN_DTYPE_F32, 1, 1, N, D);
    vcattn_status st = vcattn_attention(ctx, &cfg, &t, &t, &t, &o, NULL, NULL, NULL);
    printf("vcattn %s: %s\n", vcattn_version_string(), st ? vcattn_last_error(ctx) : "attention ok");
    vcattn_destroy(ctx);
    return st != VCATTN_OK;
}
C
# the version a user of this release asks for (a minor version may change the ABI before 1.0)
version=$(sed -n 's/^#define VCATTN_VERSION_MAJOR \([0-9]*\).*/\1/p' "$prefix/include/vcattn.h").$(
    sed -n 's/^#define VCATTN_VERSION_MINOR \([0-9]*\).*/\1/p' "$prefix/include/vcattn.h")
cat >"$tmp/app/CMakeLists.txt" <<CM
cmake_minimum_required(VERSION 3.22)
project(app C)
find_package(vcattn $version REQUIRED)
add_executable(app main.c)
target_link_libraries(app PRIVATE vcattn::vcattn)
CM
if cmake -S "$tmp/app" -B "$tmp/app/build" -DCMAKE_PREFIX_PATH="$prefix" >"$tmp/log" 2>&1 &&
   cmake --build "$tmp/app/build" >>"$tmp/log" 2>&1 && "$tmp/app/build/app"; then
    echo "ok: find_package(vcattn) builds and runs a program"
else
    tail -20 "$tmp/log"
    echo "FAIL: find_package(vcattn)"
    status=1
fi
if command -v pkg-config >/dev/null 2>&1; then
    # shellcheck disable=SC2046
    if cc -o "$tmp/app2" "$tmp/app/main.c" $(PKG_CONFIG_PATH="$libdir/pkgconfig" pkg-config --cflags --libs vcattn) &&
       "$tmp/app2"; then
        echo "ok: pkg-config builds and runs a program"
    else
        echo "FAIL: pkg-config"
        status=1
    fi
else
    echo "install: pkg-config not found, that part SKIPPED"
fi
# The shared library exports the header's VCATTN_API functions and nothing
# else (no internal function, no compiler-made symbol).
lib=$(find "$libdir" -name 'libvcattn.so*' -type f | head -1)
if command -v nm >/dev/null 2>&1 && [ -n "$lib" ]; then
    sed -n 's/^VCATTN_API[^(]*[ *]\(vcattn_[a-z0-9_]*\)(.*/\1/p' "$prefix/include/vcattn.h" | sort >"$tmp/api"
    nm -D --defined-only "$lib" | awk '{print $3}' | sort >"$tmp/exported"
    if [ -s "$tmp/api" ] && diff "$tmp/api" "$tmp/exported" >"$tmp/diff"; then
        echo "ok: exports = the $(wc -l <"$tmp/api") VCATTN_API functions of vcattn.h"
    else
        sed 's/^/     /' "$tmp/diff"
        echo "FAIL: exports differ from vcattn.h's VCATTN_API functions (< header only, > library only)"
        status=1
    fi
else
    echo "install: nm not found, the exports check SKIPPED"
fi
[ $status = 0 ] && echo "install: passed" || echo "install: FAILED"
exit $status
