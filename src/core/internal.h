/* Internal interfaces shared by the core, the backends and the tools.
 * Nothing here is part of the public API. */
#ifndef VCATTN_INTERNAL_H
#define VCATTN_INTERNAL_H

#include "vcattn.h"

#include <math.h>
#include <stdint.h>
#include <stdarg.h>

#ifdef __cplusplus
extern "C" {
#endif

#define VCATTN_TILE 128          /* keys per KV tile, rows per V-Smooth block */
#define VCATTN_K_LANE_GROUPS 4   /* INT8 K scales per tile: one per lane group */
#define VCATTN_MAX_HEAD_DIM 256
#define VCATTN_ERRMSG_LEN 512

struct vcattn_context {
    vcattn_backend backend;
    void *cuda_stream;   /* cudaStream_t of a CUDA context */
    void *cuda_pool;     /* cudaMemPool_t of the workspaces (CUDA backend), or NULL */
    int cuda_pool_device;
    int *cuda_flag_host;     /* pinned word the finite check's flag is published to, or NULL */
    int *cuda_flag_device;   /* that word mapped for the device (the score bound's kernel writes it), or NULL: copied */
    void *cuda_flag_ready;   /* cudaEvent_t recorded after the word is written */
    void *cuda_side_stream;  /* cudaStream_t on which V's quantizers run beside Q's and K's, or NULL */
    void *cuda_fork, *cuda_join;  /* cudaEvent_t: the side stream's start and end within a call */
    vcattn_progress_fn progress;  /* CPU backend: rows done, see vcattn_set_progress */
    void *progress_user;
    char last_error[VCATTN_ERRMSG_LEN];
};

/* The bytes [lo, hi) a view spans in memory, measured with overflow checks
 * (the only place the library computes a view's sizes). */
typedef struct {
    uintptr_t lo, hi;
} vcattn_view_size;

/* Measures a view whose sizes are positive and strides non-negative: NULL,
 * or what passes which limit (VCATTN_MAX_TOKENS, VCATTN_MAX_ELEMENTS, the
 * address space). */
const char *vcattn_view_measure(const vcattn_tensor *t, vcattn_view_size *size);

/* *hi = p + count * esize, or 0 when that passes the address space. */
int vcattn_array_span(const void *p, int64_t count, size_t esize, uintptr_t *hi);

/* The config validator every function taking a config calls: VCATTN_OK, or
 * the status with the reason written to why (len bytes; why may be NULL).
 * head_dim <= 0 skips the checks that need the call's head dim. */
vcattn_status vcattn_config_check(const vcattn_config *cfg, int64_t head_dim, char *why, size_t len);

/* Records a message on ctx (may be NULL) and returns status. */
vcattn_status vcattn_fail(vcattn_context *ctx, vcattn_status status, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

/* INT8 K scale group of a key within its 128-key tile: the wgmma accumulator
 * gives lane l of a warp the columns 8j + 2(l % 4) + {0, 1}, so the keys a
 * thread multiplies share (key % 8) / 2. */
static inline int vcattn_k_lane_group(int64_t key) { return (int)((key & 7) >> 1); }

/* RoPE table `which` (0 q_cos, 1 q_sin, 2 k_cos, 3 k_sin) as a float32
 * view [B, H, N, D/2] over the sizes of x (q for the q tables, k for the k
 * tables), with the struct's strides (a token stride of 0 meaning D/2):
 * row (b, h, n) of the view is the row that token's rotation reads. */
vcattn_tensor vcattn_rope_table(const vcattn_rope *rope, int which, const vcattn_tensor *x);

/* Element (b, h, n, d) of a tensor view as float. */
float vcattn_tensor_get(const vcattn_tensor *t, int64_t b, int64_t h, int64_t n, int64_t d);
/* Copies row (b, h, n) into dst[head_dim] as float. */
void vcattn_tensor_load_row(const vcattn_tensor *t, int64_t b, int64_t h, int64_t n, float *dst);
/* Writes src[head_dim] into row (b, h, n) with round-to-nearest-even,
 * 16-bit types saturating (vcattn_saturate). */
void vcattn_tensor_store_row(const vcattn_tensor *t, int64_t b, int64_t h, int64_t n,
                             const float *src);

/* The largest finite value of a dtype. An output is a weighted mean of V's
 * rows: with check_finite, V past the largest value of out's dtype is
 * refused (vcattn_fail_out_range, the message both backends give), as the
 * output could not be stored. */
float vcattn_dtype_max(vcattn_dtype dtype);
vcattn_status vcattn_fail_out_range(vcattn_context *ctx, vcattn_dtype out_dtype);

/* The quantized operands of one call in a backend-independent form, for
 * tests that compare backends stage by stage. Caller-allocated: q_codes
 * [B*Hq][Nq][D], q_scale and lse_shift [B*Hq][Nq]; k_codes and v_codes (E4M3
 * bytes) [B*Hkv][Nk][D] in permuted token order; k_scale [B*Hkv][T][4] (lane
 * groups); v_mean (code units) [B*Hkv][T][D]; v_scale and k_mean [B*Hkv][D];
 * T = ceil(Nk/128); perm [B*Hkv][Nk] the token order used (the identity
 * when the call does not reorder). INT8 Q/K, per-channel FP8 V only. */
typedef struct {
    int32_t *perm;
    int8_t *q_codes, *k_codes;
    uint8_t *v_codes;
    float *q_scale, *lse_shift, *k_scale, *v_mean, *v_scale, *k_mean;
} vcattn_quantized;

/* One call as the API layer resolves it, once, for whichever backend runs
 * it (vcattn_resolve_call in src/api): the config as it applies to this
 * shape (ExpCast P resolved to exp then cast below expcast_min_keys), the
 * shape, the effective softmax scale, the k-means cluster count and what
 * V-Smooth does. The layer is read (REUSE reads its permutation, WARM its
 * centroids), never written by a backend. */
typedef struct {
    vcattn_config cfg;
    int64_t batch, heads_q, heads_kv, tokens_q, tokens_k, head_dim;
    float sm_scale;
    int clusters;
    vcattn_grouping plan;
    const vcattn_layer *layer;  /* read only: the API layer alone writes it, after the call */
} vcattn_call;

/* What a backend hands back for the layer: from a call that grouped (plan
 * COLD or WARM with a layer), centroids [B*Hkv][clusters][D] and perm
 * [B*Hkv][Nk] from malloc, which the API layer gives to the layer once the
 * call has succeeded (and frees otherwise); device_perm, if set, a copy of
 * the permutation (the new one, or the layer's uploaded by a REUSE call
 * without perm) on `device` for the next plain steps, which release frees. */
typedef struct {
    float *centroids;
    int32_t *perm;
    void *device_perm;
    int device;
    void (*release)(void *device_perm);
} vcattn_new_grouping;

/* The softmax scale a call uses: cfg's, or 1/sqrt(head_dim) when it is 0
 * (the one place this default is written; float, as every backend rounds it). */
static inline float vcattn_effective_sm_scale(const vcattn_config *cfg, int64_t head_dim) {
    return cfg->sm_scale > 0.0f ? cfg->sm_scale : 1.0f / sqrtf((float)head_dim);
}

/* The P format a call with tokens_k keys uses: ExpCast falls back to exp
 * then the cast on key sequences shorter than cfg->expcast_min_keys. */
static inline vcattn_p_format vcattn_applied_p_format(const vcattn_config *cfg, int64_t tokens_k) {
    return cfg->p_format == VCATTN_P_FP8_EXPCAST && tokens_k < cfg->expcast_min_keys ? VCATTN_P_FP8_CAST
                                                                                      : cfg->p_format;
}

/* 1 if head_dim is a power of two (the Hadamard needs one). */
static inline int vcattn_is_pow2(int64_t x) { return x > 0 && (x & (x - 1)) == 0; }

#ifdef __cplusplus
}
#endif
#endif
