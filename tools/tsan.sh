#!/bin/sh
# The C tests and the CLI under ThreadSanitizer (CPU backend), built with
# clang and LLVM's OpenMP runtime with its TSan annotations (archer): with
# libgomp, whose synchronisation TSan cannot see, every parallel loop would
# report (libomp itself is not instrumented: its own reports are ignored).
# Exits 77 (skipped, with the reason) where clang, libomp or archer
# is missing. Usage: sh tools/tsan.sh BUILD_DIR [JOBS]
build=${1:?usage: sh tools/tsan.sh BUILD_DIR [JOBS]}
jobs=${2:-2}
root=$(cd "$(dirname "$0")/.." && pwd)
archer=$(clang -print-file-name=libarcher.so 2>/dev/null)
[ -f "$archer" ] || archer=$(ls /usr/lib/llvm-*/lib/libarcher.so 2>/dev/null | tail -1)
if ! command -v clang >/dev/null 2>&1 || [ ! -f "$archer" ]; then
    echo "tsan: skipped: needs clang and LLVM's OpenMP with archer (libarcher.so)"
    exit 77
fi
omp=$(dirname "$archer")
CC=clang cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DVCATTN_CUDA=OFF \
    -DCMAKE_C_FLAGS="-fsanitize=thread -fno-omit-frame-pointer" \
    -DOpenMP_C_FLAGS="-fopenmp=libomp" -DOpenMP_C_LIB_NAMES=omp -DOpenMP_omp_LIBRARY="$omp/libomp.so" \
    -DCMAKE_EXE_LINKER_FLAGS="-Wl,-rpath,$omp" -DCMAKE_SHARED_LINKER_FLAGS="-Wl,-rpath,$omp" >/dev/null || exit 1
cmake --build "$build" -j "$jobs" >/dev/null || exit 1
# install links an unsanitized program against the library; the Python and
# fuzz suites need their own runtimes: those run in `make test`.
VCATTN_TSAN=1 OMP_TOOL_LIBRARIES="$archer" TSAN_OPTIONS="halt_on_error=1 ignore_noninstrumented_modules=1" \
    ctest --test-dir "$build" --output-on-failure -j "$jobs" -E "fuzz_smoke|py_|wheel|install"
