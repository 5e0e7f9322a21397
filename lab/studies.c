/* Fidelity studies; see studies.h. */
#include "studies.h"
#include "workloads.h"

#include <float.h>
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "vcattn_inspect.h"
#include "reference.h"
#include "expcast_study.h"

#define BLOCK VCATTN_TILE

vcattn_status study_group_rows(const vcattn_config *cfg, int stateless, const float *x, int64_t n, int64_t d,
                               uint64_t stream, int32_t *perm) {
    if (stateless) return vsmooth_principal_order(x, n, d, perm);
    int clusters = vsmooth_cluster_count(cfg, n);
    float *centroids = malloc((size_t)clusters * (size_t)d * sizeof *centroids);
    int32_t *labels = malloc((size_t)n * sizeof *labels);
    vcattn_status st = VCATTN_ERR_OUT_OF_MEMORY;
    if (centroids && labels) {
        vsmooth_init_centroids(x, n, d, clusters, cfg->kmeans_seed, stream, centroids);
        vsmooth_kmeans(x, n, d, clusters, cfg->kmeans_iters, centroids, labels);
        vsmooth_argsort_labels(labels, n, clusters, perm);
        st = VCATTN_OK;
    }
    free(centroids);
    free(labels);
    return st;
}

/* Tokens in spatiotemporal cubes of ct x ch x cw (raster order inside each,
 * cubes in raster order, clipped at the grid's edges). */
static void cube_order(int frames, int height, int width, int ct, int ch, int cw, int32_t *perm) {
    int64_t at = 0;
    for (int t0 = 0; t0 < frames; t0 += ct)
        for (int h0 = 0; h0 < height; h0 += ch)
            for (int w0 = 0; w0 < width; w0 += cw)
                for (int t = t0; t < t0 + ct && t < frames; t++)
                    for (int h = h0; h < h0 + ch && h < height; h++)
                        for (int w = w0; w < w0 + cw && w < width; w++)
                            perm[at++] = (int32_t)(((int64_t)t * height + h) * width + w);
}

typedef struct {
    float dist;
    int32_t token, cluster;
} candidate;

static int by_distance(const void *a, const void *b) {
    const candidate *x = a, *y = b;
    if (x->dist != y->dist) return x->dist < y->dist ? -1 : 1;
    if (x->token != y->token) return x->token < y->token ? -1 : 1;
    return x->cluster - y->cluster;
}

/* Size-balanced k-means: k-means with one cluster per 128-row block, then
 * every token goes to the nearest centroid that still has room (greedy over
 * all token-centroid pairs by distance), so every block holds one cluster. */
static vcattn_status balanced_order(const vcattn_config *cfg, const float *x, int64_t n, int64_t d,
                                    uint64_t stream, int32_t *perm) {
    int k = (int)((n + BLOCK - 1) / BLOCK);
    float *cent = malloc((size_t)k * (size_t)d * sizeof *cent);
    int32_t *labels = malloc((size_t)n * sizeof *labels);
    int64_t *room = malloc((size_t)k * sizeof *room);
    candidate *pairs = malloc((size_t)(n * k) * sizeof *pairs);
    vcattn_status st = VCATTN_ERR_OUT_OF_MEMORY;
    if (cent && labels && room && pairs) {
        vsmooth_init_centroids(x, n, d, k, cfg->kmeans_seed, stream, cent);
        vsmooth_kmeans(x, n, d, k, cfg->kmeans_iters, cent, labels);
        for (int64_t t = 0; t < n; t++)
            for (int c = 0; c < k; c++) {
                double s = 0.0;
                for (int64_t i = 0; i < d; i++) {
                    double e = (double)x[t * d + i] - cent[(int64_t)c * d + i];
                    s += e * e;
                }
                pairs[t * k + c] = (candidate){(float)s, (int32_t)t, c};
            }
        qsort(pairs, (size_t)(n * k), sizeof *pairs, by_distance);
        for (int c = 0; c < k; c++) room[c] = c < k - 1 ? BLOCK : n - (int64_t)(k - 1) * BLOCK;
        for (int64_t t = 0; t < n; t++) labels[t] = -1;
        for (int64_t p = 0; p < n * k; p++) {
            candidate *c = &pairs[p];
            if (labels[c->token] >= 0 || room[c->cluster] == 0) continue;
            labels[c->token] = c->cluster;
            room[c->cluster]--;
        }
        vsmooth_argsort_labels(labels, n, k, perm);
        st = VCATTN_OK;
    }
    free(cent); free(labels); free(room); free(pairs);
    return st;
}

/* Quantizes rows x (in the given order) as cfg says and accumulates the error. */
static vcattn_status add_error(const vcattn_config *cfg, const float *x, const int32_t *perm, int64_t n,
                               int64_t d, float *xp, float *xh, double *num, double *den) {
    for (int64_t t = 0; t < n; t++)
        memcpy(xp + t * d, x + (perm ? perm[t] : t) * d, (size_t)d * sizeof *xp);
    vcattn_status st = cpu_value_roundtrip(cfg, xp, n, d, xh);
    if (st) return st;
    for (int64_t i = 0; i < n * d; i++) {
        double e = (double)xp[i] - xh[i];
        *num += e * e;
        *den += (double)xp[i] * xp[i];
    }
    return VCATTN_OK;
}

vcattn_status study_orders(const vcattn_tensor *v, int frames, int height, int width,
                           const vcattn_config *cfg, study_order out[STUDY_ORDER_COUNT]) {
    const int64_t n = v->tokens, d = v->head_dim, heads = v->batch * v->heads;
    static const char *const names[STUDY_ORDER_COUNT] = {
        "no demeaning", "sequence", "cube", "k-means", "balanced k-means", "hadamard"};
    vcattn_config fp8, fp4;
    vcattn_config_from_method("vsmooth", &fp8);
    vcattn_config_from_method("vsmooth-4bit", &fp4);
    fp8.kmeans_clusters = fp4.kmeans_clusters = cfg->kmeans_clusters;
    double num[STUDY_ORDER_COUNT][2] = {{0}}, den[STUDY_ORDER_COUNT][2] = {{0}};
    double energy[STUDY_ORDER_COUNT] = {0};
    int ct = frames >= 2 ? 2 : 1, cs = ct == 2 ? 8 : 16;  /* 2x8x8 (or 1x8x16) = 128 tokens */
    int has_grid = frames > 0 && (int64_t)frames * height * width == n;
    /* The greedy balanced assignment sorts all token-centroid pairs: small inputs only. */
    int balanced_ok = n * ((n + BLOCK - 1) / BLOCK) <= 20000000;

    float *x = malloc((size_t)(n * d) * sizeof *x), *xp = malloc((size_t)(n * d) * sizeof *xp);
    float *xh = malloc((size_t)(n * d) * sizeof *xh);
    int32_t *perm = malloc((size_t)n * sizeof *perm);
    vcattn_status st = VCATTN_ERR_OUT_OF_MEMORY;
    if (!x || !xp || !xh || !perm) goto done;
    for (int64_t g = 0; g < heads; g++) {
        for (int64_t t = 0; t < n; t++) vcattn_tensor_load_row(v, g / v->heads, g % v->heads, t, x + t * d);
        for (int o = 0; o < STUDY_ORDER_COUNT; o++) {
            const int32_t *order = NULL;
            if (o == 2) {
                if (!has_grid) continue;
                cube_order(frames, height, width, ct, cs, cs, perm);
                order = perm;
            } else if (o == 3) {
                if ((st = study_group_rows(cfg, 0, x, n, d, (uint64_t)g, perm))) goto done;
                order = perm;
            } else if (o == 4) {
                if (!balanced_ok) continue;
                if ((st = balanced_order(cfg, x, n, d, (uint64_t)g, perm))) goto done;
                order = perm;
            }
            if (o == 5 && !vcattn_is_pow2(d)) continue;
            if (o == 0 || o == 5) {  /* SageAttention2's V path: per channel, no demeaning */
                vcattn_config plain8 = fp8, plain4 = fp4;
                plain8.vsmooth = plain4.vsmooth = 0;
                const float *src = x;
                if (o == 5) {  /* rotate the channels; the error is measured after rotating back */
                    for (int64_t t = 0; t < n; t++) {
                        memcpy(xh + t * d, x + t * d, (size_t)d * sizeof *xh);
                        cpu_hadamard(xh + t * d, d);
                    }
                    memcpy(x, xh, (size_t)(n * d) * sizeof *x);  /* orthonormal: errors are preserved */
                    src = x;
                }
                if ((st = add_error(&plain8, src, NULL, n, d, xp, xh, &num[o][0], &den[o][0])) ||
                    (st = add_error(&plain4, src, NULL, n, d, xp, xh, &num[o][1], &den[o][1])))
                    goto done;
                energy[o] = -1.0;
                continue;
            }
            if ((st = add_error(&fp8, x, order, n, d, xp, xh, &num[o][0], &den[o][0])) ||
                (st = add_error(&fp4, x, order, n, d, xp, xh, &num[o][1], &den[o][1])))
                goto done;
            energy[o] += vsmooth_block_mean_energy_share(x, n, d, order, BLOCK) / (double)heads;
        }
    }
    for (int o = 0; o < STUDY_ORDER_COUNT; o++) {
        study_order *r = &out[o];
        memset(r, 0, sizeof *r);
        r->name = names[o];
        r->available = (o != 2 || has_grid) && (o != 4 || balanced_ok) && (o != 5 || vcattn_is_pow2(d));
        r->v_err_fp8 = den[o][0] > 0.0 ? sqrt(num[o][0] / den[o][0]) : 0.0;
        r->v_err_fp4 = den[o][1] > 0.0 ? sqrt(num[o][1] / den[o][1]) : 0.0;
        r->energy_share = energy[o];
        if (o == 2) snprintf(r->label, sizeof r->label, "cube %dx%dx%d", ct, cs, cs);
        else if (o == 3) snprintf(r->label, sizeof r->label, "k-means (k=%d)", vsmooth_cluster_count(cfg, n));
        else if (o == 4) snprintf(r->label, sizeof r->label, "balanced k-means (k=%lld)", (long long)((n + BLOCK - 1) / BLOCK));
        else if (o == 5) snprintf(r->label, sizeof r->label, "hadamard (no demeaning)");
        else snprintf(r->label, sizeof r->label, "%s", names[o]);
    }
    st = VCATTN_OK;
done:
    free(x); free(xp); free(xh); free(perm);
    return st;
}

/* ------------------------------------------------------------ ExpCast rows */

typedef struct {
    float beta;
    double bound;
    double *acc;  /* per thread: rows, tv sum x2, tv max x2, tau sum, no-underflow, violations, min slack */
} expcast_sink;

enum { ACC_ROWS, ACC_TV0, ACC_TV1, ACC_MAX0, ACC_MAX1, ACC_TAU, ACC_CLEAN, ACC_CLEAN_MAX, ACC_VIOL, ACC_SLACK,
       ACC_ENTROPY, ACC_N };

static void expcast_row(void *ctx, int thread, int64_t b, int64_t hq, int64_t i, double *s,
                        const double *v_rows, int64_t nk, int64_t d) {
    expcast_sink *e = ctx;
    double *acc = e->acc + (size_t)thread * ACC_N;
    double mx = -INFINITY, sum = 0.0, sum_x = 0.0, sum_c = 0.0, tau = 0.0;
    for (int64_t j = 0; j < nk; j++) mx = fmax(mx, s[j]);
    for (int64_t j = 0; j < nk; j++) sum += exp(s[j] - mx);
    /* Two passes: the normalizers of both encodings, then the distances. */
    for (int64_t j = 0; j < nk; j++) {
        float u = (float)((s[j] - mx) * 1.4426950408889634);
        uint8_t c = vcattn_expcast_code(vcattn_expcast_arg(u, e->beta));
        sum_x += vcattn_e4m3_decode(c);
        sum_c += vcattn_e4m3_decode(vcattn_expthencast_code(u));
        if (c == 0) tau += exp(s[j] - mx) / sum;
    }
    double tv0 = 0.0, tv1 = 0.0, entropy = 0.0;
    for (int64_t j = 0; j < nk; j++) {
        float u = (float)((s[j] - mx) * 1.4426950408889634);
        double p = exp(s[j] - mx) / sum;
        if (p > 0.0) entropy -= p * log(p);
        tv0 += fabs(vcattn_e4m3_decode(vcattn_expcast_code(vcattn_expcast_arg(u, e->beta))) / sum_x - p);
        tv1 += fabs(vcattn_e4m3_decode(vcattn_expthencast_code(u)) / sum_c - p);
    }
    tv0 *= 0.5;
    tv1 *= 0.5;
    double slack = e->bound + tau - tv0;
    acc[ACC_ROWS] += 1.0;
    acc[ACC_TV0] += tv0;
    acc[ACC_TV1] += tv1;
    acc[ACC_MAX0] = fmax(acc[ACC_MAX0], tv0);
    acc[ACC_MAX1] = fmax(acc[ACC_MAX1], tv1);
    acc[ACC_TAU] += tau;
    acc[ACC_CLEAN] += tau == 0.0;
    if (tau == 0.0) acc[ACC_CLEAN_MAX] = fmax(acc[ACC_CLEAN_MAX], tv0);
    acc[ACC_VIOL] += slack < 0.0;
    acc[ACC_SLACK] = fmin(acc[ACC_SLACK], slack);
    acc[ACC_ENTROPY] += nk > 1 ? entropy / log((double)nk) : 0.0;
}

vcattn_status study_expcast_rows(const vcattn_tensor *q, const vcattn_tensor *k,
                                 const vcattn_rope *rope, float sm_scale, float beta,
                                 study_expcast *out) {
    expcast_facts facts;
    expcast_compute(beta, &facts);
    int threads = omp_get_max_threads();
    expcast_sink sink = {beta, facts.tv_bound, calloc((size_t)threads * ACC_N, sizeof(double))};
    if (!sink.acc) return VCATTN_ERR_OUT_OF_MEMORY;
    for (int t = 0; t < threads; t++) sink.acc[t * ACC_N + ACC_SLACK] = INFINITY;
    vcattn_status st = vcattn_reference_rows(q, k, NULL, rope, sm_scale, expcast_row, &sink);
    memset(out, 0, sizeof *out);
    out->tv_bound = facts.tv_bound;
    out->worst_slack = INFINITY;
    for (int t = 0; t < threads; t++) {
        const double *a = sink.acc + (size_t)t * ACC_N;
        out->rows += (int64_t)a[ACC_ROWS];
        out->tv_mean[0] += a[ACC_TV0];
        out->tv_mean[1] += a[ACC_TV1];
        out->tv_max[0] = fmax(out->tv_max[0], a[ACC_MAX0]);
        out->tv_max[1] = fmax(out->tv_max[1], a[ACC_MAX1]);
        out->tau_mean += a[ACC_TAU];
        out->no_underflow += (int64_t)a[ACC_CLEAN];
        out->tv_max_no_underflow = fmax(out->tv_max_no_underflow, a[ACC_CLEAN_MAX]);
        out->violations += (int64_t)a[ACC_VIOL];
        out->worst_slack = fmin(out->worst_slack, a[ACC_SLACK]);
        out->entropy_mean += a[ACC_ENTROPY];
    }
    if (out->rows) {
        out->entropy_mean /= (double)out->rows;
        out->tv_mean[0] /= (double)out->rows;
        out->tv_mean[1] /= (double)out->rows;
        out->tau_mean /= (double)out->rows;
    }
    free(sink.acc);
    return st;
}

/* ------------------------------------------------------ input statistics */

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *x, int64_t n) {
    qsort(x, (size_t)n, sizeof *x, cmp_double);
    return n % 2 ? x[n / 2] : 0.5 * (x[n / 2 - 1] + x[n / 2]);
}

vcattn_status study_tensor_stats(const vcattn_tensor *k, const vcattn_tensor *v, study_stats *out) {
    const int64_t heads = k->batch * k->heads, n = k->tokens, d = k->head_dim;
    double *mean = malloc((size_t)d * sizeof *mean), *sq = malloc((size_t)d * sizeof *sq);
    double *norms = malloc((size_t)(n > d ? n : d) * sizeof *norms);
    memset(out, 0, sizeof *out);
    if (!mean || !sq || !norms) {
        free(mean); free(sq); free(norms);
        return VCATTN_ERR_OUT_OF_MEMORY;
    }
    int64_t outliers = 0;
    for (int64_t g = 0; g < heads; g++) {
        const int64_t b = g / k->heads, h = g % k->heads;
        double total = 0.0, mean_energy = 0.0;
        for (int64_t c = 0; c < d; c++) mean[c] = sq[c] = 0.0;
        for (int64_t t = 0; t < n; t++)
            for (int64_t c = 0; c < d; c++) {
                double x = vcattn_tensor_get(k, b, h, t, c);
                mean[c] += x;
                sq[c] += x * x;
            }
        for (int64_t c = 0; c < d; c++) {
            mean[c] /= (double)n;
            mean_energy += mean[c] * mean[c];
            total += sq[c] / (double)n;
            norms[c] = sqrt(sq[c] / (double)n);
        }
        out->k_mean_share += total > 0.0 ? mean_energy / total : 0.0;
        double peak = 0.0;
        for (int64_t c = 0; c < d; c++) peak = fmax(peak, norms[c]);
        double mid = median(norms, d);
        out->k_channel_peak += mid > 0.0 ? peak / mid : 0.0;

        for (int64_t t = 0; t < n; t++) {
            double e = 0.0;
            for (int64_t c = 0; c < d; c++) {
                double x = vcattn_tensor_get(v, b, h, t, c);
                e += x * x;
            }
            norms[t] = sqrt(e);
        }
        mid = median(norms, n);  /* sorts: norms[n - 1] is the largest */
        out->v_token_peak += mid > 0.0 ? norms[n - 1] / mid : 0.0;
        for (int64_t t = 0; t < n; t++) outliers += norms[t] > 3.0 * mid;
    }
    out->k_mean_share /= (double)heads;
    out->k_channel_peak /= (double)heads;
    out->v_token_peak /= (double)heads;
    out->v_outlier_frac = (double)outliers / (double)(heads * n);
    free(mean); free(sq); free(norms);
    return VCATTN_OK;
}

/* ---------------------------------------------------------------- output */

void study_print(const study_order orders[STUDY_ORDER_COUNT], const study_expcast *ex,
                 const study_stats *stats, int json, FILE *f) {
    if (json) {
        fprintf(f, "{\"orders\": [");
        for (int o = 0, first = 1; orders && o < STUDY_ORDER_COUNT; o++) {
            const study_order *r = &orders[o];
            if (!r->available) continue;
            fprintf(f, "%s{\"order\": \"%s\", \"v_err_fp8\": %.6g, \"v_err_fp4\": %.6g, \"energy_share\": ",
                    first ? "" : ", ", r->label, r->v_err_fp8, r->v_err_fp4);
            if (r->energy_share < 0.0) fprintf(f, "null}");
            else fprintf(f, "%.6g}", r->energy_share);
            first = 0;
        }
        fprintf(f, "]");
        if (ex)
            fprintf(f, ", \"expcast_rows\": {\"rows\": %lld, \"tv_mean_expcast\": %.6g, \"tv_mean_cast\": %.6g, "
                       "\"tv_max_expcast\": %.6g, \"tv_max_cast\": %.6g, \"tau_mean\": %.6g, "
                       "\"rows_without_underflow\": %lld, \"tv_max_without_underflow\": %.6g, \"violations\": %lld, "
                       "\"worst_slack\": %.6g, \"tv_bound\": %.6g, \"entropy_mean\": %.6g}",
                    (long long)ex->rows, ex->tv_mean[0], ex->tv_mean[1], ex->tv_max[0], ex->tv_max[1],
                    ex->tau_mean, (long long)ex->no_underflow, ex->tv_max_no_underflow, (long long)ex->violations,
                    ex->worst_slack, ex->tv_bound, ex->entropy_mean);
        if (stats)
            fprintf(f, ", \"stats\": {\"k_mean_share\": %.6g, \"k_channel_peak\": %.6g, \"v_token_peak\": %.6g, "
                       "\"v_outlier_frac\": %.6g}",
                    stats->k_mean_share, stats->k_channel_peak, stats->v_token_peak, stats->v_outlier_frac);
        fprintf(f, "}\n");
        return;
    }
    if (orders) {
        fprintf(f, "V quantization error by token order (128-row blocks; paper table 1, figure 4):\n");
        fprintf(f, "%-28s %10s %10s %14s\n", "order", "FP8 err", "NVFP4 err", "energy share");
        for (int o = 0; o < STUDY_ORDER_COUNT; o++) {
            const study_order *r = &orders[o];
            if (!r->available) {
                fprintf(f, "%-28s %10s %10s %14s\n", r->name, "-", "-", "(not run)");
                continue;
            }
            fprintf(f, "%-28s %9.3f%% %9.3f%% ", r->label, 100.0 * r->v_err_fp8, 100.0 * r->v_err_fp4);
            if (r->energy_share < 0.0) fprintf(f, "%14s\n", "-");
            else fprintf(f, "%13.1f%%\n", 100.0 * r->energy_share);
        }
    }
    if (ex) {
        fprintf(f, "%sExpCast-FP8 per row (P alone, exact scores; %lld rows):\n", orders ? "\n" : "",
                (long long)ex->rows);
        fprintf(f, "  total variation to softmax: ExpCast mean %.3f%% max %.3f%%, exp-then-cast mean %.3f%% max %.3f%%\n",
                100.0 * ex->tv_mean[0], 100.0 * ex->tv_max[0], 100.0 * ex->tv_mean[1], 100.0 * ex->tv_max[1]);
        fprintf(f, "  underflow mass tau (code 0) mean %.3f%%; rows without underflow %.1f%% (their max TV %.3f%%)\n",
                100.0 * ex->tau_mean, ex->rows ? 100.0 * (double)ex->no_underflow / (double)ex->rows : 0.0,
                100.0 * ex->tv_max_no_underflow);
        fprintf(f, "  rows over the bound %.4f%% + tau: %lld (worst slack %.4f%%)\n", 100.0 * ex->tv_bound,
                (long long)ex->violations, 100.0 * ex->worst_slack);
        fprintf(f, "  softmax entropy / log(Nk), mean over rows: %.3f\n", ex->entropy_mean);
    }
    if (stats) {
        fprintf(f, "%sThe inputs' statistics (per kv head, mean over heads):\n", orders || ex ? "\n" : "");
        fprintf(f, "  K channel-mean energy share %.1f%%, largest/median channel RMS %.2f\n",
                100.0 * stats->k_mean_share, stats->k_channel_peak);
        fprintf(f, "  V largest/median token norm %.2f, tokens over 3x the median %.3f%%\n", stats->v_token_peak,
                100.0 * stats->v_outlier_frac);
    }
}

/* ------------------------------------------------------- schedule (table 3) */

#include <time.h>

static double wall_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

typedef struct {
    const char *name;
    float window;
    int refresh, demean_outside, cold_restarts, vsmooth;
    double cluster_factor;
    int stateless;  /* no layer: V-Smooth in principal order on every step (the drop-in call) */
} schedule_variant;

vcattn_status study_schedule(const char *workload, uint64_t seed, int steps,
                             study_schedule_row out[STUDY_SCHEDULE_COUNT]) {
    vcattn_workload a, b;
    vcattn_status st = vcattn_workload_generate(workload, seed, &a);
    if (st) return st;
    if ((st = vcattn_workload_generate(workload, seed + 7919, &b))) {
        vcattn_workload_free(&a);
        return st;
    }
    const int64_t nq = a.batch * a.heads_q * a.tokens * a.head_dim;
    const int64_t nkv = a.batch * a.heads_kv * a.tokens * a.head_dim;
    float *q = malloc((size_t)nq * sizeof *q), *k = malloc((size_t)nkv * sizeof *k);
    float *v = malloc((size_t)nkv * sizeof *v), *o = malloc((size_t)nq * sizeof *o);
    double *ref = malloc((size_t)nq * sizeof *ref);
    double *err = calloc((size_t)STUDY_SCHEDULE_COUNT * (size_t)steps, sizeof *err);
    vcattn_context *ctx = NULL;
    vcattn_layer *layers[STUDY_SCHEDULE_COUNT] = {0};
    if (!q || !k || !v || !o || !ref || !err) {
        st = VCATTN_ERR_OUT_OF_MEMORY;
        goto done;
    }
    if ((st = vcattn_create(&ctx, VCATTN_BACKEND_CPU))) goto done;
    vcattn_config vc;
    vcattn_config_from_method("vc", &vc);
    int auto_k = vsmooth_cluster_count(&vc, a.tokens);
    int window_steps = (int)ceil(vc.group_window * steps), paper_groupings = (window_steps + vc.group_refresh - 1) / vc.group_refresh;
    const schedule_variant variants[STUDY_SCHEDULE_COUNT] = {
        {"first quarter (paper)", vc.group_window, vc.group_refresh, 0, 0, 1, 1.0, 0},
        {"first quarter, demean after", vc.group_window, vc.group_refresh, 1, 0, 1, 1.0, 0},
        {"same count spread uniformly", 1.0f, (steps + paper_groupings - 1) / paper_groupings, 1, 0, 1, 1.0, 0},
        {"every step", 1.0f, 1, 1, 0, 1, 1.0, 0},
        {"cold k-means restarts", vc.group_window, vc.group_refresh, 0, 1, 1, 1.0, 0},
        {"half the clusters", vc.group_window, vc.group_refresh, 0, 0, 1, 0.5, 0},
        {"twice the clusters", vc.group_window, vc.group_refresh, 0, 0, 1, 2.0, 0},
        {"no V-Smooth", vc.group_window, vc.group_refresh, 0, 0, 0, 1.0, 0},
        {"no layer state (principal order)", vc.group_window, vc.group_refresh, 0, 0, 1, 1.0, 1},
    };
    vcattn_tensor tq = vcattn_tensor_bhnd(q, VCATTN_DTYPE_F32, a.batch, a.heads_q, a.tokens, a.head_dim);
    vcattn_tensor tk = vcattn_tensor_bhnd(k, VCATTN_DTYPE_F32, a.batch, a.heads_kv, a.tokens, a.head_dim);
    vcattn_tensor tv = vcattn_tensor_bhnd(v, VCATTN_DTYPE_F32, a.batch, a.heads_kv, a.tokens, a.head_dim);
    vcattn_tensor to = vcattn_tensor_bhnd(o, VCATTN_DTYPE_F32, a.batch, a.heads_q, a.tokens, a.head_dim);
    vcattn_rope rope = {.style = a.rope_style, .q_cos = a.rope_cos, .q_sin = a.rope_sin, .k_cos = a.rope_cos,
                        .k_sin = a.rope_sin};
    for (int r = 0; r < STUDY_SCHEDULE_COUNT; r++) {
        memset(&out[r], 0, sizeof out[r]);
        snprintf(out[r].name, sizeof out[r].name, "%s", variants[r].name);
        if ((st = vcattn_layer_create(&layers[r], steps))) goto done;
    }
    for (int s = 0; s < steps; s++) {
        double th = 0.6 * (steps > 1 ? (double)s / (steps - 1) : 0.0), c = cos(th), sn = sin(th);
        for (int64_t i = 0; i < nq; i++) q[i] = (float)(c * a.q[i] + sn * b.q[i]);
        /* Timestep-dependent outlier channels: 4 channels per kv head carry
         * values 3x larger at the first step, fading to 1x at the last. */
        double boost = 1.0 + 2.0 * (steps > 1 ? 1.0 - (double)s / (steps - 1) : 1.0);
        for (int64_t i = 0; i < nkv; i++) {
            int64_t head = i / (a.tokens * a.head_dim), ch = i % a.head_dim;
            int hot = 0;
            for (int j = 0; j < 4; j++) hot |= ch == (head * 37 + j * 29) % a.head_dim;
            k[i] = (float)(c * a.k[i] + sn * b.k[i]);
            v[i] = (float)((c * a.v[i] + sn * b.v[i]) * (hot ? boost : 1.0));
        }
        fprintf(stderr, "[schedule] step %d/%d\n", s + 1, steps);
        if ((st = vcattn_reference_attention(&tq, &tk, &tv, &rope, 0.0f, ref, NULL))) goto done;
        double ref_norm = 0.0;
        for (int64_t i = 0; i < nq; i++) ref_norm += ref[i] * ref[i];
        for (int r = 0; r < STUDY_SCHEDULE_COUNT; r++) {
            const schedule_variant *var = &variants[r];
            vcattn_config cfg = vc;
            cfg.group_window = var->window;
            cfg.group_refresh = var->refresh;
            cfg.demean_outside_window = var->demean_outside;
            cfg.vsmooth = var->vsmooth;
            cfg.kmeans_clusters = (int)fmax(2.0, floor(auto_k * var->cluster_factor + 0.5));
            vcattn_layer_set_step(layers[r], s);
            vcattn_layer *layer = var->stateless ? NULL : layers[r];
            vcattn_grouping plan = vcattn_layer_plan(layer, &cfg);
            if (var->cold_restarts && plan == VCATTN_GROUP_WARM) {
                vcattn_layer_reset(layers[r]);
                plan = VCATTN_GROUP_COLD;
            }
            out[r].groupings += plan == VCATTN_GROUP_COLD || plan == VCATTN_GROUP_WARM;
            double t0 = wall_ms();
            if ((st = vcattn_attention(ctx, &cfg, &tq, &tk, &tv, &to, NULL, &rope, layer))) goto done;
            out[r].ms += wall_ms() - t0;
            double e2 = 0.0;
            for (int64_t i = 0; i < nq; i++) e2 += (o[i] - ref[i]) * (o[i] - ref[i]);
            err[r * steps + s] = ref_norm > 0.0 ? sqrt(e2 / ref_norm) : 0.0;
        }
    }
    for (int r = 0; r < STUDY_SCHEDULE_COUNT; r++) {
        double all = 0.0, win = 0.0, after = 0.0;
        for (int s = 0; s < steps; s++) {
            all += err[r * steps + s];
            if (s < window_steps) win += err[r * steps + s];
            else after += err[r * steps + s];
        }
        out[r].err_mean = all / steps;
        out[r].err_window = window_steps ? win / window_steps : 0.0;
        out[r].err_after = steps > window_steps ? after / (steps - window_steps) : 0.0;
    }
done:
    for (int r = 0; r < STUDY_SCHEDULE_COUNT; r++) vcattn_layer_destroy(layers[r]);
    vcattn_destroy(ctx);
    free(q); free(k); free(v); free(o); free(ref); free(err);
    vcattn_workload_free(&a);
    vcattn_workload_free(&b);
    return st;
}

void study_schedule_print(const study_schedule_row rows[STUDY_SCHEDULE_COUNT], int steps, int json,
                          FILE *f) {
    if (json) {
        fprintf(f, "{\"steps\": %d, \"schedule\": [", steps);
        for (int r = 0; r < STUDY_SCHEDULE_COUNT; r++)
            fprintf(f, "%s{\"variant\": \"%s\", \"err_mean\": %.6g, \"err_window\": %.6g, \"err_after\": %.6g, "
                       "\"groupings\": %d, \"ms\": %.1f}", r ? ", " : "", rows[r].name, rows[r].err_mean,
                    rows[r].err_window, rows[r].err_after, rows[r].groupings, rows[r].ms);
        fprintf(f, "]}\n");
        return;
    }
    fprintf(f, "Grouping schedule over a %d-step trajectory, vc (paper table 3); output rel L2 vs FP64:\n", steps);
    fprintf(f, "%-30s %10s %10s %10s %9s %10s\n", "variant", "mean", "window", "after", "groupings", "time ms");
    for (int r = 0; r < STUDY_SCHEDULE_COUNT; r++)
        fprintf(f, "%-30s %9.4f%% %9.4f%% %9.4f%% %9d %10.0f\n", rows[r].name, 100.0 * rows[r].err_mean,
                100.0 * rows[r].err_window, 100.0 * rows[r].err_after, rows[r].groupings, rows[r].ms);
}
