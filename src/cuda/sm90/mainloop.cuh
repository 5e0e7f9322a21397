// The D 128 kernel's consumer loop: one warpgroup's 64 query rows against
// every 128-key tile of their head. Per tile j it issues QK(j) and PV(j-1)
// back to back, runs the softmax of tile j between the waits for QK(j) and
// for PV(j-1), then folds PV(j-1) into the output accumulator and packs P(j)
// into the registers PV(j-1) has just released. (ptxas schedules the wait
// for PV(j-1) as early as its block allows, right after the score
// conversions, so most of the softmax runs once PV(j-1) is done:
// tools/sass_tile_step.py. Forcing the written order measured no faster.)
// The two consumer warpgroups take turns at issuing (named barriers): a
// consumer hands the turn over once its PV(j-1) is done: 2-3% faster than
// right after issuing, and faster than right after waiting for both GEMMs
// or once QK(j) is done (docs/perf-notes.md).
// The per-tile steps: row_state.cuh; the slots it reads are filled by
// produce() (producer.cuh).
#pragma once
#include "attention.h"
#include "pipeline.cuh"
#include "row_state.cuh"

#include <type_traits>

constexpr uint32_t kTurnThreads = 256;  // both consumer warpgroups meet at a turn barrier

// Consumer w (0 or 1) runs the T tiles (the last with tail_keys keys) into
// st; its thread is (warp, g, t).
template <int D, bool EXPCAST, bool VSMOOTH, bool QSMOOTH, typename Shared>
__device__ __forceinline__ void consume(const vc_attention_params &p, Shared &sm,
                                        RowState<D, EXPCAST, VSMOOTH, QSMOOTH> &st, int T, int tail_keys, int w,
                                        int warp, int g, int t) {
    const uint32_t my_turn = kBarrierTurn + w, other_turn = kBarrierTurn + (1 - w);
    if (w == 1) named_barrier_arrive(other_turn, kTurnThreads);  // consumer 0 goes first
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
        named_barrier_sync(my_turn, kTurnThreads);
        st.issue_qk(sacc, qd, k_desc0);
        named_barrier_arrive(other_turn, kTurnThreads);
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
        named_barrier_sync(my_turn, kTurnThreads);
        st.issue_qk(sacc, qd, desc_advance(k_desc0, ks * Sizes<D>::k));
        issue_pv_group(pacc, j - 1, vs, mean);
        wgmma_wait<1>();  // QK(j) done
        fence_regs<64>(sacc);
        const float kmul = lds_float(smem_addr(&sm.kmul[ks][t]));  // read before the slot is released
        if (!QSMOOTH) sm.k_ring.release(j);
        constexpr int kMask = decltype(mask)::value;
        const int keys = kMask == 0 ? VC_KV_ROWS : kMask == 1 || j == T - 1 ? tail_keys : VC_KV_ROWS;
        st.softmax(sacc, kmul, keys, p.expcast_bias, t, smem_addr(sm.bias[ks]), words, alpha0, alpha1);
        if (QSMOOTH) sm.k_ring.release(j);
        wgmma_wait<0>();  // PV(j-1) done: its A registers and V slot are free
        named_barrier_arrive(other_turn, kTurnThreads);  // the other consumer's turn
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
        named_barrier_sync(my_turn, kTurnThreads);
        if (x >= kMeanTiles && x % kMeanTiles == 0) issue_pv_group(pacc, x, vs, kMean);
        else issue_pv_group(pacc, x, vs, kNoMean);
        if (w == 0) named_barrier_arrive(other_turn, kTurnThreads);  // consumer 1 takes the last turn
        wgmma_wait<0>();
        fence_regs<D / 2 + 4>(pacc);
        fence_regs<16>(st.p);
        st.update(pacc, x, t);
        if constexpr (VSMOOTH) {
            const int last = x / kMeanTiles;
            st.write_pending(mean_a, warp, g, t);
            fence_proxy_async_shared();
            named_barrier_sync(kBarrierMean + w, 128);  // the row-sum image is complete
            sm.mean_ring.wait_full(last);
            float macc[D / 2 + 4];
            st.issue_mean(macc, mean_a_desc, desc_advance(mean_desc0, sm.mean_ring.slot(last) * Sizes<D>::mean_image), 0);
            wgmma_commit();
            wgmma_wait<0>();
            fence_regs<D / 2 + 4>(macc);
            st.add_partial(macc);
        }
    }
}
