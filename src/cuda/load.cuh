// Reading the caller's tensors on the device, exactly as the CPU backend's
// vcattn_tensor_get converts them (fp16 and bf16 widen exactly).
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "kernels.h"
#include "vcattn.h"

static __device__ __forceinline__ float load_elem(const dev_tensor &t, int64_t b, int64_t h,
                                                  int64_t n, int64_t c) {
    const int64_t i = b * t.sb + h * t.sh + n * t.sn + c;
    switch (t.dtype) {
    case VCATTN_DTYPE_BF16: return __bfloat162float(static_cast<const __nv_bfloat16 *>(t.data)[i]);
    case VCATTN_DTYPE_F16: return __half2float(static_cast<const __half *>(t.data)[i]);
    default: return static_cast<const float *>(t.data)[i];
    }
}

// Records a non-finite input value (when the call checks) and passes x on.
static __device__ __forceinline__ float checked(float x, const quant_common &c) {
    if (c.check_finite && !isfinite(x)) atomicOr(c.error_flag, 1);
    return x;
}

static __device__ __forceinline__ float warp_max(float x) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, o));
    return x;
}

static __device__ __forceinline__ double warp_sum(double x) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
    return x;
}

// Rows [n0, n0 + rows) of head (b, h), gathered through perm (may be NULL), as
// float into x[rows][ld]; rows past the end are zero. The whole block loads
// the tile at once so that many loads are in flight (the per-row alternative
// left the quantizers latency-bound). d is a power of two.
static __device__ void load_tile(const dev_tensor &t, const quant_common &c, int b, int h,
                                 const int32_t *perm, int n0, int rows, float *x, int ld) {
    const int d = c.head_dim, shift = __ffs(d) - 1;
    const int64_t head = (int64_t)b * c.heads + h;
    for (int e = threadIdx.x; e < rows * d; e += blockDim.x) {
        const int r = e >> shift, col = e & (d - 1), n = n0 + r;
        float v = 0.0f;
        if (n < c.tokens) v = checked(load_elem(t, b, h, perm ? perm[head * c.tokens + n] : n, col), c);
        x[r * ld + col] = v;
    }
}
