// Launchers of the CUDA backend's preprocessing kernels (quantize_rows.cu,
// quantize_values.cu, probe.cu, kmeans.cu, principal.cu, order_choice.cu).
// All run on `stream`, are deterministic, and report non-finite inputs by
// setting *error_flag (when check_finite) instead of failing.
#pragma once
#include <cuda_runtime.h>
#include <stdint.h>

// A caller tensor on the device: element (b, h, n, c) at data + b*sb + h*sh + n*sn + c.
struct dev_tensor {
    const void *data;
    int dtype;  // vcattn_dtype
    int64_t sb, sh, sn;
    int vec;    // every row starts 16-byte aligned: rows load 8 elements at a time
};

// RoPE tables on the device: the row of token n of head (b, h) starts at
// b*sb + h*sh + n*sn floats (vcattn_rope_table's view).
struct dev_rope {
    const float *cos_tab, *sin_tab;  // or NULL for no rotation
    int64_t sb, sh, sn;
    int half_split;                  // VCATTN_ROPE_HALF_SPLIT
    __host__ __device__ int64_t row_at(int b, int h, int64_t n) const { return b * sb + h * sh + n * sn; }
};

// Bits of *error_flag, each refusing the call with its own message.
enum error_flag_bits {
    VC_FLAG_NONFINITE = 1,        // NaN or Inf in q, k, v or the RoPE tables
    VC_FLAG_SCORE_RANGE = 2,      // scores past VCATTN_MAX_SCORE_LOG2
    VC_FLAG_HADAMARD_RANGE = 4,   // a row the Hadamard rotation would overflow
    VC_FLAG_OUT_RANGE = 8,        // V past the largest value of out's dtype
    VC_FLAG_UNSEEN_SCORES = 16,   // rows with a zero INT8 scale would lose scores that matter
};

struct quant_common {
    int batch, heads, tokens, head_dim;
    int check_finite;
    int *error_flag;
};

// K channel means after RoPE, over all keys of each (batch, head): mean [B*H][D].
cudaError_t k_channel_mean(const dev_tensor &k, const dev_rope &rope, const quant_common &c,
                           double *partials, float *mean, cudaStream_t stream);
size_t k_channel_mean_partials(int batch, int heads, int tokens, int head_dim);  // doubles

// K: RoPE, gather by perm (may be NULL), minus mean (may be NULL), Hadamard,
// INT8 per tile and lane group, in the tile layout of operand_layout.h.
// With the check, max_norm receives the largest row norm (atomic max).
// Q smoothing (all NULL/0 when off): the query heads' channel means, the
// query heads per key head, sm_scale log2(e), and the per-key terms written
// [B*Hq][T][128] in the K tiles' key order.
struct q_smoothing_args {
    const float *qmean;
    int group;
    float score_mul;
    float *key_bias;
};
cudaError_t quantize_k(const dev_tensor &k, const dev_rope &rope, const quant_common &c,
                       const int32_t *perm, const float *mean, int hadamard, float hadamard_scale,
                       int8_t *codes, float *scales, float *max_norm, const q_smoothing_args &qs,
                       cudaStream_t stream);

// Q: RoPE, LSE shift sm_scale * q.kmean (when kmean), Hadamard, INT8 per token;
// `tiles` 64-row tiles (>= ceil(N/64); rows past N are zeros).
cudaError_t quantize_q(const dev_tensor &q, const dev_rope &rope, const quant_common &c,
                       int heads_kv, const float *kmean, float sm_scale, int hadamard,
                       float hadamard_scale, int tiles, int8_t *codes, float *scales,
                       float *lse_shift, float *max_norm, const float *qmean, cudaStream_t stream);

// The call's first kernel, chained to what follows: zeroes flag[0..flag_words)
// and, unless NULL, amax[0..heads) (the principal order's, which it then
// does not zero itself).
cudaError_t reset_call(int *flag, int flag_words, float *amax, int heads, cudaStream_t stream);

// The check's bound on the scores from max_norm[0] (q) and [1] (k): flag bit 2
// when they could pass VCATTN_MAX_SCORE_LOG2 (score_mul = sm_scale log2 e),
// bit 4 when, with the Hadamard on, a row's rotation could overflow float32.
// Then the flag is written to publish (a mapped host word), unless NULL.
cudaError_t check_score_bound(const float *max_norm, float score_mul, int hadamard, const quant_common &c,
                              int *publish, cudaStream_t stream);

// The attention probe's query rows alone: row s of key head (b, h) is row
// vsmooth_probe_row(s, N) of query head h * group + s % group, quantized as
// quantize_q quantizes it (the same codes and scale), packed [B*Hkv][rows][D]
// with the scales [B*Hkv][rows]. The probe then needs K's codes and these,
// not the whole of Q's, so Q's pass can run beside the probe and V's passes.
// No check: quantize_q checks the same values.
cudaError_t quantize_probe_rows(const dev_tensor &q, const dev_rope &rope, const quant_common &c, int heads_kv,
                                int hadamard, float hadamard_scale, int rows, const float *qmean, int8_t *codes,
                                float *scales, cudaStream_t stream);

// V-Smooth's attention probe (probe.cu; vsmooth.h states the arithmetic):
// `rows` query rows per key head scored with the INT8 codes of its rows
// (quantize_probe_rows' packed codes and scales) and of K (its tile layout,
// multipliers, and Q smoothing's per-key terms when not NULL),
// score_mul = sm_scale log2(e). Out: the probabilities as code bytes
// [B*Hkv][T][rows][128]; per (head, row, tile) the ceiling and the two exact
// sums [B*Hkv][rows][T], then the factor f of the tile's squared
// probabilities; the head's mean weight [B*Hkv]. quantize_v forms each
// token's weight from the codes, the factors and the mean weight.
struct probe_args {
    const int8_t *q_codes;
    const float *q_mul;
    const int8_t *k_codes;
    const float *k_mul;
    const float *key_bias;
    int batch, heads_q, heads_kv, tokens_k, rows;
    float score_mul;
    uint8_t *codes;
    float *tile_ceiling;
    double *tile_sum, *tile_sq, *tile_factor, *mean_weight;
};
cudaError_t attention_probe(const probe_args &a, int head_dim, cudaStream_t stream);

// V: gather by perm (may be NULL), block means (when demean; 0 for a block
// the sink guard keeps, as the CPU decides), per-channel E4M3 residual
// written transposed with the block means; with mean_images (or NULL) the
// means also as the mean wgmma's images. Workspace: T*D floats x 3, D x 2.
// Per channel out: chan_mul (the E4M3 scale, with 1 / l in the epilogue) and
// chan_pow2 (2^k of the pre-scale near the float limits, applied last).
// probe: the attention probe's outputs, weighting each block's mean, or NULL.
// out_max: with the check, V past it sets VC_FLAG_OUT_RANGE (0: no such check).
cudaError_t quantize_v(const dev_tensor &v, const quant_common &c, const int32_t *perm, int demean, float sink_guard,
                       float out_max, const probe_args *probe, float *tile_mean, float *tile_hi, float *tile_lo,
                       float *chan_inv, float *chan_mul, float *chan_pre, float *chan_pow2, uint8_t *records,
                       uint8_t *mean_images, cudaStream_t stream);

// k-means over the value tokens of each (batch, head), then the stable
// counting sort of the labels. centroids [B*H][k][D] hold the start on entry.
struct kmeans_workspace {
    float *norms;         // [B*H][k]
    int32_t *labels;      // [B*H][N]
    double *sums;         // [B*H][chunks][k][D]
    int32_t *counts;      // [B*H][chunks][k]
    float *amax;          // [B*H]: V's largest |v|, for the power-of-two scale
};
size_t kmeans_chunks(int tokens);
cudaError_t kmeans_gather_rows(const dev_tensor &v, const quant_common &c, int clusters,
                               const int32_t *rows, float *centroids, cudaStream_t stream);
cudaError_t kmeans_group(const dev_tensor &v, const quant_common &c, int clusters, int iters,
                         float *centroids, const kmeans_workspace &w, int32_t *perm,
                         cudaStream_t stream);

// The caller's q, k, v on the device, and the RoPE tables of q and k.
struct call_tensors {
    dev_tensor q, k, v;
    dev_rope qrope = {nullptr, nullptr, 0, 0, 0, 0}, krope = {nullptr, nullptr, 0, 0, 0, 0};
};

// The token order chosen per key head at a grouping step (order_choice.cu):
// `rows` sampled query rows of every query head (row vsmooth_probe_row(s, nq)
// for s < rows), as a Q operand of row_tiles 64-row tiles a head; each
// order's output on them and the reference ([B*Hq][rows][D] floats); the
// choice per key head (1: the principal order).
// The reference splits the keys into `splits` ranges of split_keys, each
// range's unnormalized output and row maximum and sum in part_o / part_ml
// ([splits][B*Hq][rows]), combined in a fixed order.
struct sampled_rows {
    int batch, heads_q, heads_kv, tokens_q, tokens_k, head_dim, rows, row_tiles;
    int splits, split_keys;
    int8_t *q_codes;
    float *q_mul;
    float *out_kmeans, *out_principal, *reference;
    float *part_o, *part_ml;
    int *choice;
};
// Sets a.splits and a.split_keys from the shape alone (the sums do not
// depend on the device).
void plan_reference_splits(sampled_rows *a);
cudaError_t gather_sampled_rows(const sampled_rows &a, const int8_t *q_codes, const float *q_mul, int q_tiles,
                                cudaStream_t stream);
// BF16 tensor-core attention of the sampled rows from the inputs (RoPE
// applied); score_mul = sm_scale * log2(e). Head dims 64 and 128.
cudaError_t sampled_reference(const sampled_rows &a, const call_tensors &in, float score_mul, cudaStream_t stream);
cudaError_t choose_by_error(const sampled_rows &a, cudaStream_t stream);
// dst's bytes_per_head slice of head h becomes src's where choice[h / group].
cudaError_t take_heads(void *dst, const void *src, size_t bytes_per_head, int heads, int group, const int *choice,
                       cudaStream_t stream);

// The token order of a call without a layer state (principal.cu): each
// head's rows sorted along the top principal direction of its values, into
// perm [B*H][N] (token indices within the head). Head dims 64 and 128.
struct principal_workspace {
    double *mean_partials;  // [B*H][splits][D]
    float *gram_partials;   // [B*H][splits][D][D]
    float *mu, *u;          // [B*H][D]: the mean (scaled) and the direction
    float *amax, *scale;    // [B*H]: V's largest |v| (zeroed by reset_call), the power of two applied
    void *keys, *keys_sorted;  // [B*H][N] of principal_key_t: head index above the key's bits
    int32_t *index;         // [B*H][N]
    void *sort_temp;        // principal_sort_bytes
    size_t sort_bytes;
};
int principal_splits(int heads, int tokens);  // blocks per head in the passes over V
size_t principal_sort_bytes(int heads, int tokens);
cudaError_t principal_order(const dev_tensor &v, const quant_common &c, const principal_workspace &w,
                            int32_t *perm, cudaStream_t stream);
