/* The CPU backend: prepares the operands exactly as the GPU's fused
 * quantization kernels do, then runs the online-softmax mainloop over 128-key
 * tiles with the P encoding, the two-level accumulation and the V-Smooth mean
 * restoration of the GPU kernel (paper eqs. 1, 6, 7). */
#include "cpu_backend.h"
#include "operands.h"
#include "../formats/formats.h"
#include "../vsmooth/vsmooth.h"

#include <float.h>
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#define LN2 0.6931471805599453

typedef struct {
    score_operand k;   /* permuted, smoothed, rotated, quantized keys */
    value_operand v;   /* permuted, demeaned, quantized values */
    float *kmean;      /* [d] post-RoPE channel mean of K, or NULL */
    double max_norm;   /* largest |k| the scores see (after RoPE and smoothing) */
    double unseen_norm;/* largest |k| of a row whose scale came out 0 (its scores read as 0) */
    float *rows;       /* q_smoothing: the keys as scored, [nk][d] (permuted, smoothed, before the Hadamard) */
    float *values;     /* the attention probe: V permuted, [nk][d], quantized once Q is */
} kv_head;

typedef struct {
    score_operand q;
    float *lse_shift;  /* [nq] sm_scale * q.kmean: what K smoothing took out */
    double max_norm;   /* largest |q| after RoPE */
    double unseen_norm;/* largest |q| of a row whose scale came out 0 (as quantized: after smoothing) */
    float *key_bias;   /* q_smoothing: [nk] sm_scale log2(e) (mean_q . k_j), added to the scores */
} q_head;

typedef struct {
    const vcattn_config *cfg;
    int64_t batch, hq, hkv, nq, nk, d;
    float sm_scale;
    kv_head *kv;       /* [batch * hkv] */
    q_head *qh;        /* [batch * hq] */
    float *out;        /* [batch][hq][nq][d] */
    float *lse;        /* [batch][hq][nq] */
} problem;

static problem problem_of(const vcattn_call *call) {
    problem p = {0};
    p.cfg = &call->cfg;
    p.batch = call->batch; p.hq = call->heads_q; p.hkv = call->heads_kv;
    p.nq = call->tokens_q; p.nk = call->tokens_k; p.d = call->head_dim;
    p.sm_scale = call->sm_scale;
    return p;
}

/* Dot product with eight fixed lanes: a defined summation order the compiler
 * can vectorize without reassociating. d is a multiple of 8. */
static inline float dot8(const float *a, const float *b, int64_t d) {
    float lane[8] = {0};
    for (int64_t i = 0; i < d; i += 8)
        for (int j = 0; j < 8; j++) lane[j] += a[i + j] * b[i + j];
    return ((lane[0] + lane[1]) + (lane[2] + lane[3])) + ((lane[4] + lane[5]) + (lane[6] + lane[7]));
}

/* --------------------------------------------------------------- operands */

/* Head (b, h)'s rows of t as float, rotated when rope is set (key: by the k
 * tables, else the q tables). */
static float *load_rows(const vcattn_tensor *t, int64_t b, int64_t h, const vcattn_rope *rope, int key) {
    float *x = malloc((size_t)(t->tokens * t->head_dim) * sizeof(float));
    if (!x) return NULL;
    vcattn_tensor co, si;
    if (rope) {
        co = vcattn_rope_table(rope, key ? 2 : 0, t);
        si = vcattn_rope_table(rope, key ? 3 : 1, t);
    }
    for (int64_t n = 0; n < t->tokens; n++) {
        vcattn_tensor_load_row(t, b, h, n, x + n * t->head_dim);
        if (rope) {
            const int64_t at = b * co.stride_batch + h * co.stride_head + n * co.stride_token;
            cpu_rope_row(x + n * t->head_dim, t->head_dim, (const float *)co.data + at, (const float *)si.data + at,
                         rope->style);
        }
    }
    return x;
}

/* Groups one head's values: perm from k-means (cold or warm), the layer, or
 * the principal direction (no layer). */
static vcattn_status group_head(const problem *p, vcattn_grouping plan, const float *v,
                                int64_t g, int clusters, const vcattn_layer *layer,
                                float *centroids, int32_t *perm) {
    const vcattn_config *cfg = p->cfg;
    if (plan == VCATTN_GROUP_REUSE) {
        memcpy(perm, layer->perm + g * p->nk, (size_t)p->nk * sizeof *perm);
        return VCATTN_OK;
    }
    if (plan == VCATTN_GROUP_PRINCIPAL) return vsmooth_principal_order(v, p->nk, p->d, perm);
    int iters = cfg->kmeans_iters;
    if (plan == VCATTN_GROUP_WARM) {
        size_t sz = (size_t)clusters * (size_t)p->d;
        memcpy(centroids, layer->centroids + (size_t)g * sz, sz * sizeof(float));
        iters = cfg->kmeans_warm_iters;
    } else {
        vsmooth_init_centroids(v, p->nk, p->d, clusters, cfg->kmeans_seed, (uint64_t)g, centroids);
    }
    int32_t *labels = malloc((size_t)p->nk * sizeof *labels);
    if (!labels) return VCATTN_ERR_OUT_OF_MEMORY;
    vsmooth_kmeans(v, p->nk, p->d, clusters, iters, centroids, labels);
    vsmooth_argsort_labels(labels, p->nk, clusters, perm);
    free(labels);
    return VCATTN_OK;
}

/* A row's norm for the score bound: a row that RoPE or K smoothing pushed
 * past the float range (Inf, or NaN from Inf - Inf) counts as infinite, so
 * the check refuses it (fmax would drop a NaN and let the row through). */
static double row_norm(double norm2) { return norm2 == norm2 ? sqrt(norm2) : INFINITY; }

/* Whether V is quantized with the attention probe's token weights
 * (vsmooth.h): FP8 values take them into their block centres, NVFP4 values
 * into the choice of whether a block subtracts its mean (quantize.c). */
static int probes(const vcattn_config *cfg, vcattn_grouping plan) {
    return cfg->vsmooth_probe_rows > 0 && plan != VCATTN_GROUP_NONE && cfg->v_format != VCATTN_V_EXACT;
}

static vcattn_status prepare_kv(const problem *p, const vcattn_tensor *k, const vcattn_tensor *v,
                                const vcattn_rope *rope, vcattn_grouping plan, int clusters,
                                const vcattn_layer *layer, float *centroids, int32_t *perms,
                                int64_t g) {
    const vcattn_config *cfg = p->cfg;
    int64_t b = g / p->hkv, h = g % p->hkv, n = p->nk, d = p->d;
    kv_head *kv = &p->kv[g];
    vcattn_status st = VCATTN_ERR_OUT_OF_MEMORY;
    float *kx = load_rows(k, b, h, rope, 1);
    float *vx = load_rows(v, b, h, NULL, 0);
    float *kp = malloc((size_t)(n * d) * sizeof(float));
    float *vp = malloc((size_t)(n * d) * sizeof(float));
    double *norms = malloc((size_t)n * sizeof(double));
    if (!kx || !vx || !kp || !vp || !norms) goto done;

    int32_t *perm = NULL;
    if (vsmooth_plan_permutes(plan)) {
        perm = perms + g * n;
        st = group_head(p, plan, vx, g, clusters, layer,
                        centroids + (size_t)g * (size_t)clusters * (size_t)d, perm);
        if (st) goto done;
        st = VCATTN_ERR_OUT_OF_MEMORY;
    }
    if (cfg->k_smoothing) {
        kv->kmean = malloc((size_t)d * sizeof(float));
        if (!kv->kmean) goto done;
        for (int64_t i = 0; i < d; i++) {
            double s = 0.0;
            for (int64_t t = 0; t < n; t++) s += kx[t * d + i];
            kv->kmean[i] = (float)(s / (double)n);
        }
    }
    for (int64_t t = 0; t < n; t++) {
        int64_t src = perm ? perm[t] : t;
        double norm2 = 0.0;
        for (int64_t i = 0; i < d; i++) {
            kp[t * d + i] = kx[src * d + i] - (kv->kmean ? kv->kmean[i] : 0.0f);
            vp[t * d + i] = vx[src * d + i];
            norm2 += (double)kp[t * d + i] * kp[t * d + i];
        }
        norms[t] = row_norm(norm2);
        kv->max_norm = fmax(kv->max_norm, norms[t]);
        if (cfg->hadamard) cpu_hadamard(kp + t * d, d);
    }
    if (cfg->q_smoothing) {  /* the bias of Q smoothing needs the keys before the Hadamard */
        if (!(kv->rows = malloc((size_t)(n * d) * sizeof(float)))) goto done;
        for (int64_t t = 0; t < n; t++) {
            int64_t src = perm ? perm[t] : t;
            for (int64_t i = 0; i < d; i++)
                kv->rows[t * d + i] = kx[src * d + i] - (kv->kmean ? kv->kmean[i] : 0.0f);
        }
    }
    if ((st = quantize_scores(cfg->qk_format, 1, kp, n, d, &kv->k))) goto done;
    for (int64_t t = 0; t < n; t++)
        if (kv->k.mul[t] == 0.0f) kv->unseen_norm = fmax(kv->unseen_norm, norms[t]);
    if (probes(cfg, plan)) {  /* V waits for Q: the probe needs its scores */
        kv->values = vp;
        vp = NULL;
    } else {
        st = quantize_values(cfg->v_format, plan != VCATTN_GROUP_NONE, cfg->sink_guard, vp, NULL, n, d, &kv->v);
    }
done:
    free(kx); free(vx); free(kp); free(vp); free(norms);
    return st;
}

static vcattn_status prepare_q(const problem *p, const vcattn_tensor *q, const vcattn_rope *rope,
                               int64_t gq) {
    const vcattn_config *cfg = p->cfg;
    int64_t b = gq / p->hq, h = gq % p->hq, n = p->nq, d = p->d;
    const kv_head *kv = &p->kv[b * p->hkv + h / (p->hq / p->hkv)];
    q_head *qh = &p->qh[gq];
    float *x = load_rows(q, b, h, rope, 0);
    qh->lse_shift = calloc((size_t)n, sizeof(float));
    double *norms = malloc((size_t)n * sizeof(double));  /* of the rows as quantized */
    if (!x || !qh->lse_shift || !norms) {
        free(x);
        free(norms);
        return VCATTN_ERR_OUT_OF_MEMORY;
    }
    float qmean[VCATTN_MAX_HEAD_DIM];
    if (cfg->q_smoothing) {
        qh->key_bias = malloc((size_t)p->nk * sizeof(float));
        if (!qh->key_bias) {
            free(x);
            free(norms);
            return VCATTN_ERR_OUT_OF_MEMORY;
        }
        for (int64_t i = 0; i < d; i++) {
            double s = 0.0;
            for (int64_t t = 0; t < n; t++) s += x[t * d + i];
            qmean[i] = (float)(s / (double)n);
        }
        for (int64_t j = 0; j < p->nk; j++) {  /* q.k = (q - mean_q).k + mean_q.k: the second term per key */
            double s = 0.0;
            for (int64_t i = 0; i < d; i++) s += (double)qmean[i] * kv->rows[j * d + i];
            qh->key_bias[j] = (float)(s * (double)p->sm_scale * VCATTN_LOG2E_F64);
        }
    }
    for (int64_t t = 0; t < n; t++) {
        double norm2 = 0.0;
        for (int64_t i = 0; i < d; i++) norm2 += (double)x[t * d + i] * x[t * d + i];
        qh->max_norm = fmax(qh->max_norm, row_norm(norm2));
        if (kv->kmean) {
            double s = 0.0;
            for (int64_t i = 0; i < d; i++) s += (double)x[t * d + i] * kv->kmean[i];
            qh->lse_shift[t] = (float)(s * p->sm_scale);
        }
        norms[t] = row_norm(norm2);
        if (cfg->q_smoothing) {
            double s2 = 0.0;
            for (int64_t i = 0; i < d; i++) {
                x[t * d + i] = x[t * d + i] - qmean[i];
                s2 += (double)x[t * d + i] * x[t * d + i];
            }
            norms[t] = row_norm(s2);
        }
        if (cfg->hadamard) cpu_hadamard(x + t * d, d);
    }
    vcattn_status st = quantize_scores(cfg->qk_format, 0, x, n, d, &qh->q);
    for (int64_t t = 0; !st && t < n; t++)
        if (qh->q.mul[t] == 0.0f) qh->unseen_norm = fmax(qh->unseen_norm, norms[t]);
    free(x);
    free(norms);
    return st;
}

/* The attention probe's token weights of key head g (vsmooth.h states the
 * arithmetic), then its values quantized with them. */
static vcattn_status probe_and_quantize_values(const problem *p, int64_t g) {
    const vcattn_config *cfg = p->cfg;
    kv_head *kv = &p->kv[g];
    const int rows = cfg->vsmooth_probe_rows;
    const int64_t nk = p->nk, d = p->d, tiles = (nk + VCATTN_TILE - 1) / VCATTN_TILE;
    const int64_t group = p->hq / p->hkv, gq0 = (g / p->hkv) * p->hq + (g % p->hkv) * group;
    float *prob = malloc((size_t)(rows * nk) * sizeof(float));        /* e_sj = P(t_sj, C_st) */
    double *factor = malloc((size_t)(rows * tiles) * sizeof(double));  /* f_st */
    double *weight = malloc((size_t)nk * sizeof(double));
    float *ceiling = malloc((size_t)tiles * sizeof(float));            /* C_st of the row at hand */
    double *tile_sum = malloc((size_t)tiles * sizeof(double)), *tile_sq = malloc((size_t)tiles * sizeof(double));
    vcattn_status st = VCATTN_ERR_OUT_OF_MEMORY;
    if (!prob || !factor || !weight || !ceiling || !tile_sum || !tile_sq) goto done;
    double mean_weight = 0.0;
    for (int s = 0; s < rows; s++) {
        const q_head *qh = &p->qh[gq0 + s % group];
        const int64_t i = vsmooth_probe_row(s, p->nq);
        const float *qv = qh->q.val + i * d;
        const float qmul = qh->q.mul[i] * (p->sm_scale * VCATTN_LOG2E);
        float *ps = prob + s * nk;
        float c = -INFINITY;
        for (int64_t tile = 0; tile < tiles; tile++) {
            const int64_t j0 = tile * VCATTN_TILE, j1 = j0 + VCATTN_TILE < nk ? j0 + VCATTN_TILE : nk;
            float m = -INFINITY;
            for (int64_t j = j0; j < j1; j++) {  /* the score as the kernel forms it */
                const float dot = dot8(qv, kv->k.val + j * d, d), mult = qmul * kv->k.mul[j];
                ps[j] = qh->key_bias ? fmaf(dot, mult, qh->key_bias[j]) : dot * mult;
                m = fmaxf(m, ps[j]);
            }
            ceiling[tile] = ceilf(m);
            double sum = 0.0, sq = 0.0;
            for (int64_t j = j0; j < j1; j++) {
                ps[j] = vsmooth_probe_prob(ps[j], ceiling[tile]);
                sum += ps[j];
                sq += (double)ps[j] * ps[j];
            }
            tile_sum[tile] = sum;
            tile_sq[tile] = sq;
            c = fmaxf(c, ceiling[tile]);
        }
        double l = 0.0, q2 = 0.0;
        for (int64_t tile = 0; tile < tiles; tile++) {
            const int shift = vsmooth_probe_shift(ceiling[tile], c);
            l += ldexp(tile_sum[tile], shift);
            q2 += ldexp(tile_sq[tile], 2 * shift);
        }
        const double inv_l2 = 1.0 / (l * l);
        for (int64_t tile = 0; tile < tiles; tile++)
            factor[s * tiles + tile] = ldexp(inv_l2, 2 * vsmooth_probe_shift(ceiling[tile], c));
        mean_weight += q2 * inv_l2;
    }
    mean_weight /= (double)nk;
    for (int64_t j = 0; j < nk; j++) {
        double half[2] = {0.0, 0.0};  /* even and odd probe rows */
        for (int s = 0; s < rows; s++) {
            const double e = prob[s * nk + j];
            half[s & 1] += e * e * factor[s * tiles + j / VCATTN_TILE];
        }
        weight[j] = vsmooth_probe_token_weight(half[0], half[1], mean_weight);
    }
    st = quantize_values(cfg->v_format, 1, cfg->sink_guard, kv->values, weight, nk, d, &kv->v);
done:
    free(prob); free(factor); free(weight); free(ceiling); free(tile_sum); free(tile_sq);
    free(kv->values);
    kv->values = NULL;
    return st;
}

/* --------------------------------------------------------------- mainloop */

/* P of one tile from its scores (dot products and their log2-domain
 * multipliers) and the running maximum m (log2 units). integer_dot: dot is
 * the integer dot product itself (no Q-smoothing term folded in). */
static void encode_probabilities(const vcattn_config *cfg, int64_t nt, const float *dot,
                                 const float *mult, float m, int integer_dot, float *prob) {
    switch (cfg->p_format) {
    case VCATTN_P_FP8_EXPCAST: {
        /* One FMA per element: x = 8 (t - m) + 120 + beta, scales folded in;
         * an integer dot as the kernel reads it (expcast.h). */
        float bias = (VCATTN_EXPCAST_MAX_CODE + cfg->expcast_beta) - 8.0f * m;
        for (int64_t j = 0; j < nt; j++) {
            const float x = integer_dot ? vcattn_expcast_dot_arg(dot[j], 8.0f * mult[j], bias)
                                        : fmaf(dot[j], 8.0f * mult[j], bias);
            prob[j] = vcattn_e4m3_decode(vcattn_expcast_code(x));
        }
        break;
    }
    case VCATTN_P_FP8_CAST:
        for (int64_t j = 0; j < nt; j++)
            prob[j] = vcattn_round_e4m3(exp2f(fmaf(dot[j], mult[j], VCATTN_P_SCALE_LOG2 - m)));
        break;
    case VCATTN_P_EXACT:
    case VCATTN_P_BF16:
        for (int64_t j = 0; j < nt; j++) {
            float e = exp2f(fmaf(dot[j], mult[j], -m));
            prob[j] = cfg->p_format == VCATTN_P_BF16 ? vcattn_round_bf16(e) : e;
        }
        break;
    case VCATTN_P_NVFP4: {
        /* Row maximum is 1, so the tensor scale is 1/448 and 16 keys share an
         * E4M3 scale, as SageAttention3 quantizes P. */
        const float ts = 1.0f / VCATTN_E4M3_MAX;
        for (int64_t j = 0; j < nt; j++) prob[j] = exp2f(fmaf(dot[j], mult[j], -m));
        for (int64_t j0 = 0; j0 < nt; j0 += VCATTN_NVFP4_BLOCK) {
            int64_t j1 = j0 + VCATTN_NVFP4_BLOCK < nt ? j0 + VCATTN_NVFP4_BLOCK : nt;
            float a = 0.0f;
            for (int64_t j = j0; j < j1; j++) a = fmaxf(a, prob[j]);
            float bs = vcattn_e4m3_decode(vcattn_nvfp4_block_scale_code(a, ts)) * ts;
            for (int64_t j = j0; j < j1; j++)
                prob[j] = vcattn_e2m1_decode(vcattn_nvfp4_encode(prob[j], bs)) * bs;
        }
        break;
    }
    }
}

static float p_scale_log2(vcattn_p_format f) {
    return f == VCATTN_P_FP8_CAST || f == VCATTN_P_FP8_EXPCAST ? VCATTN_P_SCALE_LOG2 : 0.0f;
}

/* One query row against every key tile: online softmax (eq. 1) with the mean
 * restored from the tile row sum (eq. 6). */
static void attend_row(const problem *p, const score_operand *q, const kv_head *kv, int64_t i,
                       float *out_row, float *lse_out, float lse_shift, const float *key_bias) {
    const vcattn_config *cfg = p->cfg;
    const int64_t d = p->d, nk = p->nk;
    const float *qv = q->val + i * d;
    const float qmul = q->mul[i] * (p->sm_scale * VCATTN_LOG2E);
    float dot[VCATTN_TILE], mult[VCATTN_TILE], prob[VCATTN_TILE];
    float acc[VCATTN_MAX_HEAD_DIM], partial[VCATTN_MAX_HEAD_DIM];
    float m = -INFINITY, l = 0.0f;
    memset(acc, 0, (size_t)d * sizeof(float));

    for (int64_t j0 = 0, tile = 0; j0 < nk; j0 += VCATTN_TILE, tile++) {
        int64_t nt = nk - j0 < VCATTN_TILE ? nk - j0 : VCATTN_TILE;
        float tile_max = -INFINITY;
        for (int64_t j = 0; j < nt; j++) {
            dot[j] = dot8(qv, kv->k.val + (j0 + j) * d, d);
            mult[j] = qmul * kv->k.mul[j0 + j];
            if (key_bias) {  /* the score with Q smoothing's per-key term, one FMA */
                dot[j] = fmaf(dot[j], mult[j], key_bias[j0 + j]);
                mult[j] = 1.0f;
            }
            tile_max = fmaxf(tile_max, dot[j] * mult[j]);
        }
        float m_new = fmaxf(m, tile_max);
        float alpha = exp2f(m - m_new);   /* 0 on the first tile (m = -inf) */
        encode_probabilities(cfg, nt, dot, mult, m_new, key_bias == NULL, prob);

        /* Second accumulation level: each tile's product in a fresh float32
         * partial, as the GPU promotes its FP8 wgmma accumulator per tile. */
        float r = 0.0f;
        memset(partial, 0, (size_t)d * sizeof(float));
        for (int64_t j = 0; j < nt; j++) {
            float pj = prob[j];
            r += pj;
            if (pj == 0.0f) continue;
            const float *vrow = kv->v.val + (j0 + j) * d;
            for (int64_t c = 0; c < d; c++) partial[c] += pj * vrow[c];
        }
        if (kv->v.mean) {
            const float *mu = kv->v.mean + tile * d;
            for (int64_t c = 0; c < d; c++) partial[c] = fmaf(r, mu[c], partial[c]);
        }
        float tmul = kv->v.tile_mul ? kv->v.tile_mul[tile] : 1.0f;
        for (int64_t c = 0; c < d; c++) acc[c] = fmaf(acc[c], alpha, partial[c] * tmul);
        l = fmaf(l, alpha, r);
        m = m_new;
    }
    float inv_l = 1.0f / l;
    for (int64_t c = 0; c < d; c++) out_row[c] = acc[c] * (kv->v.chan_mul[c] * inv_l) * kv->v.chan_pow2[c];
    *lse_out = (float)(LN2 * ((double)m + log2((double)l) - p_scale_log2(cfg->p_format))) + lse_shift;
}

/* ------------------------------------------------------------ the backend */

static void free_problem(problem *p) {
    if (p->kv)
        for (int64_t g = 0; g < p->batch * p->hkv; g++) {
            score_operand_free(&p->kv[g].k);
            value_operand_free(&p->kv[g].v);
            free(p->kv[g].kmean);
            free(p->kv[g].rows);
            free(p->kv[g].values);
        }
    if (p->qh)
        for (int64_t g = 0; g < p->batch * p->hq; g++) {
            score_operand_free(&p->qh[g].q);
            free(p->qh[g].lse_shift);
            free(p->qh[g].key_bias);
        }
    free(p->kv); free(p->qh); free(p->out); free(p->lse);
}

/* Over vsmooth_order_rows sampled query rows (the probe's rows) of each
 * query head of key head g: the squared error of the quantized attention of
 * p (returned) and of alt (*err_alt) against exact attention, in double from
 * the inputs (q and k after RoPE); -1 when out of memory. */
static double sampled_error(const problem *p, const problem *alt, const vcattn_tensor *q, const vcattn_tensor *k,
                            const vcattn_tensor *v, const vcattn_rope *rope, int64_t g, double *err_alt) {
    const int64_t b = g / p->hkv, h = g % p->hkv, group = p->hq / p->hkv, n = p->nk, d = p->d;
    const int rows = p->cfg->vsmooth_order_rows;
    float *kx = load_rows(k, b, h, rope, 1);
    float *vx = load_rows(v, b, h, NULL, 0);
    double *e = malloc((size_t)n * sizeof *e);
    float *got = malloc((size_t)d * 2 * sizeof *got);
    double err = 0.0;
    *err_alt = 0.0;
    if (!kx || !vx || !e || !got) {
        err = -1.0;
        goto done;
    }
    for (int64_t hq = h * group; hq < (h + 1) * group; hq++) {
        const int64_t gq = b * p->hq + hq;
        float *qx = load_rows(q, b, hq, rope, 0);
        if (!qx) {
            err = -1.0;
            goto done;
        }
        for (int s = 0; s < rows; s++) {
            const int64_t i = vsmooth_probe_row(s, p->nq);
            double mx = -INFINITY, l = 0.0, ref[VCATTN_MAX_HEAD_DIM] = {0};
            for (int64_t j = 0; j < n; j++) {
                double dot = 0.0;
                for (int64_t c = 0; c < d; c++) dot += (double)qx[i * d + c] * kx[j * d + c];
                e[j] = dot * p->sm_scale;
                mx = fmax(mx, e[j]);
            }
            for (int64_t j = 0; j < n; j++) {
                e[j] = exp(e[j] - mx);
                l += e[j];
            }
            for (int64_t j = 0; j < n; j++)
                for (int64_t c = 0; c < d; c++) ref[c] += e[j] / l * vx[j * d + c];
            float lse;
            attend_row(p, &p->qh[gq].q, &p->kv[g], i, got, &lse, p->qh[gq].lse_shift[i], p->qh[gq].key_bias);
            attend_row(alt, &alt->qh[gq].q, &alt->kv[g], i, got + d, &lse, alt->qh[gq].lse_shift[i],
                       alt->qh[gq].key_bias);
            for (int64_t c = 0; c < d; c++) {
                err += (got[c] - ref[c]) * (got[c] - ref[c]);
                *err_alt += (got[d + c] - ref[c]) * (got[d + c] - ref[c]);
            }
        }
        free(qx);
    }
done:
    free(kx); free(vx); free(e); free(got);
    return err;
}

/* vsmooth_order_rows at a grouping step: each key head keeps the k-means
 * order of p or takes the principal direction's, whichever gives the
 * smaller sampled_error, with its operands (the key head's and its query
 * heads', whose Q smoothing terms follow the key order) and permutation. */
static vcattn_status choose_orders(problem *p, const vcattn_tensor *q, const vcattn_tensor *k,
                                   const vcattn_tensor *v, const vcattn_rope *rope, int32_t *perms, int threads) {
    const int64_t nkv = p->batch * p->hkv, nqh = p->batch * p->hq, group = p->hq / p->hkv, n = p->nk;
    problem alt = *p;
    alt.kv = calloc((size_t)nkv, sizeof *alt.kv);
    alt.qh = calloc((size_t)nqh, sizeof *alt.qh);
    alt.out = NULL;
    alt.lse = NULL;
    int32_t *alt_perms = malloc((size_t)(nkv * n) * sizeof *alt_perms);
    float no_centroids;  /* the principal order has none */
    int failed = !alt.kv || !alt.qh || !alt_perms;
    if (!failed) {
        #pragma omp parallel for num_threads(threads) schedule(dynamic) reduction(| : failed)
        for (int64_t g = 0; g < nkv; g++)
            failed |= prepare_kv(&alt, k, v, rope, VCATTN_GROUP_PRINCIPAL, 0, NULL, &no_centroids, alt_perms, g) !=
                      VCATTN_OK;
        #pragma omp parallel for num_threads(threads) schedule(dynamic) reduction(| : failed)
        for (int64_t g = 0; g < nqh; g++)
            failed |= !failed && prepare_q(&alt, q, rope, g) != VCATTN_OK;
    }
    if (!failed && probes(p->cfg, VCATTN_GROUP_PRINCIPAL)) {
        #pragma omp parallel for num_threads(threads) schedule(dynamic) reduction(| : failed)
        for (int64_t g = 0; g < nkv; g++)
            failed |= probe_and_quantize_values(&alt, g) != VCATTN_OK;
    }
    if (!failed) {
        #pragma omp parallel for num_threads(threads) schedule(dynamic) reduction(| : failed)
        for (int64_t g = 0; g < nkv; g++) {
            double err_alt;
            const double err = sampled_error(p, &alt, q, k, v, rope, g, &err_alt);
            if (err < 0.0) {
                failed |= 1;
                continue;
            }
            if (!(err_alt < err)) continue;  /* ties keep k-means */
            kv_head tk = p->kv[g];
            p->kv[g] = alt.kv[g];
            alt.kv[g] = tk;
            const int64_t gq0 = (g / p->hkv) * p->hq + (g % p->hkv) * group;  /* its first query head */
            for (int64_t gq = gq0; gq < gq0 + group; gq++) {
                q_head tq = p->qh[gq];
                p->qh[gq] = alt.qh[gq];
                alt.qh[gq] = tq;
            }
            memcpy(perms + g * n, alt_perms + g * n, (size_t)n * sizeof *perms);
        }
    }
    free(alt_perms);
    free_problem(&alt);
    return failed ? VCATTN_ERR_OUT_OF_MEMORY : VCATTN_OK;
}

vcattn_status cpu_attention(vcattn_context *ctx, const vcattn_call *call, const vcattn_tensor *q,
                            const vcattn_tensor *k, const vcattn_tensor *v, const vcattn_tensor *out,
                            float *lse, const vcattn_rope *rope, vcattn_new_grouping *grouping) {
    const vcattn_config *cfg = &call->cfg;
    problem p = problem_of(call);
    const int64_t nkv = p.batch * p.hkv, nqh = p.batch * p.hq;
    const int threads = cpu_thread_count(cfg);
    const int clusters = call->clusters;
    const vcattn_grouping plan = call->plan;
    const vcattn_layer *layer = call->layer;
    int groups = plan == VCATTN_GROUP_COLD || plan == VCATTN_GROUP_WARM;

    /* A new grouping lands in fresh arrays, handed back only once the whole
     * call has succeeded, so a failed call leaves the layer as it was. */
    float *centroids = NULL;
    int32_t *perms = NULL;
    p.kv = calloc((size_t)nkv, sizeof *p.kv);
    p.qh = calloc((size_t)nqh, sizeof *p.qh);
    p.out = malloc((size_t)(nqh * p.nq * p.d) * sizeof(float));
    p.lse = malloc((size_t)(nqh * p.nq) * sizeof(float));
    const int permutes = vsmooth_plan_permutes(plan);
    if (permutes) {
        centroids = malloc((size_t)nkv * (size_t)clusters * (size_t)p.d * sizeof(float));
        perms = malloc((size_t)(nkv * p.nk) * sizeof(int32_t));
    }
    vcattn_status st = VCATTN_OK;
    if (!p.kv || !p.qh || !p.out || !p.lse || (permutes && (!centroids || !perms))) {
        st = vcattn_fail(ctx, VCATTN_ERR_OUT_OF_MEMORY, "cpu backend: out of host memory");
        goto done;
    }

    int failed = 0;
    #pragma omp parallel for num_threads(threads) schedule(dynamic) reduction(| : failed)
    for (int64_t g = 0; g < nkv; g++)
        failed |= prepare_kv(&p, k, v, rope, plan, clusters, layer, centroids, perms, g) != VCATTN_OK;
    #pragma omp parallel for num_threads(threads) schedule(dynamic) reduction(| : failed)
    for (int64_t g = 0; g < nqh; g++)
        failed |= !failed && prepare_q(&p, q, rope, g) != VCATTN_OK;
    if (!failed && probes(cfg, plan)) {
        #pragma omp parallel for num_threads(threads) schedule(dynamic) reduction(| : failed)
        for (int64_t g = 0; g < nkv; g++)
            failed |= probe_and_quantize_values(&p, g) != VCATTN_OK;
    }
    if (failed) {
        st = vcattn_fail(ctx, VCATTN_ERR_OUT_OF_MEMORY, "cpu backend: out of host memory");
        goto done;
    }
    if (cfg->check_finite) {
        double max_q = 0.0, max_k = 0.0;
        for (int64_t g = 0; g < nqh; g++) max_q = fmax(max_q, p.qh[g].max_norm);
        for (int64_t g = 0; g < nkv; g++) max_k = fmax(max_k, p.kv[g].max_norm);
        /* The unnormalized Hadamard sums up to sqrt(D) |x| (|x| at most
         * twice the measured norm after Q smoothing): past the float maximum
         * it overflows, whatever the scores. */
        if (cfg->hadamard && fmax(max_q, max_k) * 2.0 * sqrt((double)p.d) > FLT_MAX) {
            st = vcattn_fail(ctx, VCATTN_ERR_INVALID_ARGUMENT,
                             "the Hadamard rotation would overflow float32: rows of norm %.3g (q) and %.3g (k) "
                             "after RoPE and smoothing, times 2 sqrt(D), pass the float maximum",
                             max_q, max_k);
            goto done;
        }
        /* A row past the float range is refused even against keys that
         * smoothing made zero: Inf * 0 is NaN, which no comparison catches. */
        const double bound = isinf(max_q) || isinf(max_k) ? INFINITY : max_q * max_k * p.sm_scale * VCATTN_LOG2E;
        /* Rows whose scale came out 0 (amax below ~3.7e-37: 127 / amax
         * overflows) score 0 against every key: refused where the scores
         * they lose could matter (q ~1e-37 against k ~1e37 scores ~1). */
        double unseen_q = 0.0, unseen_k = 0.0;
        for (int64_t g = 0; g < nqh; g++) unseen_q = fmax(unseen_q, p.qh[g].unseen_norm);
        for (int64_t g = 0; g < nkv; g++) unseen_k = fmax(unseen_k, p.kv[g].unseen_norm);
        const double lost = fmax(unseen_q * max_k, max_q * unseen_k) * p.sm_scale * VCATTN_LOG2E;
        if (lost > VCATTN_UNSEEN_SCORE_LOG2) {
            st = vcattn_fail(ctx, VCATTN_ERR_INVALID_ARGUMENT,
                             "scores up to %.3g (log2 units) would read as 0: rows of norm %.3g (q) or %.3g (k) are "
                             "below what INT8 scales hold (amax ~3.7e-37) against rows of norm %.3g (k) or %.3g (q); "
                             "scale q up and k down by the same power of two", lost, unseen_q, unseen_k, max_k, max_q);
            goto done;
        }
        if (bound > VCATTN_MAX_SCORE_LOG2) {
            st = vcattn_fail(ctx, VCATTN_ERR_INVALID_ARGUMENT,
                             "scores could reach %.3g (log2 units: |q| %.3g, |k| %.3g after RoPE and "
                             "smoothing), beyond the %g the float32 softmax resolves",
                             bound, max_q, max_k, VCATTN_MAX_SCORE_LOG2);
            goto done;
        }
    }

    if (groups && cfg->vsmooth_order_rows > 0 && choose_orders(&p, q, k, v, rope, perms, threads)) {
        st = vcattn_fail(ctx, VCATTN_ERR_OUT_OF_MEMORY, "cpu backend: out of host memory");
        goto done;
    }

    const int64_t qtiles = (p.nq + VCATTN_TILE - 1) / VCATTN_TILE;
    const int64_t total_rows = nqh * p.nq;
    int64_t rows_done = 0, rows_told = 0;  /* under progress_lock */
    /* This call's own lock, not a process-wide critical section: a callback
     * may run a call on another context, which takes its own lock. */
    const vcattn_progress_fn progress = ctx->progress;
    void *const progress_user = ctx->progress_user;
    omp_lock_t progress_lock;
    if (progress) omp_init_lock(&progress_lock);
    #pragma omp parallel for num_threads(threads) schedule(dynamic)
    for (int64_t w = 0; w < nqh * qtiles; w++) {
        int64_t gq = w / qtiles, i0 = (w % qtiles) * VCATTN_TILE;
        int64_t i1 = i0 + VCATTN_TILE < p.nq ? i0 + VCATTN_TILE : p.nq;
        int64_t b = gq / p.hq, h = gq % p.hq;
        const kv_head *kv = &p.kv[b * p.hkv + h / (p.hq / p.hkv)];
        for (int64_t i = i0; i < i1; i++)
            attend_row(&p, &p.qh[gq].q, kv, i, p.out + (gq * p.nq + i) * p.d, p.lse + gq * p.nq + i,
                       p.qh[gq].lse_shift[i], p.qh[gq].key_bias);
        if (progress) {
            omp_set_lock(&progress_lock);
            rows_done += i1 - i0;  /* told at each 1% and at the end */
            if (rows_done == total_rows || (rows_done - rows_told) * 100 >= total_rows) {
                rows_told = rows_done;
                progress(rows_done, total_rows, progress_user);
            }
            omp_unset_lock(&progress_lock);
        }
    }
    if (progress) omp_destroy_lock(&progress_lock);

    /* Only now, with nothing left to fail, touch the caller's buffers. */
    for (int64_t gq = 0; gq < nqh; gq++)
        for (int64_t i = 0; i < p.nq; i++)
            vcattn_tensor_store_row(out, gq / p.hq, gq % p.hq, i, p.out + (gq * p.nq + i) * p.d);
    if (lse) memcpy(lse, p.lse, (size_t)(nqh * p.nq) * sizeof(float));
    if (layer && groups) {
        grouping->centroids = centroids;
        grouping->perm = perms;
        centroids = NULL;
        perms = NULL;
    }
done:
    free(centroids);
    free(perms);
    free_problem(&p);
    return st;
}

vcattn_status cpu_quantize_for_test(vcattn_context *ctx, const vcattn_call *call, const vcattn_tensor *q,
                                    const vcattn_tensor *k, const vcattn_tensor *v, const vcattn_rope *rope,
                                    vcattn_quantized *out) {
    const vcattn_config *cfg = &call->cfg;
    if (cfg->qk_format != VCATTN_QK_INT8 || cfg->v_format != VCATTN_V_FP8_CHANNEL)
        return vcattn_fail(ctx, VCATTN_ERR_UNSUPPORTED_CONFIG, "quantize for test: INT8 Q/K and FP8 V only");
    problem p = problem_of(call);
    const int64_t nkv = p.batch * p.hkv, nqh = p.batch * p.hq, d = p.d, tiles = (p.nk + 127) / 128;
    const int clusters = call->clusters;
    const vcattn_grouping plan = call->plan;
    const vcattn_layer *layer = call->layer;
    p.kv = calloc((size_t)nkv, sizeof *p.kv);
    p.qh = calloc((size_t)nqh, sizeof *p.qh);
    float *centroids = malloc((size_t)(nkv * clusters * d) * sizeof(float));
    int32_t *perms = malloc((size_t)(nkv * p.nk) * sizeof(int32_t));
    vcattn_status st = p.kv && p.qh && centroids && perms ? VCATTN_OK : VCATTN_ERR_OUT_OF_MEMORY;
    for (int64_t g = 0; !st && g < nkv; g++)
        st = prepare_kv(&p, k, v, rope, plan, clusters, layer, centroids, perms, g);
    for (int64_t g = 0; !st && g < nqh; g++) st = prepare_q(&p, q, rope, g);
    for (int64_t g = 0; !st && probes(cfg, plan) && g < nkv; g++) st = probe_and_quantize_values(&p, g);
    for (int64_t g = 0; !st && g < nqh; g++)
        for (int64_t n = 0; n < p.nq; n++) {
            out->q_scale[g * p.nq + n] = p.qh[g].q.mul[n];
            out->lse_shift[g * p.nq + n] = p.qh[g].lse_shift[n];
            for (int64_t c = 0; c < d; c++)
                out->q_codes[(g * p.nq + n) * d + c] = (int8_t)p.qh[g].q.val[n * d + c];
        }
    for (int64_t g = 0; !st && g < nkv; g++) {
        const kv_head *kv = &p.kv[g];
        for (int64_t n = 0; n < p.nk; n++)
            out->perm[g * p.nk + n] = vsmooth_plan_permutes(plan) ? perms[g * p.nk + n] : (int32_t)n;
        for (int64_t n = 0; n < p.nk; n++)
            for (int64_t c = 0; c < d; c++) {
                out->k_codes[(g * p.nk + n) * d + c] = (int8_t)kv->k.val[n * d + c];
                out->v_codes[(g * p.nk + n) * d + c] = vcattn_e4m3_encode(kv->v.val[n * d + c]);
            }
        for (int64_t t = 0; t < tiles; t++)
            for (int lg = 0; lg < VCATTN_K_LANE_GROUPS; lg++) {
                int64_t key = t * 128 + 2 * lg;  /* first key of the lane group */
                out->k_scale[(g * tiles + t) * 4 + lg] = key < p.nk ? kv->k.mul[key] : 0.0f;
            }
        for (int64_t i = 0; i < tiles * d; i++)
            out->v_mean[g * tiles * d + i] = kv->v.mean ? kv->v.mean[i] : 0.0f;
        for (int64_t c = 0; c < d; c++) {
            out->v_scale[g * d + c] = kv->v.chan_mul[c] * kv->v.chan_pow2[c];
            out->k_mean[g * d + c] = kv->kmean ? kv->kmean[c] : 0.0f;
        }
    }
    free(centroids);
    free(perms);
    free_problem(&p);
    return st ? vcattn_fail(ctx, st, "quantize for test: out of host memory") : VCATTN_OK;
}

vcattn_status cpu_value_roundtrip(const vcattn_config *cfg, const float *v, int64_t n,
                                  int64_t d, float *v_hat) {
    value_operand op;
    vcattn_status st = quantize_values(cfg->v_format, cfg->vsmooth, cfg->sink_guard, v, NULL, n, d, &op);
    if (st) return st;
    for (int64_t t = 0; t < n; t++) {
        int64_t tile = t / VCATTN_TILE;
        float tmul = op.tile_mul ? op.tile_mul[tile] : 1.0f;
        for (int64_t c = 0; c < d; c++) {
            float x = op.val[t * d + c] + (op.mean ? op.mean[tile * d + c] : 0.0f);
            v_hat[t * d + c] = x * tmul * op.chan_mul[c] * op.chan_pow2[c];
        }
    }
    value_operand_free(&op);
    return VCATTN_OK;
}
