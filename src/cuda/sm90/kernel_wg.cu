// The head-dim-64 kernel for sm_90a: one warpgroup per CTA, 64 query rows,
// four CTAs per SM that hide each other's waits (as SageAttention2's sm90
// kernel runs). Per 128-key tile: INT8 QK^T (wgmma s8), online softmax with P
// encoded as E4M3 (ExpCast or exp-then-cast) straight into the A registers of
// the FP8 PV wgmma, whose 8 extra columns of ones return the row sum of the
// decoded P; then the two-level update acc = alpha * acc + (P V + r mu).
// At head dim 64 the per-score softmax outweighs the GEMMs, and four
// independent warpgroups per SM beat the warp-specialized kernel's two
// (docs/perf-notes.md); head dim 128 runs kernel.cuh.
#include "attention.h"
#include "epilogue.cuh"
#include "mainloop.cuh"
#include "ptx.cuh"
#include "softmax.cuh"
#include "tile.cuh"
#include "scheduler.cuh"
#include "wgmma.cuh"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "vcattn.h"

namespace {

constexpr uint32_t kBiasBytes = VC_KV_ROWS * sizeof(float);  // a K tile's Q-smoothing terms

// One tile's probabilities as PV A-operand registers, and the rescale
// factors of the running sums that go with them.
struct TileP {
    uint32_t a[16];
    float alpha0, alpha1;
};

// The state one warpgroup carries over the key tiles for its 64 query rows:
// thread (warp, g, t) owns rows 16 warp + g and + 8.
// MEAN_MMA (with VSMOOTH): the mean term r mu of tile j is added by an f16
// wgmma in tile j+1's PV group, scaled by that tile's alpha, instead of 2 FMAs
// per output element in the update (docs/cuda-design.md).
template <int D, bool EXPCAST, bool VSMOOTH, bool QSMOOTH, bool MEAN_MMA>
struct WgRowState {
    float o[D / 2];
    float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.0f, l1 = 0.0f;
    float qmul0, qmul1;
    float r_pending0 = 0.0f, r_pending1 = 0.0f;  // MEAN_MMA: row sums whose mean term is not yet in o

    __device__ void init(float q0, float q1) {
#pragma unroll
        for (int i = 0; i < D / 2; i++) o[i] = 0.0f;
        qmul0 = q0;
        qmul1 = q1;
    }

    // S = Q K^T (int32), issued and committed; the caller waits.
    __device__ __forceinline__ static void issue_qk(int32_t *sacc, uint64_t q, uint64_t k) {
        wgmma_fence();
#pragma unroll
        for (int ks = 0; ks < D / 32; ks++)
            wgmma_s8_m64n128k32(sacc, desc_advance(q, ks * 2 * VC_Q_ROWS * 16),
                                desc_advance(k, ks * 2 * VC_KV_ROWS * 16), ks > 0);
        wgmma_commit();
    }

    // Online softmax of the tile: new row maxima, and into pt the rescale
    // factors and P encoded. tail_keys < 128 masks the keys past the end.
    // bias: the tile's Q-smoothing terms in shared memory (QSMOOTH only).
    __device__ __forceinline__ void softmax(int32_t *sacc, float kmul, int tail_keys, float expcast_bias, int t,
                                            TileP &pt, uint32_t bias) {
        float s[64];
#pragma unroll
        for (int i = 0; i < 64; i++) s[i] = (float)sacc[i];
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
        tile_row_max(s, A0, A1, tmax0, tmax1);
        const float mn0 = fmaxf(m0, tmax0), mn1 = fmaxf(m1, tmax1);
        pt.alpha0 = ex2_approx(m0 - mn0);  // <= 1; relative error 2^-22, inside the tolerance
        pt.alpha1 = ex2_approx(m1 - mn1);
        if (tail) encode_p<EXPCAST, true>(s, A0, A1, mn0, mn1, expcast_bias, pt.a);
        else encode_p<EXPCAST, false>(s, A0, A1, mn0, mn1, expcast_bias, pt.a);
        m0 = mn0;
        m1 = mn1;
    }

    // partial = P V^T (+ row sums in the ones columns), issued and committed.
    // MEAN_MMA: first the previous tile's mean term, alpha r_pending mu (A:
    // column 0/1 of lane t = 0 hold it as FP16 hi + lo; `mean` is the B
    // operand with mu in rows k = 0, 1), the same shape of accumulator.
    __device__ __forceinline__ void issue_pv(float *pacc, const TileP &pt, uint64_t v, uint64_t mean, int t) {
        uint32_t am[4] = {0u, 0u, 0u, 0u};
        if constexpr (MEAN_MMA) {
            am[0] = t == 0 ? f16_hi_lo(pt.alpha0 * r_pending0) : 0u;
            am[1] = t == 0 ? f16_hi_lo(pt.alpha1 * r_pending1) : 0u;
        }
        wgmma_fence();
        if constexpr (MEAN_MMA) {
            if constexpr (D == 128) wgmma_f16_m64n136k16(pacc, am, mean, 0);
            else wgmma_f16_m64n72k16(pacc, am, mean, 0);
        }
#pragma unroll
        for (int ks = 0; ks < 4; ks++) {
            const uint64_t desc = desc_advance(v, ks * 2 * Sizes<D>::vt_rows * 16);
            if constexpr (D == 128) wgmma_e4m3_m64n136k32(pacc, pt.a + 4 * ks, desc, MEAN_MMA || ks > 0);
            else wgmma_e4m3_m64n72k32(pacc, pt.a + 4 * ks, desc, MEAN_MMA || ks > 0);
        }
        wgmma_commit();
    }

    // acc = alpha acc + (partial + r mu): the two-level update, mean restored.
    __device__ __forceinline__ void update(const float *pacc, const uint8_t *v, const TileP &pt, int t) {
        const float alpha0 = pt.alpha0, alpha1 = pt.alpha1;
        const float r0 = pacc[D / 2], r1 = pacc[D / 2 + 2];
        const uint32_t mu = smem_addr(v + Sizes<D>::mean_offset);
#pragma unroll
        for (int i = 0; i < D / 2; i += 2) {
            const bool lower = (i >> 1) & 1;
            float x0 = pacc[i], x1 = pacc[i + 1];
            if constexpr (VSMOOTH && !MEAN_MMA) {
                const float2 mv = lds_float2(mu + 4 * acc_col(i, t));
                x0 = __fmaf_rn(lower ? r1 : r0, mv.x, x0);
                x1 = __fmaf_rn(lower ? r1 : r0, mv.y, x1);
            }
            o[i] = __fmaf_rn(o[i], lower ? alpha1 : alpha0, x0);
            o[i + 1] = __fmaf_rn(o[i + 1], lower ? alpha1 : alpha0, x1);
        }
        l0 = __fmaf_rn(l0, alpha0, r0);
        l1 = __fmaf_rn(l1, alpha1, r1);
        if constexpr (MEAN_MMA) {
            r_pending0 = r0;
            r_pending1 = r1;
        }
    }

    // MEAN_MMA, after the last tile: o += r_pending mu of that tile (v: its record).
    __device__ __forceinline__ void add_pending_mean(const uint8_t *v, int t) {
        if constexpr (MEAN_MMA) {
            const uint32_t mu = smem_addr(v + Sizes<D>::mean_offset);
#pragma unroll
            for (int i = 0; i < D / 2; i += 2) {
                const float r = (i >> 1) & 1 ? r_pending1 : r_pending0;
                const float2 mv = lds_float2(mu + 4 * acc_col(i, t));
                o[i] = __fmaf_rn(r, mv.x, o[i]);
                o[i + 1] = __fmaf_rn(r, mv.y, o[i + 1]);
            }
        }
    }
};

// ---------------------------------------------------------------------------
// v1: one warpgroup per CTA, 64 query rows, thread 0 also issues the copies;
// the CTAs sharing an SM hide each other's waits.
// ---------------------------------------------------------------------------
constexpr int kV1Threads = 128;
// One K/V stage (52 KB of shared memory at D 128, the mean images included)
// so that three CTAs share an SM (168 registers each): K(j+1) loads during
// tile j's softmax and PV, V(j+1) during QK(j+1) and its softmax, and three
// independent warpgroups keep the tensor cores busy in turn.
// Two stages of both allowed two CTAs per SM: 748 against 794 TFLOP/s
// (perf-notes.md).
constexpr int kV1KStages = 1, kV1VStages = 1;
constexpr int kV1CtasPerSm = 3;

template <int D>
struct V1Shared {
    alignas(128) int8_t q[Sizes<D>::q];
    alignas(128) int8_t k[kV1KStages][Sizes<D>::k];
    alignas(128) uint8_t v[kV1VStages][Sizes<D>::v];
    // The mean restoration's B operand: two images in turn (tile j's mean
    // is used by tile j+1's PV group while tile j+1 writes its own), each a
    // k 0..7 half followed by an all-zero k 8..15 half.
    alignas(128) uint8_t mean[2][2][Sizes<D>::mean_half];
    alignas(16) float bias[kV1KStages][VC_KV_ROWS];
    uint64_t full_q, full_k[kV1KStages], full_v[kV1VStages];
};

template <int D, bool EXPCAST, bool VSMOOTH, bool QSMOOTH, typename OutT>
__global__ void __launch_bounds__(kV1Threads, kV1CtasPerSm) vc_attention_v1_kernel(const __grid_constant__ vc_attention_params p) {
    extern __shared__ uint8_t smem_raw[];
    V1Shared<D> &sm = *reinterpret_cast<V1Shared<D> *>(
        (reinterpret_cast<uintptr_t>(smem_raw) + 127) & ~uintptr_t(127));
    if (p.error_flag && *p.error_flag) return;

    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;
    const WorkTile work = work_tile(p);
    const int m_block = work.m_block, head = work.head, batch = work.batch;
    const int64_t q_head = work.q_head, kv_head = work.kv_head;
    const int T = p.kv_tiles;
    const int8_t *k_tiles = p.k + kv_head * T * Sizes<D>::k;
    const uint8_t *v_tiles = p.v + kv_head * T * Sizes<D>::v;
    const float *k_mul = p.k_mul + kv_head * T * 4;

    if (tid == 0) {
        mbar_init(&sm.full_q, 1);
        for (int s = 0; s < kV1KStages; s++) mbar_init(&sm.full_k[s], 1);
        for (int s = 0; s < kV1VStages; s++) mbar_init(&sm.full_v[s], 1);
        fence_mbar_init();
    }
    if constexpr (VSMOOTH) {  // the mean images start as zeros; only their mean words are rewritten
        const uint32_t images = smem_addr(sm.mean);
        for (uint32_t b = 4 * tid; b < sizeof(sm.mean); b += 4 * kV1Threads) sts_u32(images + b, 0u);
        fence_proxy_async_shared();
    }
    __syncthreads();
    auto load_k = [&](int stage, int tile) {
        mbar_arrive_expect_tx(&sm.full_k[stage], Sizes<D>::k + (QSMOOTH ? kBiasBytes : 0));
        bulk_load(sm.k[stage], k_tiles + (int64_t)tile * Sizes<D>::k, Sizes<D>::k, &sm.full_k[stage]);
        if (QSMOOTH)
            bulk_load(sm.bias[stage], p.key_bias + (q_head * T + tile) * VC_KV_ROWS, kBiasBytes, &sm.full_k[stage]);
    };
    auto load_v = [&](int stage, int tile) {
        mbar_arrive_expect_tx(&sm.full_v[stage], Sizes<D>::v);
        bulk_load(sm.v[stage], v_tiles + (int64_t)tile * Sizes<D>::v, Sizes<D>::v, &sm.full_v[stage]);
    };
    if (tid == 0) {
        mbar_arrive_expect_tx(&sm.full_q, Sizes<D>::q);
        bulk_load(sm.q, p.q + (q_head * p.q_tiles + m_block) * Sizes<D>::q, Sizes<D>::q, &sm.full_q);
        for (int s = 0; s < kV1KStages && s < T; s++) load_k(s, s);
        for (int s = 0; s < kV1VStages && s < T; s++) load_v(s, s);
    }

    const int row0 = m_block * VC_Q_ROWS + 16 * warp + g;
    const float *q_mul = p.q_mul + q_head * (int64_t)p.q_tiles * VC_Q_ROWS;
    WgRowState<D, EXPCAST, VSMOOTH, QSMOOTH, VSMOOTH> st;
    st.init(q_mul[row0] * p.score_mul, q_mul[row0 + 8] * p.score_mul);
    const int tail_keys = p.nk - (T - 1) * VC_KV_ROWS;

    mbar_wait(&sm.full_q, 0);
    for (int j = 0; j < T; j++) {
        const int ks = j % kV1KStages, vs = j % kV1VStages;
        const uint32_t k_parity = (j / kV1KStages) & 1, v_parity = (j / kV1VStages) & 1;
        int32_t sacc[64];
        mbar_wait(&sm.full_k[ks], k_parity);
        st.issue_qk(sacc, q_desc(sm.q), k_desc(sm.k[ks]));
        wgmma_wait_all();
#pragma unroll
        for (int i = 0; i < 64; i++) reg_fence(sacc[i]);
        if (!QSMOOTH) {
            __syncthreads();  // every warp is done with K[ks]
            if (tid == 0 && j + kV1KStages < T) load_k(ks, j + kV1KStages);
        }

        TileP pt;
        st.softmax(sacc, k_mul[j * 4 + t], j == T - 1 ? tail_keys : VC_KV_ROWS, p.expcast_bias, t, pt,
                   smem_addr(sm.bias[ks]));
        if (QSMOOTH) {
            __syncthreads();  // every warp is done with K[ks] and its terms
            if (tid == 0 && j + kV1KStages < T) load_k(ks, j + kV1KStages);
        }

        float pacc[D / 2 + 4];
        mbar_wait(&sm.full_v[vs], v_parity);
        st.issue_pv(pacc, pt, v_desc<D>(sm.v[vs]),
                    smem_desc(sm.mean[(j + 1) & 1], Sizes<D>::mean_half, 128), t);
        if constexpr (VSMOOTH) {  // tile j's mean, FP16 as stored, into rows k = 0, 1 of image j & 1
            if (tid < D) {
                const float mu = lds_float(smem_addr(sm.v[vs] + Sizes<D>::mean_offset) + 4 * tid);
                sts_u32(smem_addr(sm.mean[j & 1]) + 16 * tid, cvt_f16x2(mu, mu));
            }
            fence_proxy_async_shared();
        }
        wgmma_wait_all();
#pragma unroll
        for (int i = 0; i < D / 2 + 4; i++) reg_fence(pacc[i]);
        st.update(pacc, sm.v[vs], pt, t);
        __syncthreads();  // every warp is done with V[vs] and the mean image
        if (tid == 0 && j + kV1VStages < T) load_v(vs, j + kV1VStages);
    }
    st.add_pending_mean(sm.v[(T - 1) % kV1VStages], t);
    store_rows<D, OutT>(p, st.o, st.m0, st.m1, st.l0, st.l1, q_head, kv_head, batch, head, row0, t);
}

template <int D, bool EXPCAST, bool VSMOOTH, bool QSMOOTH, typename OutT>
cudaError_t launch(const vc_attention_params &p, cudaStream_t stream) {
    auto kernel = vc_attention_v1_kernel<D, EXPCAST, VSMOOTH, QSMOOTH, OutT>;
    const int smem = (int)sizeof(V1Shared<D>) + 128;
    cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
    if (err != cudaSuccess) return err;
    dim3 grid(p.q_tiles, p.heads_q, p.batch);
    kernel<<<grid, kV1Threads, smem, stream>>>(p);
    return cudaGetLastError();
}

template <int D, bool EXPCAST, bool VSMOOTH, bool QSMOOTH>
cudaError_t launch_dtype(const vc_attention_params &p, cudaStream_t stream) {
    switch (p.out_dtype) {
    case VCATTN_DTYPE_BF16: return launch<D, EXPCAST, VSMOOTH, QSMOOTH, __nv_bfloat16>(p, stream);
    case VCATTN_DTYPE_F16: return launch<D, EXPCAST, VSMOOTH, QSMOOTH, __half>(p, stream);
    default: return launch<D, EXPCAST, VSMOOTH, QSMOOTH, float>(p, stream);
    }
}

}  // namespace

// ExpCast without V-Smooth runs the V-Smooth kernel: the records' means are
// zeros then, and r * 0 adds nothing.
cudaError_t vc_attention_sm90_d64(const vc_attention_params &p, bool expcast, bool vsmooth, cudaStream_t stream) {
    const bool q_smoothing = p.key_bias != nullptr;
    if (expcast) return q_smoothing ? launch_dtype<64, true, true, true>(p, stream)
                                    : launch_dtype<64, true, true, false>(p, stream);
    if (vsmooth) return q_smoothing ? launch_dtype<64, false, true, true>(p, stream)
                                    : launch_dtype<64, false, true, false>(p, stream);
    return q_smoothing ? launch_dtype<64, false, false, true>(p, stream) : launch_dtype<64, false, false, false>(p, stream);
}
