/* libFuzzer harness over the .npy reader: any bytes, read as a file (with
 * and without the bf16 flag), must give a status and, on success, an array
 * whose shape product matches what was allocated. Run through
 * tests/fuzz/run_fuzz.sh (ASan + UBSan). */
#include "npy.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static char path[64];
    if (!path[0]) snprintf(path, sizeof path, "/tmp/vcattn_fuzz_npy_%d.npy", (int)getpid());
    FILE *f = fopen(path, "wb");
    if (!f) return 0;
    if (size && fwrite(data, 1, size, f) != size) {
        fclose(f);
        return 0;
    }
    fclose(f);
    for (int bf16 = 0; bf16 < 2; bf16++) {
        npy_array arr;
        char err[256];
        vcattn_status st = npy_read(path, bf16, &arr, err, sizeof err);
        if (st >= VCATTN_STATUS_COUNT) abort();
        if (st == VCATTN_OK) {
            int64_t n = npy_numel(&arr);
            if (n < 0 || !arr.data) abort();
            /* touch the last element: ASan catches a short allocation */
            size_t es = arr.dtype == VCATTN_DTYPE_F32 ? 4 : 2;
            volatile uint8_t last = n ? ((const uint8_t *)arr.data)[(size_t)n * es - 1] : 0;
            (void)last;
        } else if (arr.data || arr.ndim) {
            abort();  /* documented: on error *out is zeroed */
        }
        npy_free(&arr);
    }
    return 0;
}
