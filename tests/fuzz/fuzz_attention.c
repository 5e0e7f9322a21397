/* libFuzzer harness over vcattn_attention on the CPU backend: the input bytes
 * choose the method, switches (Q smoothing included), shapes, strides,
 * dtype, layout, the optional outputs and the values (normal, huge, tiny,
 * NaN, Inf), then the call's
 * promises are checked:
 *   - the status is a known one with a message;
 *   - on error nothing is written to out or lse;
 *   - on success nothing outside the views is written, and with finite
 *     moderate inputs every output is finite;
 *   - NaN or Inf in the inputs with check_finite on is always an error;
 *   - finite inputs of any magnitude (+-3e38 V blocks with mixed signs
 *     among them) accepted with the check on give no NaN, and into a
 *     float16 out (the out dtype at times differs from the inputs') no Inf;
 *   - an out view whose heads overlap, and config fields past their
 *     bounds, are refused;
 *   - V times 2^+-100 (float32 or bfloat16, moderate values) gives the
 *     output times 2^+-100, bit for bit: no step on V may lose anything at
 *     the float limits that ordinary V keeps;
 *   - q times 2^-a and k times 2^+a (a in 93..124, every element scaled
 *     exactly) keep every score: with the check on, the call is refused or
 *     gives the same output (within 2^-6 of V's largest magnitude): no row
 *     may silently lose its scores to an 8-bit scale that underflows;
 *   - sizes past the limits are refused and write nothing: k and v
 *     broadcast (strides 0) to 2^31..2^62 tokens, an out head stride whose
 *     byte offset wraps the address space onto q;
 *   - a layer plan for any config returns (a group_refresh of 0 included);
 *   - a progress callback that runs a call on a second context (with its own
 *     callback) returns.
 * A broken promise aborts (libFuzzer reports it with the input). Run through
 * tests/fuzz/run_fuzz.sh (ASan + UBSan). */
#include "vcattn.h"
#include "vcattn_inspect.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define GUARD 0xA5u
#define MAX_ELEMS (1 << 20)

typedef struct {
    const uint8_t *p;
    size_t n;
} bytes;

static unsigned take(bytes *b, unsigned range) {  /* 0 .. range-1; 0 once the input is used up */
    if (!b->n || !range) return 0;
    unsigned v = *b->p++;
    b->n--;
    return v % range;
}

static void promise(int ok, const char *what) {
    if (!ok) {
        fprintf(stderr, "broken promise: %s\n", what);
        abort();
    }
}

static float value_of(bytes *b, int *nonfinite, int *huge) {
    switch (take(b, 18)) {  /* an exhausted input gives ordinary values */
    case 17: *huge = 1; return -3.4028235e38f;  /* the float maximum */
    case 16: return 1.1754944e-38f;         /* the smallest normal */
    case 15: *nonfinite = 1; return NAN;
    case 14: *nonfinite = 1; return INFINITY;
    case 13: *nonfinite = 1; return -INFINITY;
    case 12: *huge = 1; return 3.0e38f;     /* near the float and bf16 maxima */
    case 11: *huge = 1; return -6.5e4f;     /* the float16 maximum */
    case 10: return 1.0e-40f;               /* float32 subnormal */
    case 9: return 0.0f;
    case 8: return -0.0f;
    default: return ((int)take(b, 255) - 127) / 32.0f;
    }
}

/* One stored element as a float (16-bit types widen exactly, Inf and NaN kept). */
static float elem_value(const uint8_t *e, vcattn_dtype dt) {
    if (dt == VCATTN_DTYPE_F32) {
        float x;
        memcpy(&x, e, 4);
        return x;
    }
    uint16_t h;
    memcpy(&h, e, 2);
    return dt == VCATTN_DTYPE_BF16 ? vcattn_bf16_to_f32(h) : vcattn_f16_to_f32(h);
}

static int finite_elem(const uint8_t *e, vcattn_dtype dt) { return isfinite(elem_value(e, dt)); }
static int not_nan_elem(const uint8_t *e, vcattn_dtype dt) { return !isnan(elem_value(e, dt)); }

/* A view of `count` logical elements inside a buffer with guard bytes after it. */
typedef struct {
    vcattn_tensor t;
    uint8_t *buf;
    size_t bytes;
} view;

static size_t elem_size(vcattn_dtype dt) { return dt == VCATTN_DTYPE_F32 ? 4 : 2; }

/* Calls fn on the byte offset of every element of t (strided, as the call
 * sees it) until it returns 0; 1 if it never did. */
static int each_elem(const vcattn_tensor *t, int (*fn)(size_t at, void *arg), void *arg) {
    const size_t es = elem_size(t->dtype);
    for (int64_t b = 0; b < t->batch; b++)
        for (int64_t h = 0; h < t->heads; h++)
            for (int64_t n = 0; n < t->tokens; n++)
                for (int64_t c = 0; c < t->head_dim; c++)
                    if (!fn(es * (size_t)(b * t->stride_batch + h * t->stride_head + n * t->stride_token + c), arg))
                        return 0;
    return 1;
}

typedef struct {
    const view *v;
    int (*test)(const uint8_t *, vcattn_dtype);
} elem_test;

static int test_at(size_t at, void *arg) {
    const elem_test *e = arg;
    return e->test(e->v->buf + at, e->v->t.dtype);
}

/* 1 if test holds for every element of the view. */
static int every_elem(const view *v, int (*test)(const uint8_t *, vcattn_dtype)) {
    elem_test e = {v, test};
    return each_elem(&v->t, test_at, &e);
}

static int make_view(view *v, vcattn_dtype dt, int64_t b, int64_t h, int64_t n, int64_t d, int nhd,
                     int64_t pad, int bad_stride) {
    int64_t sn = nhd ? h * (d + pad) : d + pad, sh = nhd ? d + pad : n * (d + pad), sb = h * n * (d + pad);
    if (bad_stride == 1) sn = -sn;       /* negative */
    if (bad_stride == 2) sh = 0;         /* heads overlap */
    int64_t count = b * h * n * (d + pad);
    if (count <= 0 || count > MAX_ELEMS) count = 1;
    v->bytes = (size_t)count * elem_size(dt) + 64;
    v->buf = malloc(v->bytes);
    if (!v->buf) return 0;
    memset(v->buf, GUARD, v->bytes);
    v->t = (vcattn_tensor){v->buf, dt, b, h, n, d, sb, sh, sn};
    return 1;
}

/* 1 if every element is 0 or of magnitude in [2^-20, 2^20]. */
static int moderate_elem(const uint8_t *e, vcattn_dtype dt) {
    const float x = fabsf(elem_value(e, dt));
    return x == 0.0f || (x >= 0x1p-20f && x <= 0x1p20f);
}

/* Two views of one layout (float32 or bfloat16) and a power of two. */
typedef struct {
    const view *a, *b;
    int s;
} scaled_pair;

static int scale_at(size_t at, void *arg) {  /* b's element = a's times 2^s (exact) */
    const scaled_pair *p = arg;
    const float x = ldexpf(elem_value(p->a->buf + at, p->a->t.dtype), p->s);
    if (p->a->t.dtype == VCATTN_DTYPE_F32) {
        memcpy(p->b->buf + at, &x, 4);
    } else {
        const uint16_t u = vcattn_f32_to_bf16(x);
        memcpy(p->b->buf + at, &u, 2);
    }
    return 1;
}

static int is_scaled_at(size_t at, void *arg) {
    const scaled_pair *p = arg;
    return elem_value(p->b->buf + at, p->b->t.dtype) == ldexpf(elem_value(p->a->buf + at, p->a->t.dtype), p->s);
}

/* dst: a copy of src (same layout) with every element times 2^s. */
static int scaled_copy(const view *src, int s, view *dst) {
    *dst = *src;
    if (!(dst->buf = malloc(src->bytes))) return 0;
    memcpy(dst->buf, src->buf, src->bytes);
    dst->t.data = dst->buf;
    scaled_pair p = {src, dst, s};
    return each_elem(&src->t, scale_at, &p);
}

/* 1 if every element of b is the element of a times 2^s. */
static int scaled_outputs(const view *a, const view *b, int s) {
    scaled_pair p = {a, b, s};
    return each_elem(&a->t, is_scaled_at, &p);
}

static int roundtrips_at(size_t at, void *arg) {  /* a's element times 2^s is exact: b holds it */
    const scaled_pair *p = arg;
    const float x = elem_value(p->a->buf + at, p->a->t.dtype), y = elem_value(p->b->buf + at, p->b->t.dtype);
    return isfinite(y) && ldexpf(y, -p->s) == x;
}

/* dst: src times 2^s, where every element scales exactly (no rounding, no
 * overflow); 0 (dst freed) where one does not. */
static int exactly_scaled_copy(const view *src, int s, view *dst) {
    if (!scaled_copy(src, s, dst)) return 0;
    scaled_pair p = {src, dst, s};
    if (each_elem(&src->t, roundtrips_at, &p)) return 1;
    free(dst->buf);
    return 0;
}

/* dst: a copy of src's layout whose values vary with token and channel
 * (small integers, exact in every dtype), so attention that moves shows. */
static int varied_copy(const view *src, view *dst) {
    *dst = *src;
    if (!(dst->buf = malloc(src->bytes))) return 0;
    memcpy(dst->buf, src->buf, src->bytes);
    dst->t.data = dst->buf;
    const vcattn_tensor *t = &src->t;
    const size_t es = elem_size(t->dtype);
    for (int64_t b = 0; b < t->batch; b++)
        for (int64_t h = 0; h < t->heads; h++)
            for (int64_t n = 0; n < t->tokens; n++)
                for (int64_t c = 0; c < t->head_dim; c++) {
                    const float x = (float)((n * 3 + c + h) % 9) - 4.0f;
                    uint8_t *e = dst->buf + es * (size_t)(b * t->stride_batch + h * t->stride_head +
                                                          n * t->stride_token + c);
                    if (t->dtype == VCATTN_DTYPE_F32) {
                        memcpy(e, &x, 4);
                    } else {
                        const uint16_t u = t->dtype == VCATTN_DTYPE_BF16 ? vcattn_f32_to_bf16(x) : vcattn_f32_to_f16(x);
                        memcpy(e, &u, 2);
                    }
                }
    return 1;
}

typedef struct {
    const view *a, *b;
    float tol;
} close_pair;

static int close_at(size_t at, void *arg) {  /* false for NaN */
    const close_pair *p = arg;
    return fabsf(elem_value(p->a->buf + at, p->a->t.dtype) - elem_value(p->b->buf + at, p->b->t.dtype)) <= p->tol;
}

typedef struct {
    const view *v;
    float max;
} max_abs_acc;

static int max_abs_at(size_t at, void *arg) {
    max_abs_acc *m = arg;
    m->max = fmaxf(m->max, fabsf(elem_value(m->v->buf + at, m->v->t.dtype)));
    return 1;
}

/* 1 if every element of b is within tol times V's largest magnitude of a's. */
static int close_outputs(const view *a, const view *b, const view *v, float tol) {
    max_abs_acc m = {v, 0.0f};
    each_elem(&v->t, max_abs_at, &m);
    close_pair p = {a, b, tol * m.max};
    return each_elem(&a->t, close_at, &p);
}

/* huge_mixed > 0: every value +-3e38 (bf16 and float32 hold it), the signs
 * a pattern of few input bytes: 1 scattered by a seeded hash, 2 one token
 * positive in a sea of negatives (the V blocks whose demeaned residual once
 * overflowed), 3 alternating channels. */
static float huge_value(int pattern, uint32_t seed, int64_t token, int64_t c, int64_t i) {
    int neg;
    if (pattern == 1) {
        uint32_t h = (uint32_t)i * 2654435761u ^ seed;
        neg = (int)((h ^ (h >> 15)) * 2246822519u >> 31);
    } else if (pattern == 2) {
        neg = token % 128 != seed % 128;
    } else {
        neg = (int)(c & 1);
    }
    return neg ? -3.0e38f : 3.0e38f;
}

static void fill(view *v, bytes *b, int *nonfinite, int *huge, int huge_mixed) {
    const uint32_t seed = huge_mixed ? take(b, 256) : 0;
    const vcattn_tensor *t = &v->t;
    if (t->batch * t->heads * t->tokens * t->head_dim > MAX_ELEMS || t->stride_token < 0 || t->stride_head <= 0)
        return;
    for (int64_t ib = 0; ib < t->batch; ib++)
        for (int64_t ih = 0; ih < t->heads; ih++)
            for (int64_t in = 0; in < t->tokens; in++)
                for (int64_t c = 0; c < t->head_dim; c++) {
                    int64_t at = ib * t->stride_batch + ih * t->stride_head + in * t->stride_token + c;
                    if ((size_t)(at + 1) * elem_size(t->dtype) > v->bytes - 64) continue;
                    float x = huge_mixed ? huge_value(huge_mixed, seed, in, c, at) : value_of(b, nonfinite, huge);
                    if (t->dtype == VCATTN_DTYPE_F32) {
                        memcpy(v->buf + at * 4, &x, 4);
                    } else {
                        const uint16_t h = t->dtype == VCATTN_DTYPE_BF16 ? vcattn_f32_to_bf16(x) : vcattn_f32_to_f16(x);
                        memcpy(v->buf + at * 2, &h, 2);
                        if (!finite_elem(v->buf + at * 2, t->dtype)) *nonfinite = 1;  /* overflowed in 16 bits */
                    }
                }
}

/* A progress callback that runs one small call on a second context, whose
 * own progress callback counts. */
typedef struct {
    vcattn_context *inner;
    int inner_calls;
    vcattn_status status;
} nested;

static void count_progress(int64_t done, int64_t total, void *user) {
    (void)done; (void)total;
    ++*(int *)user;
}

static void call_inner(int64_t done, int64_t total, void *user) {
    (void)done; (void)total;
    nested *n = user;
    if (n->inner_calls) return;
    static float x[2 * 16 * 8], o[2 * 16 * 8];
    for (int i = 0; i < 2 * 16 * 8; i++) x[i] = (float)(i % 7) - 3.0f;
    vcattn_tensor t = vcattn_tensor_bhnd(x, VCATTN_DTYPE_F32, 1, 2, 16, 8);
    vcattn_tensor to = vcattn_tensor_bhnd(o, VCATTN_DTYPE_F32, 1, 2, 16, 8);
    vcattn_config c = vcattn_config_default();
    c.num_threads = 1;
    vcattn_set_progress(n->inner, count_progress, &n->inner_calls);
    n->status = vcattn_attention(n->inner, &c, &t, &t, &t, &to, NULL, NULL, NULL);
    promise(n->inner_calls > 0, "the inner call's progress ran");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    bytes in = {data, size};
    const char *const *methods = vcattn_method_names();
    int nmethods = 0;
    while (methods[nmethods]) nmethods++;

    vcattn_config cfg;
    if (vcattn_config_from_method(methods[take(&in, (unsigned)nmethods)], &cfg)) abort();
    cfg.num_threads = 1;
    cfg.check_finite = take(&in, 4) != 0;           /* mostly on */
    if (take(&in, 4) == 0) cfg.hadamard = !cfg.hadamard;
    if (take(&in, 8) == 0) cfg.q_smoothing = 1;
    if (take(&in, 8) == 0) cfg.sink_guard = 0.5f * (float)take(&in, 4) - 0.25f;  /* -0.25 and 1.25 are invalid */
    if (take(&in, 8) == 0) cfg.kmeans_clusters = (int)take(&in, 40);
    if (take(&in, 8) == 0) cfg.sm_scale = (float)take(&in, 4) - 1.0f;   /* -1 is invalid */
    /* mostly ExpCast at every length (the fuzzed shapes are short); -1 is invalid */
    cfg.expcast_min_keys = take(&in, 8) == 0 ? (int)take(&in, 4) * 100 - 1 : 0;

    static const int64_t dims[] = {8, 16, 32, 64, 128, 0, 7, 136};
    const int64_t d = dims[take(&in, 8)];
    const int64_t b = 1 + take(&in, 2), hkv = 1 + take(&in, 2), hq = hkv * (1 + take(&in, 2));
    const int64_t nq = 1 + take(&in, 40), nk = 1 + take(&in, 200) + (take(&in, 2) ? 0 : 128);
    const vcattn_dtype dt = (vcattn_dtype)take(&in, 3);
    /* at times an out dtype other than the inputs' (and on an input used up
     * by here: float32 in, float16 out, with the +-3e38 V below) */
    const vcattn_dtype out_dt = take(&in, 4) == 0 ? (vcattn_dtype)((dt + 1 + take(&in, 2)) % 3) : dt;
    const int nhd = take(&in, 2), pad = (int)take(&in, 3) * 8;
    const int bad = take(&in, 16) == 0 ? 1 + (int)take(&in, 2) : 0;

    const int out_overlap = take(&in, 16) == 0 && hq > 1;  /* out heads on top of each other */
    if (take(&in, 16) == 0) cfg.num_threads = take(&in, 2) ? VCATTN_MAX_THREADS + 1 : 100000;
    if (take(&in, 16) == 0) cfg.kmeans_iters = VCATTN_MAX_KMEANS_ITERS + 1 + (int)take(&in, 200);
    if (take(&in, 16) == 0) cfg.group_refresh = (int)take(&in, 3);  /* 0 is invalid */
    /* V-Smooth's attention probe: mostly 64 rows, at times 1, 3 or past the bound */
    if (take(&in, 4) == 0) cfg.vsmooth_probe_rows = take(&in, 8) == 0 ? VCATTN_MAX_PROBE_ROWS + 1 : 1 + 2 * (int)take(&in, 2) + (take(&in, 2) ? 62 : 0);
    /* The order chosen per head at a grouping step: from the input's last
     * byte (read, not taken, so the seed corpus keeps its meaning), about
     * one input in 16: 1 to 241 sampled rows, or past the bound. */
    const unsigned tail = size ? data[size - 1] : 0;
    if ((tail & 15) == 9) cfg.vsmooth_order_rows = tail >> 4 == 15 ? VCATTN_MAX_ORDER_ROWS + 1 : 1 + 16 * (int)(tail >> 4);
    /* 1: k and v broadcast to a huge token count; 2: out's heads wrap onto q */
    const int size_case = take(&in, 32) == 0 ? 1 + (int)take(&in, 2) : 0;
    const int nest_progress = take(&in, 32) == 0;

    view q, k, v, out;
    memset(&q, 0, sizeof q); memset(&k, 0, sizeof k); memset(&v, 0, sizeof v); memset(&out, 0, sizeof out);
    if (!make_view(&q, dt, b, hq, nq, d, nhd, pad, bad) || !make_view(&k, dt, b, hkv, nk, d, nhd, pad, 0) ||
        !make_view(&v, dt, b, hkv, nk, d, nhd, pad, 0) ||
        !make_view(&out, out_dt, b, hq, nq, d, nhd, pad, out_overlap ? 2 : 0))
        goto done;
    if (take(&in, 16) == 0) out.t.tokens = nq + 1;  /* shape mismatch */

    int nonfinite = 0, huge = 0;
    const int huge_v = dt != VCATTN_DTYPE_F16 && take(&in, 8) == 0 ? 1 + (int)take(&in, 3) : 0;
    fill(&q, &in, &nonfinite, &huge, 0);
    fill(&k, &in, &nonfinite, &huge, 0);
    fill(&v, &in, &nonfinite, &huge, huge_v);

    const int want_lse = take(&in, 2);
    const size_t lse_count = (size_t)(b * hq * nq);
    float *lse = want_lse ? malloc((lse_count + 4) * sizeof(float)) : NULL;
    if (lse) memset(lse, GUARD, (lse_count + 4) * sizeof(float));

    vcattn_rope rope, *ropep = NULL;
    float *tab = NULL;
    if (take(&in, 3) == 0 && d > 0 && d % 2 == 0) {
        const int64_t rows = nq > nk ? nq : nk;
        tab = malloc((size_t)(rows * d) * sizeof(float));
        if (tab) {
            for (int64_t i = 0; i < rows * d; i++) tab[i] = cosf((float)i * 0.37f);
            if (take(&in, 32) == 31) tab[take(&in, (unsigned)(rows * d / 2))] = NAN, nonfinite = 1;  /* not on an exhausted input */
            rope = (vcattn_rope){take(&in, 2) ? VCATTN_ROPE_HALF_SPLIT : VCATTN_ROPE_INTERLEAVED,
                                 tab, tab + rows * d / 2, tab, tab + rows * d / 2};
            ropep = &rope;
        }
    }

    vcattn_layer *layer = NULL;
    if (take(&in, 2)) {
        vcattn_layer_create(&layer, 1 + (int)take(&in, 40));
        if (layer) vcattn_layer_set_step(layer, (int)take(&in, 12));
    }

    if (layer) {  /* any config, valid or not: a plan comes back */
        const vcattn_grouping plan = vcattn_layer_plan(layer, &cfg);
        promise(plan <= VCATTN_GROUP_PRINCIPAL, "a layer plan in range");
        promise(cfg.group_refresh >= 1 || plan == VCATTN_GROUP_NONE, "no plan for an invalid config");
    }
    if (size_case == 1) {  /* after fill(): the views now claim far more tokens than they hold */
        k.t.tokens = v.t.tokens = (int64_t)1 << (31 + take(&in, 32));
        k.t.stride_batch = k.t.stride_head = k.t.stride_token = 0;
        v.t.stride_batch = v.t.stride_head = v.t.stride_token = 0;
    }
    /* head 1 of a float32 out lands on q once its byte offset wraps past 2^64 */
    const int wraps = size_case == 2 && hq > 1 && d > 0 && dt == VCATTN_DTYPE_F32;
    if (wraps)
        out.t.stride_head = ((int64_t)1 << 62) + (int64_t)((uintptr_t)q.buf - (uintptr_t)out.buf) / 4;
    uint8_t *q_before = wraps ? malloc(q.bytes) : NULL;
    if (q_before) memcpy(q_before, q.buf, q.bytes);

    vcattn_context *ctx = NULL;
    if (vcattn_create(&ctx, VCATTN_BACKEND_CPU)) abort();
    nested nest = {NULL, 0, VCATTN_OK};
    if (nest_progress && vcattn_create(&nest.inner, VCATTN_BACKEND_CPU) == VCATTN_OK)
        vcattn_set_progress(ctx, call_inner, &nest);
    uint8_t *out_before = malloc(out.bytes);
    if (!out_before) goto cleanup;
    memcpy(out_before, out.buf, out.bytes);

    vcattn_status st = vcattn_attention(ctx, &cfg, &q.t, &k.t, &v.t, &out.t, lse, ropep, layer);
    promise(st >= 0 && st < VCATTN_STATUS_COUNT, "status in range");
    promise(!(size_case == 1 && st != VCATTN_ERR_INVALID_ARGUMENT && st != VCATTN_ERR_SHAPE_MISMATCH &&
              st != VCATTN_ERR_UNSUPPORTED_HEAD_DIM && st != VCATTN_ERR_UNSUPPORTED_DTYPE &&
              st != VCATTN_ERR_NULL_POINTER),
            "k and v broadcast to 2^31 tokens or more refused as an invalid argument");
    if (q_before) {
        promise(st != VCATTN_OK, "an out stride wrapping onto q refused");
        promise(memcmp(q_before, q.buf, q.bytes) == 0, "q not written through a wrapping out stride");
    }
    promise(!(nest.inner && st == VCATTN_OK) || nest.status == VCATTN_OK,
            "a progress callback's call on a second context succeeded");
    promise(vcattn_status_string(st) != NULL, "status string");
    promise(!(st == VCATTN_OK && out_overlap), "an out view whose heads overlap refused");
    promise(!(st == VCATTN_OK && (cfg.num_threads > VCATTN_MAX_THREADS || cfg.kmeans_iters > VCATTN_MAX_KMEANS_ITERS ||
                                  cfg.vsmooth_probe_rows > VCATTN_MAX_PROBE_ROWS ||
                                  cfg.vsmooth_order_rows > VCATTN_MAX_ORDER_ROWS)),
            "config fields past their bounds refused");
    if (st != VCATTN_OK) {
        promise(vcattn_last_error(ctx)[0] != '\0', "an error has a message");
        promise(memcmp(out_before, out.buf, out.bytes) == 0, "nothing written to out on error");
        if (lse) {
            const uint8_t *l = (const uint8_t *)lse;
            for (size_t i = 0; i < (lse_count + 4) * sizeof(float); i++) promise(l[i] == GUARD, "lse untouched on error");
        }
    } else {
        promise(!(nonfinite && cfg.check_finite), "NaN/Inf input accepted with check_finite on");
        for (size_t i = out.bytes - 64; i < out.bytes; i++) promise(out.buf[i] == GUARD, "no write past out");
        if (lse) {
            const uint8_t *l = (const uint8_t *)(lse + lse_count);
            for (size_t i = 0; i < 4 * sizeof(float); i++) promise(l[i] == GUARD, "no write past lse");
        }
        if (!nonfinite && cfg.check_finite)  /* finite inputs, any magnitude: never NaN */
            promise(every_elem(&out, not_nan_elem), "no NaN output for finite inputs accepted");
        if (!nonfinite && cfg.check_finite && out_dt == VCATTN_DTYPE_F16)  /* V past 65504 refused, stores saturate */
            promise(every_elem(&out, finite_elem), "finite float16 output for finite inputs accepted");
        if (!nonfinite && !huge && !huge_v)
            promise(every_elem(&out, finite_elem), "finite output for finite moderate inputs");
        const int shift = take(&in, 2) ? 100 : -100;
        view vs, outs;
        if (!layer && !nonfinite && !huge && (dt == VCATTN_DTYPE_F32 || dt == VCATTN_DTYPE_BF16) && out_dt == dt &&
            every_elem(&v, moderate_elem) && scaled_copy(&v, shift, &vs)) {
            if (scaled_copy(&out, 0, &outs)) {
                vcattn_status s2 = vcattn_attention(ctx, &cfg, &q.t, &k.t, &vs.t, &outs.t, NULL, ropep, NULL);
                promise(s2 == VCATTN_OK && scaled_outputs(&out, &outs, shift),
                        "V times 2^+-100 gives the output times 2^+-100");
                free(outs.buf);
            }
            free(vs.buf);
        }
        /* q times 2^-a and k times 2^+a keep every score: refused (a row's
         * 8-bit scale underflows and would lose scores past
         * VCATTN_UNSEEN_SCORE_LOG2, or k's Hadamard overflows), or the same
         * output within 2^-6 of V's largest magnitude (bf16 rounding; rows
         * whose scale underflows may lose scores up to 2^-10) */
        const int qk_shift = 124 - (int)take(&in, 32);  /* 124 on a used-up input: rows of amax under 8 unseen */
        view qs, ks, vt, out1, out2;
        if (!layer && !nonfinite && !huge && cfg.check_finite && out_dt == dt &&
            (dt == VCATTN_DTYPE_F32 || dt == VCATTN_DTYPE_BF16) && every_elem(&q, moderate_elem) &&
            every_elem(&k, moderate_elem) && exactly_scaled_copy(&q, -qk_shift, &qs)) {
            if (exactly_scaled_copy(&k, qk_shift, &ks)) {
                /* V varied by token (a fuzzed V is often constant), the outputs fresh */
                if (varied_copy(&v, &vt) && scaled_copy(&out, 0, &out1) && scaled_copy(&out, 0, &out2)) {
                    const vcattn_status s1 = vcattn_attention(ctx, &cfg, &q.t, &k.t, &vt.t, &out1.t, NULL, ropep, NULL);
                    const vcattn_status s3 = vcattn_attention(ctx, &cfg, &qs.t, &ks.t, &vt.t, &out2.t, NULL, ropep, NULL);
                    promise(s1 != VCATTN_OK || s3 != VCATTN_OK || close_outputs(&out1, &out2, &vt, 0x1p-6f),
                            "q times 2^-a and k times 2^+a refused or the same output");
                    free(out1.buf);
                    free(out2.buf);
                }
                free(vt.buf);
                free(ks.buf);
            }
            free(qs.buf);
        }
    }
    free(out_before);
cleanup:
    free(q_before);
    vcattn_destroy(nest.inner);
    vcattn_destroy(ctx);
    vcattn_layer_destroy(layer);
    free(tab);
    free(lse);
done:
    free(q.buf); free(k.buf); free(v.buf); free(out.buf);
    return 0;
}
