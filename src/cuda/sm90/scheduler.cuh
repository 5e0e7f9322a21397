// Which query rows and heads a CTA works on: blockIdx.x counts blocks of
// query rows, y the query heads, z the batch; a grouped-query head reads the
// K and V of head * Hkv / Hq.
#pragma once
#include "attention.h"

struct WorkTile {
    int m_block, head, batch;
    int64_t q_head, kv_head;  // flat (batch, head) indices into the operands
};

static __device__ __forceinline__ WorkTile work_tile(const vc_attention_params &p) {
    WorkTile w;
    w.m_block = blockIdx.x;
    w.head = blockIdx.y;
    w.batch = blockIdx.z;
    w.q_head = (int64_t)w.batch * p.heads_q + w.head;
    const int kv = (int)(((uint64_t)w.head * p.kv_group_mul) >> 32);  // no integer division
    w.kv_head = (int64_t)w.batch * p.heads_kv + kv;
    return w;
}
