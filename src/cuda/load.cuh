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
    if (c.check_finite && !isfinite(x)) atomicOr(c.error_flag, VC_FLAG_NONFINITE);
    return x;
}

static __device__ __forceinline__ float warp_max(float x) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, o));
    return x;
}

// Eight bf16 or fp16 values, as loaded in 16 bytes, widened to float.
static __device__ __forceinline__ void widen8(int dtype, uint4 raw, float *v) {
    const uint32_t w[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
    for (int i = 0; i < 4; i++) {
        const uint16_t lo = (uint16_t)(w[i] & 0xffffu), hi = (uint16_t)(w[i] >> 16);
        if (dtype == VCATTN_DTYPE_BF16) {
            v[2 * i] = __uint_as_float((uint32_t)lo << 16);
            v[2 * i + 1] = __uint_as_float((uint32_t)hi << 16);
        } else {
            v[2 * i] = __half2float(__ushort_as_half(lo));
            v[2 * i + 1] = __half2float(__ushort_as_half(hi));
        }
    }
}

// Eight consecutive elements of a row (16-byte aligned) as float.
static __device__ __forceinline__ void load8(const dev_tensor &t, int64_t at, float *v) {
    if (t.dtype == VCATTN_DTYPE_F32) {
        const float4 *p = reinterpret_cast<const float4 *>(static_cast<const float *>(t.data) + at);
        const float4 a = p[0], b = p[1];
        v[0] = a.x; v[1] = a.y; v[2] = a.z; v[3] = a.w; v[4] = b.x; v[5] = b.y; v[6] = b.z; v[7] = b.w;
        return;
    }
    widen8(t.dtype, *reinterpret_cast<const uint4 *>(static_cast<const uint16_t *>(t.data) + at), v);
}

// Elements [col, col + 8) of row n of head (b, h) as float.
static __device__ __forceinline__ void load_row8(const dev_tensor &t, int b, int h, int64_t n, int col, float *v) {
    if (t.vec) {
        load8(t, b * t.sb + h * t.sh + n * t.sn + col, v);
        return;
    }
    for (int e = 0; e < 8; e++) v[e] = load_elem(t, b, h, n, col + e);
}

// Rows [n0, n0 + rows) of head (b, h), gathered through perm (may be NULL), as
// float into x[rows][ld]; rows past the end are zero. The whole block loads
// the tile, 16 bytes per access where rows are aligned (the quantizers were
// instruction-bound on per-element loads and address arithmetic). d is a
// power of two, a multiple of 8; ld a multiple of 4.
static __device__ void load_tile(const dev_tensor &t, const quant_common &c, int b, int h,
                                 const int32_t *perm, int n0, int rows, float *x, int ld) {
    const int d = c.head_dim;
    const int64_t head = (int64_t)b * c.heads + h, base = b * t.sb + h * t.sh;
    if (t.vec) {
        const int shift = __ffs(d / 8) - 1, total = rows * (d / 8);
        for (int i = threadIdx.x; i < total; i += blockDim.x) {
            const int r = i >> shift, col = (i & (d / 8 - 1)) * 8, n = n0 + r;
            float v[8] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
            if (n < c.tokens) {
                load8(t, base + (int64_t)(perm ? perm[head * c.tokens + n] : n) * t.sn + col, v);
                if (c.check_finite)
                    for (int e = 0; e < 8; e++) checked(v[e], c);
            }
            float4 *dst = reinterpret_cast<float4 *>(x + r * ld + col);
            dst[0] = make_float4(v[0], v[1], v[2], v[3]);
            dst[1] = make_float4(v[4], v[5], v[6], v[7]);
        }
        return;
    }
    const int shift = __ffs(d) - 1, total = rows * d;
    for (int e = threadIdx.x; e < total; e += blockDim.x) {
        const int r = e >> shift, col = e & (d - 1), n = n0 + r;
        float v = 0.0f;
        if (n < c.tokens) v = checked(load_elem(t, b, h, perm ? perm[head * c.tokens + n] : n, col), c);
        x[r * ld + col] = v;
    }
}
