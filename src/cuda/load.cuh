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
