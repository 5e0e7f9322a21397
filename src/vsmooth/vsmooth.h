/* V-Smooth: value-guided token grouping (k-means + stable argsort) and the
 * per-layer state that carries it across denoising steps. */
#ifndef VCATTN_VSMOOTH_H
#define VCATTN_VSMOOTH_H

#include "vcattn.h"
#include "../formats/format_common.h"
#include "../formats/expcast.h"

#ifdef __cplusplus
extern "C" {
#endif

/* k-means forms the distances |c|^2 - 2 x.c in float32. A head whose V amax
 * reaches 2^57 is clustered as V 2^-k, the amax then in [2^56, 2^57), so
 * no distance overflows (D <= 256); one whose nonzero amax lies below 2^-57
 * as V 2^-k with k < 0, the amax then in [2^-57, 2^-56), so the products do
 * not underflow. k = 0 in between: the same bits as without. Scaling by a
 * power of two keeps every comparison; centroids are kept unscaled. */
VCATTN_HD int vsmooth_kmeans_scale_exp(float amax) {
    if (!(amax > 0.0f) || !(amax <= 3.402823466e38f)) return 0;
    const int e = ilogbf(amax);
    if (e >= 57) return e - 56;
    if (e < -57) return e + 57;
    return 0;
}

/* V-Smooth leaves a block undemeaned when its mean carries less than this
 * share of the block's energy (count |mean|^2 < share sum |v|^2, in double):
 * such a mean removes almost nothing, and it would move values that E4M3
 * holds exactly (e.g. +-1) off the grid, with one shared rounding error per
 * value and channel (docs/formats.md). Nor is a block whose values all lie on
 * the E4M3 grid at its channel ranges (vcattn_e4m3_exact_at, e.g. two-valued
 * V): sorted along a principal direction, even random +-1 forms blocks whose
 * mean passes this share. */
#define VSMOOTH_MIN_MEAN_SHARE 0.02

VCATTN_HD int vsmooth_mean_worth_removing(double count, double mean2, double energy) {
    return !(count * mean2 < VSMOOTH_MIN_MEAN_SHARE * energy);
}

/* The order of a block's long double sums on both backends (the weights'
 * total, |mean|^2 over the channels, the energy over the rows): lane l of a
 * warp adds x[l], x[l + 32], ... in turn, then the lanes' sums meet in a
 * tree, 16 apart, then 8, 4, 2, 1 (the GPU's shuffles): no serial chain of
 * n additions for a block to wait on. */
#define VSMOOTH_SUM_LANES 32
static inline double vsmooth_tree_sum(const double *x, int64_t n) {
    double p[VSMOOTH_SUM_LANES] = {0.0};
    for (int64_t i = 0; i < n; i++) p[i % VSMOOTH_SUM_LANES] += x[i];
    for (int o = VSMOOTH_SUM_LANES / 2; o > 0; o >>= 1)
        for (int l = 0; l < o; l++) p[l] += p[l + o];
    return p[0];
}

/*
 * The attention probe (vcattn_config.vsmooth_probe_rows = S > 0). A block's
 * FP8 error reaches the output through the attention its tokens receive:
 * row i's value error is sum_j p_ij e_j, whose energy is about
 * sum_j p_ij^2 |e_j|^2 with |e_j| proportional to |v_j - c| (E4M3 errs in
 * proportion to what it stores). The c that minimizes it is the mean of the
 * block's tokens weighted by w_j = sum_i p_ij^2: the plain mean where the
 * attention is spread, the sink's own value where most rows read one token.
 * Both backends estimate w from S query rows and the quantized scores:
 *   probe row s (0 <= s < S) is row vsmooth_probe_row(s, nq) of the group's
 *   query head s mod G (G query heads per key head); its score of key j is
 *   t_sj, in log2 units, as the attention kernel forms it;
 *   per 128-key tile t: C_st = ceil(max_j t_sj), e_sj = P(t_sj, C_st),
 *   L_st = sum_j e_sj and S_st = sum_j e_sj^2 (exact in double);
 *   C_s = max_t C_st; with k_st = vsmooth_probe_shift(C_st, C_s), over t ascending
 *   l_s = sum L_st 2^k_st and Q_s = sum S_st 2^(2 k_st);
 *   w_mean = (sum over s ascending of Q_s / l_s^2) / nk;
 *   w_j^even (w_j^odd) = sum over the even (odd) s ascending of
 *   e_sj^2 f_st, f_st = (1 / l_s^2) 2^(2 k_st), t the tile of key j;
 *   token j weighs vsmooth_probe_token_weight(w_j^even, w_j^odd, w_mean) in
 *   its block's centre (sums in double in row order).
 * P(t, C) is the E4M3 probability ExpCast writes for score t under the
 * maximum C (vsmooth_probe_prob): multiples of 2^-9 up to 256, so the tile
 * sums are exact, and the GPU, which keeps e as code bytes between its
 * passes, forms every other sum in the same order: both backends agree to
 * the bit. NVFP4 values (CPU) keep the plain mean and use the same weights
 * to decide, per block and channel, whether it is subtracted at all: their
 * error follows each 16-token run's largest value, not each value's own.
 */

/* 2^k_st rescales a tile's probabilities from its ceiling to the row's
 * (integers, C_st <= C_s); past -200 (or NaN, from an unchecked input's
 * scores) the tile counts as -200 binades down. */
VCATTN_HD int vsmooth_probe_shift(float tile_ceiling, float row_ceiling) {
    const float k = tile_ceiling - row_ceiling;
    return k >= -200.0f ? (int)k : -200;
}

/* A token's weight in its block's centre: 1 (the plain mean), plus how far
 * both halves of the probe rows together put it past VSMOOTH_PROBE_HEAVY
 * times the average weight. The smaller half counts twice: a key only some
 * sampled rows read (a neighbour in local attention, different for every
 * row) is no sink, and a sample of it would pull the centre at random. Where
 * no token passes, every weight is 1 and the centre is the mean, bit for bit. */
#define VSMOOTH_PROBE_HEAVY 2.0

VCATTN_HD double vsmooth_probe_token_weight(double even, double odd, double mean) {
    if (!(mean > 0.0) || !(mean < 1e300)) return 1.0;  /* NaN scores of an unchecked call */
    const double heavy = 2.0 * (even < odd ? even : odd) / mean - VSMOOTH_PROBE_HEAVY;
    return heavy > 0.0 ? 1.0 + heavy : 1.0;
}

/* Probe row s: frac(s / golden ratio) of the way through the nq rows (a
 * Weyl sequence in 32-bit fixed point), spread over the sequence without
 * the aliasing an even stride has with a latent grid's rows and frames. */
VCATTN_HD int64_t vsmooth_probe_row(int s, int64_t nq) {
    const uint32_t f = (uint32_t)s * 2654435769u;
    return (int64_t)(((uint64_t)f * (uint64_t)nq) >> 32);
}

/* ExpCast's byte (beta 0, the maximum C at code 120 = 256) of a log2-domain
 * score t, one FMA as the kernel writes it, and the probability it holds. */
VCATTN_HD uint8_t vsmooth_probe_code(float t, float ceiling) {
    return vcattn_expcast_code(fmaf(t, 8.0f, VCATTN_EXPCAST_MAX_CODE - 8.0f * ceiling));
}

VCATTN_HD float vsmooth_probe_prob(float t, float ceiling) {
    return vcattn_e4m3_decode(vsmooth_probe_code(t, ceiling));
}

/*
 * Lloyd's k-means over n tokens of dimension d (rows of x, float32 [n][d]).
 * centroids [k][d] holds the initial centroids on entry and the final ones on
 * return. For it = 0 .. iters-1: labels = nearest centroid (squared distance
 * computed as |c|^2 - 2 x.c in float32, ties to the lowest index); then every
 * non-empty cluster's centroid becomes the mean of its tokens (summed in
 * double, in token order); an empty cluster keeps its centroid. labels[n]
 * comes from the last assignment. x and the centroids are scaled first as
 * vsmooth_kmeans_scale_exp says (the centroids scaled back at the end).
 * Deterministic; single-threaded.
 */
void vsmooth_kmeans(const float *x, int64_t n, int64_t d, int k, int iters,
                    float *centroids, int32_t *labels);

/* Cold-start rows: k distinct token indices picked by a seeded Fisher-Yates
 * (splitmix64 of seed and stream) into rows[k]. Needs k <= n. Returns 0 when
 * out of memory (rows are then evenly spaced tokens). */
int vsmooth_init_rows(int64_t n, int k, uint64_t seed, uint64_t stream, int32_t *rows);

/* Cold-start centroids: the rows vsmooth_init_rows picks, copied to
 * centroids [k][d]. */
void vsmooth_init_centroids(const float *x, int64_t n, int64_t d, int k, uint64_t seed,
                            uint64_t stream, float *centroids);

/* Stable counting sort by label: perm[i] = original index of the i-th token. */
void vsmooth_argsort_labels(const int32_t *labels, int64_t n, int k, int32_t *perm);

/*
 * The token order of a call without a layer state: the rows of x [n][d]
 * (one head's values) sorted by their projection on the top principal
 * direction of the centred rows, so that each 128-row block holds tokens
 * alike along V's main axis of variation and its mean removes more:
 *   mu = the mean row; u = mu / |mu| (e_0 if mu = 0); then
 *   VSMOOTH_PRINCIPAL_ITERS power steps on the covariance C = sum_t
 *   (x_t - mu)(x_t - mu)^T: u = C u / |C u| (u kept if C u = 0);
 *   key_t = x_t . u; perm = the stable sort of the keys as float, to the
 *   precision and in the order of vsmooth_principal_key_bits (-0 before +0;
 *   equal keys keep the token order).
 * This oracle works in double. The GPU forms C on tensor cores (the rows
 * scaled by a power of two and centred, in half precision, summed in
 * float), so its keys agree to rounding: tokens whose keys lie within
 * rounding of each other may come out swapped. perm[i] = the original index
 * of the i-th token.
 */
#define VSMOOTH_PRINCIPAL_ITERS 4
vcattn_status vsmooth_principal_order(const float *x, int64_t n, int64_t d, int32_t *perm);

/* A float key as the unsigned integer whose order is the float's (negative
 * values with every bit flipped, the others with the sign flipped), its top
 * VSMOOTH_PRINCIPAL_KEY_BITS kept: sign, exponent and 15 mantissa bits.
 * Keys equal to that precision keep the token order; the GPU's device-wide
 * radix sort then orders up to 256 heads at once with 32-bit keys. */
#define VSMOOTH_PRINCIPAL_KEY_BITS 24
VCATTN_HD uint32_t vsmooth_principal_key_bits(float key) {
    uint32_t u;
    memcpy(&u, &key, sizeof u);
    return ((u >> 31) ? ~u : u | 0x80000000u) >> (32 - VSMOOTH_PRINCIPAL_KEY_BITS);
}

/* Share of a block's energy its mean removes, B_j |mu_j|^2 / |V_j|_F^2 (paper
 * eq. 5), averaged over the blocks of `block` consecutive rows of x (the last
 * may be partial) in the order given by perm (NULL: sequence order), as the
 * paper's figure 4 averages it. Blocks with zero energy are skipped; 0 if all. */
double vsmooth_block_mean_energy_share(const float *x, int64_t n, int64_t d,
                                       const int32_t *perm, int64_t block);

/* The number of clusters a call uses: the config's, or with 0 the automatic
 * choice (a quarter of the 128-row blocks, within [2, 32]); at most nk. Sorting
 * leaves at most k - 1 blocks mixing two clusters, so k well below the block
 * count keeps most blocks single-cluster. */
int vsmooth_cluster_count(const vcattn_config *cfg, int64_t nk);

/* Per-layer state (the public vcattn_layer). */
struct vcattn_layer {
    int num_steps;
    int step;
    /* grouping kept from the last call that grouped; shape key below */
    int64_t batch, heads_kv, tokens, head_dim;
    int clusters;
    float *centroids;   /* [batch*heads_kv][clusters][head_dim] */
    int32_t *perm;      /* [batch*heads_kv][tokens] */
    int has_grouping;
    /* A device copy of perm kept by the CUDA backend so plain steps need no
     * upload; released (by the backend's function) whenever perm changes. */
    void *device_perm;
    int device_perm_device;
    void (*release_device_perm)(void *device_perm);
};

/* Whether the layer's current step lies in the grouping window, the first
 * ceil(group_window * num_steps) steps. */
int vsmooth_in_window(const vcattn_layer *layer, const vcattn_config *cfg);

/* Whether the stored grouping fits this shape and cluster count. */
int vsmooth_layer_matches(const vcattn_layer *layer, int64_t batch, int64_t heads_kv,
                          int64_t tokens, int64_t head_dim, int clusters);
/* What a call of this shape does for V-Smooth: the layer's plan, except that a
 * stored grouping for another shape is not reused (regroup cold inside the
 * window, run plain outside it). */
vcattn_grouping vsmooth_resolve_plan(const vcattn_config *cfg, const vcattn_layer *layer,
                                     int64_t batch, int64_t heads_kv, int64_t tokens,
                                     int64_t head_dim, int clusters);
/* Whether a plan reorders the keys (all but none). */
static inline int vsmooth_plan_permutes(vcattn_grouping plan) { return plan != VCATTN_GROUP_NONE; }
/* Replaces the stored grouping by these arrays (the layer takes ownership). */
void vsmooth_layer_adopt(vcattn_layer *layer, int64_t batch, int64_t heads_kv, int64_t tokens,
                         int64_t head_dim, int clusters, float *centroids, int32_t *perm);
/* Keeps a device copy of the stored permutation (or NULL), released by
 * `release` when the permutation changes or the layer goes; the one it
 * replaces is released now. */
void vsmooth_layer_keep_device_perm(vcattn_layer *layer, void *device_perm, int device,
                                    void (*release)(void *device_perm));

#ifdef __cplusplus
}
#endif
#endif
