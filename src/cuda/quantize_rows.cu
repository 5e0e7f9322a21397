// Quantization of Q and K for the sm_90a attention kernel: the K channel
// mean after RoPE, then one pass over each operand's rows (RoPE, smoothing,
// the Hadamard rotation, INT8), nothing in high precision written back, and
// the finite check's score bound. The codecs are src/formats' (bit-identical
// to the CPU backend); this file compiles with -fmad=false so every product
// and sum rounds as the CPU's C code does. Layout of the outputs:
// operand_layout.h. V's passes: quantize_values.cu.
#include "chain.cuh"
#include "kernels.h"
#include "load.cuh"
#include "operand_layout.h"
#include "../formats/formats.h"
#include "../vsmooth/vsmooth.h"

#include <cuda_fp16.h>
#include <float.h>

namespace {

constexpr int kRowThreads = 256;  // >= 128: one thread per row of a tile where needed
constexpr int kMeanChunk = 1024;  // keys per partial sum of the K channel mean, at most
constexpr int kMeanMinChunk = 256;
constexpr int kMeanTargetBlocks = 256;  // fewer chunks leave SMs idle at short sequences
constexpr int kMeanLanes = 8;     // token lanes per block of that sum

// ---- Rows in registers (shared by the K mean and the Q/K quantizers) ------

// A row lives in one warp's registers: lane l holds the E = D/32 consecutive
// elements [E l, E l + E). The per-row steps are then register arithmetic
// and shuffles (the shared-memory version was instruction-bound: ~260 warp
// instructions per row, docs/perf-notes.md).
//
// The warp's rows are loaded all at once, every load issued before any is
// used: rows gathered through perm otherwise cost one DRAM latency each.
template <int RPW, int E>
__device__ __forceinline__ void load_rows(const dev_tensor &t, const int64_t (&at)[RPW],
                                          const bool (&valid)[RPW], float (&x)[RPW][E]) {
    if (t.vec && t.dtype == VCATTN_DTYPE_F32) {  // rows 16-byte aligned: 8- or 16-byte loads
        const float *base = static_cast<const float *>(t.data);
#pragma unroll
        for (int i = 0; i < RPW; i++) {
            if constexpr (E % 4 == 0) {
#pragma unroll
                for (int c = 0; c < E / 4; c++) {
                    const float4 v =
                        valid[i] ? reinterpret_cast<const float4 *>(base + at[i])[c] : make_float4(0, 0, 0, 0);
                    x[i][4 * c] = v.x; x[i][4 * c + 1] = v.y; x[i][4 * c + 2] = v.z; x[i][4 * c + 3] = v.w;
                }
            } else {
                const float2 v = valid[i] ? *reinterpret_cast<const float2 *>(base + at[i]) : make_float2(0, 0);
                x[i][0] = v.x; x[i][1] = v.y;
            }
        }
    } else if (t.vec) {  // 16-bit: the raw words first, widened (exactly) after
        const uint16_t *base = static_cast<const uint16_t *>(t.data);
        uint32_t w[RPW][E / 2];
#pragma unroll
        for (int i = 0; i < RPW; i++) {
            if constexpr (E % 8 == 0) {
#pragma unroll
                for (int c = 0; c < E / 8; c++) {
                    const uint4 v = valid[i] ? reinterpret_cast<const uint4 *>(base + at[i])[c] : make_uint4(0, 0, 0, 0);
                    w[i][4 * c] = v.x; w[i][4 * c + 1] = v.y; w[i][4 * c + 2] = v.z; w[i][4 * c + 3] = v.w;
                }
            } else if constexpr (E == 4) {
                const uint2 v = valid[i] ? *reinterpret_cast<const uint2 *>(base + at[i]) : make_uint2(0, 0);
                w[i][0] = v.x; w[i][1] = v.y;
            } else {
                w[i][0] = valid[i] ? *reinterpret_cast<const uint32_t *>(base + at[i]) : 0u;
            }
        }
        if (t.dtype == VCATTN_DTYPE_BF16) {  // one loop per type: a select would convert both ways
#pragma unroll
            for (int i = 0; i < RPW; i++)
#pragma unroll
                for (int k = 0; k < E; k++) x[i][k] = __uint_as_float((w[i][k / 2] << (16 * (1 - (k & 1)))) & 0xffff0000u);
        } else {
#pragma unroll
            for (int i = 0; i < RPW; i++)
#pragma unroll
                for (int k = 0; k < E; k++)
                    x[i][k] = __half2float(__ushort_as_half((uint16_t)(w[i][k / 2] >> (16 * (k & 1)))));
        }
    } else {  // strided rows: element by element
#pragma unroll
        for (int i = 0; i < RPW; i++)
#pragma unroll
            for (int k = 0; k < E; k++) {
                float v = 0.0f;
                if (valid[i]) {
                    switch (t.dtype) {
                    case VCATTN_DTYPE_BF16: v = __bfloat162float(static_cast<const __nv_bfloat16 *>(t.data)[at[i] + k]); break;
                    case VCATTN_DTYPE_F16: v = __half2float(static_cast<const __half *>(t.data)[at[i] + k]); break;
                    default: v = static_cast<const float *>(t.data)[at[i] + k];
                    }
                }
                x[i][k] = v;
            }
    }
}

// RoPE of the lane's elements of row x by the table rows at `row`
// (dev_rope::row_at of the row's head and original position), as the CPU: for a
// pair (xa, xb), xa co - xb si and xa si + xb co. CHECK: fold the table
// entries into fold (finite_fold; the K mean skips it: quantize_k reads the
// same entries). A row spans LANES lanes (a segment of the warp: 32, or
// kRowLanes in the row quantizers); the lane's elements are [E sl, E sl + E),
// sl its place in the segment.
template <int D, bool CHECK, int LANES = 32>
__device__ __forceinline__ void rope_row(const dev_rope &rope, int64_t row, float *x, float &fold) {
    constexpr int E = D / LANES;
    if (!rope.cos_tab) return;
    const int sl = threadIdx.x % LANES;
    if (rope.half_split) {  // pairs (i, i + D/2): lanes sl and sl ^ LANES/2 hold the two halves
        // Both halves as x co + other (+-si): the first half's xa co - xb si
        // with si negated, the second's xa si + xb co with its terms swapped
        // (the same roundings: no selects on the integer pipe).
        const float sign = sl < LANES / 2 ? -1.0f : 1.0f;
        const int64_t at = row + (sl % (LANES / 2)) * E;
#pragma unroll
        for (int k = 0; k < E; k++) {
            const float co = rope.cos_tab[at + k], si = rope.sin_tab[at + k];
            if (CHECK) fold = finite_fold(finite_fold(fold, co), si);
            const float other = __shfl_xor_sync(0xffffffffu, x[k], LANES / 2);
            x[k] = x[k] * co + other * (si * sign);
        }
    } else {  // interleaved pairs (2i, 2i + 1) inside the lane
        const int64_t at = row + sl * (E / 2);
#pragma unroll
        for (int k = 0; k < E; k += 2) {
            const float co = rope.cos_tab[at + k / 2], si = rope.sin_tab[at + k / 2];
            if (CHECK) fold = finite_fold(finite_fold(fold, co), si);
            const float xa = x[k], xb = x[k + 1];
            x[k] = xa * co - xb * si;
            x[k + 1] = xa * si + xb * co;
        }
    }
}

// ---- K channel mean (post-RoPE), in double, deterministic chunk order -------

// Block of kMeanLanes warps per chunk of keys: warp y sums the chunk's tokens
// n = y mod kMeanLanes in token order, then the warps' sums are added in
// order (deterministic). A warp loads BATCH rows at once: 4, not 8, keeps
// D 128 at 62 registers (four blocks an SM instead of two at 102) with the
// same additions in the same order.
template <int D>
__global__ void __launch_bounds__(32 * kMeanLanes) k_mean_partial_kernel(dev_tensor k, dev_rope rope,
                                                                         quant_common c, int chunk_keys,
                                                                         double *partials) {
    chain_begin();
    constexpr int E = D / 32, BATCH = 4;
    __shared__ double lane_sum[kMeanLanes][D];
    const int chunk = blockIdx.x, h = blockIdx.y, b = blockIdx.z, y = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int n1 = min(c.tokens, (chunk + 1) * chunk_keys);
    double sum[E] = {};
    for (int n0 = chunk * chunk_keys + y; n0 < n1; n0 += kMeanLanes * BATCH) {
        int64_t at[BATCH];
        bool valid[BATCH];
#pragma unroll
        for (int i = 0; i < BATCH; i++) {
            valid[i] = n0 + kMeanLanes * i < n1;
            at[i] = b * k.sb + h * k.sh + (int64_t)(n0 + kMeanLanes * i) * k.sn + lane * E;
        }
        float x[BATCH][E], no_fold = 0.0f;  // rope_row<D, false> folds nothing into it
        load_rows<BATCH, E>(k, at, valid, x);
#pragma unroll
        for (int i = 0; i < BATCH; i++) {
            if (valid[i]) {
                rope_row<D, false>(rope, rope.row_at(b, h, n0 + kMeanLanes * i), x[i], no_fold);
#pragma unroll
                for (int e = 0; e < E; e++) sum[e] += x[i][e];
            }
        }
    }
#pragma unroll
    for (int e = 0; e < E; e++) lane_sum[y][lane * E + e] = sum[e];
    __syncthreads();
    for (int i = threadIdx.x; i < D; i += blockDim.x) {
        double s = lane_sum[0][i];
        for (int l = 1; l < kMeanLanes; l++) s += lane_sum[l][i];
        partials[(((int64_t)b * gridDim.y + h) * gridDim.x + chunk) * D + i] = s;
    }
}

__global__ void k_mean_final_kernel(const double *partials, int chunks, quant_common c, float *mean) {
    chain_begin();
    const int g = blockIdx.x, i = threadIdx.x, d = c.head_dim;
    double s = 0.0;
    for (int ch = 0; ch < chunks; ch++) s += partials[((int64_t)g * chunks + ch) * d + i];
    mean[(int64_t)g * d + i] = (float)(s / (double)c.tokens);
}

// ---- Q and K rows: RoPE, smoothing, Hadamard, INT8 -------------------------

struct row_args {
    dev_tensor x;
    dev_rope rope;
    quant_common c;
    const int32_t *perm;     // K only, may be NULL
    const float *kmean;      // K: subtracted; Q: for the LSE shift; may be NULL
    int heads_kv;            // Q: which kmean row
    float sm_scale;
    int hadamard;
    float hadamard_scale;
    int8_t *codes;
    float *scales;
    float *lse_shift;        // Q only, may be NULL (no LSE asked for)
    float *max_norm;         // with the check: atomic max of the rows' norms (before the Hadamard)
    const float *qmean;      // Q smoothing: [B*Hq][D] channel means of Q, or NULL
    int group;               // K: query heads per key head (for the per-key terms)
    float score_mul;         // K: sm_scale log2(e)
    float *key_bias;         // K: [B*Hq][T][128] Q smoothing's per-key terms, or NULL
};

// A Q or K row spans a segment of kRowLanes lanes (a warp holds 32 /
// kRowLanes rows at once), E = D / kRowLanes elements a lane: the per-row
// sums and maxima are three shuffle levels instead of a whole warp's five,
// and a lane's 16 elements (D 128) give the scheduler independent work
// (with a row a warp the kernels were latency-bound: docs/perf-notes.md).
constexpr int kRowLanes = 8;

template <typename T> __device__ __forceinline__ T seg_sum(T x) {
#pragma unroll
    for (int o = kRowLanes / 2; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
    return x;
}
__device__ __forceinline__ float seg_max(float x) {
#pragma unroll
    for (int o = kRowLanes / 2; o > 0; o >>= 1) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, o));
    return x;
}

// Row (token n; its RoPE table rows at rope_at) rotated, smoothed and Hadamard-
// transformed in place, with the arithmetic of the CPU's prepare_q /
// prepare_kv (same products and sums, same bits); returns the row's amax.
// mean, qm: the K channel mean (used when a.kmean) and Q's channel mean
// (QSMOOTH), whole, in shared memory (in registers they took 16 a lane).
// QSMOOTH: a.qmean is set (a template argument, so the plain path carries
// none of Q smoothing's registers: it cost the rows kernels 0.7 ms at Wan2.2).
// Every lane of the warp calls it (the segments' rows may differ in
// validity: valid says whether this row's sums and terms are written).
// row_norm: with the check, the row's norm as quantized (after smoothing,
// before the Hadamard); 0 for a row past the end or without the check.
// fold: the RoPE table entries read are folded in (finite_fold).
template <int D, bool IS_KEY, bool QSMOOTH>
__device__ __forceinline__ float transform_row(const row_args &a, int64_t head, int n, int64_t rope_at, bool valid,
                                               const float *mean_s, const float *qm_s, float *x, float &norm_max,
                                               float &row_norm, float &fold) {
    constexpr int E = D / kRowLanes;
    const int sl = threadIdx.x % kRowLanes;
    const float *mean = mean_s + sl * E, *qm = qm_s + sl * E;
    row_norm = 0.0f;
    rope_row<D, true, kRowLanes>(a.rope, rope_at, x, fold);
    if (a.kmean) {
        if constexpr (IS_KEY) {
#pragma unroll
            for (int k = 0; k < E; k++) x[k] = x[k] - mean[k];
        } else if (a.lse_shift) {
            double s = 0.0;
#pragma unroll
            for (int k = 0; k < E; k++) s += (double)x[k] * mean[k];
            s = seg_sum(s);
            if (valid && sl == 0) a.lse_shift[head * a.c.tokens + n] = (float)(s * a.sm_scale);
        }
    }
    if (a.max_norm) {  // the score bound of the check (the Hadamard keeps norms)
        // In double, as the CPU: |x|^2 of a row near 1e37 is past the float
        // range although its scores may be small. NaN (Inf - Inf past the
        // float range) counts as Inf: refused.
        double s = 0.0;
#pragma unroll
        for (int k = 0; k < E; k++) s += (double)x[k] * x[k];
        const double sum = seg_sum(s);
        if (valid) row_norm = sum == sum ? (float)sqrt(sum) : INFINITY;
        norm_max = fmaxf(norm_max, row_norm);
    }
    if constexpr (QSMOOTH) {
        if constexpr (IS_KEY) {
            // Q smoothing's term of this key for each query head of the group:
            // sm_scale log2(e) (mean_q . k), k as scored (before the Hadamard).
            const int b = (int)(head / a.c.heads), hkv = (int)(head % a.c.heads), tiles = gridDim.x;
            const int64_t heads_q = (int64_t)a.c.heads * a.group;
            const int tile = n / VC_KV_ROWS, r = n % VC_KV_ROWS;
            for (int g = 0; g < a.group; g++) {
                const int64_t qh = (int64_t)b * heads_q + (int64_t)hkv * a.group + g;
                float s = 0.0f;
#pragma unroll
                for (int k = 0; k < E; k++) s += a.qmean[qh * D + sl * E + k] * x[k];
                s = seg_sum(s);
                if (valid && sl == 0) a.key_bias[(qh * tiles + tile) * VC_KV_ROWS + r] = s * a.score_mul;
            }
        } else {
#pragma unroll
            for (int k = 0; k < E; k++) x[k] = x[k] - qm[k];
            if (a.max_norm) {  // the row as quantized, for the unseen-score check
                double s = 0.0;
#pragma unroll
                for (int k = 0; k < E; k++) s += (double)x[k] * x[k];
                const double sum = seg_sum(s);
                if (valid) row_norm = sum == sum ? (float)sqrt(sum) : INFINITY;
            }
        }
    }
    if (a.hadamard) {
        // Sylvester order, stage by stage, as cpu_hadamard: x[j] = u + w and
        // x[j + span] = u - w for u = x[j], w = x[j + span].
#pragma unroll
        for (int span = 1; span < E; span *= 2)
#pragma unroll
            for (int k = 0; k < E; k++)
                if (!(k & span)) {
                    const float u = x[k], w = x[k + span];
                    x[k] = u + w;
                    x[k + span] = u - w;
                }
        // Across lanes: the upper lane's other - x as (-x) + other, one FMA by
        // +-1 (exact product, one rounding: the same bits, no select).
#pragma unroll
        for (int span = E; span < D; span *= 2) {
            const float sign = sl & (span / E) ? -1.0f : 1.0f;
#pragma unroll
            for (int k = 0; k < E; k++) {
                const float other = __shfl_xor_sync(0xffffffffu, x[k], span / E);
                x[k] = fmaf(x[k], sign, other);
            }
        }
#pragma unroll
        for (int k = 0; k < E; k++) x[k] = x[k] * a.hadamard_scale;
    }
    float m = 0.0f;
#pragma unroll
    for (int k = 0; k < E; k++) m = fmaxf(m, fabsf(x[k]));
    return seg_max(m);
}

// The lane's E codes as little-endian words (4 codes a word):
// vcattn_int8_encode, with the byte taken from the magic-number sum's bits
// (RNE, no F2I), four bytes gathered by three byte permutes.
template <int E>
__device__ __forceinline__ void int8_codes(const float *x, float inv_scale, uint32_t *words) {
    static_assert(E % 4 == 0, "whole words of codes");
#pragma unroll
    for (int k0 = 0; k0 < E; k0 += 4) {
        uint32_t bits[4];
#pragma unroll
        for (int k = 0; k < 4; k++)
            bits[k] = __float_as_uint(fminf(fmaxf(x[k0 + k] * inv_scale, -127.0f), 127.0f) + 12582912.0f);
        words[k0 / 4] = __byte_perm(__byte_perm(bits[0], bits[1], 0x0040), __byte_perm(bits[2], bits[3], 0x0040),
                                    0x5410);
    }
}

// Stages a lane's E codes at p (16-byte aligned for E 16, 8-byte for E 8).
template <int E>
__device__ __forceinline__ void stage_codes(const float *x, float inv_scale, int8_t *p) {
    uint32_t w[(E + 3) / 4];
    int8_codes<E>(x, inv_scale, w);
    if constexpr (E == 16) *reinterpret_cast<uint4 *>(p) = make_uint4(w[0], w[1], w[2], w[3]);
    else if constexpr (E == 8) *reinterpret_cast<uint2 *>(p) = make_uint2(w[0], w[1]);
    else *reinterpret_cast<uint32_t *>(p) = w[0];
}

// One tile of R rows (Q: 64, K: 128) per block; a warp holds 32 / kRowLanes
// rows at once and RPL rows a lane in registers until the scales are known;
// codes staged row-major (rows padded by 16 bytes: the 16-byte reads of the
// copy-out hit distinct banks), then written out in the tile image order,
// 16 bytes per thread.
template <int D, bool IS_KEY, bool QSMOOTH>
__global__ void __launch_bounds__(kRowThreads, IS_KEY ? 2 : 4) quantize_rows_kernel(row_args a) {
    chain_begin();
    constexpr int R = IS_KEY ? VC_KV_ROWS : VC_Q_ROWS, E = D / kRowLanes, WARPS = kRowThreads / 32;
    constexpr int SEGS = 32 / kRowLanes, RPL = R / (WARPS * SEGS), LD = D + 16;
    __shared__ alignas(16) int8_t staged[R * LD];
    __shared__ float row_amax[R], row_norms[IS_KEY ? R : 1];
    __shared__ float group_inv[4];
    __shared__ alignas(16) float mean[D], qm[D];
    const int tile = blockIdx.x, h = blockIdx.y, b = blockIdx.z;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, seg = lane / kRowLanes, sl = lane % kRowLanes;
    const int64_t head = (int64_t)b * a.c.heads + h;
    const int tiles = gridDim.x;

    if (threadIdx.x < D) {
        const int64_t mrow = IS_KEY ? head : (int64_t)b * a.heads_kv + h / (a.c.heads / a.heads_kv);
        mean[threadIdx.x] = a.kmean ? a.kmean[mrow * D + threadIdx.x] : 0.0f;
        qm[threadIdx.x] = !IS_KEY && QSMOOTH ? a.qmean[head * D + threadIdx.x] : 0.0f;
    }
    __syncthreads();
    int src[RPL];
    int64_t at[RPL];
    bool valid[RPL];
#pragma unroll
    for (int i = 0; i < RPL; i++) {  // row r of the tile: warps and segments interleaved
        const int n = tile * R + warp * SEGS + seg + WARPS * SEGS * i;
        valid[i] = n < a.c.tokens;
        src[i] = valid[i] ? (a.perm ? a.perm[head * a.c.tokens + n] : n) : 0;
        at[i] = b * a.x.sb + h * a.x.sh + (int64_t)src[i] * a.x.sn + sl * E;
    }
    float x[RPL][E];
    load_rows<RPL, E>(a.x, at, valid, x);
    float norm_max = 0.0f, unseen = 0.0f;  // unseen: the largest norm of a row whose scale is 0
    float fold = 0.0f;  // the finite check's fold of every value read (rows past the end read as 0)
#pragma unroll
    for (int i = 0; i < RPL; i++) {
        const int r = warp * SEGS + seg + WARPS * SEGS * i, n = tile * R + r;
        if (IS_KEY && QSMOOTH && !valid[i] && sl == 0) {  // keys past the end: term 0 (masked anyway)
            const int64_t heads_q = (int64_t)a.c.heads * a.group;
            for (int g = 0; g < a.group; g++) {
                const int64_t qh = (int64_t)b * heads_q + (int64_t)h * a.group + g;
                a.key_bias[(qh * tiles + tile) * VC_KV_ROWS + r] = 0.0f;
            }
        }
        if (a.c.check_finite)
#pragma unroll
            for (int k = 0; k < E; k++) fold = finite_fold(fold, x[i][k]);
        float row_norm;
        float amax =
            transform_row<D, IS_KEY, QSMOOTH>(a, head, n, a.rope.row_at(b, h, src[i]), valid[i], mean, qm, x[i],
                                              norm_max, row_norm, fold);
        if (!valid[i]) {  // rows past the end: codes 0, no part in the scales
            amax = 0.0f;
#pragma unroll
            for (int k = 0; k < E; k++) x[i][k] = 0.0f;
        }
        if constexpr (IS_KEY) {
            if (sl == 0) {
                row_amax[r] = amax;
                row_norms[r] = row_norm;
            }
        } else {  // per-token scale: encode now
            const vcattn_int8_scale s = vcattn_int8_scale_from_amax(amax);
            if (s.scale == 0.0f) unseen = fmaxf(unseen, row_norm);  // its scores read as 0
            if (sl == 0) a.scales[head * tiles * R + tile * R + r] = s.scale;
            stage_codes<E>(x[i], s.inv_scale, staged + r * LD + sl * E);
        }
    }
    checked(fold, a.c);
    // a segment's lanes agree; the warp's segments combined: one atomic a warp
#pragma unroll
    for (int o = kRowLanes; o < 32; o *= 2) {
        norm_max = fmaxf(norm_max, __shfl_xor_sync(0xffffffffu, norm_max, o));
        if constexpr (!IS_KEY) unseen = fmaxf(unseen, __shfl_xor_sync(0xffffffffu, unseen, o));
    }
    if (a.max_norm && lane == 0 && norm_max > 0.0f)  // non-negative floats order as their bits
        atomicMax(reinterpret_cast<int *>(a.max_norm), __float_as_int(norm_max));
    if (!IS_KEY && a.max_norm && lane == 0 && unseen > 0.0f)  // the slot two past the norm's
        atomicMax(reinterpret_cast<int *>(a.max_norm + 2), __float_as_int(unseen));
    if constexpr (IS_KEY) {
        // 4 scales per tile: keys with the same (key % 8) / 2 (a thread's keys in the attention kernel).
        __syncthreads();
        if (threadIdx.x < 4) {
            float m = 0.0f;
            for (int r = 2 * threadIdx.x; r < R; r += 8) m = fmaxf(m, fmaxf(row_amax[r], row_amax[r + 1]));
            const vcattn_int8_scale s = vcattn_int8_scale_from_amax(m);
            a.scales[(head * tiles + tile) * 4 + threadIdx.x] = s.scale;
            group_inv[threadIdx.x] = s.inv_scale;
            if (s.scale == 0.0f && a.max_norm) {  // the group's scores read as 0
                float u = 0.0f;
                for (int r = 2 * threadIdx.x; r < R; r += 8) u = fmaxf(u, fmaxf(row_norms[r], row_norms[r + 1]));
                if (u > 0.0f) atomicMax(reinterpret_cast<int *>(a.max_norm + 2), __float_as_int(u));
            }
        }
        __syncthreads();
#pragma unroll
        for (int i = 0; i < RPL; i++) {
            const int r = warp * SEGS + seg + WARPS * SEGS * i;
            stage_codes<E>(x[i], group_inv[(r & 7) >> 1], staged + r * LD + sl * E);
        }
    }
    __syncthreads();
    uint4 *out = reinterpret_cast<uint4 *>(a.codes + (head * tiles + tile) * (int64_t)R * D);
    for (int c = threadIdx.x; c < R * D / 16; c += kRowThreads) {
        uint32_t row, col;
        vc_tile_coords((uint32_t)c * 16, R, &row, &col);
        out[c] = *reinterpret_cast<const uint4 *>(staged + row * LD + col);
    }
}

// The attention probe's query rows (kernels.h: quantize_probe_rows), 32 a
// block, a row on kRowLanes lanes as in quantize_rows_kernel, through the
// same transform_row: the same codes and scales as Q's own pass gives them.
template <int D, bool QSMOOTH>
__global__ void __launch_bounds__(kRowThreads) quantize_probe_rows_kernel(row_args a, int rows, int heads_kv) {
    chain_begin();
    constexpr int E = D / kRowLanes, ROWS = kRowThreads / kRowLanes;
    __shared__ float no_mean[D];  // not read: no K mean and no LSE shift are asked here
    const int64_t kv_head = blockIdx.y;
    const int b = (int)(kv_head / heads_kv), h = (int)(kv_head % heads_kv), group = a.c.heads / heads_kv;
    const int s = blockIdx.x * ROWS + threadIdx.x / kRowLanes, sl = threadIdx.x % kRowLanes;
    const bool valid[1] = {s < rows};
    const int hq = h * group + (valid[0] ? s % group : 0), n = valid[0] ? vsmooth_probe_row(s, a.c.tokens) : 0;
    const int64_t head = (int64_t)b * a.c.heads + hq;
    const int64_t at[1] = {b * a.x.sb + hq * a.x.sh + (int64_t)n * a.x.sn + sl * E};
    float x[1][E];
    load_rows<1, E>(a.x, at, valid, x);
    float norm_max = 0.0f, row_norm, fold = 0.0f;
    const float *qm = QSMOOTH ? a.qmean + head * D : no_mean;
    const float amax =
        transform_row<D, false, QSMOOTH>(a, head, n, a.rope.row_at(b, hq, n), valid[0], no_mean, qm, x[0], norm_max,
                                         row_norm, fold);
    checked(fold, a.c);
    if (!valid[0]) return;
    const vcattn_int8_scale sc = vcattn_int8_scale_from_amax(amax);
    if (sl == 0) a.scales[kv_head * rows + s] = sc.scale;
    stage_codes<E>(x[0], sc.inv_scale, a.codes + (kv_head * rows + s) * D + sl * E);
}

// The call's first kernel: zeroes its flag block and, when given, the
// principal order's amax. A memset would sit in the stream as a node that
// chained launches cannot overlap: the chain would start twice.
__global__ void reset_call_kernel(int *flag, int flag_words, float *amax, int heads) {
    chain_begin();  // the previous call's attention may still read its flag
    for (int i = threadIdx.x; i < flag_words; i += blockDim.x) flag[i] = 0;
    for (int i = threadIdx.x; amax && i < heads; i += blockDim.x) amax[i] = 0.0f;
}

// The check's score bound: |q| |k| sm_scale log2(e) beyond what float32
// softmax resolves sets flag bit 2, a row norm whose Hadamard could overflow
// (2 sqrt(D) |x| past the float maximum, as the CPU) bit 4, scores past
// VCATTN_UNSEEN_SCORE_LOG2 that rows with a zero scale lose bit 16; the
// attention kernel then writes nothing. Last of the call's quantizers: it
// publishes the flag into the host's mapped word (publish, or NULL).
__global__ void score_bound_kernel(const float *max_norm, float score_mul, int hadamard, quant_common c, int *publish) {
    chain_begin();
    if (hadamard && fmax((double)max_norm[0], (double)max_norm[1]) * 2.0 * sqrt((double)c.head_dim) > FLT_MAX)
        atomicOr(c.error_flag, VC_FLAG_HADAMARD_RANGE);
    const double q = max_norm[0], k = max_norm[1];  // an Inf norm is refused even against k = 0
    if (isinf(q) || isinf(k) || q * k * (double)score_mul > VCATTN_MAX_SCORE_LOG2) atomicOr(c.error_flag, VC_FLAG_SCORE_RANGE);
    // rows whose scale came out 0 (max_norm[2], [3]: q, k) score 0 against every key
    if (fmax((double)max_norm[2] * k, q * (double)max_norm[3]) * (double)score_mul > VCATTN_UNSEEN_SCORE_LOG2)
        atomicOr(c.error_flag, VC_FLAG_UNSEEN_SCORES);
    if (publish) *(volatile int *)publish = atomicOr(c.error_flag, 0);
}

}  // namespace

// Keys per partial sum: 1024, halved (to 256 at least) while the blocks
// would not fill the GPU; a function of the shape, so every call of a shape
// adds in the same order. Long sequences keep few partials (the final sum
// over them is one thread a channel).
static int mean_chunk_keys(int batch, int heads, int tokens) {
    int chunk = kMeanChunk;
    while (chunk > kMeanMinChunk && (int64_t)batch * heads * ((tokens + chunk - 1) / chunk) < kMeanTargetBlocks)
        chunk /= 2;
    return chunk;
}

size_t k_channel_mean_partials(int batch, int heads, int tokens, int head_dim) {
    const int chunk = mean_chunk_keys(batch, heads, tokens);
    return (size_t)batch * heads * ((tokens + chunk - 1) / chunk) * head_dim;
}

cudaError_t k_channel_mean(const dev_tensor &k, const dev_rope &rope, const quant_common &c,
                           double *partials, float *mean, cudaStream_t stream) {
    const int chunk = mean_chunk_keys(c.batch, c.heads, c.tokens), chunks = (c.tokens + chunk - 1) / chunk;
    const dim3 grid(chunks, c.heads, c.batch);
    if (c.head_dim == 128)
        launch_chained(k_mean_partial_kernel<128>, grid, 32 * kMeanLanes, 0, stream, k, rope, c, chunk, partials);
    else if (c.head_dim == 64)
        launch_chained(k_mean_partial_kernel<64>, grid, 32 * kMeanLanes, 0, stream, k, rope, c, chunk, partials);
    else return cudaErrorInvalidValue;
    launch_chained(k_mean_final_kernel, c.batch * c.heads, c.head_dim, 0, stream, partials, chunks, c, mean);
    return cudaGetLastError();
}

template <int D, bool IS_KEY>
static void launch_rows_for(const row_args &a, dim3 grid, cudaStream_t stream) {
    if (a.qmean) launch_chained(quantize_rows_kernel<D, IS_KEY, true>, grid, kRowThreads, 0, stream, a);
    else launch_chained(quantize_rows_kernel<D, IS_KEY, false>, grid, kRowThreads, 0, stream, a);
}

static cudaError_t launch_rows(bool is_key, const row_args &a, int tiles, cudaStream_t stream) {
    const dim3 grid(tiles, a.c.heads, a.c.batch);
    if (a.c.head_dim == 128) {
        if (is_key) launch_rows_for<128, true>(a, grid, stream);
        else launch_rows_for<128, false>(a, grid, stream);
    } else if (a.c.head_dim == 64) {
        if (is_key) launch_rows_for<64, true>(a, grid, stream);
        else launch_rows_for<64, false>(a, grid, stream);
    } else {
        return cudaErrorInvalidValue;
    }
    return cudaGetLastError();
}

cudaError_t reset_call(int *flag, int flag_words, float *amax, int heads, cudaStream_t stream) {
    launch_chained(reset_call_kernel, 1, 256, 0, stream, flag, flag_words, amax, heads);
    return cudaGetLastError();
}

cudaError_t check_score_bound(const float *max_norm, float score_mul, int hadamard, const quant_common &c,
                              int *publish, cudaStream_t stream) {
    launch_chained(score_bound_kernel, 1, 1, 0, stream, max_norm, score_mul, hadamard, c, publish);
    return cudaGetLastError();
}

cudaError_t quantize_k(const dev_tensor &k, const dev_rope &rope, const quant_common &c,
                       const int32_t *perm, const float *mean, int hadamard, float hadamard_scale,
                       int8_t *codes, float *scales, float *max_norm, const q_smoothing_args &qs,
                       cudaStream_t stream) {
    row_args a = {k, rope, c, perm, mean, c.heads, 0.0f, hadamard, hadamard_scale, codes, scales, nullptr,
                  c.check_finite ? max_norm : nullptr, qs.qmean, qs.group, qs.score_mul, qs.key_bias};
    return launch_rows(true, a, (c.tokens + VC_KV_ROWS - 1) / VC_KV_ROWS, stream);
}

cudaError_t quantize_q(const dev_tensor &q, const dev_rope &rope, const quant_common &c,
                       int heads_kv, const float *kmean, float sm_scale, int hadamard,
                       float hadamard_scale, int tiles, int8_t *codes, float *scales,
                       float *lse_shift, float *max_norm, const float *qmean, cudaStream_t stream) {
    row_args a = {q, rope, c, nullptr, kmean, heads_kv, sm_scale, hadamard, hadamard_scale, codes, scales, lse_shift,
                  c.check_finite ? max_norm : nullptr, qmean, 1, 0.0f, nullptr};
    return launch_rows(false, a, tiles, stream);
}

cudaError_t quantize_probe_rows(const dev_tensor &q, const dev_rope &rope, const quant_common &c, int heads_kv,
                                int hadamard, float hadamard_scale, int rows, const float *qmean, int8_t *codes,
                                float *scales, cudaStream_t stream) {
    const row_args a = {q, rope, c, nullptr, nullptr, heads_kv, 0.0f, hadamard, hadamard_scale, codes, scales,
                        nullptr, nullptr, qmean, 1, 0.0f, nullptr};
    const dim3 grid((rows + kRowThreads / kRowLanes - 1) / (kRowThreads / kRowLanes), c.batch * heads_kv);
    if (c.head_dim == 128) {
        if (qmean) launch_chained(quantize_probe_rows_kernel<128, true>, grid, kRowThreads, 0, stream, a, rows, heads_kv);
        else launch_chained(quantize_probe_rows_kernel<128, false>, grid, kRowThreads, 0, stream, a, rows, heads_kv);
    } else if (c.head_dim == 64) {
        if (qmean) launch_chained(quantize_probe_rows_kernel<64, true>, grid, kRowThreads, 0, stream, a, rows, heads_kv);
        else launch_chained(quantize_probe_rows_kernel<64, false>, grid, kRowThreads, 0, stream, a, rows, heads_kv);
    } else {
        return cudaErrorInvalidValue;
    }
    return cudaGetLastError();
}
