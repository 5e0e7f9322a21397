/*
 * vcattn.h — VC-Attention: low-bit attention for video diffusion transformers.
 *
 * The one public header of libvcattn. Everything the library exports has the
 * vcattn_ prefix. Objects are opaque handles with create/destroy pairs; every
 * fallible call returns a vcattn_status and, where a context is involved,
 * leaves a human-readable message in vcattn_last_error(ctx). On any error
 * nothing is written to the caller's output buffers.
 *
 * Quick use:
 *     vcattn_context *ctx;
 *     vcattn_create(&ctx, VCATTN_BACKEND_AUTO);
 *     vcattn_config cfg = vcattn_config_default();          // method "vc"
 *     vcattn_tensor q = vcattn_tensor_bhnd(qp, VCATTN_DTYPE_BF16, B, H, N, D);
 *     ... k, v, out likewise ...
 *     if (vcattn_attention(ctx, &cfg, &q, &k, &v, &out, NULL, NULL, layer))
 *         fprintf(stderr, "%s\n", vcattn_last_error(ctx));
 *     vcattn_destroy(ctx);
 */
#ifndef VCATTN_H
#define VCATTN_H

#include <stddef.h>
#include <stdint.h>

/* Marks what the shared library exports: the functions of this header and
 * nothing else (the library is built with hidden visibility). */
#if defined(__GNUC__) || defined(__clang__)
#define VCATTN_API __attribute__((visibility("default")))
#else
#define VCATTN_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------- version */

#define VCATTN_VERSION_MAJOR 0
#define VCATTN_VERSION_MINOR 2
#define VCATTN_VERSION_PATCH 0
#define VCATTN_VERSION_NUMBER \
    (VCATTN_VERSION_MAJOR * 10000 + VCATTN_VERSION_MINOR * 100 + VCATTN_VERSION_PATCH)

/* The version of the library actually linked (compare with the macros). */
VCATTN_API unsigned vcattn_version_number(void);
VCATTN_API const char *vcattn_version_string(void);

/* ----------------------------------------------------------------- status */

typedef enum {
    VCATTN_OK = 0,
    VCATTN_ERR_NULL_POINTER,          /* a required pointer was NULL */
    VCATTN_ERR_INVALID_ARGUMENT,      /* a value out of its documented range */
    VCATTN_ERR_SHAPE_MISMATCH,        /* q/k/v/out/lse shapes disagree */
    VCATTN_ERR_UNSUPPORTED_DTYPE,     /* dtype not accepted here */
    VCATTN_ERR_UNSUPPORTED_HEAD_DIM,  /* head dim not supported by this backend */
    VCATTN_ERR_UNSUPPORTED_CONFIG,    /* a switch combination this backend lacks */
    VCATTN_ERR_NONFINITE_INPUT,       /* NaN or Inf in q, k, v or the RoPE tables */
    VCATTN_ERR_BACKEND_UNAVAILABLE,   /* backend not built, or no usable device */
    VCATTN_ERR_OUT_OF_MEMORY,
    VCATTN_ERR_IO,                    /* file could not be opened, read or written */
    VCATTN_ERR_BAD_FILE_FORMAT,       /* file is not what it claims (e.g. .npy) */
    VCATTN_ERR_UNKNOWN_NAME,          /* unknown method or workload name */
    VCATTN_ERR_DEVICE,                /* a device (CUDA) call failed */
    VCATTN_ERR_INTERNAL,
    VCATTN_STATUS_COUNT
} vcattn_status;

/* Static description of a status ("invalid argument", ...); never NULL. */
VCATTN_API const char *vcattn_status_string(vcattn_status status);

/* ---------------------------------------------------------------- tensors */

typedef enum {
    VCATTN_DTYPE_F32 = 0,
    VCATTN_DTYPE_F16,
    VCATTN_DTYPE_BF16
} vcattn_dtype;

VCATTN_API const char *vcattn_dtype_name(vcattn_dtype dtype);

/*
 * A 4-D view [batch, heads, tokens, head_dim] over caller memory. data must be
 * aligned to the element size (4 bytes for float32, 2 for the 16-bit types);
 * so must lse and the RoPE tables (4). Strides are
 * in elements; the head_dim axis must be contiguous (stride 1). Both the
 * [B,H,N,D] ("HND") and [B,N,H,D] ("NHD") layouts, and non-contiguous views of
 * either, are expressed by the three strides.
 */
typedef struct {
    void *data;
    vcattn_dtype dtype;
    int64_t batch, heads, tokens, head_dim;
    int64_t stride_batch, stride_head, stride_token;
} vcattn_tensor;

/* Contiguous [B,H,N,D] view. */
VCATTN_API vcattn_tensor vcattn_tensor_bhnd(void *data, vcattn_dtype dtype, int64_t batch,
                                            int64_t heads, int64_t tokens, int64_t head_dim);
/* Contiguous [B,N,H,D] view. */
VCATTN_API vcattn_tensor vcattn_tensor_bnhd(void *data, vcattn_dtype dtype, int64_t batch,
                                            int64_t heads, int64_t tokens, int64_t head_dim);

/* Sizes every view may have, broadcast views (stride 0) included: work
 * buffers scale with the logical sizes, and permutation indices are 32-bit.
 * A view past them, or whose strides times sizes pass the address space,
 * gets VCATTN_ERR_INVALID_ARGUMENT. */
#define VCATTN_MAX_TOKENS 2147483647LL   /* tokens of a view (2^31 - 1) */
#define VCATTN_MAX_ELEMENTS (1LL << 48)  /* batch x heads x tokens x head_dim of a view */

/*
 * Rotary position embedding tables, supplied by the caller: cos and sin are
 * float32, head_dim/2 entries a row. Query token i of head (b, h) uses the q
 * tables' row at b * q_stride_batch + h * q_stride_head + i * q_stride_token
 * floats, key token j of key head (b, h) the k tables' row likewise (for
 * self-attention pass the same pointers and strides). The strides default
 * to one [tokens][head_dim/2] table shared by every batch entry and head:
 * a token stride of 0 means head_dim/2, batch and head strides of 0 share
 * the rows (a zero-initialized struct's). Per-head tables (LTX-Video's
 * frequencies differ per head) and per-sample ones set them.
 */
typedef enum {
    VCATTN_ROPE_INTERLEAVED = 0,  /* rotates pairs (2i, 2i+1): Wan, HunyuanVideo */
    VCATTN_ROPE_HALF_SPLIT        /* rotates pairs (i, i + D/2): GPT-NeoX style */
} vcattn_rope_style;

typedef struct {
    vcattn_rope_style style;
    const float *q_cos, *q_sin;   /* rows of query tokens */
    const float *k_cos, *k_sin;   /* rows of key tokens */
    int64_t q_stride_batch, q_stride_head, q_stride_token;  /* in floats, cos and sin alike */
    int64_t k_stride_batch, k_stride_head, k_stride_token;
} vcattn_rope;

/* ----------------------------------------------------------------- config */

/* How Q and K enter the score product. */
typedef enum {
    VCATTN_QK_EXACT = 0,  /* fp32 values as given */
    VCATTN_QK_INT8,       /* INT8, Q per token, K per 128-key tile x 4 lane groups */
    VCATTN_QK_FP8,        /* E4M3 nearest code, one scale per 128-token block */
    VCATTN_QK_NVFP4       /* E2M1, E4M3 scale per 16 channels, fp32 tensor scale */
} vcattn_qk_format;

/* How the probabilities P enter the value product. */
typedef enum {
    VCATTN_P_EXACT = 0,   /* fp32 */
    VCATTN_P_BF16,        /* rounded to bf16, as BF16 FlashAttention does */
    VCATTN_P_FP8_CAST,    /* fp32 exp, then E4M3 cast (row max at 256) */
    VCATTN_P_FP8_EXPCAST, /* ExpCast-FP8: the E4M3 byte from one FMA (paper eq. 7) */
    VCATTN_P_NVFP4        /* E2M1 with E4M3 scale per 16 keys */
} vcattn_p_format;

/* How V (or the V-Smooth residual) enters the value product. */
typedef enum {
    VCATTN_V_EXACT = 0,   /* fp32 */
    VCATTN_V_FP8_CHANNEL, /* E4M3, one scale per channel over all tokens */
    VCATTN_V_FP8_BLOCK,   /* E4M3, one scale per 128-token block */
    VCATTN_V_NVFP4        /* E2M1, E4M3 scale per 16 tokens per channel */
} vcattn_v_format;

/*
 * Every switch of the pipeline. vcattn_config_default() gives method "vc";
 * vcattn_config_from_method() gives any named preset, whose fields may then be
 * changed one by one for ablations. Each field's accepted range is given
 * beside it; a call with any field outside it returns
 * VCATTN_ERR_INVALID_ARGUMENT. Switches (int flags) take 0 or 1.
 */
#define VCATTN_MAX_SM_SCALE 64.0f       /* sm_scale log2(e) times the largest INT8 Q scale stays finite */
#define VCATTN_MAX_KMEANS_CLUSTERS 4096
#define VCATTN_MAX_KMEANS_ITERS 1000    /* the defaults are 10 and 5 */
#define VCATTN_MAX_THREADS 1024
#define VCATTN_MAX_PROBE_ROWS 256
#define VCATTN_PROBE_ROWS 64           /* the "+probe" suffix's rows (docs/fidelity.md) */
#define VCATTN_DEFAULT_PROBE_ROWS 32   /* "vc" without "+probe" */
#define VCATTN_MAX_ORDER_ROWS 4096
#define VCATTN_DEFAULT_ORDER_ROWS 256  /* "vc": the order chosen per key head at grouping steps */

typedef struct {
    /* score path */
    vcattn_qk_format qk_format;
    int k_smoothing;          /* 0/1: subtract the per-channel mean of K over tokens */
    int hadamard;             /* 0/1: rotate Q and K by the same normalized Hadamard */
    float sm_scale;           /* softmax scale in [0, VCATTN_MAX_SM_SCALE];
                                 0 means 1/sqrt(head_dim) */
    /* probability path */
    vcattn_p_format p_format;
    float expcast_beta;       /* the beta of eq. 7, in (-1, 1); default -0.35 */
    /* value path */
    vcattn_v_format v_format;
    int vsmooth;              /* 0/1: V-Smooth: k-means grouping + 128-row block demeaning */
    /* k-means of V-Smooth */
    int kmeans_clusters;      /* [0, VCATTN_MAX_KMEANS_CLUSTERS]; 0 (default) =
                                 auto: ceil(Nk/128)/4 clamped to [2, 32], so
                                 most 128-row blocks hold one cluster; never
                                 more than Nk (the CUDA backend takes up to 32) */
    int kmeans_iters;         /* Lloyd iterations from a cold start, in
                                 [1, VCATTN_MAX_KMEANS_ITERS]; default 10 */
    int kmeans_warm_iters;    /* from the previous step's centroids, same range; default 5 */
    uint64_t kmeans_seed;     /* any value: seeds the cold-start choice of initial centroids */
    /* grouping schedule (paper appendix A), used when a vcattn_layer is given */
    float group_window;       /* in [0, 1]: fraction of the steps that group; default 0.25 */
    int group_refresh;        /* any int >= 1: regroup every this many steps in the window; 4 */
    int demean_outside_window;/* 0/1: after the window: 1 = reuse the last permutation
                                 and demean, 0 = plain low-bit kernel (paper) */
    /* input policy */
    int check_finite;         /* 0/1; 1 (default): reject NaN/Inf inputs with
                                 VCATTN_ERR_NONFINITE_INPUT, and inputs whose
                                 scores could pass VCATTN_MAX_SCORE_LOG2, or
                                 v with values past the largest of out's
                                 dtype (float32 v, float16 out), with
                                 VCATTN_ERR_INVALID_ARGUMENT, before any
                                 output is written. 16-bit outputs are
                                 stored saturating either way: a finite
                                 result never becomes Inf */
    int num_threads;          /* CPU backend threads in [0, VCATTN_MAX_THREADS];
                                 0 = all cores; fewer where no more threads
                                 can be started (same outputs, slower) */
    /* score path, 0/1 (default 0): subtract each head's channel mean of Q over
     * tokens before quantizing, and add the exact per-key term
     * sm_scale (mean_q . k_j) back to the scores, as SageAttention2 smooths Q
     * (docs/fidelity.md; on the GPU it costs the vc kernel 16-17%) */
    int q_smoothing;
    /* value path, V-Smooth's sink guard: a 128-row block holding a token whose
     * norm is below sink_guard x the norm of the block's mean is not demeaned
     * (its mean is 0), so near-zero "attention sink" values keep FP8's
     * relative precision; in [0, 1], 0 = off, default 0.25 (docs/fidelity.md) */
    float sink_guard;
    /* probability path: ExpCast P applies to calls with at least this many
     * keys; shorter key sequences (text self-attention, cross-attention to a
     * prompt) take exp then the E4M3 cast (VCATTN_P_FP8_CAST), where the
     * exponentials do not bound the kernel and ExpCast's probability error
     * is not made up by V-Smooth (docs/fidelity.md). Any int >= 0, default
     * 1024; 0 = ExpCast at every length (the paper) */
    int expcast_min_keys;
    /* value path, V-Smooth's attention probe: each 128-row block subtracts
     * its tokens' mean weighted by the attention they receive, estimated from
     * this many query rows per key head, so that a token most rows read (an
     * attention sink) keeps FP8's relative precision; blocks without such a
     * token keep the plain mean bit for bit. With NVFP4 values (CPU) the
     * centre stays the plain mean, and the same weights decide, per block and
     * channel, whether it is subtracted at all. In
     * [0, VCATTN_MAX_PROBE_ROWS], 0 = the plain block mean (the paper),
     * default VCATTN_DEFAULT_PROBE_ROWS in "vc" (vcattn_config_default()),
     * VCATTN_PROBE_ROWS in "vsmooth-4bit" and with "+probe", 0 in the others
     * (docs/fidelity.md) */
    int vsmooth_probe_rows;
    /* value path, V-Smooth's token order at a grouping step (a layer state
     * at a cold or warm plan): each key head takes the k-means order or the
     * principal direction's (the drop-in call's), whichever gives the
     * smaller squared error of the quantized output against exact attention
     * on this many sampled query rows of its query heads (the probe's rows).
     * In [0, VCATTN_MAX_ORDER_ROWS], 0 = k-means for every head (the paper),
     * default VCATTN_DEFAULT_ORDER_ROWS in "vc", 0 in the others. On the
     * GPU the reference is BF16 on the tensor cores (docs/fidelity.md: it
     * may part from the CPU's choice near a tie) */
    int vsmooth_order_rows;
} vcattn_config;

/* The largest |score| (log2 units: q.k * sm_scale * log2(e)) a checked call
 * accepts, judged from max|q| * max|k| after RoPE and K smoothing. Beyond it
 * one score's float32 rounding exceeds 2^-4, and past ~2^31 rows lose every
 * key or overflow (docs/robustness.md); real attention stays below 10^3. */
#define VCATTN_MAX_SCORE_LOG2 1048576.0 /* 2^20 */
/* The largest |score| (log2 units) a checked call lets a row lose: a row
 * whose 8-bit scale comes out 0 (amax below ~3.7e-37, where 127 / amax
 * overflows) scores 0 against every key. Below 2^-10 that moves a
 * probability by under 0.07%, less than INT8's own error; beyond it (q near
 * 1e-38 against k near 1e37) the call is refused, VCATTN_ERR_INVALID_ARGUMENT. */
#define VCATTN_UNSEEN_SCORE_LOG2 (1.0 / 1024.0)

VCATTN_API vcattn_config vcattn_config_default(void);
/* sizeof(vcattn_config) as this library was built: a binding that mirrors
 * the struct (ctypes, another language) checks its copy against it, so a
 * library of another version is refused instead of read past its end. */
VCATTN_API size_t vcattn_config_size(void);

/*
 * Named presets: "bf16", "fp8-naive", "sage2", "vsmooth", "vc", "sage3-4bit",
 * "vsmooth-4bit"; a "+hadamard" suffix (e.g. "sage2+hadamard") turns on the
 * QK Hadamard, then a "+qsmooth" suffix (e.g. "vc+qsmooth",
 * "sage2+hadamard+qsmooth") turns on q_smoothing (both backends; on the GPU
 * it costs the vc kernel 16-17%, so no preset has it by default), then, for
 * the V-Smooth methods, a "+probe" suffix (e.g. "vc+probe") sets
 * vsmooth_probe_rows to VCATTN_PROBE_ROWS ("vc" probes
 * VCATTN_DEFAULT_PROBE_ROWS without it, "vsmooth" none, "vsmooth-4bit" has
 * it already). Names
 * match whatever the case of their letters ("VC+Hadamard").
 * Returns VCATTN_ERR_UNKNOWN_NAME for anything else.
 */
VCATTN_API vcattn_status vcattn_config_from_method(const char *method, vcattn_config *cfg);
/* The NULL-terminated list of base method names, in order of the paper. */
VCATTN_API const char *const *vcattn_method_names(void);

/* --------------------------------------------------------------- contexts */

typedef enum {
    VCATTN_BACKEND_AUTO = 0,  /* CUDA when a usable sm_90 GPU is present, else CPU */
    VCATTN_BACKEND_CPU,
    VCATTN_BACKEND_CUDA
} vcattn_backend;

VCATTN_API const char *vcattn_backend_name(vcattn_backend backend);

typedef struct vcattn_context vcattn_context;

/* Creates a context on the given backend. AUTO resolves at creation. A CUDA
 * context keeps the device memory of its calls' workspaces (as much as the
 * largest call needed) in a pool of its own until it is destroyed. A context
 * may be used from any thread, by one thread at a time; separate contexts
 * (each with its own layer states) may run calls concurrently: the library
 * keeps no other mutable state. */
VCATTN_API vcattn_status vcattn_create(vcattn_context **ctx, vcattn_backend backend);
VCATTN_API void vcattn_destroy(vcattn_context *ctx);  /* NULL-safe */
/* The backend a context resolved to (AUTO never comes back). */
VCATTN_API vcattn_backend vcattn_context_backend(const vcattn_context *ctx);
/* Message of the last failed call on this context ("" if none); never NULL. */
VCATTN_API const char *vcattn_last_error(const vcattn_context *ctx);
/* CUDA contexts run every later call on this stream (a cudaStream_t; NULL, the
 * default, is the legacy default stream) on the device current at the call.
 * Tensors may live on that device (used in place) or in
 * host memory (staged through the device). A call returns once its work is
 * queued, unless it must read something back: host outputs or a new grouping
 * for a layer (it then waits for the stream). The non-finite check
 * (cfg.check_finite) waits for the call's preprocessing kernels only, with
 * the attention kernel already queued behind them. While the stream
 * is capturing a CUDA graph, only calls without a layer state and with
 * check_finite off are accepted (VCATTN_ERR_UNSUPPORTED_CONFIG otherwise):
 * those need the host, and a replay would repeat one step's grouping plan.
 * CPU contexts accept and ignore it. */
VCATTN_API vcattn_status vcattn_set_cuda_stream(vcattn_context *ctx, void *stream);
/* Progress of a long call: fn(done, total, user) with done counting the
 * query rows whose attention is finished, out of total (B * Hq * Nq), called
 * from one of the call's threads, never two at once, with done increasing,
 * at most about 100 times a call; the last call has done == total. CPU
 * backend only (a CUDA call is over in milliseconds); fn NULL turns it off.
 * fn must not call back into the library with this context; it may run
 * calls on other contexts (each call holds a lock of its own). */
typedef void (*vcattn_progress_fn)(int64_t done, int64_t total, void *user);
VCATTN_API vcattn_status vcattn_set_progress(vcattn_context *ctx, vcattn_progress_fn fn, void *user);
/* Whether a backend can run here; if not, why (static string) in *why. */
VCATTN_API int vcattn_backend_available(vcattn_backend backend, const char **why);

/* ------------------------------------------------------------ layer state */

/*
 * Per-layer V-Smooth state: k-means centroids, the permutation and the step
 * counter, kept across denoising steps so grouping follows the schedule of the
 * paper's appendix A. Not thread-safe: one layer state per attention module,
 * used by one call at a time.
 */
typedef struct vcattn_layer vcattn_layer;

/* num_steps >= 1: the denoising steps of the schedule. */
VCATTN_API vcattn_status vcattn_layer_create(vcattn_layer **layer, int num_steps);
VCATTN_API void vcattn_layer_destroy(vcattn_layer *layer);  /* NULL-safe */
/* Sets the denoising step the next calls belong to, in [0, num_steps). */
VCATTN_API vcattn_status vcattn_layer_set_step(vcattn_layer *layer, int step);
VCATTN_API int vcattn_layer_step(const vcattn_layer *layer);
/* Forgets centroids and permutation (next grouping starts cold). */
VCATTN_API void vcattn_layer_reset(vcattn_layer *layer);

typedef enum {
    VCATTN_GROUP_NONE = 0,  /* no V-Smooth on this call */
    VCATTN_GROUP_COLD,      /* k-means from seeded initial centroids */
    VCATTN_GROUP_WARM,      /* k-means from the previous centroids */
    VCATTN_GROUP_REUSE,     /* the stored permutation, demeaned */
    VCATTN_GROUP_PRINCIPAL  /* no layer state: the keys sorted along V's
                               principal direction, demeaned (no k-means) */
} vcattn_grouping;

VCATTN_API const char *vcattn_grouping_name(vcattn_grouping grouping);
/* What a call with this config would do at the layer's current step; a
 * config vcattn_attention would refuse (a field out of its range) gives
 * VCATTN_GROUP_NONE, as does NULL. */
VCATTN_API vcattn_grouping vcattn_layer_plan(const vcattn_layer *layer, const vcattn_config *cfg);

/* -------------------------------------------------------------- attention */

/*
 * Non-causal attention out = softmax(q k^T * sm_scale) v, per batch and head.
 *   q:   [B, Hq,  Nq, D]      k, v: [B, Hkv, Nk, D]      out: [B, Hq, Nq, D]
 * Hq must be a multiple of Hkv (grouped-query attention); Nq and Nk may
 * differ. lse, if not NULL, receives float32 [B][Hq][Nq]: the natural log of
 * sum_j exp(s_ij) of the scores as the caller defined them (before K
 * smoothing), as ring attention needs, computed from the scores the method
 * makes. With INT8 Q and K those carry the rounding of q's and k's codes,
 * which grows with |q| |k|: for unit-variance q and k at D 64 lse is within
 * 0.02 nats of the exact value, at 4 times that scale about 0.6, at 16 times
 * about 12 (the largest score's error decides it). With ExpCast P (method
 * vc) the row sum also adds decoded ExpCast bytes, each within
 * [0.9290, 1.0746] times the exact exponential: up to ln(1/0.9290) = 0.074
 * nats more (and the mass of probabilities below the smallest code). A ring
 * merge that weights partial outputs by exp(lse) carries these errors.
 * rope may be NULL. layer may be NULL: then V-Smooth (if on) sorts each
 * head's keys and values by their projection on the top principal direction
 * of the values and demeans the 128-row blocks of that order
 * (VCATTN_GROUP_PRINCIPAL; a few reads of V and a sort, no k-means);
 * k-means grouping needs a layer state (a one-step layer groups once, from
 * a cold start).
 * Memory: q, k, v and the RoPE tables may share memory with each other; out
 * and lse may not share a byte with any of them nor with each other (the
 * span from a view's first to its last element counts, so views interleaved
 * in one buffer are refused too), and no two elements of out may be the same
 * memory (a stride_head of 0, heads or rows that overlap). Such calls return
 * VCATTN_ERR_INVALID_ARGUMENT, as the in-place call out = q does.
 */
VCATTN_API vcattn_status vcattn_attention(vcattn_context *ctx, const vcattn_config *cfg,
                                          const vcattn_tensor *q, const vcattn_tensor *k,
                                          const vcattn_tensor *v, const vcattn_tensor *out,
                                          float *lse, const vcattn_rope *rope,
                                          vcattn_layer *layer);

#ifdef __cplusplus
}
#endif
#endif /* VCATTN_H */
