/* Minimal .npy reader/writer for the tools and tests: little-endian float32,
 * float16 and bfloat16 (stored as '<u2', as numpy has no bf16), C order.
 * Reads format versions 1.0, 2.0 and 3.0; writes 1.0. The reader trusts
 * nothing in the file: every length and dimension is bounded and checked
 * against the actual file size before anything is allocated. */
#ifndef VCATTN_NPY_H
#define VCATTN_NPY_H

#include <stddef.h>
#include <stdint.h>

#include "vcattn.h"

#define NPY_MAX_DIMS 8

typedef struct {
    vcattn_dtype dtype;      /* F32, F16, or BF16 (BF16 = '<u2' data read with bf16 flag) */
    int ndim;                /* 1..8 */
    int64_t shape[8];
    void *data;              /* C-order, little-endian, malloc'ed */
    int from_f64;            /* read from '<f8' and rounded to float32 */
} npy_array;

/* Reads path. '<f4' -> F32, '<f8' -> F32 (rounded to nearest; a finite value
 * past the float32 range -> VCATTN_ERR_INVALID_ARGUMENT), '<f2' -> F16, '<u2' -> BF16 only if bf16_from_u16
 * is set (else VCATTN_ERR_UNSUPPORTED_DTYPE). Missing file or read error ->
 * VCATTN_ERR_IO; bad magic or version, truncated or unparsable header,
 * fortran_order True, 0-d or >8-d shapes, overflowing shapes, data size not
 * matching the shape -> VCATTN_ERR_BAD_FILE_FORMAT; any other dtype ->
 * VCATTN_ERR_UNSUPPORTED_DTYPE. err[errlen] (may be NULL) receives a message
 * naming the file and the problem. On error *out is zeroed and nothing leaks. */
vcattn_status npy_read(const char *path, int bf16_from_u16, npy_array *out, char *err,
                       size_t errlen);
/* Writes arr as format 1.0; BF16 is written as '<u2'. The data goes to a
 * temporary file beside path, renamed over path once complete: on failure
 * path is left as it was and the temporary file removed. A path that exists
 * and is not a regular file (a device, a pipe) is written in place and never
 * removed. */
vcattn_status npy_write(const char *path, const npy_array *arr, char *err, size_t errlen);
void npy_free(npy_array *arr);   /* NULL-safe, zeroes */
/* Product of the shape; 0 for NULL or an array with ndim outside 1..8. */
int64_t npy_numel(const npy_array *arr);

#endif
