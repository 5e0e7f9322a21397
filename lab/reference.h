/* FP64 reference attention: direct (not online) softmax in double, RoPE in
 * double, no quantization, no Hadamard (it cancels). The yardstick for every
 * fidelity number and for the tolerance of every backend test. */
#ifndef VCATTN_REFERENCE_H
#define VCATTN_REFERENCE_H

#include "vcattn.h"

/* out: double [B][Hq][Nq][D]; lse (optional): double [B][Hq][Nq], natural log.
 * sm_scale 0 means 1/sqrt(D). Shapes as in vcattn_attention: a size that
 * is not positive gives VCATTN_ERR_INVALID_ARGUMENT, shapes that disagree
 * VCATTN_ERR_SHAPE_MISMATCH, before anything is read. Strides, dtypes and
 * values are the caller's to check. Multi-threaded over rows. */
vcattn_status vcattn_reference_attention(const vcattn_tensor *q, const vcattn_tensor *k,
                                         const vcattn_tensor *v, const vcattn_rope *rope,
                                         float sm_scale, double *out, double *lse);

/* The exact scores row by row: for every query row (b, hq, i), s[Nk] in
 * double (sm_scale applied, RoPE as given) is passed to visit, with the kv
 * head's values v_rows [Nk][D] in double (NULL when v is NULL). Rows run in
 * parallel (OpenMP): visit must only write row-owned or per-thread data. */
typedef void (*vcattn_row_visitor)(void *ctx, int thread, int64_t b, int64_t hq, int64_t i,
                                   double *scores, const double *v_rows, int64_t nk, int64_t d);
vcattn_status vcattn_reference_rows(const vcattn_tensor *q, const vcattn_tensor *k,
                                    const vcattn_tensor *v, const vcattn_rope *rope, float sm_scale,
                                    vcattn_row_visitor visit, void *ctx);

#endif
