/* The CUDA backend's entry points, callable from C. Without a CUDA build the
 * stubs in unavailable.c answer "not available". */
#ifndef VCATTN_CUDA_BACKEND_H
#define VCATTN_CUDA_BACKEND_H

#include "../core/internal.h"

#ifdef __cplusplus
extern "C" {
#endif

/* 1 if a usable sm_90 device and the kernels are present; else 0 and *why. */
int cuda_backend_available(const char **why);

/* As cpu_attention: the call resolved, a new grouping handed back (with a
 * device copy of its permutation when one could be made). */
vcattn_status cuda_attention(vcattn_context *ctx, const vcattn_call *call, const vcattn_tensor *q,
                             const vcattn_tensor *k, const vcattn_tensor *v, const vcattn_tensor *out,
                             float *lse, const vcattn_rope *rope, vcattn_new_grouping *grouping);

/* Frees what a context holds on the GPU (its workspace pool). */
void cuda_release_context(vcattn_context *ctx);

/* For tests: the GPU quantizers' outputs of one call (grouping as the layer
 * says) in the CPU backend's row order (see vcattn_quantized). */
vcattn_status cuda_quantize_for_test(vcattn_context *ctx, const vcattn_call *call, const vcattn_tensor *q,
                                     const vcattn_tensor *k, const vcattn_tensor *v, const vcattn_rope *rope,
                                     vcattn_quantized *out);

/* For tests: the order choice's reference output (vsmooth_order_rows) of
 * `rows` sampled query rows of every query head, into out [B*Hq][rows][D]:
 * row s is row vsmooth_probe_row(s, Nq) of its head. */
vcattn_status cuda_order_reference_for_test(vcattn_context *ctx, const vcattn_call *call, const vcattn_tensor *q,
                                            const vcattn_tensor *k, const vcattn_tensor *v, const vcattn_rope *rope,
                                            int rows, float *out);

#ifdef __cplusplus
}
#endif
#endif
