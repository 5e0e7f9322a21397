// Reading the caller's tensors on the device, exactly as the CPU backend's
// vcattn_tensor_get converts them (fp16 and bf16 widen exactly).
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <type_traits>

#include "kernels.h"
#include "operand_layout.h"
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

// The finite check of many values as one FMA each on the float pipe: x * 0
// is NaN exactly when x is NaN or Inf, and NaN stays NaN through the sum, so
// a fold of a row's values is checked once (a compare and a branch a value
// kept the row passes on the integer pipe).
static __device__ __forceinline__ float finite_fold(float fold, float x) { return fmaf(x, 0.0f, fold); }

// The finite check of one load's 8 values: folded, then tested once.
static __device__ __forceinline__ void checked8(const float *v, const quant_common &c) {
    float fold = 0.0f;
    for (int e = 0; e < 8; e++) fold = finite_fold(fold, v[e]);
    checked(fold, c);
}

static __device__ __forceinline__ float warp_max(float x) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, o));
    return x;
}

// A warp's doubles summed: each lane brings its own sum, and the lanes meet
// 16 apart, then 8, 4, 2, 1 (vsmooth_tree_sum's tree, which the CPU mirrors
// where the sum must agree to the bit); every lane gets the total.
static __device__ __forceinline__ double warp_sum(double x) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
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
// One bf16 or fp16 value's bits widened to float.
static __device__ __forceinline__ float widen1(int dtype, uint16_t u) {
    return dtype == VCATTN_DTYPE_BF16 ? __uint_as_float((uint32_t)u << 16) : __half2float(__ushort_as_half(u));
}

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

// A tile of VC_KV_ROWS rows of one head in shared memory: as loaded (bf16 or
// fp16 bits, kHalf) or as float. 16-bit rows take half the space, so twice
// the blocks fit an SM (the V passes were limited to 2-3 blocks by a float
// tile of 67 KB). Rows padded by 4 elements: 8-byte reads of 4 channels by
// one thread a row hit distinct banks (for floats: 16-byte reads).
template <bool kHalf>
struct smem_tile {
    using elem = typename std::conditional<kHalf, uint16_t, float>::type;
    elem *x;
    int ld, dtype;

    static __host__ __device__ int bytes(int d) { return VC_KV_ROWS * (d + 4) * (int)sizeof(elem); }
    __device__ smem_tile(void *smem, int d, int dtype_) : x(static_cast<elem *>(smem)), ld(d + 4), dtype(dtype_) {}

    __device__ float get(int r, int ch) const {
        if constexpr (kHalf) return widen1(dtype, x[r * ld + ch]);
        else return x[r * ld + ch];
    }
    // Channels ch and ch + 1 of row r (ch even) in one read.
    __device__ float2 get2(int r, int ch) const {
        if constexpr (kHalf) {
            const uint32_t w = *reinterpret_cast<const uint32_t *>(x + r * ld + ch);
            return make_float2(widen1(dtype, (uint16_t)w), widen1(dtype, (uint16_t)(w >> 16)));
        } else {
            return *reinterpret_cast<const float2 *>(x + r * ld + ch);
        }
    }
    // Channels [ch, ch + 4) of row r; ch a multiple of 4.
    __device__ float4 get4(int r, int ch) const {
        if constexpr (kHalf) {
            const uint2 w = *reinterpret_cast<const uint2 *>(x + r * ld + ch);
            return make_float4(widen1(dtype, (uint16_t)w.x), widen1(dtype, (uint16_t)(w.x >> 16)),
                               widen1(dtype, (uint16_t)w.y), widen1(dtype, (uint16_t)(w.y >> 16)));
        } else {
            return *reinterpret_cast<const float4 *>(x + r * ld + ch);
        }
    }

    // Rows [n0, n0 + rows) of head (b, h), gathered through perm (may be
    // NULL); rows of the tile from `rows` on are not written. The whole block
    // loads the tile, 16 bytes per access where rows are aligned (the
    // quantizers were instruction-bound on per-element loads and address
    // arithmetic); kHalf needs them aligned. d is a power of two, a multiple
    // of 8. kBatch (kHalf): 16-byte chunks a thread has in flight.
    template <int kBatch = 1>
    __device__ void load(const dev_tensor &t, const quant_common &c, int b, int h, const int32_t *perm, int n0,
                         int rows) {
        const int d = c.head_dim;
        const int64_t head = (int64_t)b * c.heads + h, base = b * t.sb + h * t.sh;
        if constexpr (kHalf) {
            // kBatch chunks at a time: their row indices, then their loads,
            // issued before any is used (4 registers of raw row a chunk).
            const int shift = __ffs(d / 8) - 1, total = rows * (d / 8);
            for (int i0 = threadIdx.x; i0 < total; i0 += kBatch * blockDim.x) {
                int64_t at[kBatch];
#pragma unroll
                for (int j = 0; j < kBatch; j++) {
                    const int i = i0 + j * blockDim.x, n = n0 + (i >> shift), col = (i & (d / 8 - 1)) * 8;
                    at[j] = i < total ? base + (int64_t)(perm ? perm[head * c.tokens + n] : n) * t.sn + col : -1;
                }
                uint4 raw[kBatch];
#pragma unroll
                for (int j = 0; j < kBatch; j++)
                    raw[j] = at[j] >= 0 ? *reinterpret_cast<const uint4 *>(static_cast<const uint16_t *>(t.data) + at[j])
                                        : make_uint4(0u, 0u, 0u, 0u);
#pragma unroll
                for (int j = 0; j < kBatch; j++) {
                    const int i = i0 + j * blockDim.x;
                    if (i >= total) break;
                    if (c.check_finite) {
                        float v[8];
                        widen8(t.dtype, raw[j], v);
                        checked8(v, c);
                    }
                    uint2 *dst = reinterpret_cast<uint2 *>(x + (i >> shift) * ld + (i & (d / 8 - 1)) * 8);
                    dst[0] = make_uint2(raw[j].x, raw[j].y);
                    dst[1] = make_uint2(raw[j].z, raw[j].w);
                }
            }
            return;
        }
        if (t.vec) {
            const int shift = __ffs(d / 8) - 1, total = rows * (d / 8);
            for (int i = threadIdx.x; i < total; i += blockDim.x) {
                const int r = i >> shift, col = (i & (d / 8 - 1)) * 8, n = n0 + r;
                float v[8];
                load8(t, base + (int64_t)(perm ? perm[head * c.tokens + n] : n) * t.sn + col, v);
                if (c.check_finite) checked8(v, c);
                float4 *dst = reinterpret_cast<float4 *>(x + r * ld + col);
                dst[0] = make_float4(v[0], v[1], v[2], v[3]);
                dst[1] = make_float4(v[4], v[5], v[6], v[7]);
            }
            return;
        }
        if constexpr (!kHalf) {
            const int shift = __ffs(d) - 1, total = rows * d;
            for (int e = threadIdx.x; e < total; e += blockDim.x) {
                const int r = e >> shift, col = e & (d - 1), n = n0 + r;
                float v = 0.0f;
                if (n < c.tokens)
                    v = checked(load_elem(t, b, h, perm ? perm[head * c.tokens + n] : n, col), c);
                x[r * ld + col] = v;
            }
        }
    }
};
