/* Value-guided grouping: k-means over the value tokens of one head, and the
 * stable argsort of its labels. Deterministic and single-threaded: callers
 * parallelize over (batch, head). */
#include "vsmooth.h"

#include <float.h>
#include <stdlib.h>
#include <string.h>

static uint64_t splitmix64(uint64_t *state) {
    uint64_t z = (*state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

int vsmooth_cluster_count(const vcattn_config *cfg, int64_t nk) {
    int64_t k = cfg->kmeans_clusters;
    if (k == 0) {
        k = (nk + 127) / 128 / 4;
        k = k < 2 ? 2 : (k > 32 ? 32 : k);
    }
    return (int)(k < nk ? k : nk);
}

int vsmooth_init_rows(int64_t n, int k, uint64_t seed, uint64_t stream, int32_t *rows) {
    /* Partial Fisher-Yates over token indices: k distinct tokens. Sparse swap
     * bookkeeping would avoid the O(n) array; n int32 is cheap next to V. */
    int32_t *idx = malloc((size_t)n * sizeof *idx);
    uint64_t state = seed ^ (stream * 0xd1b54a32d192ed03ULL);
    if (!idx) {  /* degrade gracefully: evenly spaced tokens */
        for (int c = 0; c < k; c++) rows[c] = (int32_t)(n * c / k);
        return 0;
    }
    for (int64_t i = 0; i < n; i++) idx[i] = (int32_t)i;
    for (int c = 0; c < k; c++) {
        int64_t j = c + (int64_t)(splitmix64(&state) % (uint64_t)(n - c));
        int32_t t = idx[c]; idx[c] = idx[j]; idx[j] = t;
        rows[c] = idx[c];
    }
    free(idx);
    return 1;
}

void vsmooth_init_centroids(const float *x, int64_t n, int64_t d, int k, uint64_t seed,
                            uint64_t stream, float *centroids) {
    int32_t rows[VCATTN_MAX_KMEANS_CLUSTERS];  /* k within the config's bound */
    vsmooth_init_rows(n, k, seed, stream, rows);
    for (int c = 0; c < k; c++)
        memcpy(centroids + (int64_t)c * d, x + (int64_t)rows[c] * d, (size_t)d * sizeof(float));
}

static void assign(const float *x, int64_t n, int64_t d, int k, const float *centroids,
                   const float *norms, int32_t *labels) {
    for (int64_t t = 0; t < n; t++) {
        const float *xt = x + t * d;
        float best = FLT_MAX;
        int32_t best_c = 0;
        for (int c = 0; c < k; c++) {
            const float *cc = centroids + (int64_t)c * d;
            float dot = 0.0f;
            for (int64_t i = 0; i < d; i++) dot += xt[i] * cc[i];
            float dist = norms[c] - 2.0f * dot;   /* |x|^2 is common to all c */
            if (dist < best) { best = dist; best_c = c; }
        }
        labels[t] = best_c;
    }
}

void vsmooth_kmeans(const float *x, int64_t n, int64_t d, int k, int iters,
                    float *centroids, int32_t *labels) {
    float amax = 0.0f;
    for (int64_t i = 0; i < n * d; i++) amax = fmaxf(amax, fabsf(x[i]));
    const int e = vsmooth_kmeans_scale_exp(amax);
    float *norms = malloc((size_t)k * sizeof *norms);
    double *sums = malloc((size_t)k * (size_t)d * sizeof *sums);
    int64_t *counts = malloc((size_t)k * sizeof *counts);
    float *scaled = e ? malloc((size_t)(n * d) * sizeof *scaled) : NULL;
    if (!norms || !sums || !counts || (e && !scaled)) {  /* no memory: one cluster, sequence order */
        memset(labels, 0, (size_t)n * sizeof *labels);
        free(norms); free(sums); free(counts); free(scaled);
        return;
    }
    if (e) {  /* V 2^-e, exact: the GPU multiplies by the same power of two */
        const float s = ldexpf(1.0f, -e);
        for (int64_t i = 0; i < n * d; i++) scaled[i] = x[i] * s;
        for (int64_t i = 0; i < (int64_t)k * d; i++) centroids[i] = centroids[i] * s;
        x = scaled;
    }
    for (int it = 0; it < iters; it++) {
        for (int c = 0; c < k; c++) {
            float s = 0.0f;
            for (int64_t i = 0; i < d; i++) s += centroids[(int64_t)c * d + i] * centroids[(int64_t)c * d + i];
            norms[c] = s;
        }
        assign(x, n, d, k, centroids, norms, labels);
        memset(sums, 0, (size_t)k * (size_t)d * sizeof *sums);
        memset(counts, 0, (size_t)k * sizeof *counts);
        for (int64_t t = 0; t < n; t++) {
            double *s = sums + (int64_t)labels[t] * d;
            for (int64_t i = 0; i < d; i++) s[i] += x[t * d + i];
            counts[labels[t]]++;
        }
        for (int c = 0; c < k; c++) {
            if (!counts[c]) continue;  /* empty cluster keeps its centroid */
            for (int64_t i = 0; i < d; i++)
                centroids[(int64_t)c * d + i] = (float)(sums[(int64_t)c * d + i] / (double)counts[c]);
        }
    }
    if (e) {
        const float s = ldexpf(1.0f, e);
        for (int64_t i = 0; i < (int64_t)k * d; i++) centroids[i] = centroids[i] * s;
    }
    free(norms); free(sums); free(counts); free(scaled);
}

void vsmooth_argsort_labels(const int32_t *labels, int64_t n, int k, int32_t *perm) {
    int64_t *start = calloc((size_t)k + 1, sizeof *start);
    if (!start) {  /* identity is a valid (if useless) permutation */
        for (int64_t i = 0; i < n; i++) perm[i] = (int32_t)i;
        return;
    }
    for (int64_t i = 0; i < n; i++) start[labels[i] + 1]++;
    for (int c = 0; c < k; c++) start[c + 1] += start[c];
    for (int64_t i = 0; i < n; i++) perm[start[labels[i]]++] = (int32_t)i;
    free(start);
}

double vsmooth_block_mean_energy_share(const float *x, int64_t n, int64_t d,
                                       const int32_t *perm, int64_t block) {
    double share_sum = 0.0;
    int64_t blocks = 0;
    double *mean = malloc((size_t)d * sizeof *mean);
    if (!mean) return 0.0;
    for (int64_t b0 = 0; b0 < n; b0 += block) {
        int64_t rows = n - b0 < block ? n - b0 : block;
        double energy = 0.0, sq = 0.0;
        memset(mean, 0, (size_t)d * sizeof *mean);
        for (int64_t r = 0; r < rows; r++) {
            const float *row = x + (int64_t)(perm ? perm[b0 + r] : b0 + r) * d;
            for (int64_t i = 0; i < d; i++) {
                mean[i] += row[i];
                energy += (double)row[i] * row[i];
            }
        }
        if (energy == 0.0) continue;
        for (int64_t i = 0; i < d; i++) sq += (mean[i] / rows) * (mean[i] / rows);
        share_sum += (double)rows * sq / energy;
        blocks++;
    }
    free(mean);
    return blocks ? share_sum / (double)blocks : 0.0;
}
