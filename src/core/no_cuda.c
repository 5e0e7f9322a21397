/* Stand-ins for the CUDA backend in builds without a CUDA compiler. */
#include "internal.h"
#include "../cuda/cuda_backend.h"

#ifndef VCATTN_WITH_CUDA
int cuda_backend_available(const char **why) {
    *why = "libvcattn was built without CUDA (no nvcc at configure time)";
    return 0;
}

vcattn_status cuda_attention(vcattn_context *ctx, const vcattn_config *cfg,
                             const vcattn_tensor *q, const vcattn_tensor *k,
                             const vcattn_tensor *v, const vcattn_tensor *out, float *lse,
                             const vcattn_rope *rope, vcattn_layer *layer) {
    return vcattn_fail(ctx, VCATTN_ERR_BACKEND_UNAVAILABLE,
                       "cuda backend: libvcattn was built without CUDA");
}

vcattn_status cuda_quantize_for_test(vcattn_context *ctx, const vcattn_config *cfg,
                                     const vcattn_tensor *q, const vcattn_tensor *k,
                                     const vcattn_tensor *v, const vcattn_rope *rope,
                                     vcattn_layer *layer, vcattn_quantized *out) {
    return vcattn_fail(ctx, VCATTN_ERR_BACKEND_UNAVAILABLE,
                       "cuda backend: libvcattn was built without CUDA");
}
void cuda_release_context(vcattn_context *ctx) { (void)ctx; }
#else
typedef int vcattn_no_cuda_unused; /* ISO C forbids an empty translation unit */
#endif
