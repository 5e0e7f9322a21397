// What one consumer thread carries across the key tiles, and the per-tile
// steps both kernels share: QK and PV issued on the tensor cores, the online
// softmax (softmax.cuh encodes P), the two-level update of the output and,
// with V-Smooth, the row sums that wait for their block means. The D 128
// consumer loop is in mainloop.cuh; the D 64 kernel's in kernel_wg.cu.
// Arithmetic: docs/formats.md; reasoning: docs/cuda-design.md.
#pragma once
#include "softmax.cuh"
#include "tile.cuh"
#include "wgmma.cuh"
#include "../../formats/expcast.h"

#include <cuda_fp16.h>

// How many tiles share one mean wgmma (the k16 f16 wgmma has 8 column pairs).
constexpr int kMeanTiles = VC_MEAN_TILES;
// The mean wgmma's A image: 64 rows x 16 f16 columns, two 8-column halves.
constexpr uint32_t kMeanAHalf = VC_Q_ROWS * 16, kMeanABytes = 2 * kMeanAHalf;

// a as two FP16 values, hi in column 0 (bits 0-15) and the remainder in
// column 1: hi + lo carries ~22 bits of a (|a| < 65504).
static __device__ __forceinline__ uint32_t f16_hi_lo(float a) {
    const float hi = __half2float(__float2half_rn(a));
    return cvt_f16x2(hi, a - hi);
}

// What one thread (warp, g, t) of a consumer warpgroup carries across the
// tiles for its rows 16 warp + g and + 8.
template <int D, bool EXPCAST, bool VSMOOTH, bool QSMOOTH>
struct RowState {
    float o[D / 2];                   // the output accumulator (FP32, the second level)
    float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.0f, l1 = 0.0f;
    float qmul0, qmul1;               // the rows' dequantization multipliers (log2 units)
    float alpha0 = 0.0f, alpha1 = 0.0f;  // rescale of o that goes with the P in p[]
    uint32_t p[16];                   // P of the last tile through the softmax: PV's A registers
    // VSMOOTH: the row sums of the tiles whose mean term r mu is not yet in o,
    // up to kMeanTiles of them, kept relative to the running maximum. Tile x
    // owns slot x % 8, columns 2 (x % 8) and + 1 of the mean wgmma's A; this
    // lane holds slots t and t + 4 (pend[0], pend[1]) for rows g and g + 8.
    float pend[2][2] = {{0.0f, 0.0f}, {0.0f, 0.0f}};

    __device__ void init(float q0, float q1) {
#pragma unroll
        for (int i = 0; i < D / 2; i++) o[i] = 0.0f;
        qmul0 = q0;
        qmul1 = q1;
    }

    // S = Q K^T (int32), issued and committed.
    static __device__ __forceinline__ void issue_qk(int32_t *sacc, uint64_t q, uint64_t k) {
        wgmma_fence();
#pragma unroll
        for (int ks = 0; ks < D / 32; ks++)
            wgmma_s8_m64n128k32(sacc, desc_advance(q, ks * 2 * VC_Q_ROWS * 16),
                                desc_advance(k, ks * 2 * VC_KV_ROWS * 16), ks > 0);
        wgmma_commit();
    }

    // partial = P V^T (+ the row sums in the ones columns), issued. The
    // caller commits the group, after the mean term when one is due.
    // (The D 64 kernel issues its own, per tile: kernel_wg.cu.)
    __device__ __forceinline__ void issue_pv(float *pacc, uint64_t v) const {
        static_assert(D == 128, "the batched P V and mean wgmmas are the D 128 kernel's");
        wgmma_fence();
#pragma unroll
        for (int ks = 0; ks < 4; ks++) {
            const uint64_t desc = desc_advance(v, ks * 2 * Sizes<D>::vt_rows * 16);
            wgmma_e4m3_m64n136k32(pacc, p + 4 * ks, desc, ks > 0);
        }
    }

    // The pending row sums, as they stand, into the mean wgmma's A image in
    // shared memory (64 rows x 16 f16 columns, K-major: each slot's row sum
    // as FP16 hi + lo in its two columns), and a new batch begins. The
    // caller fences and orders the image before the wgmma that reads it.
    __device__ __forceinline__ void write_pending(uint8_t *a_image, int warp, int g, int t) {
        const uint32_t row0 = smem_addr(a_image) + 256 * warp + 16 * g + 4 * t;  // rows 16 warp + g, + 8
        sts_u32(row0, f16_hi_lo(pend[0][0]));
        sts_u32(row0 + 128, f16_hi_lo(pend[0][1]));
        sts_u32(row0 + kMeanAHalf, f16_hi_lo(pend[1][0]));
        sts_u32(row0 + kMeanAHalf + 128, f16_hi_lo(pend[1][1]));
        pend[0][0] = pend[0][1] = pend[1][0] = pend[1][1] = 0.0f;
    }

    // The batch's mean terms, sum over its tiles of r mu, as one f16 wgmma
    // from the A image and a B image with each tile's mu in its slot's two
    // k rows. Issued after P V, so the FP8 products accumulate on their own
    // before the (larger) mean joins them.
    static __device__ __forceinline__ void issue_mean(float *pacc, uint64_t a_image, uint64_t b_image, int accumulate) {
        static_assert(D == 128, "the batched P V and mean wgmmas are the D 128 kernel's");
        wgmma_fence();
        wgmma_f16_ss_m64n136k16(pacc, a_image, b_image, accumulate);
    }

    // The pending row sums follow the running maximum.
    __device__ __forceinline__ void rescale_pending() {
        pend[0][0] *= alpha0;
        pend[1][0] *= alpha0;
        pend[0][1] *= alpha1;
        pend[1][1] *= alpha1;
    }

    // Online softmax of tile j: new row maxima, the rescale factors of the
    // running sums (returned; they go with P(j) when its partial is folded),
    // and P as words (softmax.cuh). tail_keys < 128 masks keys past the end;
    // kmul: the K tile's multiplier for this lane; bias: the tile's
    // Q-smoothing terms in shared memory (QSMOOTH only).
    __device__ __forceinline__ void softmax(int32_t *sacc, float kmul, int tail_keys, float expcast_bias, int t,
                                            uint32_t bias, uint32_t *w, float &alpha_new0, float &alpha_new1) {
        // ExpCast without Q smoothing reads the dot as the float 1.5 * 2^23 + dot (an integer add
        // instead of I2FP, expcast.h); the offset comes off the row maximum and folds into ExpCast's FMA
        constexpr bool kBiased = EXPCAST && !QSMOOTH;
        constexpr float kOff = kBiased ? VCATTN_EXPCAST_DOT_OFFSET : 0.0f;
        float s[64];
#pragma unroll
        for (int i = 0; i < 64; i++)
            s[i] = kBiased ? __int_as_float(sacc[i] + __float_as_int(VCATTN_EXPCAST_DOT_OFFSET)) : (float)sacc[i];
        float A0 = qmul0 * kmul, A1 = qmul1 * kmul;
        if constexpr (QSMOOTH) {  // s = dot A + term, one FMA (as the CPU); then A = 1 below
#pragma unroll
            for (int i = 0; i < 64; i += 4) {  // registers i, i+1 (row g) and i+2, i+3 (row g+8): same two keys
                const float2 b = lds_float2(bias + 4 * acc_col(i, t));
                s[i] = __fmaf_rn(s[i], A0, b.x);
                s[i + 1] = __fmaf_rn(s[i + 1], A0, b.y);
                s[i + 2] = __fmaf_rn(s[i + 2], A1, b.x);
                s[i + 3] = __fmaf_rn(s[i + 3], A1, b.y);
            }
            A0 = A1 = 1.0f;
        }
        const bool tail = tail_keys < VC_KV_ROWS;
        if (tail) {
#pragma unroll
            for (int i = 0; i < 64; i++)
                if (acc_col(i, t) >= tail_keys) s[i] = -INFINITY;
        }
        float tmax0, tmax1;
        tile_row_max(s, kOff, A0, A1, tmax0, tmax1);
        const float mn0 = fmaxf(m0, tmax0), mn1 = fmaxf(m1, tmax1);
        alpha_new0 = ex2_approx(m0 - mn0);  // <= 1; relative error 2^-22, inside the tolerance
        alpha_new1 = ex2_approx(m1 - mn1);
        if (tail) encode_words<EXPCAST, true>(s, kOff, A0, A1, mn0, mn1, expcast_bias, w);
        else encode_words<EXPCAST, false>(s, kOff, A0, A1, mn0, mn1, expcast_bias, w);
        m0 = mn0;
        m1 = mn1;
    }

    // o = alpha o + partial; l likewise with the row sums of the ones
    // columns, which it returns.
    __device__ __forceinline__ float2 fold(const float *pacc) {
        const float r0 = pacc[D / 2], r1 = pacc[D / 2 + 2];
#pragma unroll
        for (int i = 0; i < D / 2; i += 2) {
            const float a = (i >> 1) & 1 ? alpha1 : alpha0;
            o[i] = __fmaf_rn(o[i], a, pacc[i]);
            o[i + 1] = __fmaf_rn(o[i + 1], a, pacc[i + 1]);
        }
        l0 = __fmaf_rn(l0, alpha0, r0);
        l1 = __fmaf_rn(l1, alpha1, r1);
        return make_float2(r0, r1);
    }

    // The update of tile x: fold its partial, and its row sums join the
    // pending mean terms (VSMOOTH).
    __device__ __forceinline__ void update(const float *pacc, int x, int t) {
        const float2 r = fold(pacc);
        if constexpr (VSMOOTH) {
            if (t == (x & 3)) {
                const bool high = x & 4;
                pend[0][0] = high ? pend[0][0] : r.x;
                pend[0][1] = high ? pend[0][1] : r.y;
                pend[1][0] = high ? r.x : pend[1][0];
                pend[1][1] = high ? r.y : pend[1][1];
            }
        }
    }

    // o += the final mean terms, computed into pacc (a finished group).
    __device__ __forceinline__ void add_partial(const float *pacc) {
#pragma unroll
        for (int i = 0; i < D / 2; i++) o[i] += pacc[i];
    }
};

// Keeps the compiler from touching registers a wgmma reads or writes
// asynchronously before the wait that completes it.
template <int N, typename T> __device__ __forceinline__ void fence_regs(T *r) {
#pragma unroll
    for (int i = 0; i < N; i++) reg_fence(r[i]);
}
