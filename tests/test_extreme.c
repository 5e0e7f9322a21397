/* Extreme inputs: all-equal scores, one key that takes the whole
 * row, all-zero V blocks, a V block that is one outlier, V at the float16
 * and near the float32 maximum, V near the smallest normal and among the
 * subnormals, huge scores, identical value tokens
 * (k-means leaves clusters empty), fewer keys than clusters. Every 8-bit
 * method on the CPU backend, and on the CUDA backend where a GPU is present
 * (bf16, fp8-naive and vsmooth-4bit on the CPU): the call succeeds, every
 * output is finite, and the error against the FP64 reference stays within
 * the method's usual range (a guard against silent wrong answers, not a
 * fidelity figure). */
#include "testlib.h"
#include "vcattn_inspect.h"
#include "reference.h"
#include "metrics.h"

#include <float.h>
#include <string.h>

typedef struct {
    const char *name;
    int64_t nk;
    float v_scale;
    int check_error;  /* 0: finite only (INT8 QK decides the argmax) */
    void (*shape)(float *q, float *k, float *v, int64_t nq, int64_t nk, int64_t d);
} extreme_case;

enum { NQ = 96, D = 64, H = 2 };

static void equal_scores(float *q, float *k, float *v, int64_t nq, int64_t nk, int64_t d) {
    memset(q, 0, sizeof(float) * (size_t)(H * nq * d));  /* every score 0: out = mean of V */
}

static void one_key_wins(float *q, float *k, float *v, int64_t nq, int64_t nk, int64_t d) {
    for (int h = 0; h < H; h++) {
        for (int64_t i = 0; i < nq * d; i++) q[h * nq * d + i] = 1.0f;
        for (int64_t c = 0; c < d; c++) k[(h * nk + 37) * d + c] = 12.0f;  /* score 96 vs ~1: the rest underflow */
    }
}

static void zero_v_block(float *q, float *k, float *v, int64_t nq, int64_t nk, int64_t d) {
    for (int h = 0; h < H; h++) memset(v + (h * nk + 128) * d, 0, sizeof(float) * (size_t)(128 * d));
}

static void zero_v(float *q, float *k, float *v, int64_t nq, int64_t nk, int64_t d) {
    memset(v, 0, sizeof(float) * (size_t)(H * nk * d));
}

static void outlier_block(float *q, float *k, float *v, int64_t nq, int64_t nk, int64_t d) {
    for (int h = 0; h < H; h++)
        for (int64_t n = 0; n < 128; n++)
            for (int64_t c = 0; c < d; c++) v[(h * nk + n) * d + c] = 1000.0f + (c == 3 ? 500.0f : 0.0f);
}

static void huge_scores(float *q, float *k, float *v, int64_t nq, int64_t nk, int64_t d) {
    for (int64_t i = 0; i < H * nq * d; i++) q[i] *= 100.0f;
    for (int64_t i = 0; i < H * nk * d; i++) k[i] *= 100.0f;
}

static void identical_tokens(float *q, float *k, float *v, int64_t nq, int64_t nk, int64_t d) {
    for (int h = 0; h < H; h++)
        for (int64_t n = 1; n < nk; n++) memcpy(v + (h * nk + n) * d, v + h * nk * d, sizeof(float) * (size_t)d);
}

static void nothing(float *q, float *k, float *v, int64_t nq, int64_t nk, int64_t d) {}

/* The boundary of the documented V range: the largest finite float with
 * mixed signs. Demeaning such a block once overflowed the residual to Inf
 * (then Inf * 0 = NaN on every V-Smooth method). */
static void v_float_max_mixed(float *q, float *k, float *v, int64_t nq, int64_t nk, int64_t d) {
    for (int64_t i = 0; i < H * nk * d; i++) v[i] = v[i] < 0.0f ? -3.4028235e38f : 3.4028235e38f;
}

static void v_3e38_mixed(float *q, float *k, float *v, int64_t nq, int64_t nk, int64_t d) {
    for (int64_t i = 0; i < H * nk * d; i++) v[i] = v[i] < 0.0f ? -3.0e38f : 3.0e38f;
}

/* Random +-1: values E4M3 holds exactly, whose block mean carries ~1/128 of
 * the energy. Demeaning them once moved every value off the grid, with one
 * shared rounding error per value and channel: vc's error was 0.11 against
 * sage2's 0.026. Such blocks are now left undemeaned (VSMOOTH_MIN_MEAN_SHARE). */
static void v_plus_minus_one(float *q, float *k, float *v, int64_t nq, int64_t nk, int64_t d) {
    for (int64_t i = 0; i < H * nk * d; i++) v[i] = v[i] < 0.0f ? -1.0f : 1.0f;
}

/* One +2e38 token in a block of -2e38 ones: the residual of that token is
 * 4e38. */
static void v_outlier_at_float_max(float *q, float *k, float *v, int64_t nq, int64_t nk, int64_t d) {
    for (int h = 0; h < H; h++)
        for (int64_t n = 0; n < nk; n++)
            for (int64_t c = 0; c < d; c++) v[(h * nk + n) * d + c] = n == 5 ? 2.0e38f : -2.0e38f;
}

/* float32 [1, H, N, D] views of q, k, v and out (nq query rows, nk keys). */
typedef struct {
    vcattn_tensor q, k, v, out;
} views;

static views make_views(float *q, float *k, float *v, float *out, int64_t nq, int64_t nk, int64_t d) {
    views t = {vcattn_tensor_bhnd(q, VCATTN_DTYPE_F32, 1, H, nq, d), vcattn_tensor_bhnd(k, VCATTN_DTYPE_F32, 1, H, nk, d),
               vcattn_tensor_bhnd(v, VCATTN_DTYPE_F32, 1, H, nk, d), vcattn_tensor_bhnd(out, VCATTN_DTYPE_F32, 1, H, nq, d)};
    return t;
}

static const extreme_case cases[] = {
    {"all-equal scores", 300, 1.0f, 1, equal_scores},
    {"one key takes the row", 300, 1.0f, 1, one_key_wins},
    {"an all-zero V block", 300, 1.0f, 1, zero_v_block},
    {"V all zero", 300, 1.0f, 1, zero_v},
    {"a V block of one outlier", 300, 1.0f, 1, outlier_block},
    {"V at the float16 maximum", 300, 6.0e4f, 1, nothing},
    {"V near the float32 (and bfloat16) maximum", 300, 5.0e37f, 1, nothing},
    {"huge scores", 300, 1.0f, 0, huge_scores},
    {"identical value tokens (empty clusters)", 300, 1.0f, 1, identical_tokens},
    {"fewer keys than clusters", 3, 1.0f, 1, nothing},
    {"V of +-1 (exact in E4M3)", 300, 1.0f, 1, v_plus_minus_one},
    {"V of +-3e38, mixed signs", 300, 1.0f, 1, v_3e38_mixed},
    {"V of +-FLT_MAX, mixed signs", 300, 1.0f, 1, v_float_max_mixed},
    {"one +2e38 token among -2e38 ones", 300, 1.0f, 1, v_outlier_at_float_max},
    /* tiny V: 448 / amax once overflowed below ~1.3e-36, every code was 0
     * and the output 0 (relative L2 1.000); now a power-of-two pre-scale */
    {"V near the smallest normal float (1e-38)", 300, 1.0e-38f, 1, nothing},
    {"V of subnormals near 1e-40", 300, 1.0e-40f, 1, nothing},
};

static void run_case(vcattn_context *ctx, const char *backend, const extreme_case *ec, const char *method,
                     double max_err) {
    if (!tl_wanted(ec->name)) return;
    const int64_t nk = ec->nk, nq = NQ, d = D;
    float *q = malloc(sizeof(float) * (size_t)(H * nq * d)), *k = malloc(sizeof(float) * (size_t)(H * nk * d));
    float *v = malloc(sizeof(float) * (size_t)(H * nk * d)), *out = malloc(sizeof(float) * (size_t)(H * nq * d));
    double *ref = malloc(sizeof(double) * (size_t)(H * nq * d));
    for (int64_t i = 0; i < H * nq * d; i++) q[i] = nrand();
    for (int64_t i = 0; i < H * nk * d; i++) k[i] = nrand() + 0.5f;
    for (int64_t i = 0; i < H * nk * d; i++) v[i] = ec->v_scale * nrand();
    ec->shape(q, k, v, nq, nk, d);
    const views t = make_views(q, k, v, out, nq, nk, d);
    vcattn_reference_attention(&t.q, &t.k, &t.v, NULL, 0.0f, ref, NULL);

    vcattn_config cfg;
    vcattn_config_from_method(method, &cfg);
    cfg.expcast_min_keys = 0;  /* ExpCast at these few keys too */
    cfg.kmeans_clusters = 8;  /* more than the identical tokens can fill */
    vcattn_status st = vcattn_attention(ctx, &cfg, &t.q, &t.k, &t.v, &t.out, NULL, NULL, NULL);
    int finite = 1;
    for (int64_t i = 0; i < H * nq * d; i++) finite &= isfinite(out[i]) != 0;
    CHECK(st == VCATTN_OK && finite, "%s, %s, %s: status %d (%s), finite %d", backend, method, ec->name, st,
          vcattn_last_error(ctx), finite);
    if (st == VCATTN_OK && ec->check_error) {
        vcattn_metrics m;
        metrics_compute(out, ref, H * nq, d, &m);
        const double err = m.rel_l2;  /* NaN (a non-finite output) fails */
        CHECK(err < max_err, "%s, %s, %s: relative L2 error %.4f", backend, method, ec->name, err);
    }
    free(q); free(k); free(v); free(out); free(ref);
}

/* q near 1e37 against keys near 1e-36: scores of a few units, but the Hadamard's
 * sums of D entries pass the float maximum. Such a call once returned OK
 * with an output unrelated to the reference (relative L2 0.99); now it is
 * refused with the check on, and without the Hadamard it runs as usual. */
static void hadamard_overflow(vcattn_context *ctx, const char *backend) {
    enum { N = 64 };
    static float q[H * N * D], k[H * N * D], v[H * N * D], out[H * N * D];
    static double ref[H * N * D];
    for (int i = 0; i < H * N * D; i++) {
        q[i] = 1.0e37f * (1.0f + 0.1f * nrand());
        k[i] = 1.0e-36f * nrand();
        v[i] = nrand();
        out[i] = -7.0f;
    }
    const views t = make_views(q, k, v, out, N, N, D);
    vcattn_reference_attention(&t.q, &t.k, &t.v, NULL, 0.0f, ref, NULL);
    vcattn_config cfg;
    vcattn_config_from_method("sage2+hadamard", &cfg);
    vcattn_status st = vcattn_attention(ctx, &cfg, &t.q, &t.k, &t.v, &t.out, NULL, NULL, NULL);
    int untouched = 1;
    for (int i = 0; i < H * N * D; i++) untouched &= out[i] == -7.0f;
    CHECK(st == VCATTN_ERR_INVALID_ARGUMENT && strstr(vcattn_last_error(ctx), "Hadamard") && untouched,
          "%s, q ~1e37 with the Hadamard: status %d (%s), output untouched %d", backend, st, vcattn_last_error(ctx),
          untouched);
    vcattn_config_from_method("sage2", &cfg);
    st = vcattn_attention(ctx, &cfg, &t.q, &t.k, &t.v, &t.out, NULL, NULL, NULL);
    vcattn_metrics m;
    metrics_compute(out, ref, H * N, D, &m);
    CHECK(st == VCATTN_OK && m.rel_l2 < 0.05, "%s, q ~1e37 without the Hadamard: status %d, relative L2 %.4f", backend,
          st, m.rel_l2);
}

/* Each of the methods refuses the call t (invalid argument) and leaves its
 * output (filled with -7) untouched; `what` names the case. */
static void expect_refused(vcattn_context *ctx, const char *backend, const views *t, const vcattn_rope *rope,
                           const char *what) {
    static const char *const methods[] = {"sage2+qsmooth", "vc+qsmooth", "sage2", "sage3-4bit"};
    const float *out = t->out.data;
    const int64_t count = t->out.heads * t->out.tokens * t->out.head_dim;
    for (size_t m = 0; m < sizeof methods / sizeof methods[0]; m++) {
        if (strcmp(backend, "cuda") == 0 && strstr(methods[m], "4bit")) continue;  /* CPU-only method */
        vcattn_config cfg;
        vcattn_config_from_method(methods[m], &cfg);
        cfg.expcast_min_keys = 0;
        vcattn_status st = vcattn_attention(ctx, &cfg, &t->q, &t->k, &t->v, &t->out, NULL, rope, NULL);
        int untouched = 1;
        for (int64_t i = 0; i < count; i++) untouched &= out[i] == -7.0f;
        CHECK(st == VCATTN_ERR_INVALID_ARGUMENT && untouched, "%s, %s, %s: status %d (%s), output untouched %d",
              backend, methods[m], what, st, vcattn_last_error(ctx), untouched);
    }
}

/* Keys at the float maximum that RoPE pushes past it (FLT_MAX (cos + sin) is
 * Inf, and K smoothing's mean of Inf and -Inf is NaN): the row norms of the
 * score bound came out NaN and fmax dropped them, so with Q smoothing such a
 * call returned OK with NaN outputs (found by the fuzzer). Now refused, with
 * the check on, and nothing written. */
static void rope_overflow(vcattn_context *ctx, const char *backend) {
    enum { N = 64 };
    static float q[H * N * D], k[H * N * D], v[H * N * D], out[H * N * D], cs[N * D / 2];
    for (int i = 0; i < H * N * D; i++) {
        q[i] = nrand();
        k[i] = (i / D) % 2 ? FLT_MAX : -FLT_MAX;
        v[i] = nrand();
        out[i] = -7.0f;
    }
    for (int i = 0; i < N * D / 2; i++) cs[i] = 0.70710678f;
    vcattn_rope rope = {.style = VCATTN_ROPE_INTERLEAVED, .q_cos = cs, .q_sin = cs, .k_cos = cs, .k_sin = cs};
    const views t = make_views(q, k, v, out, N, N, D);
    expect_refused(ctx, backend, &t, &rope, "keys past the float maximum after RoPE");
    /* The same with the roles swapped and one key, which K smoothing makes
     * zero: |q| Inf times |k| 0 made the bound NaN, and the call went through
     * (found by the fuzzer: NaN outputs with the 4-bit method). */
    const views one = make_views(k, q, v, out, N, 1, D);
    expect_refused(ctx, backend, &one, &rope, "queries past the float maximum after RoPE, one key");
}

/* An output is a weighted mean of V's rows. float32 V past the largest
 * float16 (or bfloat16) with a 16-bit out gave Inf with status OK. Now, with
 * the check on, such V is refused and nothing is written; with it off, the
 * 16-bit stores saturate: every output finite and within the type. Each
 * method, each backend (4-bit, bf16, fp8-naive on the CPU alone). */
static void out_dtype_range(vcattn_context *ctx, const char *backend) {
    enum { N = 300 };
    static float q[H * NQ * D], k[H * N * D], v[H * N * D];
    static uint16_t out[H * NQ * D];
    static const char *const methods[] = {"sage2", "vsmooth", "vc", "sage2+hadamard", "bf16", "fp8-naive",
                                          "vsmooth-4bit"};
    const struct { vcattn_dtype dtype; float big, max; const char *name; } types[] = {
        {VCATTN_DTYPE_F16, 1.0e5f, 65504.0f, "float16"},
        {VCATTN_DTYPE_BF16, FLT_MAX, 3.38953139e38f, "bfloat16"},
    };
    for (int i = 0; i < H * NQ * D; i++) q[i] = 1.0f;
    for (int i = 0; i < H * N * D; i++) k[i] = nrand();
    for (int h = 0; h < H; h++)  /* key 37 takes every row (score 96 against ~1) */
        for (int c = 0; c < D; c++) k[(h * N + 37) * D + c] = 12.0f;
    for (size_t ti = 0; ti < 2; ti++) {
        for (int i = 0; i < H * N * D; i++) v[i] = nrand();
        for (int h = 0; h < H; h++)  /* so every output is near +-big */
            for (int c = 0; c < D; c++) v[(h * N + 37) * D + c] = c % 2 ? -types[ti].big : types[ti].big;
        vcattn_tensor tq = vcattn_tensor_bhnd(q, VCATTN_DTYPE_F32, 1, H, NQ, D);
        vcattn_tensor tk = vcattn_tensor_bhnd(k, VCATTN_DTYPE_F32, 1, H, N, D);
        vcattn_tensor tv = vcattn_tensor_bhnd(v, VCATTN_DTYPE_F32, 1, H, N, D);
        vcattn_tensor to = vcattn_tensor_bhnd(out, types[ti].dtype, 1, H, NQ, D);
        for (size_t m = 0; m < sizeof methods / sizeof methods[0]; m++) {
            if (strcmp(backend, "cuda") == 0 && m >= 4) continue;  /* CPU-only methods */
            vcattn_config cfg;
            vcattn_config_from_method(methods[m], &cfg);
            cfg.expcast_min_keys = 0;
            memset(out, 0xab, sizeof out);
            vcattn_status st = vcattn_attention(ctx, &cfg, &tq, &tk, &tv, &to, NULL, NULL, NULL);
            int untouched = 1;
            for (int i = 0; i < H * NQ * D; i++) untouched &= out[i] == 0xabab;
            CHECK(st == VCATTN_ERR_INVALID_ARGUMENT && strstr(vcattn_last_error(ctx), types[ti].name) && untouched,
                  "%s, %s, V past the largest %s: status %d (%s), output untouched %d", backend, methods[m],
                  types[ti].name, st, vcattn_last_error(ctx), untouched);
            cfg.check_finite = 0;
            st = vcattn_attention(ctx, &cfg, &tq, &tk, &tv, &to, NULL, NULL, NULL);
            int within = 1;
            for (int i = 0; i < H * NQ * D; i++) {
                const float x = types[ti].dtype == VCATTN_DTYPE_F16 ? vcattn_f16_to_f32(out[i])
                                                                    : vcattn_bf16_to_f32(out[i]);
                within &= isfinite(x) && fabsf(x) <= types[ti].max;
            }
            CHECK(st == VCATTN_OK && within, "%s, %s, V past the largest %s, check off: status %d, outputs "
                  "finite and within the type %d", backend, methods[m], types[ti].name, st, within);
        }
    }
}

/* q near 1e-38 against k near 1e37: scores of order 1, but each query row's
 * amax is below what an INT8 scale holds (127 / amax overflows), so its
 * codes and scale came out 0 and every score read as 0: uniform attention
 * with status OK (relative L2 0.30 on the 8-bit methods). Now refused with
 * the check on, nothing written; NVFP4 (sage3-4bit), whose tensor scale
 * holds such rows, runs at its usual error; q that small against ordinary
 * keys (scores ~1e-38) is accepted. */
static void unseen_scores(vcattn_context *ctx, const char *backend) {
    enum { N = 200 };
    static float q[H * N * D], k[H * N * D], v[H * N * D], out[H * N * D];
    static double ref[H * N * D];
    for (int i = 0; i < H * N * D; i++) {
        q[i] = 1.0e-38f * nrand();
        k[i] = 3.0e37f * nrand();
        v[i] = nrand();
    }
    const views t = make_views(q, k, v, out, N, N, D);
    vcattn_reference_attention(&t.q, &t.k, &t.v, NULL, 0.0f, ref, NULL);
    static const char *const refused[] = {"sage2", "vc", "sage2+qsmooth", "fp8-naive"};
    for (size_t m = 0; m < sizeof refused / sizeof refused[0]; m++) {
        if (strcmp(backend, "cuda") == 0 && m == 3) continue;  /* CPU-only method */
        vcattn_config cfg;
        vcattn_config_from_method(refused[m], &cfg);
        for (int i = 0; i < H * N * D; i++) out[i] = -7.0f;
        const vcattn_status st = vcattn_attention(ctx, &cfg, &t.q, &t.k, &t.v, &t.out, NULL, NULL, NULL);
        int untouched = 1;
        for (int i = 0; i < H * N * D; i++) untouched &= out[i] == -7.0f;
        CHECK(st == VCATTN_ERR_INVALID_ARGUMENT && strstr(vcattn_last_error(ctx), "read as 0") && untouched,
              "%s, %s, q ~1e-38 against k ~1e37: status %d (%s), output untouched %d", backend, refused[m], st,
              vcattn_last_error(ctx), untouched);
    }
    if (strcmp(backend, "cpu") == 0) {
        vcattn_config cfg;
        vcattn_config_from_method("sage3-4bit", &cfg);
        const vcattn_status st = vcattn_attention(ctx, &cfg, &t.q, &t.k, &t.v, &t.out, NULL, NULL, NULL);
        vcattn_metrics met;
        metrics_compute(out, ref, H * N, D, &met);
        CHECK(st == VCATTN_OK && met.rel_l2 < 0.25, "cpu, sage3-4bit, q ~1e-38 against k ~1e37: status %d, "
              "relative L2 %.4f", st, met.rel_l2);
    }
    for (int i = 0; i < H * N * D; i++) k[i] = nrand();
    vcattn_config cfg;
    vcattn_config_from_method("vc", &cfg);
    const vcattn_status st = vcattn_attention(ctx, &cfg, &t.q, &t.k, &t.v, &t.out, NULL, NULL, NULL);
    CHECK(st == VCATTN_OK, "%s, q ~1e-38 against ordinary keys: status %d (%s)", backend, st, vcattn_last_error(ctx));
}

/* V and V 2^s give outputs exactly 2^s apart, bit for bit, for s = +-100:
 * every step on V (the power-of-two pre-scale near the float limits, the
 * k-means scale, block means, the sink guard, E4M3 scales) is invariant
 * under a power of two, so neither huge nor tiny V may lose anything that
 * ordinary V keeps. CPU backend; with a grouping step (one-step layer) so
 * k-means runs too. */
static void v_power_of_two(vcattn_context *ctx) {
    enum { N = 300 };
    static float q[H * NQ * D], k[H * N * D], v[H * N * D], vs[H * N * D], out[H * NQ * D], outs[H * NQ * D];
    for (int i = 0; i < H * NQ * D; i++) q[i] = nrand();
    for (int i = 0; i < H * N * D; i++) {
        k[i] = nrand() + 0.5f;
        v[i] = nrand() + (float)((i / D) % 3);  /* three value levels: clusters and block means */
    }
    static const char *const methods[] = {"sage2", "vsmooth", "vc", "fp8-naive", "vsmooth-4bit"};
    const int shifts[] = {100, -100};
    for (size_t m = 0; m < sizeof methods / sizeof methods[0]; m++)
        for (int si = 0; si < 2; si++) {
            for (int i = 0; i < H * N * D; i++) vs[i] = ldexpf(v[i], shifts[si]);
            vcattn_config cfg;
            vcattn_config_from_method(methods[m], &cfg);
            cfg.expcast_min_keys = 0;
            const views a = make_views(q, k, v, out, NQ, N, D), b = make_views(q, k, vs, outs, NQ, N, D);
            vcattn_status sa = grouped_attention(ctx, &cfg, &a.q, &a.k, &a.v, &a.out, NULL, NULL);
            vcattn_status sb = grouped_attention(ctx, &cfg, &b.q, &b.k, &b.v, &b.out, NULL, NULL);
            int same = sa == VCATTN_OK && sb == VCATTN_OK;
            for (int i = 0; same && i < H * NQ * D; i++) same = outs[i] == ldexpf(out[i], shifts[si]);
            CHECK(same, "cpu, %s: V times 2^%d does not scale the output exactly (status %d/%d)", methods[m],
                  shifts[si], sa, sb);
        }
}

int main(int argc, char **argv) {
    tl_args(argc, argv);
    static const char *const methods[] = {"sage2", "vsmooth", "vc", "sage2+hadamard"};
    const vcattn_backend backends[] = {VCATTN_BACKEND_CPU, VCATTN_BACKEND_CUDA};
    for (int bi = 0; bi < 2; bi++) {
        const char *why;
        if (!vcattn_backend_available(backends[bi], &why)) {
            printf("test_extreme: cuda backend skipped: %s\n", why);
            continue;
        }
        vcattn_context *ctx;
        if (vcattn_create(&ctx, backends[bi]) != VCATTN_OK) return 1;
        hadamard_overflow(ctx, bi ? "cuda" : "cpu");
        rope_overflow(ctx, bi ? "cuda" : "cpu");
        out_dtype_range(ctx, bi ? "cuda" : "cpu");
        unseen_scores(ctx, bi ? "cuda" : "cpu");
        if (!bi) v_power_of_two(ctx);
        for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
            for (size_t m = 0; m < sizeof methods / sizeof methods[0]; m++)
                run_case(ctx, bi ? "cuda" : "cpu", &cases[c], methods[m], 0.05);
            if (!bi) {  /* the float-V and 4-bit paths (CPU backend only), each at its usual error */
                run_case(ctx, "cpu", &cases[c], "bf16", 0.01);
                run_case(ctx, "cpu", &cases[c], "fp8-naive", 0.10);
                run_case(ctx, "cpu", &cases[c], "vsmooth-4bit", 0.25);
            }
        }
        vcattn_destroy(ctx);
    }
    return tl_finish("test_extreme");
}
