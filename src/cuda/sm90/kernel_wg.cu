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
#include "launch_common.cuh"
#include "pipeline.cuh"
#include "row_state.cuh"
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

// What one thread carries across the tiles: the shared per-tile steps of
// row_state.cuh, with the mean term per tile instead of per batch. Tile j's
// r mu goes into tile j+1's PV group, scaled by that tile's alpha, as an f16
// wgmma whose A is in registers (lane t = 0 holds it in columns 0 and 1).
template <int D, bool EXPCAST, bool VSMOOTH, bool QSMOOTH>
struct WgRowState : RowState<D, EXPCAST, VSMOOTH, QSMOOTH> {
    static_assert(D == 64, "head dim 128 runs the warp-specialized kernel");
    using Base = RowState<D, EXPCAST, VSMOOTH, QSMOOTH>;
    using Base::o;
    float r_pending0 = 0.0f, r_pending1 = 0.0f;  // VSMOOTH: row sums whose mean term is not yet in o

    // The tile's softmax with P packed at once (no PV is in flight here).
    __device__ __forceinline__ void softmax(int32_t *sacc, float kmul, int tail_keys, float expcast_bias, int t,
                                            TileP &pt, uint32_t bias) {
        uint32_t words[64];
        Base::softmax(sacc, kmul, tail_keys, expcast_bias, t, bias, words, pt.alpha0, pt.alpha1);
        pack_p<EXPCAST>(words, pt.a);
    }

    // partial = P V^T (+ row sums in the ones columns), issued and committed.
    // VSMOOTH: first the previous tile's mean term, alpha r_pending mu (A:
    // column 0/1 of lane t = 0 hold it as FP16 hi + lo; `mean` is the B
    // operand with mu in rows k = 0, 1), the same shape of accumulator.
    __device__ __forceinline__ void issue_pv(float *pacc, const TileP &pt, uint64_t v, uint64_t mean, int t) {
        uint32_t am[4] = {0u, 0u, 0u, 0u};
        if constexpr (VSMOOTH) {
            am[0] = t == 0 ? f16_hi_lo(pt.alpha0 * r_pending0) : 0u;
            am[1] = t == 0 ? f16_hi_lo(pt.alpha1 * r_pending1) : 0u;
        }
        wgmma_fence();
        if constexpr (VSMOOTH) wgmma_f16_m64n72k16(pacc, am, mean, 0);
#pragma unroll
        for (int ks = 0; ks < 4; ks++) {
            const uint64_t desc = desc_advance(v, ks * 2 * Sizes<D>::vt_rows * 16);
            wgmma_e4m3_m64n72k32(pacc, pt.a + 4 * ks, desc, VSMOOTH || ks > 0);
        }
        wgmma_commit();
    }

    // acc = alpha acc + partial: the two-level update; the row sums wait
    // for the next tile's PV group to bring their mean term.
    __device__ __forceinline__ void update(const float *pacc, const TileP &pt) {
        Base::alpha0 = pt.alpha0;
        Base::alpha1 = pt.alpha1;
        const float2 r = Base::fold(pacc);
        r_pending0 = r.x;
        r_pending1 = r.y;
    }

    // After the last tile: o += r_pending mu of that tile (v: its record).
    __device__ __forceinline__ void add_pending_mean(const uint8_t *v, int t) {
        if constexpr (VSMOOTH) {
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

// One warpgroup per CTA, 64 query rows; thread 0 also issues the copies.
constexpr int kWgThreads = 128;
// One K and one V stage (~27 KB of shared memory at D 64): K(j+1) loads
// during tile j's softmax and PV, V(j+1) during QK(j+1) and its softmax, and
// the CTAs sharing an SM (four at 125-127 registers; three with Q
// smoothing) keep the tensor cores busy in turn.
constexpr int kWgKStages = 1, kWgVStages = 1;
constexpr int kWgCtasPerSm = 3;  // the register cap; four fit without Q smoothing

template <int D>
struct WgShared {
    alignas(128) int8_t q[Sizes<D>::q];
    alignas(128) int8_t k[kWgKStages][Sizes<D>::k];
    alignas(128) uint8_t v[kWgVStages][Sizes<D>::v];
    // The mean restoration's B operand: two images in turn (tile j's mean
    // is used by tile j+1's PV group while tile j+1 writes its own), each a
    // k 0..7 half followed by an all-zero k 8..15 half.
    alignas(128) uint8_t mean[2][2][Sizes<D>::mean_half];
    alignas(16) float bias[kWgKStages][VC_KV_ROWS];
    uint64_t full_q;
    Slots<kWgKStages> k_slots;  // released by the CTA-wide barrier after a tile's last read
    Slots<kWgVStages> v_slots;
};

template <int D, bool EXPCAST, bool VSMOOTH, bool QSMOOTH, typename OutT>
__global__ void __launch_bounds__(kWgThreads, kWgCtasPerSm) vc_attention_wg_kernel(const __grid_constant__ vc_attention_params p) {
    extern __shared__ uint8_t smem_raw[];
    WgShared<D> &sm = *reinterpret_cast<WgShared<D> *>(
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
        sm.k_slots.init();
        sm.v_slots.init();
        fence_mbar_init();
    }
    if constexpr (VSMOOTH) {  // the mean images start as zeros; only their mean words are rewritten
        const uint32_t images = smem_addr(sm.mean);
        for (uint32_t b = 4 * tid; b < sizeof(sm.mean); b += 4 * kWgThreads) sts_u32(images + b, 0u);
        fence_proxy_async_shared();
    }
    __syncthreads();
    auto load_k = [&](int tile) {
        const int s = sm.k_slots.slot(tile);
        uint64_t *full = sm.k_slots.expect(tile, Sizes<D>::k + (QSMOOTH ? kBiasBytes : 0));
        bulk_load(sm.k[s], k_tiles + (int64_t)tile * Sizes<D>::k, Sizes<D>::k, full);
        if (QSMOOTH) bulk_load(sm.bias[s], p.key_bias + (q_head * T + tile) * VC_KV_ROWS, kBiasBytes, full);
    };
    auto load_v = [&](int tile) {
        uint64_t *full = sm.v_slots.expect(tile, Sizes<D>::v);
        bulk_load(sm.v[sm.v_slots.slot(tile)], v_tiles + (int64_t)tile * Sizes<D>::v, Sizes<D>::v, full);
    };
    if (tid == 0) {
        mbar_arrive_expect_tx(&sm.full_q, Sizes<D>::q);
        bulk_load(sm.q, p.q + (q_head * p.q_tiles + m_block) * Sizes<D>::q, Sizes<D>::q, &sm.full_q);
        for (int j = 0; j < kWgKStages && j < T; j++) load_k(j);
        for (int j = 0; j < kWgVStages && j < T; j++) load_v(j);
    }

    const int row0 = m_block * VC_Q_ROWS + 16 * warp + g;
    const float *q_mul = p.q_mul + q_head * (int64_t)p.q_tiles * VC_Q_ROWS;
    WgRowState<D, EXPCAST, VSMOOTH, QSMOOTH> st;
    st.init(q_mul[row0] * p.score_mul, q_mul[row0 + 8] * p.score_mul);
    const int tail_keys = p.nk - (T - 1) * VC_KV_ROWS;

    mbar_wait(&sm.full_q, 0);
    for (int j = 0; j < T; j++) {
        const int ks = sm.k_slots.slot(j), vs = sm.v_slots.slot(j);
        int32_t sacc[64];
        sm.k_slots.wait_full(j);
        st.issue_qk(sacc, q_desc(sm.q), k_desc(sm.k[ks]));
        wgmma_wait_all();
#pragma unroll
        for (int i = 0; i < 64; i++) reg_fence(sacc[i]);
        if (!QSMOOTH) {
            __syncthreads();  // every warp is done with K[ks]
            if (tid == 0 && j + kWgKStages < T) load_k(j + kWgKStages);
        }

        TileP pt;
        st.softmax(sacc, k_mul[j * 4 + t], j == T - 1 ? tail_keys : VC_KV_ROWS, p.expcast_bias, t, pt,
                   smem_addr(sm.bias[ks]));
        if (QSMOOTH) {
            __syncthreads();  // every warp is done with K[ks] and its terms
            if (tid == 0 && j + kWgKStages < T) load_k(j + kWgKStages);
        }

        float pacc[D / 2 + 4];
        sm.v_slots.wait_full(j);
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
        st.update(pacc, pt);
        __syncthreads();  // every warp is done with V[vs] and the mean image
        if (tid == 0 && j + kWgVStages < T) load_v(j + kWgVStages);
    }
    st.add_pending_mean(sm.v[sm.v_slots.slot(T - 1)], t);
    store_rows<D, OutT>(p, st.o, st.m0, st.m1, st.l0, st.l1, q_head, kv_head, batch, head, row0, t);
}

template <int D, bool EXPCAST, bool VSMOOTH, bool QSMOOTH>
cudaError_t launch_dtype(const vc_attention_params &p, cudaStream_t stream) {
    return with_out_type(p.out_dtype, [&](auto out) {
        using OutT = typename decltype(out)::type;
        return launch_kernel(vc_attention_wg_kernel<D, EXPCAST, VSMOOTH, QSMOOTH, OutT>,
                             dim3(p.q_tiles, p.heads_q, p.batch), kWgThreads, (int)sizeof(WgShared<D>) + 128, p,
                             stream);
    });
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
