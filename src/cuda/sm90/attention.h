// The sm_90a attention kernel's interface: quantized operands in the layout
// of operand_layout.h in, the caller's output (and LSE) out.
#pragma once
#include <cuda_runtime.h>
#include <stdint.h>

struct vc_attention_params {
    const int8_t *q;          // [B][Hq][QT][64 x D]
    const float *q_mul;       // [B][Hq][QT*64]
    const int8_t *k;          // [B][Hkv][T][128 x D]
    const float *k_mul;       // [B][Hkv][T][4]
    const uint8_t *v;         // [B][Hkv][T] records
    const float *v_mul;       // [B][Hkv][D] E4M3 scales, applied with 1 / l
    const float *v_pow2;      // [B][Hkv][D] powers of two of the V pre-scale, applied last
    const uint8_t *v_means;   // [B][Hkv][ceil(T/8)] mean images (head dim 128, V-Smooth)
    const float *lse_shift;   // [B][Hq][Nq], or NULL (no K smoothing)
    const float *key_bias;    // [B][Hq][T][128] Q smoothing's per-key term (log2 units), or NULL
    void *out;                // element (b, h, n, c) at out + b*sb + h*sh + n*sn + c
    int out_dtype;            // vcattn_dtype
    int64_t out_sb, out_sh, out_sn;  // in elements
    float *lse;               // [B][Hq][Nq] natural log, or NULL
    const int *error_flag;    // set by the quantizers on bad input: write nothing
    int batch, heads_q, heads_kv, nq, nk, q_tiles, kv_tiles;
    uint64_t kv_group_mul;    // ceil(2^32 / (heads_q / heads_kv)): kv head = (head * mul) >> 32
    float score_mul;          // sm_scale * log2(e)
    float expcast_bias;       // 120 + beta
};

// Whether the kernel a call runs restores block means from the mean images
// (p.v_means must then be set): head dim 128 with V-Smooth, or with ExpCast,
// which runs the V-Smooth kernel (zero means without V-Smooth).
bool vc_attention_sm90_reads_means(int head_dim, bool expcast, bool vsmooth);

// expcast: ExpCast-FP8 (else exp-then-cast); vsmooth: restore block means.
// q_tiles must be even (the head-dim-128 kernel takes two 64-row tiles per CTA).
cudaError_t vc_attention_sm90(const vc_attention_params &p, int head_dim, bool expcast, bool vsmooth,
                              cudaStream_t stream);
