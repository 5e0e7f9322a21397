/* The top layer: contexts, argument validation, the call resolved once,
 * dispatch to a backend, and the layer state updated after a call that
 * grouped (through vsmooth, only once the call has succeeded). */
#include "api.h"
#include "../cpu/cpu_backend.h"
#include "../cuda/cuda_backend.h"
#include "../formats/halfs.h"
#include "../vsmooth/vsmooth.h"

#include <float.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------- contexts */

int vcattn_backend_available(vcattn_backend backend, const char **why) {
    const char *reason = "";
    int ok = 0;
    switch (backend) {
    case VCATTN_BACKEND_CPU: ok = 1; break;
    case VCATTN_BACKEND_CUDA: ok = cuda_backend_available(&reason); break;
    case VCATTN_BACKEND_AUTO: ok = 1; break;
    default: reason = "unknown backend";
    }
    if (why) *why = reason;
    return ok;
}

vcattn_status vcattn_create(vcattn_context **out, vcattn_backend backend) {
    if (!out) return VCATTN_ERR_NULL_POINTER;
    *out = NULL;
    const char *why = "";
    vcattn_backend chosen;
    switch (backend) {
    case VCATTN_BACKEND_AUTO:
        chosen = cuda_backend_available(&why) ? VCATTN_BACKEND_CUDA : VCATTN_BACKEND_CPU;
        break;
    case VCATTN_BACKEND_CPU: chosen = VCATTN_BACKEND_CPU; break;
    case VCATTN_BACKEND_CUDA:
        if (!cuda_backend_available(&why)) return VCATTN_ERR_BACKEND_UNAVAILABLE;
        chosen = VCATTN_BACKEND_CUDA;
        break;
    default: return VCATTN_ERR_INVALID_ARGUMENT;
    }
    vcattn_context *ctx = calloc(1, sizeof *ctx);
    if (!ctx) return VCATTN_ERR_OUT_OF_MEMORY;
    ctx->backend = chosen;
    *out = ctx;
    return VCATTN_OK;
}

void vcattn_destroy(vcattn_context *ctx) {
    if (ctx) cuda_release_context(ctx);
    free(ctx);
}

vcattn_backend vcattn_context_backend(const vcattn_context *ctx) {
    return ctx ? ctx->backend : VCATTN_BACKEND_CPU;
}

const char *vcattn_last_error(const vcattn_context *ctx) {
    return ctx ? ctx->last_error : "no context";
}

vcattn_status vcattn_set_cuda_stream(vcattn_context *ctx, void *stream) {
    if (!ctx) return VCATTN_ERR_NULL_POINTER;
    ctx->cuda_stream = stream;
    return VCATTN_OK;
}

vcattn_status vcattn_set_progress(vcattn_context *ctx, vcattn_progress_fn fn, void *user) {
    if (!ctx) return VCATTN_ERR_NULL_POINTER;
    ctx->progress = fn;
    ctx->progress_user = user;
    return VCATTN_OK;
}

/* ----------------------------------------------------------- validation */

static size_t dtype_size(vcattn_dtype dt) { return dt == VCATTN_DTYPE_F32 ? 4 : 2; }

static vcattn_status check_tensor(vcattn_context *ctx, const vcattn_tensor *t, const char *name) {
    if (!t->data) return vcattn_fail(ctx, VCATTN_ERR_NULL_POINTER, "%s: data pointer is NULL", name);
    if (t->dtype != VCATTN_DTYPE_F32 && t->dtype != VCATTN_DTYPE_F16 && t->dtype != VCATTN_DTYPE_BF16)
        return vcattn_fail(ctx, VCATTN_ERR_UNSUPPORTED_DTYPE,
                           "%s: dtype %d is not float32, float16 or bfloat16", name, (int)t->dtype);
    if ((uintptr_t)t->data % dtype_size(t->dtype) != 0)
        return vcattn_fail(ctx, VCATTN_ERR_INVALID_ARGUMENT, "%s: data pointer not aligned to its %zu-byte elements",
                           name, dtype_size(t->dtype));
    if (t->batch <= 0 || t->heads <= 0 || t->tokens <= 0 || t->head_dim <= 0)
        return vcattn_fail(ctx, VCATTN_ERR_INVALID_ARGUMENT,
                           "%s: every size must be positive (B=%lld H=%lld N=%lld D=%lld)", name,
                           (long long)t->batch, (long long)t->heads, (long long)t->tokens,
                           (long long)t->head_dim);
    if (t->stride_batch < 0 || t->stride_head < 0 || t->stride_token < 0)
        return vcattn_fail(ctx, VCATTN_ERR_INVALID_ARGUMENT, "%s: strides must be non-negative", name);
    vcattn_view_size size;
    const char *why = vcattn_view_measure(t, &size);
    if (why)
        return vcattn_fail(ctx, VCATTN_ERR_INVALID_ARGUMENT, "%s: %s (B=%lld H=%lld N=%lld D=%lld, strides %lld, "
                           "%lld, %lld)", name, why, (long long)t->batch, (long long)t->heads, (long long)t->tokens,
                           (long long)t->head_dim, (long long)t->stride_batch, (long long)t->stride_head,
                           (long long)t->stride_token);
    return VCATTN_OK;
}

/* Whether distinct (b, h, n, d) of out land on distinct elements: taken
 * from the smallest stride up, each axis must step past everything the
 * smaller ones span (a sufficient rule: NHD, HND and padded views pass). */
static int view_self_disjoint(const vcattn_tensor *t) {
    int64_t size[3] = {t->batch, t->heads, t->tokens};
    int64_t stride[3] = {t->stride_batch, t->stride_head, t->stride_token};
    for (int i = 1; i < 3; i++)  /* three entries: insertion sort by stride */
        for (int j = i; j > 0 && stride[j] < stride[j - 1]; j--) {
            int64_t x = stride[j]; stride[j] = stride[j - 1]; stride[j - 1] = x;
            x = size[j]; size[j] = size[j - 1]; size[j - 1] = x;
        }
    int64_t spanned = t->head_dim;  /* elements the smaller axes span */
    for (int i = 0; i < 3; i++) {
        if (size[i] == 1) continue;
        if (stride[i] < spanned) return 0;
        spanned += stride[i] * (size[i] - 1);  /* no overflow: at most the view's measured extent */
    }
    return 1;
}

typedef struct {
    const char *name;
    uintptr_t lo, hi;  /* bytes [lo, hi) */
} span;

/* check_tensor measured every view: its span fits the address space. */
static span view_span(const char *name, const vcattn_tensor *t) {
    vcattn_view_size size;
    vcattn_view_measure(t, &size);
    span s = {name, size.lo, size.hi};
    return s;
}

/* Counts below VCATTN_MAX_ELEMENTS: 0 when the array would pass the address space. */
static int array_span(const char *name, const void *p, int64_t count, size_t esize, span *s) {
    s->name = name;
    s->lo = (uintptr_t)p;
    return vcattn_array_span(p, count, esize, &s->hi);
}

static int spans_meet(span a, span b) { return a.lo < b.hi && b.lo < a.hi; }

static const char *const rope_table_names[4] = {"the rope q_cos table", "the rope q_sin table",
                                                 "the rope k_cos table", "the rope k_sin table"};

/* out and lse are written after the inputs are read: neither may share a
 * byte with an input, with the other, or with itself. Spans are compared
 * whole (first to last byte), so interleaved views of one buffer count as
 * overlapping too. */
static vcattn_status check_aliasing(vcattn_context *ctx, const vcattn_tensor *q, const vcattn_tensor *k,
                                    const vcattn_tensor *v, const vcattn_tensor *out, const float *lse,
                                    const vcattn_rope *rope) {
    if (!view_self_disjoint(out))
        return vcattn_fail(ctx, VCATTN_ERR_INVALID_ARGUMENT,
                           "out: the view overlaps itself (strides batch %lld, head %lld, token %lld for "
                           "B=%lld H=%lld N=%lld D=%lld)", (long long)out->stride_batch, (long long)out->stride_head,
                           (long long)out->stride_token, (long long)out->batch, (long long)out->heads,
                           (long long)out->tokens, (long long)out->head_dim);
    span in[7];
    int n = 0;
    in[n++] = view_span("q", q);
    in[n++] = view_span("k", k);
    in[n++] = view_span("v", v);
    if (rope)
        for (int i = 0; i < 4; i++) {
            const vcattn_tensor t = vcattn_rope_table(rope, i, i < 2 ? q : k);
            in[n++] = view_span(rope_table_names[i], &t);
        }
    const span o = view_span("out", out);
    span l = {"lse", 0, 0};
    if (lse && !array_span("lse", lse, out->batch * out->heads * out->tokens, sizeof(float), &l))
        return vcattn_fail(ctx, VCATTN_ERR_INVALID_ARGUMENT, "lse passes the address space");
    for (int i = 0; i < n; i++) {
        if (spans_meet(o, in[i]))
            return vcattn_fail(ctx, VCATTN_ERR_INVALID_ARGUMENT,
                               "out shares memory with %s: the output may not alias an input", in[i].name);
        if (lse && spans_meet(l, in[i]))
            return vcattn_fail(ctx, VCATTN_ERR_INVALID_ARGUMENT,
                               "lse shares memory with %s: the output may not alias an input", in[i].name);
    }
    if (lse && spans_meet(l, o))
        return vcattn_fail(ctx, VCATTN_ERR_INVALID_ARGUMENT, "lse shares memory with out");
    return VCATTN_OK;
}

/* Whether every element of t is finite and within +-max (FLT_MAX: finite). */
static int scan_within(const vcattn_tensor *t, float max, int threads) {
    int ok = 1;
    #pragma omp parallel for collapse(2) reduction(&& : ok) schedule(static) num_threads(threads)
    for (int64_t b = 0; b < t->batch; b++)
        for (int64_t h = 0; h < t->heads; h++)
            for (int64_t n = 0; n < t->tokens; n++)
                for (int64_t d = 0; d < t->head_dim; d++) {
                    const float x = vcattn_tensor_get(t, b, h, n, d);
                    ok = ok && vcattn_isfinite_f32(x) && fabsf(x) <= max;
                }
    return ok;
}

/* Whether a RoPE table's rows are finite, each shared row scanned once. */
static int table_finite(vcattn_tensor t, int threads) {
    if (t.stride_batch == 0) t.batch = 1;
    if (t.stride_head == 0) t.heads = 1;
    return scan_within(&t, FLT_MAX, threads);
}

/* The tables as views over q's and k's sizes: present, of a known style,
 * with non-negative strides, aligned, within the address space. */
static vcattn_status check_rope(vcattn_context *ctx, const vcattn_rope *rope, const vcattn_tensor *q,
                                const vcattn_tensor *k) {
    if (!rope->q_cos || !rope->q_sin || !rope->k_cos || !rope->k_sin)
        return vcattn_fail(ctx, VCATTN_ERR_NULL_POINTER, "rope: all four tables are required");
    if (rope->style != VCATTN_ROPE_INTERLEAVED && rope->style != VCATTN_ROPE_HALF_SPLIT)
        return vcattn_fail(ctx, VCATTN_ERR_INVALID_ARGUMENT, "rope: unknown style %d", (int)rope->style);
    if ((((uintptr_t)rope->q_cos | (uintptr_t)rope->q_sin | (uintptr_t)rope->k_cos | (uintptr_t)rope->k_sin) %
         sizeof(float)) != 0)
        return vcattn_fail(ctx, VCATTN_ERR_INVALID_ARGUMENT, "rope: tables not aligned to 4-byte floats");
    const int64_t strides[6] = {rope->q_stride_batch, rope->q_stride_head, rope->q_stride_token,
                                rope->k_stride_batch, rope->k_stride_head, rope->k_stride_token};
    for (int i = 0; i < 6; i++)
        if (strides[i] < 0)
            return vcattn_fail(ctx, VCATTN_ERR_INVALID_ARGUMENT,
                               "rope: strides must be non-negative (q %lld, %lld, %lld; k %lld, %lld, %lld)",
                               (long long)strides[0], (long long)strides[1], (long long)strides[2],
                               (long long)strides[3], (long long)strides[4], (long long)strides[5]);
    vcattn_status s;
    for (int i = 0; i < 4; i++) {
        const vcattn_tensor t = vcattn_rope_table(rope, i, i < 2 ? q : k);
        if ((s = check_tensor(ctx, &t, rope_table_names[i]))) return s;
    }
    return VCATTN_OK;
}

vcattn_status vcattn_validate_call(vcattn_context *ctx, const vcattn_config *cfg,
                                   const vcattn_tensor *q, const vcattn_tensor *k,
                                   const vcattn_tensor *v, const vcattn_tensor *out,
                                   const float *lse, const vcattn_rope *rope, int scan_host) {
    if (!cfg || !q || !k || !v)
        return vcattn_fail(ctx, VCATTN_ERR_NULL_POINTER, "cfg, q, k, v and out must not be NULL");
    const int has_out = out != NULL;
    if (!out) out = q;  /* inputs alone: q's shape stands for out's */
    vcattn_status s;
    if ((s = check_tensor(ctx, q, "q")) || (s = check_tensor(ctx, k, "k")) ||
        (s = check_tensor(ctx, v, "v")) || (s = check_tensor(ctx, out, "out")))
        return s;
    int64_t d = q->head_dim;
    if (k->head_dim != d || v->head_dim != d || out->head_dim != d)
        return vcattn_fail(ctx, VCATTN_ERR_SHAPE_MISMATCH,
                           "head dims differ: q %lld, k %lld, v %lld, out %lld", (long long)d,
                           (long long)k->head_dim, (long long)v->head_dim, (long long)out->head_dim);
    if (d > VCATTN_MAX_HEAD_DIM || d % 8 != 0)
        return vcattn_fail(ctx, VCATTN_ERR_UNSUPPORTED_HEAD_DIM,
                           "head dim %lld unsupported: the CPU backend takes multiples of 8 up to %d",
                           (long long)d, VCATTN_MAX_HEAD_DIM);
    if (k->batch != q->batch || v->batch != q->batch || out->batch != q->batch)
        return vcattn_fail(ctx, VCATTN_ERR_SHAPE_MISMATCH, "batch sizes differ between q, k, v, out");
    if (k->heads != v->heads || k->tokens != v->tokens)
        return vcattn_fail(ctx, VCATTN_ERR_SHAPE_MISMATCH,
                           "k and v must have the same heads and tokens (k %lldx%lld, v %lldx%lld)",
                           (long long)k->heads, (long long)k->tokens, (long long)v->heads,
                           (long long)v->tokens);
    if (out->heads != q->heads || out->tokens != q->tokens)
        return vcattn_fail(ctx, VCATTN_ERR_SHAPE_MISMATCH, "out must have q's heads and tokens");
    if (q->heads % k->heads != 0)
        return vcattn_fail(ctx, VCATTN_ERR_SHAPE_MISMATCH,
                           "query heads (%lld) must be a multiple of key/value heads (%lld)",
                           (long long)q->heads, (long long)k->heads);
    char why[VCATTN_ERRMSG_LEN];
    if ((s = vcattn_config_check(cfg, d, why, sizeof why))) return vcattn_fail(ctx, s, "%s", why);
    if (rope && (s = check_rope(ctx, rope, q, k))) return s;
    if (has_out && (s = check_aliasing(ctx, q, k, v, out, lse, rope))) return s;
    if ((uintptr_t)lse % sizeof(float) != 0)
        return vcattn_fail(ctx, VCATTN_ERR_INVALID_ARGUMENT, "lse: pointer not aligned to 4-byte floats");
    if (cfg->check_finite && scan_host) {
        const int threads = cpu_thread_count(cfg);
        if (!scan_within(q, FLT_MAX, threads)) return vcattn_fail(ctx, VCATTN_ERR_NONFINITE_INPUT, "q contains NaN or Inf");
        if (!scan_within(k, FLT_MAX, threads)) return vcattn_fail(ctx, VCATTN_ERR_NONFINITE_INPUT, "k contains NaN or Inf");
        if (!scan_within(v, FLT_MAX, threads)) return vcattn_fail(ctx, VCATTN_ERR_NONFINITE_INPUT, "v contains NaN or Inf");
        for (int i = 0; rope && i < 4; i++)
            if (!table_finite(vcattn_rope_table(rope, i, i < 2 ? q : k), threads))
                return vcattn_fail(ctx, VCATTN_ERR_NONFINITE_INPUT, "rope tables contain NaN or Inf");
        /* v's own dtype may hold more than out's (float32 or bfloat16 v, float16 out) */
        const float out_max = vcattn_dtype_max(out->dtype);
        if (has_out && out_max < vcattn_dtype_max(v->dtype) && !scan_within(v, out_max, threads))
            return vcattn_fail_out_range(ctx, out->dtype);
    }
    return VCATTN_OK;
}

/* ------------------------------------------------------------- dispatch */

void vcattn_resolve_call(const vcattn_config *cfg, const vcattn_tensor *q, const vcattn_tensor *k,
                         vcattn_layer *layer, vcattn_call *call) {
    call->cfg = *cfg;
    call->cfg.p_format = vcattn_applied_p_format(cfg, k->tokens);
    call->batch = q->batch; call->heads_q = q->heads; call->heads_kv = k->heads;
    call->tokens_q = q->tokens; call->tokens_k = k->tokens; call->head_dim = q->head_dim;
    call->sm_scale = vcattn_effective_sm_scale(cfg, q->head_dim);
    call->clusters = vsmooth_cluster_count(cfg, k->tokens);
    call->plan = vsmooth_resolve_plan(cfg, layer, call->batch, call->heads_kv, call->tokens_k, call->head_dim,
                                      call->clusters);
    call->layer = layer;
}

vcattn_status vcattn_attention(vcattn_context *ctx, const vcattn_config *cfg,
                               const vcattn_tensor *q, const vcattn_tensor *k,
                               const vcattn_tensor *v, const vcattn_tensor *out, float *lse,
                               const vcattn_rope *rope, vcattn_layer *layer) {
    if (!ctx) return VCATTN_ERR_NULL_POINTER;
    ctx->last_error[0] = '\0';
    if (!out) return vcattn_fail(ctx, VCATTN_ERR_NULL_POINTER, "cfg, q, k, v and out must not be NULL");
    vcattn_status s = vcattn_validate_call(ctx, cfg, q, k, v, out, lse, rope,
                                          ctx->backend != VCATTN_BACKEND_CUDA);
    if (s) return s;
    vcattn_call call;
    vcattn_resolve_call(cfg, q, k, layer, &call);
    vcattn_new_grouping grouping = {NULL, NULL, NULL, 0, NULL};
    switch (ctx->backend) {
    case VCATTN_BACKEND_CPU: s = cpu_attention(ctx, &call, q, k, v, out, lse, rope, &grouping); break;
    case VCATTN_BACKEND_CUDA: s = cuda_attention(ctx, &call, q, k, v, out, lse, rope, &grouping); break;
    default: s = vcattn_fail(ctx, VCATTN_ERR_INTERNAL, "context has no resolved backend");
    }
    if (s == VCATTN_OK && (grouping.perm || grouping.device_perm)) {
        if (grouping.perm)
            vsmooth_layer_adopt(layer, call.batch, call.heads_kv, call.tokens_k, call.head_dim, call.clusters,
                                grouping.centroids, grouping.perm);
        if (grouping.device_perm)
            vsmooth_layer_keep_device_perm(layer, grouping.device_perm, grouping.device, grouping.release);
        return VCATTN_OK;
    }
    free(grouping.centroids);
    free(grouping.perm);
    if (grouping.device_perm) grouping.release(grouping.device_perm);
    return s;
}
