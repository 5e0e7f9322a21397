/* The CUDA backend against the CPU backend (the oracle), on the GPU.
 * Skips (exit 77, with the reason) where no sm_90 GPU is usable, as in CI.
 *
 * Per shape and method (sage2, vsmooth, vc; V-Smooth in the principal order, as a
 * call without a layer runs it, and after k-means, through a one-step layer): the GPU output's error to the
 * FP64 reference is within twice the CPU emulation's plus a small atol, the
 * GPU and CPU outputs agree far more closely than either agrees with the
 * reference, LSE agrees, no NaN, guard words around the output untouched,
 * repeated runs bit-identical. Shapes cover tails (N = 1, 17, 127, 129, 1000,
 * 4097), Nq != Nk, B = 2, GQA, the [B,N,H,D] layout, strided views, fp16/bf16
 * inputs and outputs, RoPE and the Hadamard, near-zero value tokens (the
 * sink guard), more (batch, head) pairs than one grid dimension holds, and
 * more work tiles than SMs. Then the layer schedule (same permutation as
 * the CPU), V blocks on the thresholds that decide whether a block keeps
 * its mean, device-resident tensors, and bad input. VCATTN_TEST_QUICK=1
 * keeps the shapes of at most 1000 tokens and 16 (batch, head) pairs, and
 * the work-tile shapes (few keys): every kernel and variant still runs,
 * small enough for the compute-sanitizer tools. */
#include "testlib.h"
#include "vcattn.h"
#include "reference.h"
#include "vcattn_inspect.h"

#include <string.h>
#ifdef VCATTN_WITH_CUDA
#include <cuda_runtime.h>
#endif

#define GUARD 64
#define GUARD_WORD 0x5aa5f00du

enum { V_SINKS = 1, V_FLAT = 2, V_ATTENDED = 3 };  /* shape_t.v_case */
/* shape_t.rope: 1 RoPE on interleaved pairs (2i, 2i + 1); ROPE_HALVES on pairs
 * (i, i + D/2); ROPE_PER_HEAD added: each batch entry and head has its own
 * table rows, laid out [B][N][H][D/2] as LTX-Video's (strided tables). */
enum { ROPE_HALVES = 2, ROPE_PER_HEAD = 4 };

typedef struct {
    const char *name;
    int64_t b, hq, hkv, nq, nk, d;
    int nhd;            /* [B,N,H,D] layout */
    int pad;            /* extra elements per row: a strided (non-contiguous) view */
    vcattn_dtype dtype; /* inputs and output */
    int rope;           /* 0: none; else 1 or ROPE_HALVES, with ROPE_PER_HEAD or not */
    const char *method;
    int v_case;         /* 0: clusters; V_SINKS: every 300th value token near zero
                         * (the sink guard); V_FLAT: odd heads plain noise, whose
                         * block means carry under 2% of the energy (left
                         * undemeaned); V_ATTENDED: every 300th key draws most
                         * of every row's attention, its value half the others'
                         * (the attention probe's case) */
} shape_t;

/* Fills a view's elements: per-head V clusters (so grouping matters), K offsets. */
static void *make_tensor(const shape_t *s, int64_t heads, int64_t n, int kind, vcattn_tensor *t) {
    int64_t row = s->d + s->pad;
    size_t count = (size_t)(s->b * heads * n * row);
    size_t es = s->dtype == VCATTN_DTYPE_F32 ? 4 : 2;
    void *data = calloc(count, es);
    if (s->nhd) {
        *t = vcattn_tensor_bnhd(data, s->dtype, s->b, heads, n, s->d);
        t->stride_token = heads * row; t->stride_head = row; t->stride_batch = n * heads * row;
    } else {
        *t = vcattn_tensor_bhnd(data, s->dtype, s->b, heads, n, s->d);
        t->stride_token = row; t->stride_head = n * row; t->stride_batch = heads * n * row;
    }
    for (int64_t b = 0; b < s->b; b++)
        for (int64_t h = 0; h < heads; h++)
            for (int64_t i = 0; i < n; i++) {
                int cluster = (int)(urand() * 4);
                for (int64_t c = 0; c < s->d; c++) {
                    float x = nrand();
                    if (kind == 1) x += 0.5f + (c % 7 == 0 ? 3.0f : 0.0f);     /* K offsets */
                    if (kind == 2) x = 0.6f * x + 1.5f * (float)((cluster * 7 + c) % 5 - 2); /* V */
                    if (kind == 2 && s->v_case == V_SINKS && i % 300 == 5) x *= 1e-3f;
                    if (kind == 2 && s->v_case == V_FLAT && h % 2) x = nrand();
                    if (s->v_case == V_ATTENDED && c == 0 && kind == 0) x += 3.0f;
                    if (s->v_case == V_ATTENDED && i % 300 == 7 && kind == 1) x = c == 0 ? 40.0f : 0.0f;
                    if (s->v_case == V_ATTENDED && i % 300 == 7 && kind == 2) x *= 0.5f;
                    int64_t at = b * t->stride_batch + h * t->stride_head + i * t->stride_token + c;
                    if (s->dtype == VCATTN_DTYPE_F32) ((float *)data)[at] = x;
                    else if (s->dtype == VCATTN_DTYPE_F16) ((uint16_t *)data)[at] = vcattn_f32_to_f16(x);
                    else ((uint16_t *)data)[at] = vcattn_f32_to_bf16(x);
                }
            }
    return data;
}

typedef struct {
    vcattn_tensor q, k, v;
    void *qd, *kd, *vd;
    float *cos_q, *sin_q, *cos_k, *sin_k;
    vcattn_rope rope;
} inputs_t;

/* RoPE tables of n tokens: [n][D/2], or [B][n][heads][D/2] per head (angles
 * shifted and scaled by batch entry and head); their strides go to rope. */
static void rope_tables(const shape_t *s, int64_t heads, int64_t n, float **co, float **si, int64_t *strides) {
    const int per_head = (s->rope & ROPE_PER_HEAD) != 0;
    const int64_t half = s->d / 2, rows = per_head ? s->b * n * heads : n;
    *co = malloc((size_t)(rows * half) * sizeof(float));
    *si = malloc((size_t)(rows * half) * sizeof(float));
    strides[0] = per_head ? n * heads * half : 0;
    strides[1] = per_head ? half : 0;
    strides[2] = per_head ? heads * half : 0;  /* 0: the default, D/2 */
    for (int64_t b = 0; b < (per_head ? s->b : 1); b++)
        for (int64_t h = 0; h < (per_head ? heads : 1); h++)
            for (int64_t i = 0; i < n; i++)
                for (int64_t j = 0; j < half; j++) {
                    const double pos = (double)(i + 3 * b + 5 * h), speed = 1.0 + 0.25 * (double)h;
                    const double th = pos * speed * pow(10000.0, -2.0 * (double)j / (double)s->d);
                    const int64_t at = b * strides[0] + h * strides[1] + i * (per_head ? strides[2] : half) + j;
                    (*co)[at] = (float)cos(th);
                    (*si)[at] = (float)sin(th);
                }
}

static void make_inputs(const shape_t *s, inputs_t *in) {
    in->qd = make_tensor(s, s->hq, s->nq, 0, &in->q);
    in->kd = make_tensor(s, s->hkv, s->nk, 1, &in->k);
    in->vd = make_tensor(s, s->hkv, s->nk, 2, &in->v);
    int64_t qs[3], ks[3];
    rope_tables(s, s->hq, s->nq, &in->cos_q, &in->sin_q, qs);
    rope_tables(s, s->hkv, s->nk, &in->cos_k, &in->sin_k, ks);
    in->rope = (vcattn_rope){.style = s->rope & ROPE_HALVES ? VCATTN_ROPE_HALF_SPLIT : VCATTN_ROPE_INTERLEAVED,
                             .q_cos = in->cos_q, .q_sin = in->sin_q, .k_cos = in->cos_k, .k_sin = in->sin_k,
                             .q_stride_batch = qs[0], .q_stride_head = qs[1], .q_stride_token = qs[2],
                             .k_stride_batch = ks[0], .k_stride_head = ks[1], .k_stride_token = ks[2]};
}

static void free_inputs(inputs_t *in) {
    free(in->qd); free(in->kd); free(in->vd); free(in->cos_q); free(in->sin_q); free(in->cos_k); free(in->sin_k);
}

/* Output as float [B][Hq][Nq][D] in a guarded buffer of the shape's dtype/layout. */
typedef struct {
    vcattn_tensor t;
    uint32_t *raw;   /* GUARD words, data, GUARD words */
    size_t words;
    float *lse;
} output_t;

static void make_output(const shape_t *s, output_t *o) {
    size_t es = s->dtype == VCATTN_DTYPE_F32 ? 4 : 2;
    int64_t row = s->d + s->pad;
    size_t bytes = (size_t)(s->b * s->hq * s->nq * row) * es;
    o->words = (bytes + 3) / 4;
    o->raw = malloc((o->words + 2 * GUARD) * 4);
    for (size_t i = 0; i < o->words + 2 * GUARD; i++) o->raw[i] = GUARD_WORD;
    void *data = o->raw + GUARD;
    if (s->nhd) {
        o->t = vcattn_tensor_bnhd(data, s->dtype, s->b, s->hq, s->nq, s->d);
        o->t.stride_token = s->hq * row; o->t.stride_head = row; o->t.stride_batch = s->nq * s->hq * row;
    } else {
        o->t = vcattn_tensor_bhnd(data, s->dtype, s->b, s->hq, s->nq, s->d);
        o->t.stride_token = row; o->t.stride_head = s->nq * row; o->t.stride_batch = s->hq * s->nq * row;
    }
    o->lse = malloc((size_t)(s->b * s->hq * s->nq) * sizeof(float));
}

static int guards_intact(const output_t *o) {
    for (size_t i = 0; i < GUARD; i++)
        if (o->raw[i] != GUARD_WORD || o->raw[GUARD + o->words + i] != GUARD_WORD) return 0;
    return 1;
}

static double out_get(const output_t *o, int64_t b, int64_t h, int64_t n, int64_t c) {
    int64_t at = b * o->t.stride_batch + h * o->t.stride_head + n * o->t.stride_token + c;
    if (o->t.dtype == VCATTN_DTYPE_F32) return ((const float *)o->t.data)[at];
    uint16_t u = ((const uint16_t *)o->t.data)[at];
    return o->t.dtype == VCATTN_DTYPE_F16 ? vcattn_f16_to_f32(u) : vcattn_bf16_to_f32(u);
}

/* sqrt(sum (a - b)^2) and sqrt(sum b^2) over every element; counts NaN. */
static void compare(const shape_t *s, const output_t *a, const output_t *b, const double *ref,
                    double *diff, double *norm, int *nans) {
    double d2 = 0.0, n2 = 0.0;
    *nans = 0;
    for (int64_t bb = 0; bb < s->b; bb++)
        for (int64_t h = 0; h < s->hq; h++)
            for (int64_t n = 0; n < s->nq; n++)
                for (int64_t c = 0; c < s->d; c++) {
                    double x = out_get(a, bb, h, n, c);
                    double y = ref ? ref[((bb * s->hq + h) * s->nq + n) * s->d + c] : out_get(b, bb, h, n, c);
                    if (isnan(x)) (*nans)++;
                    d2 += (x - y) * (x - y);
                    n2 += y * y;
                }
    *diff = sqrt(d2);
    *norm = sqrt(n2);
}

/* A method's preset with ExpCast at every key count, so that the kernels'
 * ExpCast path runs at these test sizes (the fallback below
 * expcast_min_keys has its own test, run_expcast_min_keys). "+probeN" (a
 * number after "+probe", last in the name) is "+probe" with N probe rows:
 * 32 for the probe's passes of 32, more than 64 for several passes. */
static vcattn_config method_config(const char *m) {
    vcattn_config c;
    char base[64];
    const char *probe = strstr(m, "+probe");
    int rows = probe && probe[6] >= '0' && probe[6] <= '9' ? atoi(probe + 6) : 0;
    if (rows) {
        snprintf(base, sizeof base, "%.*s+probe", (int)(probe - m), m);
        m = base;
    }
    vcattn_config_from_method(m, &c);
    if (rows) c.vsmooth_probe_rows = rows;
    c.expcast_min_keys = 0;
    return c;
}

static vcattn_quantized alloc_quantized(const shape_t *s) {
    int64_t qn = s->b * s->hq * s->nq, kn = s->b * s->hkv * s->nk, t = (s->nk + 127) / 128;
    vcattn_quantized o;
    o.q_codes = malloc((size_t)(qn * s->d));
    o.k_codes = malloc((size_t)(kn * s->d));
    o.v_codes = malloc((size_t)(kn * s->d));
    o.q_scale = malloc((size_t)qn * 4);
    o.lse_shift = malloc((size_t)qn * 4);
    o.k_scale = malloc((size_t)(s->b * s->hkv * t * 4) * 4);
    o.v_mean = malloc((size_t)(s->b * s->hkv * t * s->d) * 4);
    o.v_scale = malloc((size_t)(s->b * s->hkv * s->d) * 4);
    o.k_mean = malloc((size_t)(s->b * s->hkv * s->d) * 4);
    o.perm = malloc((size_t)kn * sizeof(int32_t));
    return o;
}

static void free_quantized(vcattn_quantized *o) {
    free(o->perm); free(o->q_codes); free(o->k_codes); free(o->v_codes); free(o->q_scale); free(o->lse_shift);
    free(o->k_scale); free(o->v_mean); free(o->v_scale); free(o->k_mean);
}

/* A layer holding perm [B*Hkv][Nk] (copied), reused at step 1. */
static vcattn_layer *layer_with_perm(const shape_t *s, const vcattn_config *cfg, const int32_t *perm) {
    int64_t heads = s->b * s->hkv, n = s->nk;
    int clusters = vsmooth_cluster_count(cfg, n);
    int32_t *copy = malloc((size_t)(heads * n) * sizeof(int32_t));
    float *cent = calloc((size_t)(heads * clusters * s->d), sizeof(float));
    memcpy(copy, perm, (size_t)(heads * n) * sizeof(int32_t));
    vcattn_layer *layer = NULL;
    vcattn_layer_create(&layer, 40);
    vsmooth_layer_adopt(layer, s->b, s->hkv, n, s->d, clusters, cent, copy);
    vcattn_layer_set_step(layer, 1);
    return layer;
}

/* Whether each head's row of perm [heads][n] is a permutation of 0..n-1. */
static int is_permutation(const int32_t *perm, int64_t heads, int64_t n) {
    char *seen = malloc((size_t)n);
    int ok = 1;
    for (int64_t g = 0; g < heads && ok; g++) {
        memset(seen, 0, (size_t)n);
        for (int64_t i = 0; i < n && ok; i++) {
            int32_t t = perm[g * n + i];
            ok = t >= 0 && t < n && !seen[t];
            if (ok) seen[t] = 1;
        }
    }
    free(seen);
    return ok;
}

/* One call: a grouping step with kmeans, else without a layer (V-Smooth in
 * the principal order). */
static vcattn_status call(vcattn_context *ctx, const vcattn_config *cfg, const inputs_t *in, const output_t *o,
                          const vcattn_rope *rope, int kmeans) {
    return kmeans ? grouped_attention(ctx, cfg, &in->q, &in->k, &in->v, &o->t, o->lse, rope)
                  : vcattn_attention(ctx, cfg, &in->q, &in->k, &in->v, &o->t, o->lse, rope, NULL);
}

static void run_shape(vcattn_context *cpu, vcattn_context *gpu, const shape_t *s, int kmeans) {
    inputs_t in;
    make_inputs(s, &in);
    vcattn_config cfg = method_config(s->method);
    /* Where the two orders' errors lie close, the order choice may take
     * them apart on the two backends (its sums are formed differently):
     * run_order_choice checks it; here both keep k-means's order. */
    cfg.vsmooth_order_rows = 0;
    const vcattn_rope *rope = s->rope ? &in.rope : NULL;
    output_t oc, og, og2;
    make_output(s, &oc); make_output(s, &og); make_output(s, &og2);
    size_t rows = (size_t)(s->b * s->hq * s->nq);
    double *ref = malloc(rows * (size_t)s->d * sizeof(double)), *ref_lse = malloc(rows * sizeof(double));

    /* Without a layer each backend finds the principal order, the two
     * agreeing to rounding (checked by run_quantizers); a token in another
     * block changes two block means and so every output's quantization
     * noise. So the CPU runs in the GPU's order here: the outputs then
     * differ by the emulation alone. */
    vcattn_layer *gpu_order = NULL;
    if (!kmeans && cfg.vsmooth) {
        vcattn_quantized qg = alloc_quantized(s);
        vcattn_call qcall;
        vcattn_resolve_call(&cfg, &in.q, &in.k, NULL, &qcall);
        if (cuda_quantize_for_test(gpu, &qcall, &in.q, &in.k, &in.v, rope, &qg) == VCATTN_OK)
            gpu_order = layer_with_perm(s, &cfg, qg.perm);
        free_quantized(&qg);
        CHECK(gpu_order, "%s: the GPU's order: %s", s->name, vcattn_last_error(gpu));
    }
    vcattn_status sc = gpu_order ? vcattn_attention(cpu, &cfg, &in.q, &in.k, &in.v, &oc.t, oc.lse, rope, gpu_order)
                                 : call(cpu, &cfg, &in, &oc, rope, kmeans);
    vcattn_layer_destroy(gpu_order);
    vcattn_status sg = call(gpu, &cfg, &in, &og, rope, kmeans);
    vcattn_status sg2 = call(gpu, &cfg, &in, &og2, rope, kmeans);
    CHECK(sc == VCATTN_OK && sg == VCATTN_OK && sg2 == VCATTN_OK, "%s: cpu %d gpu %d/%d: %s", s->name,
          sc, sg, sg2, vcattn_last_error(gpu));
    if (sc || sg || sg2) goto done;
    vcattn_reference_attention(&in.q, &in.k, &in.v, rope, cfg.sm_scale, ref, ref_lse);

    double dc, dg, dgc, nref, ncpu;
    int nan_c, nan_g, nan_x;
    compare(s, &oc, NULL, ref, &dc, &nref, &nan_c);
    compare(s, &og, NULL, ref, &dg, &nref, &nan_g);
    compare(s, &og, &oc, NULL, &dgc, &ncpu, &nan_x);
    double err_cpu = dc / nref, err_gpu = dg / nref, gpu_cpu = dgc / ncpu;
    printf("%-34s %-8s %-8s cpu %.4e gpu %.4e |gpu-cpu| %.2e\n", s->name, s->method,
           cfg.vsmooth ? (kmeans ? "kmeans" : "principal") : "", err_cpu, err_gpu, gpu_cpu);
    CHECK(nan_g == 0 && nan_c == 0, "%s: %d NaN in the GPU output", s->name, nan_g);
    CHECK(err_gpu <= 2.0 * err_cpu + 1e-3, "%s %s: GPU error %.4e vs CPU %.4e", s->name, s->method,
          err_gpu, err_cpu);
    CHECK(gpu_cpu <= 0.25 * err_cpu + 1e-3, "%s %s: GPU-CPU difference %.4e vs CPU error %.4e",
          s->name, s->method, gpu_cpu, err_cpu);
    CHECK(guards_intact(&og), "%s: guard words around the GPU output changed", s->name);
    CHECK(memcmp(og.raw, og2.raw, (og.words + 2 * GUARD) * 4) == 0 &&
          memcmp(og.lse, og2.lse, rows * sizeof(float)) == 0, "%s: two GPU runs differ", s->name);
    double lse_cpu = 0.0, lse_gpu = 0.0;  /* worst LSE error against the FP64 reference */
    for (size_t i = 0; i < rows; i++) {
        lse_cpu = fmax(lse_cpu, fabs((double)oc.lse[i] - ref_lse[i]));
        lse_gpu = fmax(lse_gpu, isnan(og.lse[i]) ? INFINITY : fabs((double)og.lse[i] - ref_lse[i]));
    }
    CHECK(lse_gpu <= 2.0 * lse_cpu + 1e-3, "%s %s: LSE error %.3e vs the CPU's %.3e", s->name,
          s->method, lse_gpu, lse_cpu);
done:
    free(ref); free(ref_lse);
    free(oc.raw); free(og.raw); free(og2.raw); free(oc.lse); free(og.lse); free(og2.lse);
    free_inputs(&in);
}

/* Ten steps of one layer on both backends: same schedule, same permutation. */
static void run_schedule(vcattn_context *cpu, vcattn_context *gpu) {
    shape_t s = {"schedule", 1, 4, 2, 1000, 1000, 128, 0, 0, VCATTN_DTYPE_BF16, 1, "vc", 0};
    inputs_t in;
    make_inputs(&s, &in);
    vcattn_config cfg = method_config("vc");
    cfg.vsmooth_order_rows = 0;  /* the schedule's own permutations (run_order_choice checks the choice) */
    vcattn_layer *lc, *lg;
    vcattn_layer_create(&lc, 8);
    vcattn_layer_create(&lg, 8);
    output_t oc, og;
    make_output(&s, &oc); make_output(&s, &og);
    int64_t mismatch = 0, compared = 0;
    for (int step = 0; step < 8; step++) {
        vcattn_layer_set_step(lc, step);
        vcattn_layer_set_step(lg, step);
        vcattn_status a = vcattn_attention(cpu, &cfg, &in.q, &in.k, &in.v, &oc.t, NULL, &in.rope, lc);
        vcattn_status b = vcattn_attention(gpu, &cfg, &in.q, &in.k, &in.v, &og.t, NULL, &in.rope, lg);
        CHECK(a == VCATTN_OK && b == VCATTN_OK, "schedule step %d: %s", step, vcattn_last_error(gpu));
        CHECK(lc->has_grouping == lg->has_grouping, "schedule step %d: grouping state differs", step);
        if (lc->has_grouping && lg->has_grouping) {
            for (int64_t i = 0; i < lc->batch * lc->heads_kv * lc->tokens; i++)
                mismatch += lc->perm[i] != lg->perm[i];
            compared += lc->batch * lc->heads_kv * lc->tokens;
        }
    }
    printf("schedule: %lld of %lld permutation entries differ between CPU and GPU\n",
           (long long)mismatch, (long long)compared);
    CHECK(compared > 0 && mismatch * 100 <= compared, "permutations differ in %lld of %lld places",
          (long long)mismatch, (long long)compared);
    vcattn_layer_destroy(lc);
    vcattn_layer_destroy(lg);
    free(oc.raw); free(og.raw); free(oc.lse); free(og.lse);
    free_inputs(&in);
}

/* Grouping of V times 2^70 and 2^-90 (float32), one cold grouping step on
 * each backend: the same permutation as V's own on the CPU, give or take the
 * usual CPU/GPU tie differences (the distances once overflowed or
 * underflowed and every token fell into one cluster). */
static void run_huge_grouping(vcattn_context *cpu, vcattn_context *gpu) {
    shape_t s = {"grouping of scaled V", 1, 2, 2, 700, 700, 128, 0, 0, VCATTN_DTYPE_F32, 0, "vc", 0};
    inputs_t in;
    make_inputs(&s, &in);
    vcattn_config cfg = method_config("vc");
    cfg.vsmooth_order_rows = 0;  /* k-means's order on both backends: near ties between orders may break apart */
    output_t o;
    make_output(&s, &o);
    const int64_t count = s.b * s.hkv * s.nk;
    const size_t elems = (size_t)(count * s.d);
    float *v = (float *)in.vd, *v0 = malloc(elems * sizeof(float));
    memcpy(v0, v, elems * sizeof(float));
    int32_t *reference = malloc((size_t)count * sizeof(int32_t));
    const int shifts[] = {0, 70, -90};
    for (int si = 0; si < 3; si++) {
        for (size_t i = 0; i < elems; i++) v[i] = ldexpf(v0[i], shifts[si]);
        vcattn_context *ctxs[2] = {cpu, gpu};
        for (int bi = 0; bi < 2; bi++) {
            vcattn_layer *layer;
            vcattn_layer_create(&layer, 1);
            vcattn_status st = vcattn_attention(ctxs[bi], &cfg, &in.q, &in.k, &in.v, &o.t, NULL, NULL, layer);
            CHECK(st == VCATTN_OK && layer->has_grouping, "V times 2^%d, %s: %s", shifts[si], bi ? "gpu" : "cpu",
                  vcattn_last_error(ctxs[bi]));
            if (st == VCATTN_OK && layer->has_grouping) {
                if (si == 0 && bi == 0) memcpy(reference, layer->perm, (size_t)count * sizeof(int32_t));
                int64_t mismatch = 0;
                for (int64_t i = 0; i < count; i++) mismatch += layer->perm[i] != reference[i];
                CHECK(mismatch * 100 <= count, "V times 2^%d, %s: permutation differs from V's in %lld of %lld",
                      shifts[si], bi ? "gpu" : "cpu", (long long)mismatch, (long long)count);
            }
            vcattn_layer_destroy(layer);
        }
    }
    free(v0); free(reference);
    free(o.raw); free(o.lse);
    free_inputs(&in);
}

/* Largest relative difference of two float arrays (NaN counts as infinite). */
static double max_rel(const float *a, const float *b, int64_t n) {
    double m = 0.0;
    for (int64_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]) / fmax(fabs((double)b[i]), 1e-30);
        if (isnan(d)) return INFINITY;
        if (a[i] != b[i]) m = fmax(m, d);
    }
    return m;
}

/* Codes of two backends: *worst = largest difference, returns the count that differ. */
static int64_t code_diffs(const void *a, const void *b, int64_t n, int is_int8, int *worst) {
    int64_t count = 0;
    *worst = 0;
    for (int64_t i = 0; i < n; i++) {
        int x, y;
        if (is_int8) { x = ((const int8_t *)a)[i]; y = ((const int8_t *)b)[i]; }
        else {  /* E4M3 bytes: compare as signed code positions */
            uint8_t u = ((const uint8_t *)a)[i], v = ((const uint8_t *)b)[i];
            x = u & 0x80 ? -(u & 0x7f) : u;
            y = v & 0x80 ? -(v & 0x7f) : v;
        }
        if (x != y) { count++; if (abs(x - y) > *worst) *worst = abs(x - y); }
    }
    return count;
}

/* V blocks built to sit on V-Smooth's thresholds, in their own order (a layer
 * holding the identity permutation), F32: whether such a block keeps its
 * mean hangs on the last bits of its energies, summed in double in the
 * CPU's order, so the GPU's means must agree with the CPU's bit for bit
 * here too. Head 0, blocks of 128 tokens: A, a mean with exactly 2% of the
 * block's energy (kept); B, the same plus 0.5 of energy (dropped); C, a pair
 * of tokens whose energy equals the sink guard's bound (kept); D, the same a
 * float below it (dropped). Head 1: head 0 times 2^66, whose squares
 * overflow float (not double). */
static void run_energy_edges(vcattn_context *cpu, vcattn_context *gpu) {
    shape_t s = {"V energies at the thresholds", 1, 2, 2, 128, 512, 128, 0, 0, VCATTN_DTYPE_F32, 0, "vc", 0};
    inputs_t in;
    make_inputs(&s, &in);
    vcattn_config cfg = method_config("vc");
    cfg.vsmooth_probe_rows = 0;  /* the plain block mean: exact here */
    cfg.sink_guard = 0.25f;
    float *v = (float *)in.vd;
    memset(v, 0, (size_t)(2 * s.nk * s.d) * sizeof(float));
    static const float ch3[4] = {1.0f, 3.0f, -1.0f, -3.0f};
    for (int64_t i = 0; i < s.nk; i++) {  /* groups of 4 tokens: mean (5, 0, ...), energy 1250 a token */
        float *row = v + i * s.d;
        const int64_t block = i / 128, k = i % 4;
        row[0] = 5.0f;
        row[1] = k % 2 ? -34.0f : 34.0f;
        row[2] = k % 2 ? -8.0f : 8.0f;
        row[3] = ch3[k];
        if (block == 1 && i % 128 < 4 && k % 2 == 0) row[4] = k ? -0.5f : 0.5f;
        if (block >= 2 && i % 128 >= 124) {  /* two tokens of energy x^2, two of 100 */
            const float x = block == 2 ? 1.25f : nextafterf(1.25f, 0.0f);  /* 0.25^2 |mean|^2 = 1.5625 */
            memset(row, 0, (size_t)s.d * sizeof(float));
            if (k < 2) row[1] = k ? -x : x;
            else row[0] = 10.0f;
        }
    }
    for (int64_t i = 0; i < s.nk * s.d; i++) v[s.nk * s.d + i] = ldexpf(v[i], 66);
    int32_t *perm = malloc((size_t)(2 * s.nk) * sizeof(int32_t));
    for (int64_t i = 0; i < 2 * s.nk; i++) perm[i] = (int32_t)(i % s.nk);
    vcattn_layer *layer = layer_with_perm(&s, &cfg, perm);
    vcattn_quantized c = alloc_quantized(&s), g = alloc_quantized(&s);
    vcattn_call call;
    vcattn_resolve_call(&cfg, &in.q, &in.k, layer, &call);
    vcattn_status a = cpu_quantize_for_test(cpu, &call, &in.q, &in.k, &in.v, NULL, &c);
    vcattn_status b = cuda_quantize_for_test(gpu, &call, &in.q, &in.k, &in.v, NULL, &g);
    CHECK(a == VCATTN_OK && b == VCATTN_OK, "energy edges: quantize for test: %s", vcattn_last_error(gpu));
    if (!a && !b) {
        static const int kept[4] = {1, 0, 1, 0};
        for (int64_t blk = 0; blk < 8; blk++) {
            int nonzero = 0;
            for (int64_t i = 0; i < s.d; i++) nonzero |= c.v_mean[blk * s.d + i] != 0.0f;
            CHECK(nonzero == kept[blk % 4], "energy edges: the CPU %s block %lld's mean", nonzero ? "kept" : "dropped",
                  (long long)blk);
        }
        int worst;
        const int64_t dv = code_diffs(g.v_codes, c.v_codes, 2 * s.nk * s.d, 0, &worst);
        CHECK(dv == 0 && max_rel(g.v_scale, c.v_scale, 2 * s.d) == 0.0 &&
              memcmp(g.v_mean, c.v_mean, (size_t)(8 * s.d) * sizeof(float)) == 0,
              "energy edges: V codes (%lld differ), scales or means differ from the CPU's", (long long)dv);
    }
    free_quantized(&c); free_quantized(&g);
    vcattn_layer_destroy(layer);
    free(perm);
    free_inputs(&in);
}

/* Tokens that two orders place in different 128-row blocks. */
static int64_t tokens_moved(const int32_t *a, const int32_t *b, int64_t heads, int64_t n) {
    int64_t *block = malloc((size_t)n * sizeof(int64_t)), moved = 0;
    for (int64_t g = 0; g < heads; g++) {
        for (int64_t i = 0; i < n; i++) block[a[g * n + i]] = i / 128;
        for (int64_t i = 0; i < n; i++) moved += block[b[g * n + i]] != i / 128;
    }
    free(block);
    return moved;
}

/* Each quantizer's output against the CPU's. With a layer holding a random
 * permutation (reused at step 1), or without a layer: then each backend finds
 * the principal order, the two agreeing to rounding (few tokens change
 * block), and the codes are compared with the CPU given the GPU's order.
 * Codes computed from the same floats are identical; values that are sums
 * (the K channel mean, hence K and the LSE shift) may differ by rounding,
 * moving a code by one at most, rarely. */
static void run_quantizers(vcattn_context *cpu, vcattn_context *gpu, const shape_t *s, int vsmooth) {
    inputs_t in;
    make_inputs(s, &in);
    vcattn_config cfg = method_config(s->method);
    const vcattn_rope *rope = s->rope ? &in.rope : NULL;
    int64_t qn = s->b * s->hq * s->nq, kn = s->b * s->hkv * s->nk, t = (s->nk + 127) / 128;
    int64_t heads = s->b * s->hkv;
    vcattn_layer *layer = NULL;
    if (vsmooth) {
        int32_t *perm = malloc((size_t)kn * sizeof(int32_t));
        for (int64_t g = 0; g < heads; g++) {
            int64_t n = s->nk;
            for (int64_t i = 0; i < n; i++) perm[g * n + i] = (int32_t)i;
            for (int64_t i = n - 1; i > 0; i--) {
                int64_t j = (int64_t)(urand() * (double)(i + 1));
                int32_t tmp = perm[g * n + i]; perm[g * n + i] = perm[g * n + j]; perm[g * n + j] = tmp;
            }
        }
        layer = layer_with_perm(s, &cfg, perm);
        free(perm);
    }
    vcattn_quantized c = alloc_quantized(s), g = alloc_quantized(s);
    vcattn_call call;
    vcattn_resolve_call(&cfg, &in.q, &in.k, layer, &call);
    vcattn_status a = cpu_quantize_for_test(cpu, &call, &in.q, &in.k, &in.v, rope, &c);
    vcattn_status b = cuda_quantize_for_test(gpu, &call, &in.q, &in.k, &in.v, rope, &g);
    CHECK(a == VCATTN_OK && b == VCATTN_OK, "%s: quantize for test: %s", s->name, vcattn_last_error(gpu));
    if (!a && !b && !vsmooth) {
        int valid = is_permutation(c.perm, heads, s->nk) && is_permutation(g.perm, heads, s->nk);
        int64_t moved = valid ? tokens_moved(c.perm, g.perm, heads, s->nk) : kn;
        printf("quantizers %-22s principal order: %lld of %lld tokens in another block than the CPU's\n",
               s->name, (long long)moved, (long long)kn);
        CHECK(valid && moved * 100 <= kn, "%s: the orders disagree (%lld tokens moved, valid %d)", s->name,
              (long long)moved, valid);
        if (valid && memcmp(c.perm, g.perm, (size_t)kn * sizeof(int32_t)) != 0) {
            layer = layer_with_perm(s, &cfg, g.perm);
            vcattn_resolve_call(&cfg, &in.q, &in.k, layer, &call);
            a = cpu_quantize_for_test(cpu, &call, &in.q, &in.k, &in.v, rope, &c);
            CHECK(a == VCATTN_OK, "%s: quantize for test in the GPU's order", s->name);
        }
    }
    if (!a && !b) {
        int wq, wk, wv;
        int64_t dq = code_diffs(g.q_codes, c.q_codes, qn * s->d, 1, &wq);
        int64_t dk = code_diffs(g.k_codes, c.k_codes, kn * s->d, 1, &wk);
        int64_t dv = code_diffs(g.v_codes, c.v_codes, kn * s->d, 0, &wv);
        double r_kmean = max_rel(g.k_mean, c.k_mean, heads * s->d);
        printf("quantizers %-22s %s: Q codes differ %lld, K %lld (max %d), V %lld; K mean rel %.1e\n",
               s->name, vsmooth ? "reused permutation" : "no layer", (long long)dq, (long long)dk, wk, (long long)dv, r_kmean);
        CHECK(dq == 0 && max_rel(g.q_scale, c.q_scale, qn) == 0.0, "%s: Q codes or scales differ (%lld)",
              s->name, (long long)dq);
        if (cfg.vsmooth_probe_rows > 0 && vsmooth && s->v_case == V_ATTENDED) {
            vcattn_quantized plain = alloc_quantized(s);
            vcattn_config off = cfg;
            off.vsmooth_probe_rows = 0;
            vcattn_call plain_call;
            vcattn_resolve_call(&off, &in.q, &in.k, layer, &plain_call);
            CHECK(cpu_quantize_for_test(cpu, &plain_call, &in.q, &in.k, &in.v, rope, &plain) == VCATTN_OK &&
                  max_rel(plain.v_mean, c.v_mean, heads * t * s->d) > 0.0,
                  "%s: the probe left every centre as the plain mean", s->name);
            free_quantized(&plain);
        }
        if (cfg.vsmooth_probe_rows > 0 && vsmooth) {
            /* The probe scores with the K codes, which may differ in the last
             * bit where K smoothing's channel mean rounds apart (checked
             * below): a probability byte then moves, and with it a centre by
             * rounding. Bounded here; identical where the K codes are. */
            const double r_mean = max_rel(g.v_mean, c.v_mean, heads * t * s->d);
            printf("quantizers %-22s attention probe: V means rel %.1e, V codes differ %lld\n", s->name, r_mean,
                   (long long)dv);
            CHECK((dk > 0 || (dv == 0 && r_mean == 0.0)) && r_mean < 1e-3 && dv * 1000 <= kn * s->d,
                  "%s: with the probe, V means differ by %.2e and %lld codes (K codes differ %lld)", s->name, r_mean,
                  (long long)dv, (long long)dk);
        } else {
            CHECK(dv == 0 && max_rel(g.v_scale, c.v_scale, heads * s->d) == 0.0 &&
                  max_rel(g.v_mean, c.v_mean, heads * t * s->d) == 0.0,
                  "%s: V codes, scales or means differ (%lld codes)", s->name, (long long)dv);
        }
        CHECK(r_kmean < 1e-5, "%s: K channel means differ by %.2e", s->name, r_kmean);
        if ((s->v_case == V_SINKS || s->v_case == V_FLAT) && vsmooth) {  /* both sides of the rule */
            int64_t guarded = 0;
            for (int64_t b = 0; b < heads * t; b++) {
                int zero = 1;
                for (int64_t i = 0; i < s->d; i++) zero &= c.v_mean[b * s->d + i] == 0.0f;
                guarded += zero;
            }
            CHECK(guarded > 0 && guarded < heads * t, "%s: %lld of %lld blocks keep no mean", s->name,
                  (long long)guarded, (long long)(heads * t));
        }
        CHECK(wk <= 1 && dk * 1000 <= kn * s->d, "%s: %lld K codes differ, by up to %d", s->name,
              (long long)dk, wk);
        CHECK(max_rel(g.k_scale, c.k_scale, heads * t * 4) < 1e-5, "%s: K scales differ", s->name);
        CHECK(max_rel(g.lse_shift, c.lse_shift, qn) < 1e-4 || !cfg.k_smoothing, "%s: LSE shifts differ", s->name);
    }
    free_quantized(&c);
    free_quantized(&g);
    vcattn_layer_destroy(layer);
    free_inputs(&in);
}

static void run_bad_input(vcattn_context *gpu) {
    shape_t s = {"bad", 1, 2, 2, 200, 200, 128, 0, 0, VCATTN_DTYPE_F32, 0, "vc", 0};
    inputs_t in;
    make_inputs(&s, &in);
    output_t o;
    make_output(&s, &o);
    vcattn_config cfg = method_config("vc");

    ((float *)in.vd)[12345] = NAN;
    vcattn_status st = vcattn_attention(gpu, &cfg, &in.q, &in.k, &in.v, &o.t, o.lse, NULL, NULL);
    CHECK(st == VCATTN_ERR_NONFINITE_INPUT, "NaN in v: status %d (%s)", st, vcattn_last_error(gpu));
    int untouched = guards_intact(&o);
    for (size_t i = 0; i < o.words; i++) untouched &= o.raw[GUARD + i] == GUARD_WORD;
    CHECK(untouched, "NaN input: the output was written");
    ((float *)in.vd)[12345] = 0.0f;

    /* Scores beyond what float32 softmax resolves: refused, nothing written. */
    const size_t nqe = (size_t)(s.b * s.hq * s.nq * s.d), nke = (size_t)(s.b * s.hkv * s.nk * s.d);
    for (size_t i = 0; i < nqe; i++) ((float *)in.qd)[i] *= 16384.0f;
    for (size_t i = 0; i < nke; i++) ((float *)in.kd)[i] *= 16384.0f;
    st = vcattn_attention(gpu, &cfg, &in.q, &in.k, &in.v, &o.t, o.lse, NULL, NULL);
    CHECK(st == VCATTN_ERR_INVALID_ARGUMENT && strstr(vcattn_last_error(gpu), "float32 softmax"),
          "huge scores on the GPU: status %d (%s)", st, vcattn_last_error(gpu));
    untouched = guards_intact(&o);
    for (size_t i = 0; i < o.words; i++) untouched &= o.raw[GUARD + i] == GUARD_WORD;
    CHECK(untouched, "huge scores: the output was written");
    for (size_t i = 0; i < nqe; i++) ((float *)in.qd)[i] /= 16384.0f;
    for (size_t i = 0; i < nke; i++) ((float *)in.kd)[i] /= 16384.0f;

    /* Tiny V (subnormal): the channel scale counts as zero, output finite (zeros). */
    for (size_t i = 0; i < (size_t)(s.b * s.hkv * s.nk * s.d); i++) ((float *)in.vd)[i] *= 1e-40f;
    st = vcattn_attention(gpu, &cfg, &in.q, &in.k, &in.v, &o.t, o.lse, NULL, NULL);
    int finite = st == VCATTN_OK;
    for (int64_t i = 0; finite && i < s.b * s.hq * s.nq * s.d; i++) finite = vcattn_isfinite_f32(((float *)o.t.data)[i]);
    CHECK(finite, "subnormal V on the GPU: status %d or non-finite output", st);

    vcattn_config fp4 = method_config("sage3-4bit");
    st = vcattn_attention(gpu, &fp4, &in.q, &in.k, &in.v, &o.t, NULL, NULL, NULL);
    CHECK(st == VCATTN_ERR_UNSUPPORTED_CONFIG && strstr(vcattn_last_error(gpu), "sage2"),
          "NVFP4 on the GPU: status %d (%s)", st, vcattn_last_error(gpu));

    vcattn_tensor q96 = in.q, k96 = in.k, v96 = in.v, o96 = o.t;
    q96.head_dim = k96.head_dim = v96.head_dim = o96.head_dim = 96;
    st = vcattn_attention(gpu, &cfg, &q96, &k96, &v96, &o96, NULL, NULL, NULL);
    CHECK(st == VCATTN_ERR_UNSUPPORTED_HEAD_DIM && strstr(vcattn_last_error(gpu), "64 and 128"),
          "D=96 on the GPU: status %d (%s)", st, vcattn_last_error(gpu));

    vcattn_tensor odd = in.q;
    odd.data = (char *)in.qd + 1;
    st = vcattn_attention(gpu, &cfg, &odd, &in.k, &in.v, &o.t, NULL, NULL, NULL);
    CHECK(st == VCATTN_ERR_INVALID_ARGUMENT && strstr(vcattn_last_error(gpu), "aligned"),
          "misaligned q: status %d (%s)", st, vcattn_last_error(gpu));
    free(o.raw); free(o.lse);
    free_inputs(&in);
}

/* Which order each query head's output came from: 1 the principal order, 0
 * k-means, -1 neither, bit for bit. */
static void head_orders(const shape_t *s, const output_t *o, const output_t *kmeans, const output_t *principal,
                        int *order) {
    for (int64_t b = 0; b < s->b; b++)
        for (int64_t h = 0; h < s->hq; h++) {
            int same_k = 1, same_p = 1;
            for (int64_t n = 0; n < s->nq; n++)
                for (int64_t c = 0; c < s->d; c++) {
                    const double x = out_get(o, b, h, n, c);
                    same_k &= x == out_get(kmeans, b, h, n, c);
                    same_p &= x == out_get(principal, b, h, n, c);
                }
            order[b * s->hq + h] = same_k ? 0 : same_p ? 1 : -1;
        }
}

/* The order choice's reference on the GPU (BF16 operands, FP32 sums, P in
 * BF16) against FP64 on the same sampled rows: within BF16's rounding. */
static void check_order_reference(vcattn_context *gpu, const shape_t *s, const vcattn_config *cfg,
                                  const inputs_t *in, const vcattn_rope *rope, const double *ref) {
    const int rows = cfg->vsmooth_order_rows;
    const int64_t heads = s->b * s->hq;
    float *out = malloc((size_t)(heads * rows * s->d) * sizeof(float));
    vcattn_call call;
    vcattn_resolve_call(cfg, &in->q, &in->k, NULL, &call);
    vcattn_status st = cuda_order_reference_for_test(gpu, &call, &in->q, &in->k, &in->v, rope, rows, out);
    CHECK(st == VCATTN_OK, "%s: order reference: %s", s->name, vcattn_last_error(gpu));
    if (!st) {
        double err = 0.0, norm = 0.0;
        int finite = 1;
        for (int64_t h = 0; h < heads; h++)
            for (int r = 0; r < rows; r++) {
                const double *want = ref + (h * s->nq + vsmooth_probe_row(r, s->nq)) * s->d;
                const float *got = out + (h * rows + r) * s->d;
                for (int64_t c = 0; c < s->d; c++) {
                    finite &= isfinite(got[c]);
                    err += (got[c] - want[c]) * (got[c] - want[c]);
                    norm += want[c] * want[c];
                }
            }
        const double rel = sqrt(err / norm);
        printf("order reference %-36s relative error %.3e against FP64\n", s->name, rel);
        CHECK(finite && rel < 1e-2, "%s: the order choice's reference is %.3e from FP64", s->name, rel);
    }
    free(out);
}

/* vsmooth_order_rows at a grouping step: on each backend every query head's
 * output is that of the k-means grouping step or of the principal order (the
 * drop-in call's) bit for bit, the query heads of a key head alike; on the
 * GPU the next plain step reuses the chosen permutation (the same bits);
 * the GPU chooses as the CPU does (its reference is BF16 on the tensor
 * cores, the CPU's exact) and is as faithful. */
static void run_order_choice(vcattn_context *cpu, vcattn_context *gpu) {
    static const shape_t shapes[] = {
        {"order choice attended keys GQA rope", 1, 8, 2, 1000, 1000, 128, 0, 0, VCATTN_DTYPE_BF16, 1, "vc+probe32",
         V_ATTENDED},
        {"order choice D=64 tail sinks", 1, 4, 4, 300, 1300, 64, 0, 0, VCATTN_DTYPE_F32, 0, "vsmooth", V_SINKS},
        {"order choice per-head rope B=2 NHD", 2, 4, 2, 600, 700, 128, 1, 0, VCATTN_DTYPE_BF16, 1 | ROPE_PER_HEAD,
         "vc+probe32", V_ATTENDED},
        /* the reference's key ranges of several tiles, the last one partial
         * (141 tiles of 64 keys in 47 ranges of 3) */
        {"order choice key ranges", 1, 16, 16, 300, 9000, 64, 0, 0, VCATTN_DTYPE_BF16, 0, "vc+probe32", V_ATTENDED},
    };
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        const shape_t *s = &shapes[i];
        inputs_t in;
        make_inputs(s, &in);
        const vcattn_rope *rope = s->rope ? &in.rope : NULL;
        vcattn_config cfg = method_config(s->method), single = cfg;
        cfg.vsmooth_order_rows = 256;
        single.vsmooth_order_rows = 0;
        const int64_t heads = s->b * s->hq, group = s->hq / s->hkv;
        int *gpu_order = malloc((size_t)heads * sizeof(int)), *cpu_order = malloc((size_t)heads * sizeof(int));
        output_t o[2][3], plain;  /* [cpu, gpu][chosen, k-means, principal] */
        for (int b = 0; b < 2; b++)
            for (int k = 0; k < 3; k++) make_output(s, &o[b][k]);
        make_output(s, &plain);
        vcattn_status st = VCATTN_OK;
        vcattn_layer *layers[2] = {NULL, NULL};
        for (int b = 0; b < 2 && !st; b++) {
            vcattn_context *ctx = b ? gpu : cpu;
            vcattn_layer *kmeans;
            vcattn_layer_create(&layers[b], 40);
            vcattn_layer_create(&kmeans, 40);
            st = vcattn_attention(ctx, &cfg, &in.q, &in.k, &in.v, &o[b][0].t, NULL, rope, layers[b]);
            if (!st) st = vcattn_attention(ctx, &single, &in.q, &in.k, &in.v, &o[b][1].t, NULL, rope, kmeans);
            if (!st) st = vcattn_attention(ctx, &single, &in.q, &in.k, &in.v, &o[b][2].t, NULL, rope, NULL);
            vcattn_layer_destroy(kmeans);
        }
        CHECK(st == VCATTN_OK, "%s: %s", s->name, vcattn_last_error(st ? gpu : cpu));
        if (!st) {
            vcattn_layer_set_step(layers[1], 1);
            st = vcattn_attention(gpu, &cfg, &in.q, &in.k, &in.v, &plain.t, NULL, rope, layers[1]);
            CHECK(st == VCATTN_OK && memcmp(plain.raw, o[1][0].raw, (plain.words + 2 * GUARD) * 4) == 0,
                  "%s: the plain step after the GPU's choice gives other bits (%s)", s->name, vcattn_last_error(gpu));
            head_orders(s, &o[0][0], &o[0][1], &o[0][2], cpu_order);
            head_orders(s, &o[1][0], &o[1][1], &o[1][2], gpu_order);
            int principal = 0, agree = 1, whole = 1;
            for (int64_t h = 0; h < heads; h++) {
                CHECK(cpu_order[h] >= 0 && gpu_order[h] >= 0, "%s: head %lld is neither order's (cpu %d, gpu %d)",
                      s->name, (long long)h, cpu_order[h], gpu_order[h]);
                whole &= gpu_order[h] == gpu_order[h - h % group] && cpu_order[h] == cpu_order[h - h % group];
                agree &= gpu_order[h] == cpu_order[h];
                principal += gpu_order[h] == 1;
            }
            double *ref = malloc((size_t)(heads * s->nq * s->d) * sizeof(double));
            double d_cpu, d_gpu, norm;
            int nans;
            vcattn_reference_attention(&in.q, &in.k, &in.v, rope, cfg.sm_scale, ref, NULL);
            check_order_reference(gpu, s, &cfg, &in, rope, ref);
            compare(s, &o[0][0], NULL, ref, &d_cpu, &norm, &nans);
            compare(s, &o[1][0], NULL, ref, &d_gpu, &norm, &nans);
            printf("order choice %-36s %d of %lld query heads take the principal order; cpu %.4e gpu %.4e\n",
                   s->name, principal, (long long)heads, d_cpu / norm, d_gpu / norm);
            CHECK(whole, "%s: the query heads of a key head chose apart", s->name);
            CHECK(agree, "%s: the GPU chose other orders than the CPU", s->name);
            CHECK(nans == 0 && d_gpu <= 2.0 * d_cpu + 1e-3 * norm, "%s: GPU error %.4e vs the CPU's %.4e", s->name,
                  d_gpu / norm, d_cpu / norm);
            free(ref);
        }
        vcattn_layer_destroy(layers[0]);
        vcattn_layer_destroy(layers[1]);
        for (int b = 0; b < 2; b++)
            for (int k = 0; k < 3; k++) free(o[b][k].raw), free(o[b][k].lse);
        free(plain.raw); free(plain.lse);
        free(gpu_order); free(cpu_order);
        free_inputs(&in);
    }
}

/* The presets as shipped: vc below expcast_min_keys keys is vsmooth to the
 * bit (exp then the cast), from there on it is ExpCast, on the GPU. */
static void run_expcast_min_keys(vcattn_context *gpu) {
    static const char *const names[3] = {"vc", "vc, ExpCast always", "vsmooth"};
    const int64_t nks[2] = {1023, 1024};
    for (int i = 0; i < 2; i++) {
        shape_t s = {"expcast_min_keys", 1, 2, 2, 200, nks[i], 128, 0, 0, VCATTN_DTYPE_BF16, 1, "vc", 0};
        inputs_t in;
        make_inputs(&s, &in);
        output_t o[3];
        vcattn_config cfg[3];
        const int same_as = expcast_boundary_configs(nks[i], cfg), other = 3 - same_as;
        for (int m = 0; m < 3; m++) {
            make_output(&s, &o[m]);
            vcattn_status st = vcattn_attention(gpu, &cfg[m], &in.q, &in.k, &in.v, &o[m].t, o[m].lse, &in.rope, NULL);
            CHECK(st == VCATTN_OK, "Nk=%lld %s: %s", (long long)nks[i], names[m], vcattn_last_error(gpu));
        }
        const size_t bytes = o[0].words * 4, lse_bytes = (size_t)(s.b * s.hq * s.nq) * sizeof(float);
        CHECK(memcmp(o[0].raw, o[same_as].raw, bytes + 8 * GUARD) == 0 &&
                  memcmp(o[0].lse, o[same_as].lse, lse_bytes) == 0,
              "Nk=%lld: vc should equal %s to the bit", (long long)nks[i], names[same_as]);
        CHECK(memcmp(o[0].raw + GUARD, o[other].raw + GUARD, bytes) != 0,
              "Nk=%lld: vc should differ from %s", (long long)nks[i], names[other]);
        for (int m = 0; m < 3; m++) { free(o[m].raw); free(o[m].lse); }
        free_inputs(&in);
    }
}

#ifdef VCATTN_WITH_CUDA
/* Tensors already on the GPU are used in place: same bits as the staged path. */
static void run_device_resident(vcattn_context *gpu) {
    shape_t s = {"device", 2, 4, 4, 300, 500, 64, 0, 0, VCATTN_DTYPE_BF16, 0, "vc", 0};
    inputs_t in;
    make_inputs(&s, &in);
    output_t host_out, dev_back;
    make_output(&s, &host_out); make_output(&s, &dev_back);
    vcattn_config cfg = method_config("vc");
    size_t qb = (size_t)(s.b * s.hq * s.nq * s.d) * 2, kb = (size_t)(s.b * s.hkv * s.nk * s.d) * 2;
    void *dq, *dk, *dv, *dout;
    cudaMalloc(&dq, qb); cudaMalloc(&dk, kb); cudaMalloc(&dv, kb); cudaMalloc(&dout, qb);
    cudaMemcpy(dq, in.qd, qb, cudaMemcpyHostToDevice);
    cudaMemcpy(dk, in.kd, kb, cudaMemcpyHostToDevice);
    cudaMemcpy(dv, in.vd, kb, cudaMemcpyHostToDevice);
    vcattn_tensor tq = in.q, tk = in.k, tv = in.v, to = host_out.t;
    tq.data = dq; tk.data = dk; tv.data = dv; to.data = dout;
    vcattn_status a = vcattn_attention(gpu, &cfg, &in.q, &in.k, &in.v, &host_out.t, NULL, NULL, NULL);
    vcattn_status b = vcattn_attention(gpu, &cfg, &tq, &tk, &tv, &to, NULL, NULL, NULL);
    CHECK(a == VCATTN_OK && b == VCATTN_OK, "device-resident call: %s", vcattn_last_error(gpu));
    cudaMemcpy(dev_back.t.data, dout, qb, cudaMemcpyDeviceToHost);
    CHECK(memcmp(host_out.t.data, dev_back.t.data, qb) == 0, "device-resident output differs from staged");
    cudaFree(dq); cudaFree(dk); cudaFree(dv); cudaFree(dout);
    free(host_out.raw); free(dev_back.raw); free(host_out.lse); free(dev_back.lse);
    free_inputs(&in);
}
#endif

static int quick;

static int wanted(const shape_t *s) {
    return tl_wanted(s->name) && (!quick || (s->nq <= 1000 && s->nk <= 1000 && s->b * s->hq <= 16));
}

int main(int argc, char **argv) {
    tl_args(argc, argv);
    const char *why = "";
    quick = getenv("VCATTN_TEST_QUICK") != NULL;
    if (!vcattn_backend_available(VCATTN_BACKEND_CUDA, &why)) {
        printf("test_cuda: SKIPPED, no usable GPU: %s\n", why);
        return 77;
    }
    vcattn_context *cpu, *gpu;
    vcattn_create(&cpu, VCATTN_BACKEND_CPU);
    vcattn_create(&gpu, VCATTN_BACKEND_CUDA);
    static const shape_t shapes[] = {
        {"N=1", 1, 2, 2, 1, 1, 128, 0, 0, VCATTN_DTYPE_F32, 0, NULL, 0},
        {"N=17", 1, 2, 2, 17, 17, 128, 0, 0, VCATTN_DTYPE_F32, 0, NULL, 0},
        {"N=127 rope", 1, 2, 2, 127, 127, 128, 0, 0, VCATTN_DTYPE_BF16, 1, NULL, 0},
        {"N=128", 1, 2, 2, 128, 128, 128, 0, 0, VCATTN_DTYPE_F32, 0, NULL, 0},
        {"N=129 fp16", 1, 2, 2, 129, 129, 128, 0, 0, VCATTN_DTYPE_F16, 0, NULL, 0},
        {"Nq=1000 Nk=4097 rope", 1, 2, 2, 1000, 4097, 128, 0, 0, VCATTN_DTYPE_BF16, 1, NULL, 0},
        {"N=1000 GQA half-split rope", 1, 4, 2, 1000, 1000, 128, 0, 0, VCATTN_DTYPE_BF16, ROPE_HALVES, NULL, 0},
        {"N=333 D=64 fp16 half-split rope", 2, 2, 2, 333, 333, 64, 1, 0, VCATTN_DTYPE_F16, ROPE_HALVES, NULL, 0},
        {"B=2 GQA NHD per-head rope", 2, 4, 2, 1000, 1000, 128, 1, 0, VCATTN_DTYPE_BF16, 1 | ROPE_PER_HEAD, NULL, 0},
        {"N=333 D=64 per-head half-split rope", 1, 2, 2, 333, 500, 64, 0, 0, VCATTN_DTYPE_F16,
         ROPE_HALVES | ROPE_PER_HEAD, NULL, 0},
        {"B=2 GQA 8/2 NHD", 2, 8, 2, 700, 900, 128, 1, 0, VCATTN_DTYPE_BF16, 1, NULL, 0},
        {"strided rows", 1, 3, 3, 640, 333, 128, 0, 8, VCATTN_DTYPE_BF16, 0, NULL, 0},
        {"D=64 B=2 NHD", 2, 4, 4, 1000, 1000, 64, 1, 0, VCATTN_DTYPE_BF16, 1, NULL, 0},
        {"D=64 N=17", 1, 2, 1, 17, 4097, 64, 0, 0, VCATTN_DTYPE_F32, 0, NULL, 0},
        {"D=64 Nk=8300: the device-wide sort", 1, 2, 2, 256, 8300, 64, 0, 0, VCATTN_DTYPE_BF16, 0, NULL, 0},
        {"Nk=6000: the head sort's largest block", 1, 2, 2, 100, 6000, 128, 0, 0, VCATTN_DTYPE_BF16, 0, NULL, 0},
        {"B=2 H=33000: grid.y > 65535", 2, 33000, 33000, 8, 8, 64, 0, 0, VCATTN_DTYPE_BF16, 0, NULL, 0},
        {"sink tokens", 1, 2, 2, 1000, 1000, 128, 0, 0, VCATTN_DTYPE_BF16, 1, NULL, V_SINKS},
        {"flat heads", 1, 2, 2, 1000, 1000, 128, 0, 0, VCATTN_DTYPE_BF16, 1, NULL, V_FLAT},
    };
    static const char *const methods[] = {"sage2", "vsmooth", "vc"};
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
        for (size_t m = 0; m < 3 && wanted(&shapes[i]); m++) {
            shape_t s = shapes[i];
            s.method = methods[m];
            run_shape(cpu, gpu, &s, 0);
            if (m > 0) run_shape(cpu, gpu, &s, 1);  /* V-Smooth: principal order, then k-means */
        }
    shape_t had = {"hadamard", 1, 2, 2, 1000, 1000, 128, 0, 0, VCATTN_DTYPE_BF16, 1, "vc+hadamard", 0};
    if (wanted(&had)) run_shape(cpu, gpu, &had, 1);
    static const shape_t qsmooth_shapes[] = {  /* Q smoothing: means, per-key terms, GQA, tails, D 64 */
        {"qsmooth B=2 GQA 8/2 NHD rope", 2, 8, 2, 700, 900, 128, 1, 0, VCATTN_DTYPE_BF16, 1, "vc+qsmooth", 0},
        {"qsmooth N=129 fp16", 1, 2, 2, 129, 129, 128, 0, 0, VCATTN_DTYPE_F16, 0, "vsmooth+qsmooth", 0},
        {"qsmooth D=64 tail", 1, 2, 1, 17, 4097, 64, 0, 0, VCATTN_DTYPE_F32, 0, "sage2+qsmooth", 0},
        {"qsmooth hadamard", 1, 2, 2, 1000, 1000, 128, 0, 0, VCATTN_DTYPE_BF16, 1, "vc+hadamard+qsmooth", 0},
        {"qsmooth per-head rope GQA", 2, 4, 2, 500, 700, 128, 1, 0, VCATTN_DTYPE_BF16, 1 | ROPE_PER_HEAD, "vc+qsmooth",
         0},
    };
    for (size_t i = 0; i < sizeof qsmooth_shapes / sizeof qsmooth_shapes[0]; i++)
        if (wanted(&qsmooth_shapes[i])) run_shape(cpu, gpu, &qsmooth_shapes[i], i % 2);
    static const shape_t probe_shapes[] = {  /* the attention probe end to end, both orders */
        {"probe sink tokens GQA rope", 1, 4, 2, 1000, 1000, 128, 0, 0, VCATTN_DTYPE_BF16, 1, "vc+probe", V_SINKS},
        {"probe attended keys GQA", 1, 4, 2, 1000, 1000, 128, 0, 0, VCATTN_DTYPE_BF16, 0, "vc+probe", V_ATTENDED},
        {"probe D=64 tail", 1, 2, 1, 17, 4097, 64, 0, 0, VCATTN_DTYPE_F32, 0, "vsmooth+probe", 0},
        {"probe32 attended keys GQA", 1, 4, 2, 1000, 1000, 128, 0, 0, VCATTN_DTYPE_BF16, 0, "vc+probe32", V_ATTENDED},
        {"probe32 D=64 tail", 1, 2, 1, 17, 4097, 64, 0, 0, VCATTN_DTYPE_F32, 0, "vsmooth+probe32", 0},
        /* more rows than a pass takes: passes of 64, the last one partial */
        {"probe200 attended keys GQA", 1, 4, 2, 1000, 1000, 128, 0, 0, VCATTN_DTYPE_BF16, 1, "vc+probe200", V_ATTENDED},
        /* enough key tiles that blocks score runs of them (two waves and more; on
         * 132 SMs runs of four, and of three at 200 rows: odd first tiles) */
        {"probe32 runs of tiles", 1, 40, 40, 17, 16461, 64, 0, 0, VCATTN_DTYPE_BF16, 0, "vsmooth+probe32", 0},
        {"probe runs of tiles", 1, 40, 40, 17, 16461, 64, 0, 0, VCATTN_DTYPE_BF16, 1, "vsmooth+probe", 0},
        {"probe200 runs of tiles", 1, 20, 20, 300, 16461, 64, 0, 0, VCATTN_DTYPE_BF16, 0, "vsmooth+probe200", 0},
    };
    for (size_t i = 0; i < sizeof probe_shapes / sizeof probe_shapes[0]; i++)
        if (wanted(&probe_shapes[i])) {
            run_shape(cpu, gpu, &probe_shapes[i], 0);
            run_shape(cpu, gpu, &probe_shapes[i], 1);
        }
    /* More D 128 work tiles (query-block pairs) than any Hopper part has SMs, at
     * least two a CTA on 132: a kernel whose CTAs take several work tiles in
     * turn carries its rings and turns from one tile into the next. One key
     * tile and a few, ragged query pairs, every method. Few keys, so these run
     * in quick mode too. */
    static const shape_t tile_shapes[] = {
        {"work tiles: one key tile", 1, 48, 8, 1000, 100, 128, 0, 0, VCATTN_DTYPE_BF16, 1, "vc", 0},
        {"work tiles: GQA NHD probe", 2, 28, 4, 600, 300, 128, 1, 0, VCATTN_DTYPE_BF16, 1, "vc+probe", V_SINKS},
        {"work tiles: qsmooth fp16", 1, 48, 48, 700, 300, 128, 0, 0, VCATTN_DTYPE_F16, 0, "vc+qsmooth", 0},
        {"work tiles: vsmooth key tail", 1, 40, 40, 1000, 257, 128, 0, 0, VCATTN_DTYPE_BF16, 0, "vsmooth", 0},
        {"work tiles: sage2", 1, 40, 8, 1000, 129, 128, 0, 0, VCATTN_DTYPE_BF16, 0, "sage2", 0},
    };
    for (size_t i = 0; i < sizeof tile_shapes / sizeof tile_shapes[0]; i++)
        if (tl_wanted(tile_shapes[i].name)) run_shape(cpu, gpu, &tile_shapes[i], i % 2);
    static const shape_t quant_shapes[] = {
        {"N=1000 rope", 1, 4, 2, 1000, 1000, 128, 0, 0, VCATTN_DTYPE_BF16, 1, "vc", 0},
        {"N=333 NHD D64 hadamard", 2, 2, 2, 333, 4097, 64, 1, 0, VCATTN_DTYPE_F16, 1, "vc+hadamard", 0},
        {"N=129 fp32 strided", 1, 2, 1, 129, 129, 128, 0, 8, VCATTN_DTYPE_F32, 0, "sage2", 0},
        {"N=1000 sink tokens", 1, 4, 2, 1000, 1000, 128, 0, 0, VCATTN_DTYPE_BF16, 1, "vc", V_SINKS},
        {"N=1000 flat heads", 1, 4, 2, 1000, 1000, 128, 0, 0, VCATTN_DTYPE_BF16, 1, "vc", V_FLAT},
        {"N=1000 GQA rope probe", 1, 4, 2, 1000, 1000, 128, 0, 0, VCATTN_DTYPE_BF16, 1, "vc+probe", V_SINKS},
        {"N=1000 GQA attended probe", 1, 4, 2, 1000, 1000, 128, 0, 0, VCATTN_DTYPE_BF16, 0, "vc+probe", V_ATTENDED},
        {"N=333 D64 qsmooth probe", 2, 2, 2, 333, 4097, 64, 1, 0, VCATTN_DTYPE_F16, 1, "vc+qsmooth+probe", 0},
        {"N=129 no smoothing probe", 1, 2, 1, 129, 129, 128, 0, 0, VCATTN_DTYPE_F32, 0, "vc+probe", 0},
        {"N=1000 GQA attended probe32", 1, 4, 2, 1000, 1000, 128, 0, 0, VCATTN_DTYPE_BF16, 0, "vc+probe32", V_ATTENDED},
        {"B=2 GQA NHD per-head rope probe", 2, 4, 2, 1000, 1000, 128, 1, 0, VCATTN_DTYPE_BF16, 1 | ROPE_PER_HEAD,
         "vc+probe", V_SINKS},
        {"N=333 D64 per-head half-split qsmooth", 1, 2, 2, 333, 500, 64, 0, 0, VCATTN_DTYPE_F16,
         ROPE_HALVES | ROPE_PER_HEAD, "vc+qsmooth", 0},
    };
    for (size_t i = 0; i < sizeof quant_shapes / sizeof quant_shapes[0]; i++) {
        if (!wanted(&quant_shapes[i])) continue;
        run_quantizers(cpu, gpu, &quant_shapes[i], 0);
        run_quantizers(cpu, gpu, &quant_shapes[i], 1);
    }
    TL_RUN(run_schedule(cpu, gpu));
    TL_RUN(run_huge_grouping(cpu, gpu));
    TL_RUN(run_energy_edges(cpu, gpu));
    TL_RUN(run_order_choice(cpu, gpu));
    TL_RUN(run_bad_input(gpu));
    TL_RUN(run_expcast_min_keys(gpu));
#ifdef VCATTN_WITH_CUDA
    TL_RUN(run_device_resident(gpu));
#endif
    vcattn_destroy(cpu);
    vcattn_destroy(gpu);
    return tl_finish("test_cuda");
}
