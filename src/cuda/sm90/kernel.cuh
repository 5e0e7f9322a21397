// The sm_90a attention kernel: one CTA per SM, 128 query rows of one head.
// Warpgroup 0 is the producer (one thread issues the bulk copies; its
// registers go to the others), warpgroups 1 and 2 are the consumers, 64 rows
// each, sharing every K and V slot: produce() (producer.cuh) fills the slots,
// consume() (mainloop.cuh) runs each consumer's tiles, store_rows()
// (epilogue.cuh) writes its rows. The instantiations live in separate
// translation units (attention_d*.cu), one per head dim and method.
#pragma once
#include "attention.h"
#include "epilogue.cuh"
#include "launch_common.cuh"
#include "mainloop.cuh"
#include "producer.cuh"
#include "scheduler.cuh"

namespace sm90 {

constexpr int kStages = 2;
constexpr int kThreads = 384;
constexpr uint32_t kConsumerThreads = 256;  // two consumer warpgroups
constexpr uint32_t kProducerRegs = 24, kConsumerRegs = 240;

template <int D> struct Shared {
    alignas(128) int8_t q[2][Sizes<D>::q];
    alignas(128) int8_t k[kStages][Sizes<D>::k];
    alignas(128) uint8_t v[kStages][Sizes<D>::v];
    // The mean images of two groups of kMeanTiles tiles (the mean wgmma's B
    // operand, written by the V quantizer: operand_layout.h), shared by both
    // consumers: one is read while the next lands.
    alignas(128) uint8_t mean[2][Sizes<D>::mean_image];
    alignas(128) uint8_t mean_a[2][kMeanABytes];  // per consumer, the batch's row sums (row_state.cuh)
    alignas(16) float kmul[kStages][4];
    alignas(16) float bias[kStages][VC_KV_ROWS];  // QSMOOTH: the K tile's per-key terms
    uint64_t full_q;
    Ring<kStages, kConsumerThreads> k_ring, v_ring;
    Ring<2, kConsumerThreads> mean_ring;  // group g of kMeanTiles tiles in slot g % 2
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
    consume(p, sm, st, T, tail_keys, w, warp, g, t);
    store_rows<D, OutT>(p, st.o, st.m0, st.m1, st.l0, st.l1, q_head, kv_head, batch, head, row0, t);
}

template <int D, bool EXPCAST, bool VSMOOTH, bool QSMOOTH, typename OutT>
cudaError_t launch(const vc_attention_params &p, cudaStream_t stream) {
    // q_tiles is even (the quantizer pads a 64-row tile of zeros): two per CTA.
    return launch_kernel(vc_attention_kernel<D, EXPCAST, VSMOOTH, QSMOOTH, OutT>, dim3(p.q_tiles / 2, p.heads_q, p.batch),
                         kThreads, (int)sizeof(Shared<D>) + 128, p, stream);
}

}  // namespace sm90
