// The producer: one thread issues every bulk copy of a CTA. The CTA's two Q
// tiles once, then per key tile j the K tile (with its multipliers, and its
// Q-smoothing terms) and the V record, and with every eighth tile the mean
// image of its group (VSMOOTH), each as soon as its slot is free.
#pragma once
#include "attention.h"
#include "pipeline.cuh"
#include "tile.cuh"

template <int D, bool VSMOOTH, bool QSMOOTH, typename Shared>
__device__ void produce(const vc_attention_params &p, Shared &sm, int64_t q_head, int64_t kv_head, int q_pair) {
    constexpr uint32_t bias_bytes = VC_KV_ROWS * sizeof(float), kmul_bytes = 4 * sizeof(float);
    const int T = p.kv_tiles;
    const int8_t *k_tiles = p.k + kv_head * T * Sizes<D>::k;
    const uint8_t *v_tiles = p.v + kv_head * T * Sizes<D>::v;
    const float *k_mul = p.k_mul + kv_head * T * 4;
    mbar_arrive_expect_tx(&sm.full_q, 2 * Sizes<D>::q);
    bulk_load(sm.q, p.q + (q_head * p.q_tiles + 2 * q_pair) * Sizes<D>::q, 2 * Sizes<D>::q, &sm.full_q);
    for (int j = 0; j < T; j++) {
        const int s = sm.k_ring.slot(j);
        uint64_t *k_full = sm.k_ring.acquire(j, Sizes<D>::k + kmul_bytes + (QSMOOTH ? bias_bytes : 0));
        bulk_load(sm.k[s], k_tiles + (int64_t)j * Sizes<D>::k, Sizes<D>::k, k_full);
        bulk_load(sm.kmul[s], k_mul + 4 * j, kmul_bytes, k_full);
        if (QSMOOTH) bulk_load(sm.bias[s], p.key_bias + (q_head * T + j) * VC_KV_ROWS, bias_bytes, k_full);
        uint64_t *v_full = sm.v_ring.acquire(j, Sizes<D>::v);
        bulk_load(sm.v[s], v_tiles + (int64_t)j * Sizes<D>::v, Sizes<D>::v, v_full);
        if (VSMOOTH && j % VC_MEAN_TILES == 0) {
            const int g = j / VC_MEAN_TILES, groups = (T + VC_MEAN_TILES - 1) / VC_MEAN_TILES;
            uint64_t *m_full = sm.mean_ring.acquire(g, Sizes<D>::mean_image);
            bulk_load(sm.mean[sm.mean_ring.slot(g)], p.v_means + (kv_head * groups + g) * Sizes<D>::mean_image,
                      Sizes<D>::mean_image, m_full);
        }
    }
}
