// The VC-Attention kernel for sm_90a, version 1: one warpgroup per CTA owns
// 64 query rows and streams 128-key tiles of K and V^T through a two-stage
// bulk-copy pipeline. Per tile: INT8 QK^T on the tensor cores (wgmma s8),
// online softmax with P encoded as E4M3 (ExpCast or exp-then-cast) directly
// into the A registers of the FP8 PV wgmma, whose 8 extra columns of ones
// return the row sum of the decoded P; then the two-level update
// acc = alpha * acc + (P V + r mu). Arithmetic: docs/formats.md; layout and
// reasoning: docs/cuda-design.md; measurements: docs/perf-notes.md.
#include "attention.h"
#include "ptx.cuh"
#include "softmax.cuh"
#include "wgmma.cuh"
#include "../operand_layout.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "vcattn.h"

namespace {

constexpr int kThreads = 128;
constexpr int kStages = 2;

template <int D>
struct SharedStorage {
    alignas(128) int8_t q[VC_Q_ROWS * D];
    alignas(128) int8_t k[kStages][VC_KV_ROWS * D];
    alignas(128) uint8_t v[kStages][(D + VC_ONES_ROWS) * VC_KV_ROWS + D * 4];
    uint64_t full_q, full_k[kStages], full_v[kStages];
};

template <typename T> __device__ __forceinline__ void store2(T *p, float a, float b, bool pair);
template <> __device__ __forceinline__ void store2(float *p, float a, float b, bool pair) {
    if (pair) *reinterpret_cast<float2 *>(p) = make_float2(a, b);
    else { p[0] = a; p[1] = b; }
}
template <> __device__ __forceinline__ void store2(__nv_bfloat16 *p, float a, float b, bool pair) {
    if (pair) *reinterpret_cast<__nv_bfloat162 *>(p) = __floats2bfloat162_rn(a, b);
    else { p[0] = __float2bfloat16_rn(a); p[1] = __float2bfloat16_rn(b); }
}
template <> __device__ __forceinline__ void store2(__half *p, float a, float b, bool pair) {
    if (pair) *reinterpret_cast<__half2 *>(p) = __floats2half2_rn(a, b);
    else { p[0] = __float2half_rn(a); p[1] = __float2half_rn(b); }
}

// Column (tile-relative key, or output channel) of accumulator register i.
__device__ __forceinline__ int acc_col(int i, int t) { return 8 * (i >> 2) + 2 * t + (i & 1); }

template <int D, bool EXPCAST, bool VSMOOTH, typename OutT>
__global__ void __launch_bounds__(kThreads, 2) vc_attention_kernel(const __grid_constant__ vc_attention_params p) {
    extern __shared__ uint8_t smem_raw[];
    SharedStorage<D> &sm = *reinterpret_cast<SharedStorage<D> *>(
        (reinterpret_cast<uintptr_t>(smem_raw) + 127) & ~uintptr_t(127));
    constexpr uint32_t kQBytes = VC_Q_ROWS * D, kKBytes = VC_KV_ROWS * D;
    constexpr uint32_t kVtRows = D + VC_ONES_ROWS, kVBytes = kVtRows * VC_KV_ROWS + D * 4;

    if (p.error_flag && *p.error_flag) return;  // bad input: the output stays untouched

    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;
    const int m_block = blockIdx.x, head = blockIdx.y, batch = blockIdx.z;
    const int head_kv = (int)(((uint64_t)head * p.kv_group_mul) >> 32);  // no integer division (I2F/F2I)
    const int64_t q_head = (int64_t)batch * p.heads_q + head;
    const int64_t kv_head = (int64_t)batch * p.heads_kv + head_kv;
    const int T = p.kv_tiles;
    const int8_t *k_tiles = p.k + kv_head * T * kKBytes;
    const uint8_t *v_tiles = p.v + kv_head * T * kVBytes;
    const float *k_mul = p.k_mul + kv_head * T * 4;

    if (tid == 0) {
        mbar_init(&sm.full_q, 1);
        for (int s = 0; s < kStages; s++) {
            mbar_init(&sm.full_k[s], 1);
            mbar_init(&sm.full_v[s], 1);
        }
        fence_mbar_init();
    }
    __syncthreads();
    auto load_k = [&](int stage, int tile) {
        mbar_arrive_expect_tx(&sm.full_k[stage], kKBytes);
        bulk_load(sm.k[stage], k_tiles + (int64_t)tile * kKBytes, kKBytes, &sm.full_k[stage]);
    };
    auto load_v = [&](int stage, int tile) {
        mbar_arrive_expect_tx(&sm.full_v[stage], kVBytes);
        bulk_load(sm.v[stage], v_tiles + (int64_t)tile * kVBytes, kVBytes, &sm.full_v[stage]);
    };
    if (tid == 0) {
        mbar_arrive_expect_tx(&sm.full_q, kQBytes);
        bulk_load(sm.q, p.q + (q_head * p.q_tiles + m_block) * kQBytes, kQBytes, &sm.full_q);
        for (int s = 0; s < kStages && s < T; s++) {
            load_k(s, s);
            load_v(s, s);
        }
    }

    const int row0 = m_block * VC_Q_ROWS + 16 * warp + g, row1 = row0 + 8;
    const float *q_mul = p.q_mul + q_head * (int64_t)p.q_tiles * VC_Q_ROWS;
    const float qmul0 = q_mul[row0] * p.score_mul, qmul1 = q_mul[row1] * p.score_mul;

    float o[D / 2];
#pragma unroll
    for (int i = 0; i < D / 2; i++) o[i] = 0.0f;
    float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.0f, l1 = 0.0f;
    const int tail_keys = p.nk - (T - 1) * VC_KV_ROWS;  // valid keys of the last tile

    mbar_wait(&sm.full_q, 0);
    for (int j = 0; j < T; j++) {
        const int stage = j & 1;
        const uint32_t parity = (j >> 1) & 1;

        // ---- S = Q K^T (int32) ----
        int32_t sacc[64];
        mbar_wait(&sm.full_k[stage], parity);
        wgmma_fence();
#pragma unroll
        for (int ks = 0; ks < D / 32; ks++)
            wgmma_s8_m64n128k32(sacc, smem_desc(sm.q + ks * 2 * VC_Q_ROWS * 16, VC_Q_ROWS * 16, 128),
                                smem_desc(sm.k[stage] + ks * 2 * VC_KV_ROWS * 16, VC_KV_ROWS * 16, 128),
                                ks > 0);
        wgmma_commit();
        wgmma_wait_all();
#pragma unroll
        for (int i = 0; i < 64; i++) reg_fence(sacc[i]);
        __syncthreads();  // every warp is done with K[stage]
        if (tid == 0 && j + kStages < T) load_k(stage, j + kStages);

        // ---- online softmax, P as E4M3 in A registers ----
        float s[64];
#pragma unroll
        for (int i = 0; i < 64; i++) s[i] = (float)sacc[i];
        const bool tail = j == T - 1 && tail_keys < VC_KV_ROWS;
        if (tail) {
#pragma unroll
            for (int i = 0; i < 64; i++)
                if (acc_col(i, t) >= tail_keys) s[i] = -INFINITY;
        }
        const float kmul = k_mul[j * 4 + t];
        const float A0 = qmul0 * kmul, A1 = qmul1 * kmul;
        float tmax0, tmax1;
        tile_row_max(s, A0, A1, tmax0, tmax1);
        const float mn0 = fmaxf(m0, tmax0), mn1 = fmaxf(m1, tmax1);
        const float alpha0 = exp2f(m0 - mn0), alpha1 = exp2f(m1 - mn1);
        uint32_t a[16];
        if (tail) encode_p<EXPCAST, true>(s, A0, A1, mn0, mn1, p.expcast_bias, a);
        else encode_p<EXPCAST, false>(s, A0, A1, mn0, mn1, p.expcast_bias, a);
        m0 = mn0;
        m1 = mn1;

        // ---- partial = P V^T (+ row sums in the ones columns) ----
        float pacc[D / 2 + 4];
        mbar_wait(&sm.full_v[stage], parity);
        wgmma_fence();
#pragma unroll
        for (int ks = 0; ks < 4; ks++) {
            const uint64_t desc = smem_desc(sm.v[stage] + ks * 2 * kVtRows * 16, kVtRows * 16, 128);
            if constexpr (D == 128) wgmma_e4m3_m64n136k32(pacc, a + 4 * ks, desc, ks > 0);
            else wgmma_e4m3_m64n72k32(pacc, a + 4 * ks, desc, ks > 0);
        }
        wgmma_commit();
        wgmma_wait_all();
#pragma unroll
        for (int i = 0; i < D / 2 + 4; i++) reg_fence(pacc[i]);

        // ---- two-level update with the block mean restored ----
        const float r0 = pacc[D / 2], r1 = pacc[D / 2 + 2];
        const float *mu = reinterpret_cast<const float *>(sm.v[stage] + kVtRows * VC_KV_ROWS);
#pragma unroll
        for (int i = 0; i < D / 2; i += 2) {
            const int c = acc_col(i, t);
            const bool lower = (i >> 1) & 1;
            float x0 = pacc[i], x1 = pacc[i + 1];
            if constexpr (VSMOOTH) {
                const float2 mv = *reinterpret_cast<const float2 *>(mu + c);
                x0 = __fmaf_rn(lower ? r1 : r0, mv.x, x0);
                x1 = __fmaf_rn(lower ? r1 : r0, mv.y, x1);
            }
            o[i] = __fmaf_rn(o[i], lower ? alpha1 : alpha0, x0);
            o[i + 1] = __fmaf_rn(o[i + 1], lower ? alpha1 : alpha0, x1);
        }
        l0 = __fmaf_rn(l0, alpha0, r0);
        l1 = __fmaf_rn(l1, alpha1, r1);
        __syncthreads();  // every warp is done with V[stage]
        if (tid == 0 && j + kStages < T) load_v(stage, j + kStages);
    }

    // ---- epilogue: out = acc * (v_mul / l), LSE ----
    const float *v_mul = p.v_mul + kv_head * D;
    const float inv0 = 1.0f / l0, inv1 = 1.0f / l1;
    OutT *out = reinterpret_cast<OutT *>(p.out) + batch * p.out_sb + head * p.out_sh;
    const bool pair = (reinterpret_cast<uintptr_t>(p.out) % (2 * sizeof(OutT)) == 0) &&
                      ((p.out_sb | p.out_sh | p.out_sn) & 1) == 0;
#pragma unroll
    for (int i = 0; i < D / 2; i += 2) {
        const int c = acc_col(i, t);
        const bool lower = (i >> 1) & 1;
        const int row = lower ? row1 : row0;
        if (row >= p.nq) continue;
        const float inv = lower ? inv1 : inv0;
        store2(out + row * p.out_sn + c, o[i] * (v_mul[c] * inv), o[i + 1] * (v_mul[c + 1] * inv), pair);
    }
    if (p.lse && t == 0) {
        float *lse = p.lse + q_head * p.nq;
        const float *shift = p.lse_shift ? p.lse_shift + q_head * p.nq : nullptr;
        if (row0 < p.nq)
            lse[row0] = (float)(0.6931471805599453 * ((double)m0 + log2((double)l0) - 8.0)) +
                        (shift ? shift[row0] : 0.0f);
        if (row1 < p.nq)
            lse[row1] = (float)(0.6931471805599453 * ((double)m1 + log2((double)l1) - 8.0)) +
                        (shift ? shift[row1] : 0.0f);
    }
}

template <int D, bool EXPCAST, bool VSMOOTH, typename OutT>
cudaError_t launch(const vc_attention_params &p, cudaStream_t stream) {
    auto kernel = vc_attention_kernel<D, EXPCAST, VSMOOTH, OutT>;
    const int smem = (int)sizeof(SharedStorage<D>) + 128;
    cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
    if (err != cudaSuccess) return err;
    dim3 grid(p.q_tiles, p.heads_q, p.batch);
    kernel<<<grid, kThreads, smem, stream>>>(p);
    return cudaGetLastError();
}

template <int D, bool EXPCAST, bool VSMOOTH>
cudaError_t launch_dtype(const vc_attention_params &p, cudaStream_t stream) {
    switch (p.out_dtype) {
    case VCATTN_DTYPE_BF16: return launch<D, EXPCAST, VSMOOTH, __nv_bfloat16>(p, stream);
    case VCATTN_DTYPE_F16: return launch<D, EXPCAST, VSMOOTH, __half>(p, stream);
    default: return launch<D, EXPCAST, VSMOOTH, float>(p, stream);
    }
}

template <int D>
cudaError_t launch_variant(const vc_attention_params &p, bool expcast, bool vsmooth, cudaStream_t stream) {
    if (expcast) return vsmooth ? launch_dtype<D, true, true>(p, stream) : launch_dtype<D, true, false>(p, stream);
    return vsmooth ? launch_dtype<D, false, true>(p, stream) : launch_dtype<D, false, false>(p, stream);
}

}  // namespace

cudaError_t vc_attention_sm90(const vc_attention_params &p, int head_dim, bool expcast,
                              bool vsmooth, cudaStream_t stream) {
    if (head_dim == 128) return launch_variant<128>(p, expcast, vsmooth, stream);
    if (head_dim == 64) return launch_variant<64>(p, expcast, vsmooth, stream);
    return cudaErrorInvalidValue;
}
