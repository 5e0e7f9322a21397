/* The FP64 reference against a naive computation written differently (RoPE
 * as x*cos + rotate(x)*sin, softmax through an unshifted log-sum-exp), across
 * GQA, Nq != Nk, both RoPE styles, strided BNHD views, fp16/bf16 inputs and
 * thread counts; plus the fidelity metrics on cases with known answers. */
#include <omp.h>
#include <stdint.h>
#include <string.h>

#include "reference.h"
#include "vcattn_inspect.h"
#include "metrics.h"
#include "testlib.h"

typedef struct {
    int64_t B, Hq, Hkv, Nq, Nk, D;
} dims;

static uint64_t rng = 0x243f6a8885a308d3ull;
static float uniform(void) {  /* in [-1, 1) */
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((double)(rng >> 11) * (2.0 / 9007199254740992.0) - 1.0);
}

static float *random_floats(int64_t n, float amp) {
    float *x = malloc((size_t)n * sizeof *x);
    for (int64_t i = 0; i < n; i++) x[i] = amp * uniform();
    return x;
}

/* Contiguous [B,H,N,D] view, built by hand to depend only on the struct. */
static vcattn_tensor hnd(void *data, vcattn_dtype dt, int64_t B, int64_t H, int64_t N, int64_t D) {
    vcattn_tensor t = {data, dt, B, H, N, D, H * N * D, N * D, D};
    return t;
}

/* RoPE tables [n][d/2] for positions offset + n. */
static void rope_tables(int64_t n, int64_t d, int offset, float **cos_tab, float **sin_tab) {
    *cos_tab = malloc((size_t)(n * d / 2) * sizeof(float));
    *sin_tab = malloc((size_t)(n * d / 2) * sizeof(float));
    for (int64_t t = 0; t < n; t++)
        for (int64_t i = 0; i < d / 2; i++) {
            double theta = (double)(t + offset) * pow(100.0, -2.0 * (double)i / (double)d);
            (*cos_tab)[t * (d / 2) + i] = (float)cos(theta);
            (*sin_tab)[t * (d / 2) + i] = (float)sin(theta);
        }
}

/* x' = x * cos_full + rotate(x) * sin_full, the "rotate_half" /
 * "rotate_every_two" formulation of the model code. */
static void naive_rope(const float *x, double *y, int64_t d, const float *cos_tab,
                       const float *sin_tab, int64_t pos, vcattn_rope_style style) {
    int64_t half = d / 2;
    for (int64_t e = 0; e < d; e++) {
        int64_t i;
        double rot;
        if (style == VCATTN_ROPE_INTERLEAVED) {
            i = e / 2;
            rot = (e % 2 == 0) ? -(double)x[e + 1] : (double)x[e - 1];
        } else {
            i = e % half;
            rot = e < half ? -(double)x[e + half] : (double)x[e - half];
        }
        y[e] = x[e] * (double)cos_tab[pos * half + i] + rot * (double)sin_tab[pos * half + i];
    }
}

/* q [B][Hq][Nq][D], k, v [B][Hkv][Nk][D] contiguous float. */
static void naive_attention(dims s, const float *q, const float *k, const float *v,
                            const vcattn_rope *rope, double scale, double *out, double *lse) {
    double *qr = malloc((size_t)s.D * sizeof *qr), *kr = malloc((size_t)s.D * sizeof *kr);
    double *sc = malloc((size_t)s.Nk * sizeof *sc);
    for (int64_t b = 0; b < s.B; b++)
        for (int64_t h = 0; h < s.Hq; h++) {
            int64_t hk = h / (s.Hq / s.Hkv);
            for (int64_t i = 0; i < s.Nq; i++) {
                const float *qp = q + ((b * s.Hq + h) * s.Nq + i) * s.D;
                for (int64_t e = 0; e < s.D; e++) qr[e] = qp[e];
                if (rope) naive_rope(qp, qr, s.D, rope->q_cos, rope->q_sin, i, rope->style);
                double z = 0.0;
                for (int64_t j = 0; j < s.Nk; j++) {
                    const float *kp = k + ((b * s.Hkv + hk) * s.Nk + j) * s.D;
                    for (int64_t e = 0; e < s.D; e++) kr[e] = kp[e];
                    if (rope) naive_rope(kp, kr, s.D, rope->k_cos, rope->k_sin, j, rope->style);
                    double dot = 0.0;
                    for (int64_t e = s.D - 1; e >= 0; e--) dot += kr[e] * qr[e];
                    sc[j] = dot * scale;
                    z += exp(sc[j]);  /* scores are O(1): no shift needed */
                }
                double l = log(z);
                double *o = out + ((b * s.Hq + h) * s.Nq + i) * s.D;
                for (int64_t e = 0; e < s.D; e++) {
                    double acc = 0.0;
                    for (int64_t j = 0; j < s.Nk; j++)
                        acc += exp(sc[j] - l) * v[((b * s.Hkv + hk) * s.Nk + j) * s.D + e];
                    o[e] = acc;
                }
                lse[(b * s.Hq + h) * s.Nq + i] = l;
            }
        }
    free(qr);
    free(kr);
    free(sc);
}

static double max_diff(const double *a, const double *b, int64_t n) {
    double m = 0.0;
    for (int64_t i = 0; i < n; i++) {
        double d = fabs(a[i] - b[i]);
        if (!(d <= m)) m = d;  /* NaN sticks */
    }
    return m;
}

/* Reference vs naive on contiguous float inputs. */
static void check_case(const char *name, dims s, int use_rope, vcattn_rope_style style,
                       float sm_scale) {
    if (!tl_wanted(name)) return;
    int64_t nq = s.B * s.Hq * s.Nq * s.D, nk = s.B * s.Hkv * s.Nk * s.D;
    float *q = random_floats(nq, 2.0f), *k = random_floats(nk, 2.0f), *v = random_floats(nk, 1.0f);
    vcattn_rope rope = {.style = style, .q_cos = NULL, .q_sin = NULL, .k_cos = NULL, .k_sin = NULL};
    float *qc, *qs, *kc, *ks;
    rope_tables(s.Nq, s.D, 3, &qc, &qs);  /* queries sit 3 positions later */
    rope_tables(s.Nk, s.D, 0, &kc, &ks);
    rope.q_cos = qc, rope.q_sin = qs, rope.k_cos = kc, rope.k_sin = ks;

    vcattn_tensor tq = hnd(q, VCATTN_DTYPE_F32, s.B, s.Hq, s.Nq, s.D);
    vcattn_tensor tk = hnd(k, VCATTN_DTYPE_F32, s.B, s.Hkv, s.Nk, s.D);
    vcattn_tensor tv = hnd(v, VCATTN_DTYPE_F32, s.B, s.Hkv, s.Nk, s.D);
    int64_t nrow = s.B * s.Hq * s.Nq;
    double *out = malloc((size_t)nq * sizeof *out), *lse = malloc((size_t)nrow * sizeof *lse);
    double *want = malloc((size_t)nq * sizeof *want), *want_lse = malloc((size_t)nrow * sizeof *lse);
    const vcattn_rope *rp = use_rope ? &rope : NULL;
    double scale = sm_scale != 0.0f ? (double)sm_scale : 1.0 / sqrt((double)s.D);

    vcattn_status st = vcattn_reference_attention(&tq, &tk, &tv, rp, sm_scale, out, lse);
    CHECK(st == VCATTN_OK, "%s: status %d", name, (int)st);
    naive_attention(s, q, k, v, rp, scale, want, want_lse);
    CHECK(max_diff(out, want, nq) < 1e-13, "%s: out differs by %.3g", name, max_diff(out, want, nq));
    CHECK(max_diff(lse, want_lse, nrow) < 1e-13, "%s: lse differs by %.3g", name,
          max_diff(lse, want_lse, nrow));

    /* lse is optional; thread count must not change a bit. */
    double *out2 = malloc((size_t)nq * sizeof *out2), *lse2 = malloc((size_t)nrow * sizeof *lse2);
    int threads = omp_get_max_threads();
    omp_set_num_threads(1);
    vcattn_reference_attention(&tq, &tk, &tv, rp, sm_scale, out2, NULL);
    CHECK(memcmp(out, out2, (size_t)nq * sizeof *out) == 0, "%s: 1 thread / no lse differs", name);
    omp_set_num_threads(5);
    vcattn_reference_attention(&tq, &tk, &tv, rp, sm_scale, out2, lse2);
    CHECK(memcmp(out, out2, (size_t)nq * sizeof *out) == 0 &&
              memcmp(lse, lse2, (size_t)nrow * sizeof *lse) == 0,
          "%s: 5 threads differ", name);
    omp_set_num_threads(threads);

    free(q), free(k), free(v), free(qc), free(qs), free(kc), free(ks);
    free(out), free(lse), free(want), free(want_lse), free(out2), free(lse2);
}

/* Copies a contiguous [B,H,N,D] float array into a [B,N,H,D] buffer whose
 * token stride has `pad` extra elements, padding filled with NaN so that any
 * stray read poisons the result. */
static vcattn_tensor strided_bnhd(const float *src, int64_t B, int64_t H, int64_t N, int64_t D,
                                  int64_t pad, float **buf) {
    int64_t st = H * D + pad, sb = N * st;
    *buf = malloc((size_t)(B * sb) * sizeof(float));
    for (int64_t i = 0; i < B * sb; i++) (*buf)[i] = NAN;
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < H; h++)
            for (int64_t n = 0; n < N; n++)
                memcpy(*buf + b * sb + n * st + h * D, src + ((b * H + h) * N + n) * D,
                       (size_t)D * sizeof(float));
    vcattn_tensor t = {*buf, VCATTN_DTYPE_F32, B, H, N, D, sb, D, st};
    return t;
}

static void check_layouts_and_dtypes(void) {
    dims s = {2, 4, 2, 5, 11, 32};
    int64_t nq = s.B * s.Hq * s.Nq * s.D, nk = s.B * s.Hkv * s.Nk * s.D;
    float *q = random_floats(nq, 3.0f), *k = random_floats(nk, 3.0f), *v = random_floats(nk, 1.0f);
    float *qc, *qs, *kc, *ks;
    rope_tables(s.Nq, s.D, 0, &qc, &qs);
    rope_tables(s.Nk, s.D, 0, &kc, &ks);
    vcattn_rope rope = {.style = VCATTN_ROPE_HALF_SPLIT, .q_cos = qc, .q_sin = qs, .k_cos = kc, .k_sin = ks};
    vcattn_tensor tq = hnd(q, VCATTN_DTYPE_F32, s.B, s.Hq, s.Nq, s.D);
    vcattn_tensor tk = hnd(k, VCATTN_DTYPE_F32, s.B, s.Hkv, s.Nk, s.D);
    vcattn_tensor tv = hnd(v, VCATTN_DTYPE_F32, s.B, s.Hkv, s.Nk, s.D);
    int64_t nrow = s.B * s.Hq * s.Nq;
    double *base = malloc((size_t)nq * sizeof(double)), *base_lse = malloc((size_t)nrow * sizeof(double));
    double *out = malloc((size_t)nq * sizeof(double)), *lse = malloc((size_t)nrow * sizeof(double));
    CHECK(vcattn_reference_attention(&tq, &tk, &tv, &rope, 0.0f, base, base_lse) == VCATTN_OK, "hnd");

    /* Strided BNHD views of the same values: bit-identical result. */
    float *bq, *bk, *bv;
    vcattn_tensor sq = strided_bnhd(q, s.B, s.Hq, s.Nq, s.D, 7, &bq);
    vcattn_tensor sk = strided_bnhd(k, s.B, s.Hkv, s.Nk, s.D, 3, &bk);
    vcattn_tensor sv = strided_bnhd(v, s.B, s.Hkv, s.Nk, s.D, 1, &bv);
    CHECK(vcattn_reference_attention(&sq, &sk, &sv, &rope, 0.0f, out, lse) == VCATTN_OK, "bnhd");
    CHECK(memcmp(out, base, (size_t)nq * sizeof *out) == 0 &&
              memcmp(lse, base_lse, (size_t)nrow * sizeof *lse) == 0,
          "strided BNHD differs from HND by %.3g", max_diff(out, base, nq));

    /* fp16 / bf16 inputs: same result as float inputs holding the decoded
     * values, and close to the float result. */
    for (int which = 0; which < 2; which++) {
        vcattn_dtype dt = which ? VCATTN_DTYPE_BF16 : VCATTN_DTYPE_F16;
        const float *src[3] = {q, k, v};
        int64_t len[3] = {nq, nk, nk};
        uint16_t *h[3];
        float *dec[3];
        for (int t = 0; t < 3; t++) {
            h[t] = malloc((size_t)len[t] * sizeof(uint16_t));
            dec[t] = malloc((size_t)len[t] * sizeof(float));
            for (int64_t i = 0; i < len[t]; i++) {
                h[t][i] = which ? vcattn_f32_to_bf16(src[t][i]) : vcattn_f32_to_f16(src[t][i]);
                dec[t][i] = which ? vcattn_bf16_to_f32(h[t][i]) : vcattn_f16_to_f32(h[t][i]);
            }
        }
        vcattn_tensor hq = hnd(h[0], dt, s.B, s.Hq, s.Nq, s.D);
        vcattn_tensor hk = hnd(h[1], dt, s.B, s.Hkv, s.Nk, s.D);
        vcattn_tensor hv = hnd(h[2], dt, s.B, s.Hkv, s.Nk, s.D);
        vcattn_tensor fq = hnd(dec[0], VCATTN_DTYPE_F32, s.B, s.Hq, s.Nq, s.D);
        vcattn_tensor fk = hnd(dec[1], VCATTN_DTYPE_F32, s.B, s.Hkv, s.Nk, s.D);
        vcattn_tensor fv = hnd(dec[2], VCATTN_DTYPE_F32, s.B, s.Hkv, s.Nk, s.D);
        double *want = malloc((size_t)nq * sizeof(double));
        CHECK(vcattn_reference_attention(&hq, &hk, &hv, &rope, 0.0f, out, NULL) == VCATTN_OK,
              "%s", vcattn_dtype_name(dt));
        vcattn_reference_attention(&fq, &fk, &fv, &rope, 0.0f, want, NULL);
        CHECK(memcmp(out, want, (size_t)nq * sizeof *out) == 0, "%s: differs from decoded f32",
              which ? "bf16" : "f16");
        vcattn_metrics m;
        metrics_compute_f64(out, base, nrow, s.D, &m);
        CHECK(m.rel_l2 > 0 && m.rel_l2 < (which ? 3e-2 : 3e-3), "%s vs f32: rel_l2 %.3g",
              which ? "bf16" : "f16", m.rel_l2);
        free(want);
        for (int t = 0; t < 3; t++) free(h[t]), free(dec[t]);
    }
    free(q), free(k), free(v), free(qc), free(qs), free(kc), free(ks);
    free(bq), free(bk), free(bv), free(base), free(base_lse), free(out), free(lse);
}

static void check_metrics(void) {
    enum { R = 4, C = 8 };
    double ref[R * C];
    float x[R * C];
    vcattn_metrics m;
    for (int i = 0; i < R * C; i++) {
        ref[i] = (i % 2 ? -1.0 : 1.0) * (i % 3 ? 1.0 : 2.0);
        x[i] = (float)ref[i];
    }
    metrics_compute(x, ref, R, C, &m);
    CHECK(m.rel_l2 == 0 && m.rel_l1 == 0 && m.max_abs == 0 && m.worst_row_rel_l2 == 0,
          "identical: nonzero error");
    CHECK_CLOSE(m.cosine, 1.0, 1e-15, "identical cosine");
    CHECK(isinf(m.snr_db) && m.snr_db > 0 && m.nonfinite == 0, "identical: snr %g", m.snr_db);

    /* x = ref * (1 + 1/16), exact in float: every relative error is 1/16,
     * SNR = 20 log10(16). */
    for (int i = 0; i < R * C; i++) x[i] = (float)(ref[i] * 1.0625);
    metrics_compute(x, ref, R, C, &m);
    CHECK_CLOSE(m.rel_l2, 0.0625, 1e-15, "scaled rel_l2");
    CHECK_CLOSE(m.rel_l1, 0.0625, 1e-15, "scaled rel_l1");
    CHECK_CLOSE(m.snr_db, 20.0 * log10(16.0), 1e-12, "scaled snr");
    CHECK_CLOSE(m.max_abs, 0.125, 0, "scaled max_abs");
    CHECK_CLOSE(m.worst_row_rel_l2, 0.0625, 1e-15, "scaled worst row");
    CHECK_CLOSE(m.cosine, 1.0, 1e-15, "scaled cosine");
    double xd[R * C];
    for (int i = 0; i < R * C; i++) xd[i] = x[i];
    vcattn_metrics md;
    metrics_compute_f64(xd, ref, R, C, &md);
    CHECK(memcmp(&m, &md, sizeof m) == 0, "f64 variant differs");

    /* One element of one row off by 0.5: ref rows all ones (|ref_r|^2 = 8),
     * a zero ref row judged in absolute terms. */
    for (int i = 0; i < R * C; i++) ref[i] = x[i] = 1.0f;
    x[2 * C + 5] = 1.5f;
    metrics_compute(x, ref, R, C, &m);
    CHECK_CLOSE(m.worst_row_rel_l2, 0.5 / sqrt(8.0), 1e-15, "worst row");
    CHECK_CLOSE(m.rel_l2, 0.5 / sqrt(32.0), 1e-15, "one-off rel_l2");
    CHECK_CLOSE(m.snr_db, 10.0 * log10(32.0 / 0.25), 1e-12, "one-off snr");
    CHECK_CLOSE(m.cosine, 32.5 / sqrt(32.0 * 33.25), 1e-15, "one-off cosine");
    for (int c = 0; c < C; c++) ref[C + c] = x[C + c] = 0.0f;
    x[C + 1] = 0.75f;
    metrics_compute(x, ref, R, C, &m);
    CHECK_CLOSE(m.worst_row_rel_l2, 0.75, 1e-15, "zero-ref row uses absolute error");

    /* Sums added part by part (eval's pooled draws) give the whole's metrics,
     * bit for bit; here the rows differ, so a wrong pooling would show. */
    for (int i = 0; i < R * C; i++) x[i] = (float)(ref[i] + 0.01 * ((i * 7) % 5 - 2) + (i / C) * 0.03);
    metrics_compute(x, ref, R, C, &m);
    metrics_sums sums = {0};
    metrics_sums_add(&sums, x, ref, 1, C);
    metrics_sums_add(&sums, x + C, ref + C, R - 1, C);
    metrics_sums_finish(&sums, &md);
    CHECK(memcmp(&m, &md, sizeof m) == 0 && m.rel_l2 > 0, "pooled sums differ from the whole: rel L2 %.17g vs %.17g",
          md.rel_l2, m.rel_l2);

    x[3] = NAN;
    x[7] = -INFINITY;
    metrics_compute(x, ref, R, C, &m);
    CHECK(m.nonfinite == 2, "nonfinite %lld", (long long)m.nonfinite);
    CHECK(isnan(m.cosine) && isnan(m.rel_l1) && isnan(m.rel_l2) && isnan(m.snr_db) &&
              isnan(m.max_abs) && isnan(m.worst_row_rel_l2),
          "nonfinite input must give NaN metrics");

    memset(x, 0, sizeof x);
    memset(ref, 0, sizeof ref);
    metrics_compute(x, ref, R, C, &m);
    CHECK(m.cosine == 1.0 && m.rel_l2 == 0 && m.rel_l1 == 0 && isinf(m.snr_db), "all zero");
}

/* Mismatched shapes are refused before any row is read: the CLI's eval once
 * called the reference on unvalidated .npy inputs and read past v. */
static void check_shape_mismatch(void) {
    float buf[2 * 2 * 4 * 8] = {0};
    double out[2 * 2 * 4 * 8], lse[2 * 2 * 4];
    const struct { const char *what; vcattn_tensor q, k, v; } cases[] = {
        {"v has fewer tokens", hnd(buf, VCATTN_DTYPE_F32, 1, 1, 4, 8), hnd(buf, VCATTN_DTYPE_F32, 1, 1, 4, 8),
         hnd(buf, VCATTN_DTYPE_F32, 1, 1, 1, 8)},
        {"v has fewer heads", hnd(buf, VCATTN_DTYPE_F32, 1, 2, 4, 8), hnd(buf, VCATTN_DTYPE_F32, 1, 2, 4, 8),
         hnd(buf, VCATTN_DTYPE_F32, 1, 1, 4, 8)},
        {"q batch 2, k batch 1", hnd(buf, VCATTN_DTYPE_F32, 2, 1, 4, 8), hnd(buf, VCATTN_DTYPE_F32, 1, 1, 4, 8),
         hnd(buf, VCATTN_DTYPE_F32, 1, 1, 4, 8)},
        {"head dims differ", hnd(buf, VCATTN_DTYPE_F32, 1, 1, 4, 8), hnd(buf, VCATTN_DTYPE_F32, 1, 1, 2, 16),
         hnd(buf, VCATTN_DTYPE_F32, 1, 1, 2, 16)},
        {"Hq not a multiple of Hkv", hnd(buf, VCATTN_DTYPE_F32, 1, 3, 4, 8), hnd(buf, VCATTN_DTYPE_F32, 1, 2, 4, 8),
         hnd(buf, VCATTN_DTYPE_F32, 1, 2, 4, 8)},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        vcattn_status st = vcattn_reference_attention(&cases[i].q, &cases[i].k, &cases[i].v, NULL, 0.0f, out, lse);
        CHECK(st == VCATTN_ERR_SHAPE_MISMATCH, "reference, %s: status %d", cases[i].what, (int)st);
    }
    vcattn_tensor empty = hnd(buf, VCATTN_DTYPE_F32, 1, 1, 0, 8), one = hnd(buf, VCATTN_DTYPE_F32, 1, 1, 4, 8);
    CHECK(vcattn_reference_attention(&empty, &one, &one, NULL, 0.0f, out, lse) == VCATTN_ERR_INVALID_ARGUMENT,
          "reference, zero query tokens");
}

int main(int argc, char **argv) {
    tl_args(argc, argv);
    TL_RUN(check_shape_mismatch());
    check_case("no rope", (dims){2, 3, 3, 5, 7, 8}, 0, VCATTN_ROPE_INTERLEAVED, 0.0f);
    check_case("interleaved gqa", (dims){1, 4, 2, 6, 9, 16}, 1, VCATTN_ROPE_INTERLEAVED, 0.3f);
    check_case("half-split gqa", (dims){2, 4, 2, 9, 6, 16}, 1, VCATTN_ROPE_HALF_SPLIT, 0.0f);
    check_case("mqa one key", (dims){1, 4, 1, 3, 1, 4}, 1, VCATTN_ROPE_HALF_SPLIT, 0.0f);
    TL_RUN(check_layouts_and_dtypes());
    TL_RUN(check_metrics());
    return tl_finish("test_reference");
}
