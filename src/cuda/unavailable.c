/* The CUDA backend of a build without a CUDA compiler: every entry point
 * answers "not available" (compiled only in such builds). */
#include "cuda_backend.h"

int cuda_backend_available(const char **why) {
    *why = "libvcattn was built without CUDA (no nvcc at configure time)";
    return 0;
}

vcattn_status cuda_attention(vcattn_context *ctx, const vcattn_call *call, const vcattn_tensor *q,
                             const vcattn_tensor *k, const vcattn_tensor *v, const vcattn_tensor *out,
                             float *lse, const vcattn_rope *rope, vcattn_new_grouping *grouping) {
    return vcattn_fail(ctx, VCATTN_ERR_BACKEND_UNAVAILABLE, "cuda backend: libvcattn was built without CUDA");
}

vcattn_status cuda_quantize_for_test(vcattn_context *ctx, const vcattn_call *call, const vcattn_tensor *q,
                                     const vcattn_tensor *k, const vcattn_tensor *v, const vcattn_rope *rope,
                                     vcattn_quantized *out) {
    return vcattn_fail(ctx, VCATTN_ERR_BACKEND_UNAVAILABLE, "cuda backend: libvcattn was built without CUDA");
}

vcattn_status cuda_order_reference_for_test(vcattn_context *ctx, const vcattn_call *call, const vcattn_tensor *q,
                                            const vcattn_tensor *k, const vcattn_tensor *v, const vcattn_rope *rope,
                                            int rows, float *out) {
    return vcattn_fail(ctx, VCATTN_ERR_BACKEND_UNAVAILABLE, "cuda backend: libvcattn was built without CUDA");
}

void cuda_release_context(vcattn_context *ctx) { (void)ctx; }
