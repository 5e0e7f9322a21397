// The epilogue: out = o * (v_mul / l) * v_pow2 in the caller's dtype and
// layout (v_pow2 last, so values near the float limits keep their bits), and
// the LSE (natural log) when asked for. 16-bit outputs saturate (halfs.h).
#pragma once
#include "attention.h"
#include "tile.cuh"
#include "../../formats/halfs.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

template <typename T> __device__ __forceinline__ void store2(T *p, float a, float b, bool pair);
template <> __device__ __forceinline__ void store2(float *p, float a, float b, bool pair) {
    if (pair) *reinterpret_cast<float2 *>(p) = make_float2(a, b);
    else { p[0] = a; p[1] = b; }
}
template <> __device__ __forceinline__ void store2(__nv_bfloat16 *p, float a, float b, bool pair) {
    a = vcattn_saturate(a, VCATTN_BF16_MAX), b = vcattn_saturate(b, VCATTN_BF16_MAX);
    if (pair) *reinterpret_cast<__nv_bfloat162 *>(p) = __floats2bfloat162_rn(a, b);
    else { p[0] = __float2bfloat16_rn(a); p[1] = __float2bfloat16_rn(b); }
}
template <> __device__ __forceinline__ void store2(__half *p, float a, float b, bool pair) {
    a = vcattn_saturate(a, VCATTN_F16_MAX), b = vcattn_saturate(b, VCATTN_F16_MAX);
    if (pair) *reinterpret_cast<__half2 *>(p) = __floats2half2_rn(a, b);
    else { p[0] = __float2half_rn(a); p[1] = __float2half_rn(b); }
}

// Rows row0 and row0 + 8 of (batch, head): o holds their D/2 accumulator
// values in wgmma register order, m and l their running max and sum.
template <int D, typename OutT>
__device__ void store_rows(const vc_attention_params &p, const float *o, float m0, float m1, float l0, float l1,
                           int64_t q_head, int64_t kv_head, int batch, int head, int row0, int t) {
    const int row1 = row0 + 8;
    const float *v_mul = p.v_mul + kv_head * D, *v_pow2 = p.v_pow2 + kv_head * D;
    const float inv0 = 1.0f / l0, inv1 = 1.0f / l1;
    OutT *out = reinterpret_cast<OutT *>(p.out) + batch * p.out_sb + head * p.out_sh;
    const bool pair = (reinterpret_cast<uintptr_t>(p.out) % (2 * sizeof(OutT)) == 0) &&
                      ((p.out_sb | p.out_sh | p.out_sn) & 1) == 0;
#pragma unroll
    for (int i = 0; i < D / 2; i += 2) {
        const int c = acc_col(i, t);
        const bool lower = (i >> 1) & 1;
        const int row = lower ? row1 : row0;
        if (row >= p.nq) continue;
        const float inv = lower ? inv1 : inv0;
        store2(out + row * p.out_sn + c, o[i] * (v_mul[c] * inv) * v_pow2[c],
               o[i + 1] * (v_mul[c + 1] * inv) * v_pow2[c + 1], pair);
    }
    if (p.lse && t == 0) {
        float *lse = p.lse + q_head * p.nq;
        const float *shift = p.lse_shift ? p.lse_shift + q_head * p.nq : nullptr;
        // P's maximum was written as 2^8: log2 sum = m + log2 l - 8.
        if (row0 < p.nq)
            lse[row0] = (float)(0.6931471805599453 * ((double)m0 + log2((double)l0) - 8.0)) +
                        (shift ? shift[row0] : 0.0f);
        if (row1 < p.nq)
            lse[row1] = (float)(0.6931471805599453 * ((double)m1 + log2((double)l1) - 8.0)) +
                        (shift ? shift[row1] : 0.0f);
    }
}
