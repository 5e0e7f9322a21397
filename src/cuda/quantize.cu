// Fused quantization of Q, K and V for the sm_90a attention kernel: one pass
// over each operand (V: statistics, then encode), nothing in high precision
// written back. The codecs are src/formats' (bit-identical to the CPU
// backend); this file compiles with -fmad=false so every product and sum
// rounds as the CPU's C code does. Layout of the outputs: operand_layout.h.
#include "kernels.h"
#include "launch_facts.h"
#include "load.cuh"
#include "operand_layout.h"
#include "sm90/ptx.cuh"
#include "../formats/formats.h"
#include "../vsmooth/vsmooth.h"

#include <cuda_fp16.h>
#include <cuda_pipeline.h>
#include <float.h>

namespace {

constexpr int kRowThreads = 256;  // >= 128: one thread per row of a tile where needed
constexpr int kMaxHeadDim = 128;
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

// RoPE of the lane's elements of row x at position src, as the CPU: for a
// pair (xa, xb), xa co - xb si and xa si + xb co. CHECK: report non-finite
// table entries (the K mean skips it: quantize_k reads the same entries).
// A row spans LANES lanes (a segment of the warp: 32, or kRowLanes in the
// row quantizers); the lane's elements are [E sl, E sl + E), sl its place in
// the segment.
template <int D, bool CHECK, int LANES = 32>
__device__ __forceinline__ void rope_row(const dev_rope &rope, const quant_common &c, int src, float *x) {
    constexpr int E = D / LANES;
    if (!rope.cos_tab) return;
    const int sl = threadIdx.x % LANES;
    if (rope.half_split) {  // pairs (i, i + D/2): lanes sl and sl ^ LANES/2 hold the two halves
        const bool first = sl < LANES / 2;
        const int64_t at = (int64_t)src * (D / 2) + (sl % (LANES / 2)) * E;
#pragma unroll
        for (int k = 0; k < E; k++) {
            float co = rope.cos_tab[at + k], si = rope.sin_tab[at + k];
            if (CHECK) co = checked(co, c), si = checked(si, c);
            const float other = __shfl_xor_sync(0xffffffffu, x[k], LANES / 2);
            const float xa = first ? x[k] : other, xb = first ? other : x[k];
            x[k] = first ? xa * co - xb * si : xa * si + xb * co;
        }
    } else {  // interleaved pairs (2i, 2i + 1) inside the lane
        const int64_t at = (int64_t)src * (D / 2) + sl * (E / 2);
#pragma unroll
        for (int k = 0; k < E; k += 2) {
            float co = rope.cos_tab[at + k / 2], si = rope.sin_tab[at + k / 2];
            if (CHECK) co = checked(co, c), si = checked(si, c);
            const float xa = x[k], xb = x[k + 1];
            x[k] = xa * co - xb * si;
            x[k + 1] = xa * si + xb * co;
        }
    }
}

// ---- K channel mean (post-RoPE), in double, deterministic chunk order -------

// Block of kMeanLanes warps per chunk of keys: warp y sums the chunk's tokens
// n = y mod kMeanLanes in token order, then the warps' sums are added in
// order (deterministic).
template <int D>
__global__ void __launch_bounds__(32 * kMeanLanes) k_mean_partial_kernel(dev_tensor k, dev_rope rope,
                                                                         quant_common c, int chunk_keys,
                                                                         double *partials) {
    constexpr int E = D / 32, BATCH = 8;
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
        float x[BATCH][E];
        load_rows<BATCH, E>(k, at, valid, x);
#pragma unroll
        for (int i = 0; i < BATCH; i++) {
            if (valid[i]) {
                rope_row<D, false>(rope, c, n0 + kMeanLanes * i, x[i]);
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

// Row (token n, original position src) rotated, smoothed and Hadamard-
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
template <int D, bool IS_KEY, bool QSMOOTH>
__device__ __forceinline__ float transform_row(const row_args &a, int64_t head, int n, int src, bool valid,
                                               const float *mean_s, const float *qm_s, float *x, float &norm_max,
                                               float &row_norm) {
    constexpr int E = D / kRowLanes;
    const int sl = threadIdx.x % kRowLanes;
    const float *mean = mean_s + sl * E, *qm = qm_s + sl * E;
    row_norm = 0.0f;
    rope_row<D, true, kRowLanes>(a.rope, a.c, src, x);
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
#pragma unroll
        for (int span = E; span < D; span *= 2) {
            const bool upper = sl & (span / E);
#pragma unroll
            for (int k = 0; k < E; k++) {
                const float other = __shfl_xor_sync(0xffffffffu, x[k], span / E);
                x[k] = upper ? other - x[k] : x[k] + other;
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
// (RNE, no F2I).
template <int E>
__device__ __forceinline__ void int8_codes(const float *x, float inv_scale, uint32_t *words) {
#pragma unroll
    for (int k0 = 0; k0 < E; k0 += 4) {
        uint32_t word = 0;
#pragma unroll
        for (int k = k0; k < k0 + 4 && k < E; k++) {
            const float v = fminf(fmaxf(x[k] * inv_scale, -127.0f), 127.0f);
            word |= (__float_as_uint(v + 12582912.0f) & 0xffu) << (8 * (k - k0));
        }
        words[k0 / 4] = word;
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
        if (valid[i] && a.c.check_finite)
#pragma unroll
            for (int k = 0; k < E; k++) checked(x[i][k], a.c);
        float row_norm;
        float amax = transform_row<D, IS_KEY, QSMOOTH>(a, head, n, src[i], valid[i], mean, qm, x[i], norm_max, row_norm);
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
    float norm_max = 0.0f, row_norm;
    const float *qm = QSMOOTH ? a.qmean + head * D : no_mean;
    const float amax = transform_row<D, false, QSMOOTH>(a, head, n, n, valid[0], no_mean, qm, x[0], norm_max, row_norm);
    if (!valid[0]) return;
    const vcattn_int8_scale sc = vcattn_int8_scale_from_amax(amax);
    if (sl == 0) a.scales[kv_head * rows + s] = sc.scale;
    stage_codes<E>(x[0], sc.inv_scale, a.codes + (kv_head * rows + s) * D + sl * E);
}

// ---- V: block statistics, channel scales, transposed E4M3 records -----------

struct v_args {
    dev_tensor v;
    quant_common c;
    const int32_t *perm;
    int demean;
    float sink_guard;
    float out_max;         // with the check: V past it sets VC_FLAG_OUT_RANGE; 0: none
    float *tile_mean, *tile_hi, *tile_lo, *chan_inv, *chan_mul, *chan_pre, *chan_pow2;
    uint8_t *records;
    uint8_t *mean_images;  // or NULL (operand_layout.h)
    probe_args probe;      // the attention probe's outputs when probe.rows > 0
};

// The attention probe's code bytes of 32 probe rows for one tile, and their
// factors, copied into shared memory asynchronously, so that the first batch
// is in flight while the block loads V's tile. 32 rows (not 64) keep the
// statistics kernel's shared memory to five blocks an SM at 16-bit V.
constexpr int kProbeBatch = 32;
struct probe_batch {
    alignas(16) uint8_t codes[kProbeBatch * VC_KV_ROWS];
    double factor[kProbeBatch];
};

__device__ void probe_fetch(const probe_args &p, int64_t head, int tile, int tiles, int base, probe_batch &s) {
    const int here = min(kProbeBatch, p.rows - base);
    const uint8_t *src = p.codes + ((head * tiles + tile) * (int64_t)p.rows + base) * VC_KV_ROWS;
    for (int c = threadIdx.x; c < here * VC_KV_ROWS / 16; c += blockDim.x)
        __pipeline_memcpy_async(s.codes + 16 * c, src + 16 * c, 16);
    if (threadIdx.x < here)
        __pipeline_memcpy_async(&s.factor[threadIdx.x], &p.tile_factor[(head * p.rows + base + threadIdx.x) * tiles + tile],
                                sizeof(double));
    __pipeline_commit();
}

// The weights of tile `tile`'s tokens in its centre from the probe's codes
// and factors (vsmooth.h), the first batch fetched by the caller: two threads
// per token, one for the even rows and one for the odd, each summing in s
// order, as the CPU. Every thread of the block calls it (it synchronizes);
// 256 threads.
__device__ void probe_weights(const probe_args &p, int64_t head, int tile, int tiles, int count, probe_batch &s,
                              double *weight) {
    __shared__ double odd_s[VC_KV_ROWS];
    const int r = threadIdx.x & (VC_KV_ROWS - 1), parity = threadIdx.x >> 7;
    double half = 0.0;
    for (int base = 0; base < p.rows; base += kProbeBatch) {
        if (base > 0) {
            __syncthreads();  // the previous rows are read
            probe_fetch(p, head, tile, tiles, base, s);
        }
        __pipeline_wait_prior(0);
        __syncthreads();
        const int here = min(kProbeBatch, p.rows - base);
        if (r < count)  // base is even: row base + i has the parity of i
            for (int i = parity; i < here; i += 2) {
                const double e = vcattn_e4m3_decode(s.codes[i * VC_KV_ROWS + r]);
                half += e * e * s.factor[i];
            }
    }
    if (parity) odd_s[r] = half;
    __syncthreads();
    if (!parity && r < count) weight[r] = vsmooth_probe_token_weight(half, odd_s[r], p.mean_weight[head]);
}

static_assert(VSMOOTH_SUM_LANES == 32, "vsmooth_tree_sum's lanes are a warp's (warp_sum)");

// The tile's block mean (double, as the CPU's block_means) and the range of
// each channel, from one read of the rows (v_scales_kernel turns them into
// the residual's amax). The mean is zeroed where it is not worth removing
// (the CPU's block_keeps_mean): the sink guard, a token of squared norm
// below sink_guard^2 |mean|^2, a mean with under VSMOOTH_MIN_MEAN_SHARE of
// the block's energy, or values all on the E4M3 grid at the block's channel
// ranges (vcattn_e4m3_exact_at). Two threads a channel (the even rows, the
// odd rows); the weights' total, |mean|^2 and the energy by one warp in
// vsmooth_tree_sum's order: no thread runs a chain of 128 additions while
// the block waits at a barrier.
template <bool kHalf>
__global__ void __launch_bounds__(kRowThreads) v_stats_kernel(v_args a) {
    extern __shared__ __align__(16) uint8_t tile_smem[];
    __shared__ float mean_s[kMaxHeadDim], hi_s[kMaxHeadDim], lo_s[kMaxHeadDim];
    __shared__ double energy_s[VC_KV_ROWS], mean2_s, weight_s[VC_KV_ROWS], total_s;
    __shared__ int keep_s;
    const int tile = blockIdx.x, h = blockIdx.y, b = blockIdx.z, d = a.c.head_dim;
    const int64_t head = (int64_t)b * a.c.heads + h;
    const int n0 = tile * VC_KV_ROWS, count = min(VC_KV_ROWS, a.c.tokens - n0);
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const bool weighted = a.demean && a.probe.rows > 0;
    __shared__ probe_batch batch_s;
    if (weighted) probe_fetch(a.probe, head, tile, gridDim.x, 0, batch_s);
    smem_tile<kHalf> rows(tile_smem, d, a.v.dtype);
    // four chunks a thread in flight (one at a time, this pass waited on each
    // load); the codes' pass, whose reads mostly hit L2, was slower that way
    // (more registers, fewer blocks) and keeps one
    rows.template load<4>(a.v, a.c, b, h, a.perm, n0, count);
    if (weighted) probe_weights(a.probe, head, tile, gridDim.x, count, batch_s, weight_s);
    __syncthreads();
    if (weighted && warp == 0) {
        double p = 0.0;
        for (int r = lane; r < count; r += VSMOOTH_SUM_LANES) p += weight_s[r];
        p = warp_sum(p);
        if (lane == 0) total_s = p;
    }
    // The odd rows' sums and ranges wait in arrays free until later (energy_s,
    // mean_s) or from now on (the probe batch's codes, all read above).
    float *const odd_lo = reinterpret_cast<float *>(batch_s.codes);
    const int chan = threadIdx.x % d, parity = threadIdx.x / d;
    double s = 0.0;
    float hi = -INFINITY, lo = INFINITY;
    if (parity < 2) {
        for (int r = parity; r < count; r += 2) {
            const float x = rows.get(r, chan);
            s += weighted ? weight_s[r] * (double)x : (double)x;
            hi = fmaxf(hi, x);
            lo = fminf(lo, x);
        }
        if (parity) {
            energy_s[chan] = s;
            mean_s[chan] = hi;
            odd_lo[chan] = lo;
        }
    }
    __syncthreads();
    if (parity == 0) {
        const double total = weighted ? total_s : (double)count;
        const float mean = a.demean ? (float)((s + energy_s[chan]) / total) : 0.0f;
        hi_s[chan] = fmaxf(hi, mean_s[chan]);
        lo_s[chan] = fminf(lo, odd_lo[chan]);
        mean_s[chan] = mean;
    }
    __syncthreads();
    if (a.demean && warp == 0) {
        double p = 0.0;
        for (int i = lane; i < d; i += VSMOOTH_SUM_LANES) p += (double)mean_s[i] * (double)mean_s[i];
        p = warp_sum(p);
        if (lane == 0) mean2_s = p;
    }
    __syncthreads();
    // Each row's energy in the CPU's four chains over i mod 4, two threads a
    // row: half 0 the chains 0 and 1, half 1 the chains 2 and 3, combined as
    // the CPU combines them, (e0 + e1) + (e2 + e3); a thread reads 4 channels
    // at a time (smem_tile's padding keeps these reads conflict-free).
    const int er = threadIdx.x & (VC_KV_ROWS - 1), half = threadIdx.x >> 7;
    int on_grid = 1;
    double part = 0.0;
    if (a.demean && er < count) {
        double e0 = 0.0, e1 = 0.0;
        for (int i = 0; i < d; i += 4) {
            const float4 q = rows.get4(er, i);
            const float u = half ? q.z : q.x, w = half ? q.w : q.y;
            e0 += (double)u * (double)u;
            e1 += (double)w * (double)w;
            const int c = i + 2 * half;
            if (on_grid)
                on_grid = vcattn_e4m3_exact_at(u, fmaxf(fabsf(hi_s[c]), fabsf(lo_s[c]))) &&
                          vcattn_e4m3_exact_at(w, fmaxf(fabsf(hi_s[c + 1]), fabsf(lo_s[c + 1])));
        }
        part = e0 + e1;
        if (half) energy_s[er] = part;
    }
    on_grid = __syncthreads_and(on_grid);  // and the upper halves are in energy_s
    int sink = 0;
    if (a.demean && !half && er < count) {
        const double energy = part + energy_s[er];
        energy_s[er] = energy;
        sink = a.sink_guard > 0.0f && energy < (double)a.sink_guard * (double)a.sink_guard * mean2_s;
    }
    sink = __syncthreads_or(sink);
    if (a.demean && warp == 0) {
        double p = 0.0;
        for (int r = lane; r < count; r += VSMOOTH_SUM_LANES) p += energy_s[r];
        p = warp_sum(p);
        if (lane == 0) keep_s = !sink && !on_grid && vsmooth_mean_worth_removing((double)count, mean2_s, p);
    }
    __syncthreads();
    for (int ch = threadIdx.x; ch < d; ch += kRowThreads) {
        const float mean = a.demean && keep_s ? mean_s[ch] : 0.0f;
        const int64_t at = (head * gridDim.x + tile) * d + ch;
        a.tile_mean[at] = mean;
        a.tile_hi[at] = hi_s[ch];
        a.tile_lo[at] = lo_s[ch];
    }
}

// Per channel: the power-of-two pre-scale of a channel near the float
// limits (vcattn_v_prescale_exp; 1 elsewhere) and its inverse, which the
// epilogue applies last, the block means scaled by it
// in place, and scale = max(amax, max|mean| / 128) / 448 (docs/formats.md)
// of the scaled residual, whose amax is, with RN monotone,
// max(RN(RN(max x pre) - mean), RN(mean - RN(min x pre))), as the CPU.
// kScaleThreads threads per head: thread (part, ch) takes the tiles
// t = part mod parts (a thread per channel looped over every tile, 0.1-0.3 ms
// at video lengths); maxima, so the split changes no bit.
constexpr int kScaleThreads = 1024;
__global__ void __launch_bounds__(kScaleThreads) v_scales_kernel(v_args a, int tiles) {
    __shared__ float part_s[2][kScaleThreads];
    const int64_t head = blockIdx.x;
    const int d = a.c.head_dim, ch = threadIdx.x % d, part = threadIdx.x / d, parts = kScaleThreads / d;
    float raw = 0.0f;
    for (int t = part; t < tiles; t += parts) {
        const int64_t at = (head * tiles + t) * d + ch;
        raw = fmaxf(raw, fmaxf(fabsf(a.tile_hi[at]), fabsf(a.tile_lo[at])));
    }
    part_s[0][threadIdx.x] = raw;
    __syncthreads();
    for (int p = 0; p < parts; p++) raw = fmaxf(raw, part_s[0][p * d + ch]);
    if (part == 0 && a.out_max > 0.0f && raw > a.out_max) atomicOr(a.c.error_flag, VC_FLAG_OUT_RANGE);
    const int k = vcattn_v_prescale_exp(raw);
    const float pre = vcattn_pow2f(-k);
    float amax = 0.0f, mean_amax = 0.0f;
    for (int t = part; t < tiles; t += parts) {
        const int64_t at = (head * tiles + t) * d + ch;
        const float mean = a.tile_mean[at] * pre;
        a.tile_mean[at] = mean;
        amax = fmaxf(amax, fmaxf(fmaxf(a.tile_hi[at] * pre - mean, mean - a.tile_lo[at] * pre), 0.0f));
        mean_amax = fmaxf(mean_amax, fabsf(mean));
    }
    __syncthreads();  // every thread has read the maxima above
    part_s[0][threadIdx.x] = amax;
    part_s[1][threadIdx.x] = mean_amax;
    __syncthreads();
    if (part) return;
    for (int p = 1; p < parts; p++) {
        amax = fmaxf(amax, part_s[0][p * d + ch]);
        mean_amax = fmaxf(mean_amax, part_s[1][p * d + ch]);
    }
    amax = fmaxf(amax, mean_amax / 128.0f);
    float scale;
    a.chan_inv[head * d + ch] = vcattn_e4m3_scale(amax, &scale);
    a.chan_mul[head * d + ch] = scale;
    a.chan_pre[head * d + ch] = pre;
    a.chan_pow2[head * d + ch] = vcattn_pow2f(k);
}

// Tile `tile`'s words of its group's mean image: (mu, mu) in FP16 per channel,
// zeros in the ones rows; the last tile also zeroes the slots after it.
static __device__ void write_mean_image(const v_args &a, int64_t head, int tile, int tiles, const float *mean,
                                        const float *inv) {
    const uint32_t d = a.c.head_dim, rows = d + VC_ONES_ROWS, bytes = vc_mean_image_bytes(d);
    const int groups = (tiles + VC_MEAN_TILES - 1) / VC_MEAN_TILES;
    uint8_t *image = a.mean_images + (head * groups + tile / VC_MEAN_TILES) * (int64_t)bytes;
    const int last = tile == tiles - 1 ? (tile / VC_MEAN_TILES + 1) * VC_MEAN_TILES - 1 : tile;
    for (int x = tile; x <= last; x++) {
        for (uint32_t n = threadIdx.x; n < rows; n += kRowThreads) {
            uint32_t word = 0;
            if (x == tile && n < d && a.demean) {
                const uint32_t h = __half_as_ushort(__float2half_rn(vcattn_round_f16(mean[n] * inv[n])));
                word = h | h << 16;
            }
            *reinterpret_cast<uint32_t *>(image + vc_mean_image_offset((uint32_t)x, n, d)) = word;
        }
    }
}

// V^T record of one tile: codes read straight from the float tile in the
// order of the record's bytes (token sigma-permuted within 16), ones rows,
// then the block mean in code units. A thread writes 16 bytes: one channel,
// the 16 key positions of a 16-group (a warp's lanes take 32 channels, so
// the reads of one token hit distinct banks).
template <bool kHalf>
__global__ void __launch_bounds__(kRowThreads) v_encode_kernel(v_args a) {
    extern __shared__ __align__(16) uint8_t tile_smem[];
    const int tile = blockIdx.x, h = blockIdx.y, b = blockIdx.z, d = a.c.head_dim;
    const int64_t head = (int64_t)b * a.c.heads + h;
    const int tiles = gridDim.x, n0 = tile * VC_KV_ROWS;
    const int count = min(VC_KV_ROWS, a.c.tokens - n0);
    const float *mean = a.tile_mean + (head * tiles + tile) * d;
    const float *inv = a.chan_inv + head * d, *pre = a.chan_pre + head * d;
    smem_tile<kHalf> rows(tile_smem, d, a.v.dtype);
    rows.load(a.v, a.c, b, h, a.perm, n0, count);
    __syncthreads();
    uint8_t *rec = a.records + (head * tiles + tile) * (int64_t)vc_v_record_bytes(d);
    const uint32_t vt_rows = d + VC_ONES_ROWS;
    uint4 *chunks = reinterpret_cast<uint4 *>(rec);
    for (uint32_t c = threadIdx.x; c < vc_vt_bytes(d) / 16; c += kRowThreads) {
        uint32_t row, col;
        vc_tile_coords(c * 16, vt_rows, &row, &col);
        uint4 chunk = make_uint4(0x38383838u, 0x38383838u, 0x38383838u, 0x38383838u);  // ones rows: E4M3 1.0
        if (row < (uint32_t)d) {
            const float mu = mean[row], scale = inv[row], p = pre[row];
            uint32_t w[4];
#pragma unroll
            for (int q = 0; q < 4; q++) {
                float f[4];
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    const uint32_t token = col + vc_sigma(4 * q + e);  // col is a multiple of 16
                    f[e] = (int)token < count ? (rows.get(token, row) * p - mu) * scale : 0.0f;
                }
                w[q] = cvt_e4m3x2(f[0], f[1]) | (cvt_e4m3x2(f[2], f[3]) << 16);
            }
            chunk = make_uint4(w[0], w[1], w[2], w[3]);
        }
        chunks[c] = chunk;
    }
    float *mu = reinterpret_cast<float *>(rec + vc_vt_bytes(d));
    for (int ch = threadIdx.x; ch < d; ch += kRowThreads)
        mu[ch] = a.demean ? vcattn_round_f16(mean[ch] * inv[ch]) : 0.0f;
    if (a.mean_images) write_mean_image(a, head, tile, tiles, mean, inv);
}

// The check's score bound: |q| |k| sm_scale log2(e) beyond what float32
// softmax resolves sets flag bit 2, a row norm whose Hadamard could overflow
// (2 sqrt(D) |x| past the float maximum, as the CPU) bit 4, scores past
// VCATTN_UNSEEN_SCORE_LOG2 that rows with a zero scale lose bit 16; the
// attention kernel then writes nothing.
__global__ void score_bound_kernel(const float *max_norm, float score_mul, int hadamard, quant_common c) {
    if (hadamard && fmax((double)max_norm[0], (double)max_norm[1]) * 2.0 * sqrt((double)c.head_dim) > FLT_MAX)
        atomicOr(c.error_flag, VC_FLAG_HADAMARD_RANGE);
    const double q = max_norm[0], k = max_norm[1];  // an Inf norm is refused even against k = 0
    if (isinf(q) || isinf(k) || q * k * (double)score_mul > VCATTN_MAX_SCORE_LOG2) atomicOr(c.error_flag, VC_FLAG_SCORE_RANGE);
    // rows whose scale came out 0 (max_norm[2], [3]: q, k) score 0 against every key
    if (fmax((double)max_norm[2] * k, q * (double)max_norm[3]) * (double)score_mul > VCATTN_UNSEEN_SCORE_LOG2)
        atomicOr(c.error_flag, VC_FLAG_UNSEEN_SCORES);
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
        k_mean_partial_kernel<128><<<grid, 32 * kMeanLanes, 0, stream>>>(k, rope, c, chunk, partials);
    else if (c.head_dim == 64)
        k_mean_partial_kernel<64><<<grid, 32 * kMeanLanes, 0, stream>>>(k, rope, c, chunk, partials);
    else return cudaErrorInvalidValue;
    k_mean_final_kernel<<<c.batch * c.heads, c.head_dim, 0, stream>>>(partials, chunks, c, mean);
    return cudaGetLastError();
}

template <int D, bool IS_KEY>
static void launch_rows_for(const row_args &a, dim3 grid, cudaStream_t stream) {
    if (a.qmean) quantize_rows_kernel<D, IS_KEY, true><<<grid, kRowThreads, 0, stream>>>(a);
    else quantize_rows_kernel<D, IS_KEY, false><<<grid, kRowThreads, 0, stream>>>(a);
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

cudaError_t check_score_bound(const float *max_norm, float score_mul, int hadamard, const quant_common &c,
                              cudaStream_t stream) {
    score_bound_kernel<<<1, 1, 0, stream>>>(max_norm, score_mul, hadamard, c);
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
        if (qmean) quantize_probe_rows_kernel<128, true><<<grid, kRowThreads, 0, stream>>>(a, rows, heads_kv);
        else quantize_probe_rows_kernel<128, false><<<grid, kRowThreads, 0, stream>>>(a, rows, heads_kv);
    } else if (c.head_dim == 64) {
        if (qmean) quantize_probe_rows_kernel<64, true><<<grid, kRowThreads, 0, stream>>>(a, rows, heads_kv);
        else quantize_probe_rows_kernel<64, false><<<grid, kRowThreads, 0, stream>>>(a, rows, heads_kv);
    } else {
        return cudaErrorInvalidValue;
    }
    return cudaGetLastError();
}

cudaError_t quantize_v(const dev_tensor &v, const quant_common &c, const int32_t *perm, int demean,
                       float sink_guard, float out_max, const probe_args *probe, float *tile_mean,
                       float *tile_hi, float *tile_lo, float *chan_inv, float *chan_mul, float *chan_pre,
                       float *chan_pow2, uint8_t *records, uint8_t *mean_images, cudaStream_t stream) {
    const int tiles = (c.tokens + VC_KV_ROWS - 1) / VC_KV_ROWS;
    v_args a = {v, c, perm, demean, sink_guard, c.check_finite ? out_max : 0.0f, tile_mean, tile_hi, tile_lo,
                chan_inv, chan_mul, chan_pre, chan_pow2, records, mean_images, probe ? *probe : probe_args{}};
    const dim3 grid(tiles, c.heads, c.batch);
    // 16-bit rows stay 16-bit in shared memory (twice the blocks an SM)
    const bool half = v.vec && v.dtype != VCATTN_DTYPE_F32;
    const int smem = half ? smem_tile<true>::bytes(c.head_dim) : smem_tile<false>::bytes(c.head_dim);
    void (*stats)(v_args) = half ? v_stats_kernel<true> : v_stats_kernel<false>;
    void (*encode)(v_args) = half ? v_encode_kernel<true> : v_encode_kernel<false>;
    cudaError_t err;
    if ((err = allow_dynamic_smem((const void *)stats, smem)) || (err = allow_dynamic_smem((const void *)encode, smem)))
        return err;
    stats<<<grid, kRowThreads, smem, stream>>>(a);
    v_scales_kernel<<<c.batch * c.heads, kScaleThreads, 0, stream>>>(a, tiles);
    encode<<<grid, kRowThreads, smem, stream>>>(a);
    return cudaGetLastError();
}
