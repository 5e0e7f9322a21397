/* Properties of the CPU backend's attention: exactness when every quantizer
 * is off (online softmax, V-Smooth permutation and mean restoration are
 * exact), the ExpCast row bound, LSE, layouts, GQA, determinism, guards, and
 * the fidelity ordering of the methods on the built-in workload. */
#include "testlib.h"
#include "workloads.h"
#include "vcattn.h"
#include "reference.h"
#include "vcattn_inspect.h"
#include "metrics.h"

#include <string.h>

static float *random_tensor(int64_t count, float scale, float offset) {
    float *x = malloc((size_t)count * sizeof *x);
    for (int64_t i = 0; i < count; i++) x[i] = offset + scale * nrand();
    return x;
}

/* Every switch off: plain float32 attention. */
static vcattn_config exact_config(void) {
    vcattn_config c = vcattn_config_default();
    c.qk_format = VCATTN_QK_EXACT;
    c.k_smoothing = 0;
    c.p_format = VCATTN_P_EXACT;
    c.v_format = VCATTN_V_EXACT;
    c.vsmooth = 0;
    return c;
}

typedef struct {
    int64_t b, hq, hkv, nq, nk, d;
    float *q, *k, *v, *out, *lse;
    double *ref, *ref_lse;
    vcattn_tensor tq, tk, tv, tout;
} case_t;

static void case_init(case_t *t, int64_t b, int64_t hq, int64_t hkv, int64_t nq, int64_t nk,
                      int64_t d, float v_offset) {
    memset(t, 0, sizeof *t);
    t->b = b; t->hq = hq; t->hkv = hkv; t->nq = nq; t->nk = nk; t->d = d;
    t->q = random_tensor(b * hq * nq * d, 1.0f, 0.0f);
    t->k = random_tensor(b * hkv * nk * d, 1.0f, 0.5f);   /* offset: smoothing matters */
    t->v = random_tensor(b * hkv * nk * d, 1.0f, v_offset);
    t->out = malloc((size_t)(b * hq * nq * d) * sizeof(float));
    t->lse = malloc((size_t)(b * hq * nq) * sizeof(float));
    t->ref = malloc((size_t)(b * hq * nq * d) * sizeof(double));
    t->ref_lse = malloc((size_t)(b * hq * nq) * sizeof(double));
    t->tq = vcattn_tensor_bhnd(t->q, VCATTN_DTYPE_F32, b, hq, nq, d);
    t->tk = vcattn_tensor_bhnd(t->k, VCATTN_DTYPE_F32, b, hkv, nk, d);
    t->tv = vcattn_tensor_bhnd(t->v, VCATTN_DTYPE_F32, b, hkv, nk, d);
    t->tout = vcattn_tensor_bhnd(t->out, VCATTN_DTYPE_F32, b, hq, nq, d);
    vcattn_reference_attention(&t->tq, &t->tk, &t->tv, NULL, 0.0f, t->ref, t->ref_lse);
}

static void case_free(case_t *t) {
    free(t->q); free(t->k); free(t->v); free(t->out); free(t->lse); free(t->ref); free(t->ref_lse);
}

static vcattn_status run(vcattn_context *ctx, const vcattn_config *cfg, case_t *t, vcattn_layer *layer) {
    return vcattn_attention(ctx, cfg, &t->tq, &t->tk, &t->tv, &t->tout, t->lse, NULL, layer);
}

static vcattn_status run_rope(vcattn_context *ctx, const vcattn_config *cfg, case_t *t, const vcattn_rope *rope) {
    return vcattn_attention(ctx, cfg, &t->tq, &t->tk, &t->tv, &t->tout, t->lse, rope, NULL);
}

static double lse_max_err(const case_t *t) {
    double e = 0.0;
    for (int64_t i = 0; i < t->b * t->hq * t->nq; i++) e = fmax(e, fabs(t->lse[i] - t->ref_lse[i]));
    return isnan(e) ? INFINITY : e;
}

/* Online softmax over 128-key tiles equals direct softmax, and V-Smooth with
 * every quantizer off (permutation, demeaning, mean restoration) is exact to
 * float32 rounding, on awkward shapes. */
static void test_exact_paths(vcattn_context *ctx) {
    const int64_t nks[] = {1, 17, 127, 128, 129, 300};
    for (size_t i = 0; i < sizeof nks / sizeof nks[0]; i++) {
        case_t t;
        case_init(&t, 2, 4, 2, 33, nks[i], 64, 3.0f);
        vcattn_config c = exact_config();
        vcattn_metrics m;
        CHECK(run(ctx, &c, &t, NULL) == VCATTN_OK, "exact run: %s", vcattn_last_error(ctx));
        metrics_compute(t.out, t.ref, t.b * t.hq * t.nq, t.d, &m);
        CHECK(m.rel_l2 < 2e-6, "online softmax vs direct, Nk=%lld: rel L2 %.3g", (long long)nks[i], m.rel_l2);
        CHECK(lse_max_err(&t) < 2e-5, "exact LSE, Nk=%lld: %.3g", (long long)nks[i], lse_max_err(&t));

        c.vsmooth = 1; c.k_smoothing = 1; c.hadamard = 1; c.kmeans_clusters = 5;
        CHECK(run(ctx, &c, &t, NULL) == VCATTN_OK, "vsmooth run: %s", vcattn_last_error(ctx));
        metrics_compute(t.out, t.ref, t.b * t.hq * t.nq, t.d, &m);
        CHECK(m.rel_l2 < 2e-6, "vsmooth, quantizers off, Nk=%lld: rel L2 %.3g", (long long)nks[i], m.rel_l2);
        CHECK(lse_max_err(&t) < 2e-5, "LSE with K smoothing, Nk=%lld: %.3g", (long long)nks[i], lse_max_err(&t));

        /* Q smoothing: the per-key term restores the scores exactly (q has an
         * offset here, so the term is large). */
        for (int64_t e = 0; e < t.b * t.hq * t.nq * t.d; e++) t.q[e] += 2.0f;
        vcattn_reference_attention(&t.tq, &t.tk, &t.tv, NULL, 0.0f, t.ref, t.ref_lse);
        c.q_smoothing = 1;
        CHECK(run(ctx, &c, &t, NULL) == VCATTN_OK, "q_smoothing run: %s", vcattn_last_error(ctx));
        metrics_compute(t.out, t.ref, t.b * t.hq * t.nq, t.d, &m);
        CHECK(m.rel_l2 < 2e-6, "Q smoothing, quantizers off, Nk=%lld: rel L2 %.3g", (long long)nks[i], m.rel_l2);
        CHECK(lse_max_err(&t) < 2e-5, "LSE with Q and K smoothing, Nk=%lld: %.3g", (long long)nks[i], lse_max_err(&t));
        case_free(&t);
    }
}

/* Proposition 3.1 on every row: with ExpCast the only approximation,
 * |o_hat - o|_2 <= (0.0364 + tau) diam_2(V). One key tile keeps the running
 * maximum equal to the row maximum, so tau can be computed exactly here. */
static void test_expcast_row_bound(vcattn_context *ctx) {
    const float temps[] = {0.5f, 2.0f, 6.0f};  /* flat rows .. rows with underflow */
    for (size_t ti = 0; ti < 3; ti++) {
        case_t t;
        int64_t d = 64, nk = 128, nq = 64;
        memset(&t, 0, sizeof t);
        case_init(&t, 1, 1, 1, nq, nk, d, 0.0f);
        for (int64_t i = 0; i < nq * d; i++) t.q[i] *= temps[ti];
        vcattn_reference_attention(&t.tq, &t.tk, &t.tv, NULL, 0.0f, t.ref, t.ref_lse);
        vcattn_config c = exact_config();
        c.p_format = VCATTN_P_FP8_EXPCAST;
        c.expcast_min_keys = 0;
        CHECK(run(ctx, &c, &t, NULL) == VCATTN_OK, "expcast run");
        double diam = 0.0;
        for (int64_t a = 0; a < nk; a++)
            for (int64_t b2 = a + 1; b2 < nk; b2++) {
                double s = 0.0;
                for (int64_t j = 0; j < d; j++) {
                    double e = (double)t.v[a * d + j] - t.v[b2 * d + j];
                    s += e * e;
                }
                diam = fmax(diam, sqrt(s));
            }
        int violations = 0, rows_with_tail = 0;
        double scale = 1.0 / sqrt((double)d);
        for (int64_t i = 0; i < nq; i++) {
            double s[128], mx = -INFINITY, pt = 0.0, pht = 0.0, sum = 0.0, hsum = 0.0;
            for (int64_t j = 0; j < nk; j++) {
                double dot = 0.0;
                for (int64_t x = 0; x < d; x++) dot += (double)t.q[i * d + x] * t.k[j * d + x];
                s[j] = dot * scale;
                mx = fmax(mx, s[j]);
            }
            for (int64_t j = 0; j < nk; j++) {
                double u = (s[j] - mx) * 1.4426950408889634;
                double w = exp2(u);
                double wh = vcattn_e4m3_decode(vcattn_expcast_code(vcattn_expcast_arg((float)u, -0.35f)));
                sum += w; hsum += wh;
                if (u < -14.0) { pt += w; pht += wh; }
            }
            double tau = fmax(pt / sum, pht / hsum);
            rows_with_tail += tau > 0.0;
            double err = 0.0;
            for (int64_t x = 0; x < d; x++) {
                double e = t.out[i * d + x] - t.ref[i * d + x];
                err += e * e;
            }
            /* 1e-5 relative slack for the float32 arithmetic around the codes */
            if (!(sqrt(err) <= (0.0364 + tau) * diam * (1.0 + 1e-5) + 1e-6)) violations++;
        }
        CHECK(violations == 0, "temperature %.1f: %d rows violate the ExpCast bound", temps[ti], violations);
        case_free(&t);
    }
}

/* Layouts and strides change nothing: NHD and a padded, non-contiguous view
 * give the bits of the contiguous HND call. GQA equals repeated KV heads. */
static void test_layouts_and_gqa(vcattn_context *ctx) {
    case_t t;
    case_init(&t, 2, 4, 2, 77, 200, 64, 1.0f);
    vcattn_config c;
    vcattn_config_from_method("sage2", &c);
    CHECK(run(ctx, &c, &t, NULL) == VCATTN_OK, "sage2 HND");
    int64_t b = t.b, hq = t.hq, hkv = t.hkv, nq = t.nq, nk = t.nk, d = t.d, pad = 8;

    /* Same data as [B, N, H, D] with each token row padded by `pad`. */
    float *q2 = calloc((size_t)(b * nq * hq * (d + pad)), sizeof(float));
    float *k2 = calloc((size_t)(b * nk * hkv * (d + pad)), sizeof(float));
    float *v2 = calloc((size_t)(b * nk * hkv * (d + pad)), sizeof(float));
    float *o2 = calloc((size_t)(b * nq * hq * d), sizeof(float));
    vcattn_tensor tq = {q2, VCATTN_DTYPE_F32, b, hq, nq, d, nq * hq * (d + pad), d + pad, hq * (d + pad)};
    vcattn_tensor tk = {k2, VCATTN_DTYPE_F32, b, hkv, nk, d, nk * hkv * (d + pad), d + pad, hkv * (d + pad)};
    vcattn_tensor tv = {v2, VCATTN_DTYPE_F32, b, hkv, nk, d, nk * hkv * (d + pad), d + pad, hkv * (d + pad)};
    vcattn_tensor to = vcattn_tensor_bnhd(o2, VCATTN_DTYPE_F32, b, hq, nq, d);
    for (int64_t ib = 0; ib < b; ib++)
        for (int64_t n = 0; n < nq; n++)
            for (int64_t h = 0; h < hq; h++)
                memcpy(q2 + ib * tq.stride_batch + n * tq.stride_token + h * tq.stride_head,
                       t.q + ((ib * hq + h) * nq + n) * d, (size_t)d * sizeof(float));
    for (int64_t ib = 0; ib < b; ib++)
        for (int64_t n = 0; n < nk; n++)
            for (int64_t h = 0; h < hkv; h++) {
                memcpy(k2 + ib * tk.stride_batch + n * tk.stride_token + h * tk.stride_head,
                       t.k + ((ib * hkv + h) * nk + n) * d, (size_t)d * sizeof(float));
                memcpy(v2 + ib * tv.stride_batch + n * tv.stride_token + h * tv.stride_head,
                       t.v + ((ib * hkv + h) * nk + n) * d, (size_t)d * sizeof(float));
            }
    CHECK(vcattn_attention(ctx, &c, &tq, &tk, &tv, &to, NULL, NULL, NULL) == VCATTN_OK, "sage2 NHD");
    int diff = 0;
    for (int64_t ib = 0; ib < b; ib++)
        for (int64_t n = 0; n < nq; n++)
            for (int64_t h = 0; h < hq; h++)
                diff += memcmp(o2 + ((ib * nq + n) * hq + h) * d, t.out + ((ib * hq + h) * nq + n) * d,
                               (size_t)d * sizeof(float)) != 0;
    CHECK(diff == 0, "NHD padded view differs from HND in %d rows", diff);

    /* GQA: the same call with each KV head repeated for its query heads. */
    float *k3 = malloc((size_t)(b * hq * nk * d) * sizeof(float));
    float *v3 = malloc((size_t)(b * hq * nk * d) * sizeof(float));
    for (int64_t ib = 0; ib < b; ib++)
        for (int64_t h = 0; h < hq; h++) {
            int64_t src = (ib * hkv + h / (hq / hkv)) * nk * d;
            memcpy(k3 + (ib * hq + h) * nk * d, t.k + src, (size_t)(nk * d) * sizeof(float));
            memcpy(v3 + (ib * hq + h) * nk * d, t.v + src, (size_t)(nk * d) * sizeof(float));
        }
    vcattn_tensor tk3 = vcattn_tensor_bhnd(k3, VCATTN_DTYPE_F32, b, hq, nk, d);
    vcattn_tensor tv3 = vcattn_tensor_bhnd(v3, VCATTN_DTYPE_F32, b, hq, nk, d);
    vcattn_tensor to3 = vcattn_tensor_bhnd(o2, VCATTN_DTYPE_F32, b, hq, nq, d);
    CHECK(vcattn_attention(ctx, &c, &t.tq, &tk3, &tv3, &to3, NULL, NULL, NULL) == VCATTN_OK, "MHA run");
    CHECK(memcmp(o2, t.out, (size_t)(b * hq * nq * d) * sizeof(float)) == 0, "GQA equals repeated KV heads");
    free(q2); free(k2); free(v2); free(o2); free(k3); free(v3);
    case_free(&t);
}

/* Per-head RoPE tables, strided as LTX-Video's [B][N][H][D/2]: the call
 * equals, bit for bit, calls on each (batch entry, query head) alone with
 * that head's rows as a packed [N][D/2] table; the FP64 reference too.
 * methods_count: sage2, then vc. */
static void per_head_rope_case(vcattn_context *ctx, int64_t heads_q, int64_t heads_kv, int methods_count) {
    case_t t;
    case_init(&t, 2, heads_q, heads_kv, 77, 200, 64, 1.0f);
    const int64_t b = t.b, hq = t.hq, hkv = t.hkv, nq = t.nq, nk = t.nk, d = t.d, half = d / 2;
    float *qc = malloc((size_t)(b * nq * hq * half) * sizeof(float)),
                       *qs = malloc((size_t)(b * nq * hq * half) * sizeof(float));
    float *kc = malloc((size_t)(b * nk * hkv * half) * sizeof(float)),
                       *ks = malloc((size_t)(b * nk * hkv * half) * sizeof(float));
    for (int64_t i = 0; i < b * nq * hq * half; i++) qc[i] = cosf(0.37f * (float)i), qs[i] = sinf(0.37f * (float)i);
    for (int64_t i = 0; i < b * nk * hkv * half; i++) kc[i] = cosf(0.53f * (float)i), ks[i] = sinf(0.53f * (float)i);
    float *pqc = malloc((size_t)(nq * half) * sizeof(float)), *pqs = malloc((size_t)(nq * half) * sizeof(float));
    float *pkc = malloc((size_t)(nk * half) * sizeof(float)), *pks = malloc((size_t)(nk * half) * sizeof(float));
    float *o1 = malloc((size_t)(nq * d) * sizeof(float));
    double *r1 = malloc((size_t)(nq * d) * sizeof(double));
    static const char *const methods[] = {"sage2", "vc"};
    for (int style = 0; style < 2; style++) {
        const vcattn_rope rope = {.style = style ? VCATTN_ROPE_HALF_SPLIT : VCATTN_ROPE_INTERLEAVED,
                                  .q_cos = qc, .q_sin = qs, .k_cos = kc, .k_sin = ks,
                                  .q_stride_batch = nq * hq * half, .q_stride_head = half, .q_stride_token = hq * half,
                                  .k_stride_batch = nk * hkv * half, .k_stride_head = half,
                                       .k_stride_token = hkv * half};
        vcattn_reference_attention(&t.tq, &t.tk, &t.tv, &rope, 0.0f, t.ref, NULL);
        for (int m = 0; m < methods_count; m++) {
            vcattn_config c;
            vcattn_config_from_method(methods[m], &c);
            CHECK(run_rope(ctx, &c, &t, &rope) == VCATTN_OK, "%s per-head rope: %s", methods[m],
                  vcattn_last_error(ctx));
            int diff = 0, ref_diff = 0;
            for (int64_t ib = 0; ib < b; ib++)
                for (int64_t h = 0; h < hq; h++) {
                    const int64_t hk = h / (hq / hkv);
                    for (int64_t n = 0; n < nq; n++)
                        for (int64_t i = 0; i < half; i++) {
                            pqc[n * half + i] = qc[((ib * nq + n) * hq + h) * half + i];
                            pqs[n * half + i] = qs[((ib * nq + n) * hq + h) * half + i];
                        }
                    for (int64_t n = 0; n < nk; n++)
                        for (int64_t i = 0; i < half; i++) {
                            pkc[n * half + i] = kc[((ib * nk + n) * hkv + hk) * half + i];
                            pks[n * half + i] = ks[((ib * nk + n) * hkv + hk) * half + i];
                        }
                    const vcattn_rope packed = {.style = rope.style, .q_cos = pqc, .q_sin = pqs, .k_cos = pkc,
                                                .k_sin = pks};
                    vcattn_tensor sq = vcattn_tensor_bhnd(t.q + (ib * hq + h) * nq * d, VCATTN_DTYPE_F32, 1, 1, nq, d);
                    vcattn_tensor sk = vcattn_tensor_bhnd(t.k + (ib * hkv + hk) * nk * d, VCATTN_DTYPE_F32, 1,
                                                          1, nk, d);
                    vcattn_tensor sv = vcattn_tensor_bhnd(t.v + (ib * hkv + hk) * nk * d, VCATTN_DTYPE_F32, 1,
                                                          1, nk, d);
                    vcattn_tensor so = vcattn_tensor_bhnd(o1, VCATTN_DTYPE_F32, 1, 1, nq, d);
                    CHECK(vcattn_attention(ctx, &c, &sq, &sk, &sv, &so, NULL, &packed, NULL) == VCATTN_OK, "slice");
                    diff += memcmp(o1, t.out + (ib * hq + h) * nq * d, (size_t)(nq * d) * sizeof(float)) != 0;
                    if (m == 0) {
                        vcattn_reference_attention(&sq, &sk, &sv, &packed, 0.0f, r1, NULL);
                        ref_diff += memcmp(r1, t.ref + (ib * hq + h) * nq * d, (size_t)(nq * d) * sizeof(double)) != 0;
                    }
                }
            CHECK(diff == 0, "%s %s: %d heads differ from their own packed tables", methods[m],
                  style ? "half-split" : "interleaved", diff);
            if (m == 0) CHECK(ref_diff == 0, "reference: %d heads differ from their own packed tables", ref_diff);
        }
    }
    free(qc); free(qs); free(kc); free(ks); free(pqc); free(pqs); free(pkc); free(pks); free(o1); free(r1);
    case_free(&t);
}

/* GQA with sage2 (per-head quantization alone); V-Smooth's probe weighs a key
 * head's values by all its query heads, so vc is sliced without GQA. */
static void test_per_head_rope(vcattn_context *ctx) {
    per_head_rope_case(ctx, 4, 2, 1);
    per_head_rope_case(ctx, 3, 3, 2);
}

/* Same call twice, and with 1 or 2 threads: the same bits. */
static void test_determinism(vcattn_context *ctx) {
    case_t t;
    case_init(&t, 1, 2, 2, 130, 300, 128, 2.0f);
    vcattn_config c = vcattn_config_default();
    c.expcast_min_keys = 0;  /* ExpCast at 300 keys */
    size_t bytes = (size_t)(t.b * t.hq * t.nq * t.d) * sizeof(float);
    float *first = malloc(bytes);
    c.num_threads = 1;
    CHECK(run(ctx, &c, &t, NULL) == VCATTN_OK, "vc run 1");
    memcpy(first, t.out, bytes);
    c.num_threads = 2;
    CHECK(run(ctx, &c, &t, NULL) == VCATTN_OK, "vc run 2");
    CHECK(memcmp(first, t.out, bytes) == 0, "vc output depends on the thread count");
    CHECK(run(ctx, &c, &t, NULL) == VCATTN_OK, "vc run 3");
    CHECK(memcmp(first, t.out, bytes) == 0, "vc output differs run to run");
    free(first);
    case_free(&t);
}

/* vc below expcast_min_keys keys is vsmooth to the bit (exp then the cast),
 * output and LSE; from expcast_min_keys on it is ExpCast; 0 = ExpCast always. */
static void test_expcast_min_keys(vcattn_context *ctx) {
    const int64_t nks[2] = {1023, 1024};
    for (int i = 0; i < 2; i++) {
        case_t t;
        case_init(&t, 1, 2, 1, 48, nks[i], 64, 1.0f);
        const size_t bytes = (size_t)(t.hq * t.nq * t.d) * sizeof(float), lse_bytes = (size_t)(t.hq * t.nq) * 4;
        float *out[3], *lse[3];
        vcattn_config cfg[3];
        const int same_as = expcast_boundary_configs(nks[i], cfg), other = 3 - same_as;
        for (int m = 0; m < 3; m++) {
            CHECK(run(ctx, &cfg[m], &t, NULL) == VCATTN_OK, "Nk=%lld config %d", (long long)nks[i], m);
            out[m] = malloc(bytes);
            lse[m] = malloc(lse_bytes);
            memcpy(out[m], t.out, bytes);
            memcpy(lse[m], t.lse, lse_bytes);
        }
        CHECK(memcmp(out[0], out[same_as], bytes) == 0 && memcmp(lse[0], lse[same_as], lse_bytes) == 0,
              "Nk=%lld: vc should equal %s to the bit", (long long)nks[i], same_as == 2 ? "vsmooth" : "ExpCast");
        CHECK(memcmp(out[0], out[other], bytes) != 0, "Nk=%lld: vc should differ from %s", (long long)nks[i],
              other == 2 ? "vsmooth" : "ExpCast");
        for (int m = 0; m < 3; m++) { free(out[m]); free(lse[m]); }
        case_free(&t);
    }
}

/* Low-precision outputs hold the float32 result rounded to nearest even, and
 * nothing outside the output view is written (guard words around it). */
static void test_output_dtypes_and_guards(vcattn_context *ctx) {
    case_t t;
    case_init(&t, 1, 2, 1, 40, 50, 64, 0.0f);
    vcattn_config c = vcattn_config_default();
    CHECK(run(ctx, &c, &t, NULL) == VCATTN_OK, "f32 out");
    int64_t n = t.b * t.hq * t.nq * t.d, guard = 64;
    uint16_t *buf = malloc((size_t)(n + 2 * guard) * sizeof(uint16_t));
    for (int dt = 0; dt < 2; dt++) {
        vcattn_dtype dtype = dt ? VCATTN_DTYPE_BF16 : VCATTN_DTYPE_F16;
        for (int64_t i = 0; i < n + 2 * guard; i++) buf[i] = 0xA5A5;
        vcattn_tensor to = vcattn_tensor_bhnd(buf + guard, dtype, t.b, t.hq, t.nq, t.d);
        CHECK(vcattn_attention(ctx, &c, &t.tq, &t.tk, &t.tv, &to, NULL, NULL, NULL) == VCATTN_OK, "half out");
        int bad = 0, guards = 0;
        for (int64_t i = 0; i < n; i++) {
            uint16_t want = dt ? vcattn_f32_to_bf16(t.out[i]) : vcattn_f32_to_f16(t.out[i]);
            bad += buf[guard + i] != want;
        }
        for (int64_t i = 0; i < guard; i++) guards += (buf[i] != 0xA5A5) + (buf[guard + n + i] != 0xA5A5);
        CHECK(bad == 0, "%s output: %d elements not the rounded float32 result", vcattn_dtype_name(dtype), bad);
        CHECK(guards == 0, "%d guard words written", guards);
    }
    free(buf);
    case_free(&t);
}

/* The paper's ordering on the built-in workload: vc and vsmooth beat sage2,
 * which beats fp8-naive (output rel L2 against FP64). */
static void test_method_ordering(vcattn_context *ctx) {
    vcattn_workload w;
    CHECK(vcattn_workload_generate("small", 1, &w) == VCATTN_OK, "workload");
    int64_t nq = w.tokens, d = w.head_dim, hq = w.heads_q;
    uint16_t *qb = malloc((size_t)(hq * nq * d) * 2), *kb = malloc((size_t)(w.heads_kv * nq * d) * 2),
             *vb = malloc((size_t)(w.heads_kv * nq * d) * 2);
    for (int64_t i = 0; i < hq * nq * d; i++) qb[i] = vcattn_f32_to_bf16(w.q[i]);
    for (int64_t i = 0; i < w.heads_kv * nq * d; i++) {
        kb[i] = vcattn_f32_to_bf16(w.k[i]);
        vb[i] = vcattn_f32_to_bf16(w.v[i]);
    }
    vcattn_tensor tq = vcattn_tensor_bhnd(qb, VCATTN_DTYPE_BF16, 1, hq, nq, d);
    vcattn_tensor tk = vcattn_tensor_bhnd(kb, VCATTN_DTYPE_BF16, 1, w.heads_kv, nq, d);
    vcattn_tensor tv = vcattn_tensor_bhnd(vb, VCATTN_DTYPE_BF16, 1, w.heads_kv, nq, d);
    vcattn_rope rope = {.style = w.rope_style, .q_cos = w.rope_cos, .q_sin = w.rope_sin, .k_cos = w.rope_cos,
                        .k_sin = w.rope_sin};
    double *ref = malloc((size_t)(hq * nq * d) * sizeof(double));
    float *out = malloc((size_t)(hq * nq * d) * sizeof(float));
    vcattn_tensor to = vcattn_tensor_bhnd(out, VCATTN_DTYPE_F32, 1, hq, nq, d);
    double *ref_lse = malloc((size_t)(hq * nq) * sizeof(double));
    float *lse = malloc((size_t)(hq * nq) * sizeof(float));
    vcattn_reference_attention(&tq, &tk, &tv, &rope, 0.0f, ref, ref_lse);
    const char *methods[] = {"fp8-naive", "sage2", "vsmooth", "vc"};
    double err[4];
    for (int i = 0; i < 4; i++) {
        vcattn_config c;
        vcattn_config_from_method(methods[i], &c);
        CHECK(grouped_attention(ctx, &c, &tq, &tk, &tv, &to, lse, &rope) == VCATTN_OK, "%s", methods[i]);
        /* The LSE of quantized scores: INT8 score error is ~1% of |s|, so
         * a few hundredths on average; NaN fails. */
        double lse_sum = 0.0, lse_max = 0.0;
        for (int64_t r = 0; r < hq * nq; r++) {
            double e = fabs(lse[r] - ref_lse[r]);
            lse_sum += e;
            lse_max = isnan(e) || e > lse_max ? (isnan(e) ? INFINITY : e) : lse_max;
        }
        if (i > 0)
            CHECK(lse_sum / (double)(hq * nq) < 0.02 && lse_max < 0.25, "%s LSE error mean %.4f max %.4f",
                  methods[i], lse_sum / (double)(hq * nq), lse_max);
        vcattn_metrics m;
        metrics_compute(out, ref, hq * nq, d, &m);
        err[i] = m.rel_l2;
        printf("  %-10s rel L2 %.5f\n", methods[i], m.rel_l2);
    }
    CHECK(err[1] < err[0], "sage2 (%.4f) should beat fp8-naive (%.4f)", err[1], err[0]);
    CHECK(err[2] < err[1], "vsmooth (%.4f) should beat sage2 (%.4f)", err[2], err[1]);
    CHECK(err[3] < err[1], "vc (%.4f) should beat sage2 (%.4f)", err[3], err[1]);
    free(qb); free(kb); free(vb); free(ref); free(out); free(ref_lse); free(lse);
    vcattn_workload_free(&w);
}

/* Tiny magnitudes (down to subnormals) in q, k or v: no NaN, no Inf, for
 * every 8-bit method (an amax whose reciprocal scale overflows counts as 0). */
static void test_tiny_values(vcattn_context *ctx) {
    static const char *const methods[] = {"sage2", "vsmooth", "vc", "fp8-naive"};
    static const float scales[] = {1e-30f, 1e-37f, 1e-40f};
    for (int which = 0; which < 3; which++)
        for (size_t si = 0; si < sizeof scales / sizeof scales[0]; si++)
            for (size_t m = 0; m < sizeof methods / sizeof methods[0]; m++) {
                case_t t;
                case_init(&t, 1, 2, 2, 150, 150, 64, 0.0f);
                float *x = which == 0 ? t.q : which == 1 ? t.k : t.v;
                for (int64_t i = 0; i < 2 * 150 * 64; i++) x[i] *= scales[si];
                vcattn_config cfg;
                vcattn_config_from_method(methods[m], &cfg);
                cfg.expcast_min_keys = 0;  /* vc with ExpCast at 150 keys */
                vcattn_status st = run(ctx, &cfg, &t, NULL);
                int finite = 1;
                for (int64_t i = 0; i < 2 * 150 * 64; i++) finite &= vcattn_isfinite_f32(t.out[i]);
                CHECK(st == VCATTN_OK && finite, "%s with %s scaled by %g: status %d, finite %d", methods[m],
                      which == 0 ? "q" : which == 1 ? "k" : "v", (double)scales[si], st, finite);
                case_free(&t);
            }
}

/* A constant V comes out to float32 rounding on every method: the row sum
 * and the normalizer use the P values the PV product consumes, so P's error
 * cancels (4,097 keys: 33 tiles, the last one short). */
static void test_constant_v(vcattn_context *ctx) {
    const float values[] = {0.37f, -1234.5f, 3e-5f};
    const char *const *methods = vcattn_method_names();
    case_t t;
    case_init(&t, 1, 2, 2, 40, 4097, 64, 0.0f);
    for (size_t vi = 0; vi < 3; vi++) {
        for (int64_t i = 0; i < t.b * t.hkv * t.nk * t.d; i++) t.v[i] = values[vi];
        for (int m = 0; methods[m]; m++) {
            vcattn_config c;
            vcattn_config_from_method(methods[m], &c);
            CHECK(run(ctx, &c, &t, NULL) == VCATTN_OK, "%s: %s", methods[m], vcattn_last_error(ctx));
            double worst = 0.0;
            for (int64_t i = 0; i < t.b * t.hq * t.nq * t.d; i++)
                worst = fmax(worst, fabs((double)t.out[i] / values[vi] - 1.0));
            CHECK(worst <= 8 * 0x1p-23, "constant V %g, %s: off by %.2f ulps", values[vi], methods[m],
                  worst / 0x1p-23);
        }
    }
    case_free(&t);
}

/* The LSE comes from the method's own scores: for unit-variance q and k at
 * D 64 within 0.02 nats of the exact LSE on every 8-bit method (ExpCast adds
 * up to 0.074), growing with |q| |k| as INT8's score error does (vcattn.h). */
static void test_lse_error(vcattn_context *ctx) {
    const char *methods[] = {"sage2", "vsmooth", "vc", "vc+hadamard"};
    for (int scaled = 0; scaled < 2; scaled++) {
        case_t t;
        case_init(&t, 1, 2, 2, 64, 2048, 64, 0.0f);
        if (scaled) {  /* q and k at 16 times the scale: scores of about +-130 */
            for (int64_t i = 0; i < t.b * t.hq * t.nq * t.d; i++) t.q[i] *= 16.0f;
            for (int64_t i = 0; i < t.b * t.hkv * t.nk * t.d; i++) t.k[i] *= 16.0f;
            vcattn_reference_attention(&t.tq, &t.tk, &t.tv, NULL, 0.0f, t.ref, t.ref_lse);
        }
        for (int m = 0; m < 4; m++) {
            vcattn_config c;
            vcattn_config_from_method(methods[m], &c);
            CHECK(run(ctx, &c, &t, NULL) == VCATTN_OK, "%s: %s", methods[m], vcattn_last_error(ctx));
            const double err = lse_max_err(&t), expcast = c.p_format == VCATTN_P_FP8_EXPCAST ? 0.074 : 0.0;
            if (!scaled)
                CHECK(err < 0.02 + expcast, "LSE of unit-variance q, k, %s: off by %.4f nats", methods[m], err);
            else  /* the score error of INT8 q and k decides it (the documented growth) */
                CHECK(err > 1.0 && err < 100.0, "LSE of q, k at 16 times the scale, %s: off by %.2f nats",
                      methods[m], err);
        }
        case_free(&t);
    }
}

/* V-Smooth's attention probe (vsmooth.h): where no key draws attention from
 * both halves of the probe rows (q = 0: every row uniform), every block
 * keeps its plain mean bit for bit; where every row reads one small-valued
 * key in a block of large values (an attention sink), the centre moves to it
 * and the output error drops below both the plain mean's and sage2's; the
 * probe is deterministic across thread counts, with grouped-query heads. */
static void test_attention_probe(vcattn_context *ctx) {
    case_t t;
    case_init(&t, 1, 4, 2, 200, 384, 64, 3.0f);
    const size_t bytes = (size_t)(t.b * t.hq * t.nq * t.d) * sizeof(float);
    float *plain = malloc(bytes), *probed = malloc(bytes);
    vcattn_config c = vcattn_config_default();
    c.expcast_min_keys = 0;

    memset(t.q, 0, (size_t)(t.b * t.hq * t.nq * t.d) * sizeof(float));
    CHECK(run(ctx, &c, &t, NULL) == VCATTN_OK, "uniform attention, plain mean");
    memcpy(plain, t.out, bytes);
    c.vsmooth_probe_rows = 64;
    CHECK(run(ctx, &c, &t, NULL) == VCATTN_OK, "uniform attention, probe");
    CHECK(memcmp(plain, t.out, bytes) == 0, "the probe moved a centre although no key draws attention");

    /* The sink: key 0 of each head along every query's direction, value 1.5
     * against values around 3 (case_init's offset): half the norm of its
     * block's mean, past the sink guard (0.25), as in trained ViTs. */
    for (int64_t h = 0; h < t.hq; h++)
        for (int64_t i = 0; i < t.nq; i++)
            for (int64_t x = 0; x < t.d; x++)
                t.q[(h * t.nq + i) * t.d + x] = (x == 0 ? 3.0f : 0.0f) + 0.3f * nrand();
    for (int64_t h = 0; h < t.hkv; h++) {
        for (int64_t x = 0; x < t.d; x++) {
            t.k[(h * t.nk) * t.d + x] = x == 0 ? 20.0f : 0.0f;
            t.v[(h * t.nk) * t.d + x] = 1.5f;
        }
    }
    vcattn_reference_attention(&t.tq, &t.tk, &t.tv, NULL, 0.0f, t.ref, t.ref_lse);
    double err[3];
    const char *names[3] = {"sage2", "vc", "vc + probe"};
    for (int m = 0; m < 3; m++) {
        vcattn_config_from_method(m == 0 ? "sage2" : "vc", &c);
        c.expcast_min_keys = 0;
        c.vsmooth_probe_rows = m == 2 ? 64 : 0;
        c.num_threads = 1;
        CHECK(run(ctx, &c, &t, NULL) == VCATTN_OK, "sink: %s", names[m]);
        vcattn_metrics met;
        metrics_compute(t.out, t.ref, t.b * t.hq * t.nq, t.d, &met);
        err[m] = met.rel_l2;
        if (m == 2) memcpy(probed, t.out, bytes);
    }
    CHECK(err[2] < 0.8 * err[1] && err[2] < err[0],
          "sink: relative L2 with the probe %.5f, plain mean %.5f, sage2 %.5f", err[2], err[1], err[0]);
    c.num_threads = 2;
    CHECK(run(ctx, &c, &t, NULL) == VCATTN_OK && memcmp(probed, t.out, bytes) == 0,
          "the probe's output depends on the thread count");
    free(plain);
    free(probed);
    case_free(&t);
}

int main(int argc, char **argv) {
    tl_args(argc, argv);
    vcattn_context *ctx;
    if (vcattn_create(&ctx, VCATTN_BACKEND_CPU) != VCATTN_OK) return 1;
    TL_RUN(test_exact_paths(ctx));
    TL_RUN(test_expcast_row_bound(ctx));
    TL_RUN(test_expcast_min_keys(ctx));
    TL_RUN(test_layouts_and_gqa(ctx));
    TL_RUN(test_per_head_rope(ctx));
    TL_RUN(test_determinism(ctx));
    TL_RUN(test_output_dtypes_and_guards(ctx));
    TL_RUN(test_method_ordering(ctx));
    TL_RUN(test_tiny_values(ctx));
    TL_RUN(test_constant_v(ctx));
    TL_RUN(test_lse_error(ctx));
    TL_RUN(test_attention_probe(ctx));
    vcattn_destroy(ctx);
    return tl_finish("test_attention");
}
