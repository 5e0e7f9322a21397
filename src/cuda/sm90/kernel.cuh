// The sm_90a attention kernel: one CTA per SM, 128 query rows of one head.
// Warpgroup 0 is the producer (one thread issues the bulk copies; its
// registers go to the others), warpgroups 1 and 2 are the consumers, 64 rows
// each, sharing every K and V slot. The instantiations live in separate
// translation units (attention_d*.cu), one per head dim and method.
#pragma once
#include "attention.h"
#include "epilogue.cuh"
#include "mainloop.cuh"
#include "launch_common.cuh"
#include "producer.cuh"
#include "scheduler.cuh"

#include <type_traits>

namespace sm90 {

constexpr int kStages = 2;
constexpr int kThreads = 384;
constexpr uint32_t kProducerRegs = 24, kConsumerRegs = 240;
constexpr uint32_t kTurnBarrier = 1;  // named barriers 1 and 2: "consumer w may issue its GEMMs"
constexpr uint32_t kMeanBarrier = 3;  // 3 and 4: consumer w's own threads (its row-sum image)

template <int D> struct Shared {
    alignas(128) int8_t q[2][Sizes<D>::q];
    alignas(128) int8_t k[kStages][Sizes<D>::k];
    alignas(128) uint8_t v[kStages][Sizes<D>::v];
    // The mean images of two groups of kMeanTiles tiles (the mean wgmma's B
    // operand, written by the V quantizer: operand_layout.h), shared by both
    // consumers: one is read while the next lands.
    alignas(128) uint8_t mean[2][Sizes<D>::mean_image];
    alignas(128) uint8_t mean_a[2][kMeanABytes];  // per consumer, the batch's row sums (mainloop.cuh)
    alignas(16) float kmul[kStages][4];
    alignas(16) float bias[kStages][VC_KV_ROWS];  // QSMOOTH: the K tile's per-key terms
    uint64_t full_q;
    Ring<kStages> k_ring, v_ring;
    Ring<2> mean_ring;  // group g of kMeanTiles tiles in slot g % 2
};

template <int D, bool EXPCAST, bool VSMOOTH, bool QSMOOTH, typename OutT>
__global__ void __launch_bounds__(kThreads, 1) vc_attention_kernel(const __grid_constant__ vc_attention_params p) {
    extern __shared__ uint8_t smem_raw[];
    Shared<D> &sm = *reinterpret_cast<Shared<D> *>((reinterpret_cast<uintptr_t>(smem_raw) + 127) & ~uintptr_t(127));
    if (p.error_flag && *p.error_flag) return;  // bad input: the output stays untouched

    // The warpgroup index through a shuffle from lane 0, so the compiler knows
    // it is warp-uniform and keeps what derives from it (the descriptors) in
    // uniform registers.
    const int tid = threadIdx.x, wg = __shfl_sync(0xffffffffu, tid / 128, 0), lane = tid & 31;
    const WorkTile work = work_tile(p);  // m_block: a pair of 64-row tiles
    const int q_pair = work.m_block, head = work.head, batch = work.batch;
    const int64_t q_head = work.q_head, kv_head = work.kv_head;

    if (tid == 0) {
        mbar_init(&sm.full_q, 1);
        sm.k_ring.init();
        sm.v_ring.init();
        sm.mean_ring.init();
        fence_mbar_init();
    }
    __syncthreads();

    if (wg == 0) {
        regs_decrease<kProducerRegs>();
        if (tid == 0) produce<D, VSMOOTH, QSMOOTH>(p, sm, q_head, kv_head, q_pair);
        return;
    }
    regs_increase<kConsumerRegs>();

    const int w = wg - 1, ctid = tid - 128 * wg, warp = ctid >> 5, g = lane >> 2, t = lane & 3;
    const int T = p.kv_tiles, tail_keys = p.nk - (T - 1) * VC_KV_ROWS;
    const int row0 = (2 * q_pair + w) * VC_Q_ROWS + 16 * warp + g;
    const float *q_mul = p.q_mul + q_head * (int64_t)p.q_tiles * VC_Q_ROWS;
    RowState<D, EXPCAST, VSMOOTH, QSMOOTH> st;
    st.init(q_mul[row0] * p.score_mul, q_mul[row0 + 8] * p.score_mul);
    const uint32_t my_turn = kTurnBarrier + w, other_turn = kTurnBarrier + (1 - w);
    if (w == 1) named_barrier_arrive(other_turn, 256);  // consumer 0 goes first
    const uint64_t qd = q_desc(sm.q[w]);
    // The slots' descriptors differ by a constant: slot s's is the first's
    // advanced by s slots (one uniform multiply-add per tile).
    const uint64_t k_desc0 = k_desc(sm.k[0]), v_desc0 = v_desc<D>(sm.v[0]), mean_desc0 = mean_desc<D>(sm.mean[0]);
    uint8_t *const mean_a = sm.mean_a[w];
    const uint64_t mean_a_desc = smem_desc(mean_a, kMeanAHalf, 128);

    // Tile 0: QK and its softmax alone.
    mbar_wait(&sm.full_q, 0);
    {
        int32_t sacc[64];
        uint32_t words[64];
        sm.k_ring.wait_full(0);
        named_barrier_sync(my_turn, 256);
        st.issue_qk(sacc, qd, k_desc0);
        named_barrier_arrive(other_turn, 256);
        wgmma_wait<0>();
        fence_regs<64>(sacc);
        const float kmul = lds_float(smem_addr(&sm.kmul[0][t]));  // read before the slot is released
        if (!QSMOOTH) sm.k_ring.release(0);
        st.softmax(sacc, kmul, T == 1 ? tail_keys : VC_KV_ROWS, p.expcast_bias, t, smem_addr(sm.bias[0]),
                   words, st.alpha0, st.alpha1);
        if (QSMOOTH) sm.k_ring.release(0);
        pack_p<EXPCAST>(words, st.p);
    }
    // PV of tile x, then (MEAN) the mean terms of group g = x / 8 - 1, the
    // kMeanTiles tiles before it. MEAN is a template switch, not a branch: a
    // wgmma on a divergent path makes ptxas serialize every wgmma of the kernel.
    auto issue_pv_group = [&](float *pacc, int x, int vs, auto mean) {
        st.issue_pv(pacc, desc_advance(v_desc0, vs * Sizes<D>::v));
        if constexpr (VSMOOTH && decltype(mean)::value) {
            const int g = x / kMeanTiles - 1;
            sm.mean_ring.wait_full(g);
            st.issue_mean(pacc, mean_a_desc, desc_advance(mean_desc0, sm.mean_ring.slot(g) * Sizes<D>::mean_image), 1);
        }
        wgmma_commit();
    };
    // Tile j: QK(j) and PV(j-1) in one turn; softmax(j) under PV(j-1).
    // MASK (a template switch too) says where keys past the end are masked:
    // kInner never, kLast (tile j is the last) by tail_keys, kAny by a
    // runtime test of j.
    auto step = [&](int j, auto mean, auto mask) {
        const int ks = sm.k_ring.slot(j), vs = sm.v_ring.slot(j - 1);
        int32_t sacc[64];
        float pacc[D / 2 + 4];
        uint32_t words[64];
        float alpha0, alpha1;
        sm.k_ring.wait_full(j);
        sm.v_ring.wait_full(j - 1);
        named_barrier_sync(my_turn, 256);
        st.issue_qk(sacc, qd, desc_advance(k_desc0, ks * Sizes<D>::k));
        issue_pv_group(pacc, j - 1, vs, mean);
        named_barrier_arrive(other_turn, 256);
        wgmma_wait<1>();  // QK(j) done
        fence_regs<64>(sacc);
        const float kmul = lds_float(smem_addr(&sm.kmul[ks][t]));  // read before the slot is released
        if (!QSMOOTH) sm.k_ring.release(j);
        constexpr int kMask = decltype(mask)::value;
        const int keys = kMask == 0 ? VC_KV_ROWS : kMask == 1 || j == T - 1 ? tail_keys : VC_KV_ROWS;
        st.softmax(sacc, kmul, keys, p.expcast_bias, t, smem_addr(sm.bias[ks]), words, alpha0, alpha1);
        if (QSMOOTH) sm.k_ring.release(j);
        wgmma_wait<0>();  // PV(j-1) done: its A registers and V slot are free
        fence_regs<D / 2 + 4>(pacc);
        fence_regs<16>(st.p);
        fence_regs<64>(words);
        sm.v_ring.release(j - 1);
        if (VSMOOTH && decltype(mean)::value) sm.mean_ring.release((j - 1) / kMeanTiles - 1);
        st.update(pacc, j - 1, t);
        st.alpha0 = alpha0;
        st.alpha1 = alpha1;
        pack_p<EXPCAST>(words, st.p);
        if constexpr (VSMOOTH) {  // the pending row sums follow m(j); a batch is full after tile j - 1 = 8i - 1
            st.rescale_pending();
            if (j % kMeanTiles == 0) {
                st.write_pending(mean_a, warp, g, t);  // ordered by the next turn, read by PV(j)'s group
                fence_proxy_async_shared();
            }
        }
    };
    // The mean terms go with the PV of tiles 8, 16, ... (j = 9, 17, ...).
    // The last tile gets a copy of the step of its own (it alone masks),
    // except with QSMOOTH, whose registers spill with the extra copy.
    constexpr std::integral_constant<bool, false> kNoMean;
    constexpr std::integral_constant<bool, VSMOOTH> kMean;
    constexpr std::integral_constant<int, QSMOOTH ? 2 : 0> kInner;  // 2: kAny
    constexpr std::integral_constant<int, 1> kLast;
    const int loop_end = QSMOOTH ? T : T - 1;
    for (int j = 1; j < loop_end;) {
        const int next_mean = max(kMeanTiles, (j + kMeanTiles - 2) / kMeanTiles * kMeanTiles) + 1;  // j' - 1 = 8i > 0
        for (const int stop = min(loop_end, next_mean); j < stop; j++) step(j, kNoMean, kInner);
        if (j < loop_end) step(j++, kMean, kInner);
    }
    if (!QSMOOTH && T > 1) {
        if (T - 2 >= kMeanTiles && (T - 2) % kMeanTiles == 0) step(T - 1, kMean, kLast);
        else step(T - 1, kNoMean, kLast);
    }
    // The last PV, then the mean terms still pending (the last tile's among them).
    {
        const int x = T - 1, vs = sm.v_ring.slot(x);
        float pacc[D / 2 + 4];
        sm.v_ring.wait_full(x);
        named_barrier_sync(my_turn, 256);
        if (x >= kMeanTiles && x % kMeanTiles == 0) issue_pv_group(pacc, x, vs, kMean);
        else issue_pv_group(pacc, x, vs, kNoMean);
        if (w == 0) named_barrier_arrive(other_turn, 256);  // consumer 1 takes the last turn
        wgmma_wait<0>();
        fence_regs<D / 2 + 4>(pacc);
        fence_regs<16>(st.p);
        st.update(pacc, x, t);
        if constexpr (VSMOOTH) {
            const int last = x / kMeanTiles;
            st.write_pending(mean_a, warp, g, t);
            fence_proxy_async_shared();
            named_barrier_sync(kMeanBarrier + w, 128);  // the row-sum image is complete
            sm.mean_ring.wait_full(last);
            float macc[D / 2 + 4];
            st.issue_mean(macc, mean_a_desc, desc_advance(mean_desc0, sm.mean_ring.slot(last) * Sizes<D>::mean_image), 0);
            wgmma_commit();
            wgmma_wait<0>();
            fence_regs<D / 2 + 4>(macc);
            st.add_partial(macc);
        }
    }
    store_rows<D, OutT>(p, st.o, st.m0, st.m1, st.l0, st.l1, q_head, kv_head, batch, head, row0, t);
}

template <int D, bool EXPCAST, bool VSMOOTH, bool QSMOOTH, typename OutT>
cudaError_t launch(const vc_attention_params &p, cudaStream_t stream) {
    // q_tiles is even (the quantizer pads a 64-row tile of zeros): two per CTA.
    return launch_kernel(vc_attention_kernel<D, EXPCAST, VSMOOTH, QSMOOTH, OutT>, dim3(p.q_tiles / 2, p.heads_q, p.batch),
                         kThreads, (int)sizeof(Shared<D>) + 128, p, stream);
}

}  // namespace sm90
