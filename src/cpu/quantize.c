/* Quantizers of the CPU backend, one per format and operand; the granularity
 * of every scale is documented in docs/formats.md and is the GPU kernels'. */
#include "operands.h"
#include "../formats/formats.h"
#include "../vsmooth/vsmooth.h"

#include <stdlib.h>
#include <string.h>

void score_operand_free(score_operand *op) {
    free(op->val);
    free(op->mul);
    memset(op, 0, sizeof *op);
}

void value_operand_free(value_operand *op) {
    free(op->val);
    free(op->mean);
    free(op->chan_mul);
    free(op->chan_pow2);
    free(op->tile_mul);
    memset(op, 0, sizeof *op);
}

static float amax_rows(const float *x, int64_t d, int64_t r0, int64_t r1) {
    float a = 0.0f;
    for (int64_t r = r0; r < r1; r++)
        for (int64_t i = 0; i < d; i++) a = fmaxf(a, fabsf(x[r * d + i]));
    return a;
}

/* INT8 keys: within each 128-key tile, keys with the same (key % 8) / 2 share
 * a scale (the keys one GPU thread holds). */
static void int8_keys(const float *x, int64_t n, int64_t d, score_operand *op) {
    for (int64_t t0 = 0; t0 < n; t0 += VCATTN_TILE) {
        int64_t t1 = t0 + VCATTN_TILE < n ? t0 + VCATTN_TILE : n;
        for (int g = 0; g < VCATTN_K_LANE_GROUPS; g++) {
            float a = 0.0f;
            for (int64_t r = t0; r < t1; r++)
                if (vcattn_k_lane_group(r - t0) == g) a = fmaxf(a, amax_rows(x, d, r, r + 1));
            vcattn_int8_scale s = vcattn_int8_scale_from_amax(a);
            for (int64_t r = t0; r < t1; r++) {
                if (vcattn_k_lane_group(r - t0) != g) continue;
                for (int64_t i = 0; i < d; i++)
                    op->val[r * d + i] = (float)vcattn_int8_encode(x[r * d + i], s.inv_scale);
                op->mul[r] = s.scale;
            }
        }
    }
}

/* INT8 queries: one scale per token (each GPU thread's accumulator rows). */
static void int8_queries(const float *x, int64_t n, int64_t d, score_operand *op) {
    for (int64_t r = 0; r < n; r++) {
        vcattn_int8_scale s = vcattn_int8_scale_from_amax(amax_rows(x, d, r, r + 1));
        for (int64_t i = 0; i < d; i++)
            op->val[r * d + i] = (float)vcattn_int8_encode(x[r * d + i], s.inv_scale);
        op->mul[r] = s.scale;
    }
}

/* E4M3 with one scale per 128-token block: the naive 8-bit baseline. */
static void fp8_blocks(const float *x, int64_t n, int64_t d, score_operand *op) {
    for (int64_t t0 = 0; t0 < n; t0 += VCATTN_TILE) {
        int64_t t1 = t0 + VCATTN_TILE < n ? t0 + VCATTN_TILE : n;
        float scale, inv = vcattn_e4m3_scale(amax_rows(x, d, t0, t1), &scale);
        for (int64_t r = t0; r < t1; r++) {
            for (int64_t i = 0; i < d; i++)
                op->val[r * d + i] = vcattn_round_e4m3(x[r * d + i] * inv);
            op->mul[r] = scale;
        }
    }
}

/* NVFP4 along the contraction (channel) axis: 16 channels share an E4M3
 * scale, the head's tensor scale goes into the row multiplier. */
static void nvfp4_rows(const float *x, int64_t n, int64_t d, score_operand *op) {
    float ts = vcattn_nvfp4_tensor_scale(amax_rows(x, d, 0, n));
    for (int64_t r = 0; r < n; r++) {
        for (int64_t c0 = 0; c0 < d; c0 += VCATTN_NVFP4_BLOCK) {
            float a = 0.0f;
            for (int64_t i = c0; i < c0 + VCATTN_NVFP4_BLOCK; i++) a = fmaxf(a, fabsf(x[r * d + i]));
            float bs = vcattn_e4m3_decode(vcattn_nvfp4_block_scale_code(a, ts));
            for (int64_t i = c0; i < c0 + VCATTN_NVFP4_BLOCK; i++)
                op->val[r * d + i] = vcattn_e2m1_decode(vcattn_nvfp4_encode(x[r * d + i], bs * ts)) * bs;
        }
        op->mul[r] = ts;
    }
}

vcattn_status quantize_scores(vcattn_qk_format fmt, int is_key, const float *x, int64_t n,
                              int64_t d, score_operand *op) {
    op->n = n;
    op->d = d;
    op->val = malloc((size_t)(n * d) * sizeof(float));
    op->mul = malloc((size_t)n * sizeof(float));
    if (!op->val || !op->mul) {
        score_operand_free(op);
        return VCATTN_ERR_OUT_OF_MEMORY;
    }
    switch (fmt) {
    case VCATTN_QK_EXACT:
        memcpy(op->val, x, (size_t)(n * d) * sizeof(float));
        for (int64_t r = 0; r < n; r++) op->mul[r] = 1.0f;
        break;
    case VCATTN_QK_INT8:
        if (is_key) int8_keys(x, n, d, op);
        else int8_queries(x, n, d, op);
        break;
    case VCATTN_QK_FP8: fp8_blocks(x, n, d, op); break;
    case VCATTN_QK_NVFP4: nvfp4_rows(x, n, d, op); break;
    }
    return VCATTN_OK;
}

/* ---------------------------------------------------------------- values */

/* Means are stored in 16 bits in code units (divided by the scale), so the
 * scale may not be so small that |mean| / scale overflows binary16: it is
 * floored at max|mean| / MEAN_HEADROOM codes. */
#define HUGE_V 0x1p64f                 /* values past this are rescaled by a power of two */
#define MEAN_HEADROOM_FP8 128.0f    /* 448 * 128 = 57344 < 65504 */
#define MEAN_HEADROOM_FP4 20.0f     /* 2688 * 20 = 53760 < 65504 */

/* The squared norm of a row in double, four chains over i mod 4: the GPU's
 * order (d % 8 == 0). */
static double row_energy(const float *x, int64_t d) {
    double e[4] = {0.0, 0.0, 0.0, 0.0};
    for (int64_t i = 0; i < d; i += 4)
        for (int c = 0; c < 4; c++) e[c] += (double)x[i + c] * (double)x[i + c];
    return (e[0] + e[1]) + (e[2] + e[3]);
}

/* Is the block's mean worth subtracting? Not when the block holds a token
 * far smaller than the mean (the sink guard: demeaning would turn it into
 * -mean + small, whose FP8 error scales with the mean instead of its own
 * norm, docs/fidelity.md), nor when the mean carries too little of the
 * block's energy (vsmooth_mean_worth_removing), nor when every value is on
 * the E4M3 grid already (vcattn_e4m3_exact_at). |mean|^2 and the energy are
 * double sums in vsmooth_tree_sum's order. */
static int block_keeps_mean(const float *v, int64_t t0, int64_t t1, int64_t d, const float *mean,
                            float sink_guard) {
    double squares[VCATTN_MAX_HEAD_DIM], energies[VCATTN_TILE];
    float amax[VCATTN_MAX_HEAD_DIM];
    for (int64_t i = 0; i < d; i++) {
        squares[i] = (double)mean[i] * (double)mean[i];
        amax[i] = 0.0f;
    }
    const double mean2 = vsmooth_tree_sum(squares, d);
    for (int64_t r = t0; r < t1; r++)
        for (int64_t i = 0; i < d; i++) amax[i] = fmaxf(amax[i], fabsf(v[r * d + i]));
    const double bound = (double)sink_guard * (double)sink_guard * mean2;
    int sink = 0, on_grid = 1;
    for (int64_t r = t0; r < t1; r++) {
        const double e = row_energy(v + r * d, d);
        sink |= sink_guard > 0.0f && e < bound;
        energies[r - t0] = e;
        for (int64_t i = 0; on_grid && i < d; i++) on_grid = vcattn_e4m3_exact_at(v[r * d + i], amax[i]);
    }
    const double energy = vsmooth_tree_sum(energies, t1 - t0);
    return !sink && !on_grid && vsmooth_mean_worth_removing((double)(t1 - t0), mean2, energy);
}

/* Each block's centre: the mean of its rows, weighted by weight[r] when
 * given (the attention probe, vsmooth.h), in double: per channel two chains,
 * the even rows and the odd rows in turn, added last (the GPU's two threads
 * a channel); the weights' total in vsmooth_tree_sum's order. */
static void block_means(const float *v, int64_t n, int64_t d, float sink_guard, const double *weight,
                        float *mean) {
    for (int64_t t0 = 0, j = 0; t0 < n; t0 += VCATTN_TILE, j++) {
        int64_t t1 = t0 + VCATTN_TILE < n ? t0 + VCATTN_TILE : n;
        const double total = weight ? vsmooth_tree_sum(weight + t0, t1 - t0) : (double)(t1 - t0);
        for (int64_t i = 0; i < d; i++) {
            double s[2] = {0.0, 0.0};
            for (int64_t r = t0; r < t1; r++)
                s[(r - t0) & 1] += weight ? weight[r] * v[r * d + i] : v[r * d + i];
            mean[j * d + i] = (float)((s[0] + s[1]) / total);
        }
        if (!block_keeps_mean(v, t0, t1, d, mean + j * d, sink_guard))
            memset(mean + j * d, 0, (size_t)d * sizeof *mean);
    }
}

static float amax_column(const float *x, int64_t n, int64_t d, int64_t c) {
    float a = 0.0f;
    for (int64_t t = 0; t < n; t++) a = fmaxf(a, fabsf(x[t * d + c]));
    return a;
}

static float amax_means_channel(const float *mean, int64_t tiles, int64_t d, int64_t c) {
    float a = 0.0f;
    if (mean)
        for (int64_t j = 0; j < tiles; j++) a = fmaxf(a, fabsf(mean[j * d + c]));
    return a;
}

static void fp8_values_per_channel(const float *r, int64_t n, int64_t d, value_operand *op) {
    for (int64_t c = 0; c < d; c++) {
        float a = 0.0f;
        for (int64_t t = 0; t < n; t++) a = fmaxf(a, fabsf(r[t * d + c]));
        a = fmaxf(a, amax_means_channel(op->mean, op->tiles, d, c) / MEAN_HEADROOM_FP8);
        float scale, inv = vcattn_e4m3_scale(a, &scale);
        for (int64_t t = 0; t < n; t++) op->val[t * d + c] = vcattn_round_e4m3(r[t * d + c] * inv);
        if (op->mean)
            for (int64_t j = 0; j < op->tiles; j++)
                op->mean[j * d + c] = vcattn_round_f16(op->mean[j * d + c] * inv);
        op->chan_mul[c] = scale;
    }
}

static void fp8_values_per_tile(const float *r, int64_t n, int64_t d, value_operand *op) {
    for (int64_t c = 0; c < d; c++) op->chan_mul[c] = 1.0f;
    for (int64_t t0 = 0, j = 0; t0 < n; t0 += VCATTN_TILE, j++) {
        int64_t t1 = t0 + VCATTN_TILE < n ? t0 + VCATTN_TILE : n;
        float a = amax_rows(r, d, t0, t1);
        if (op->mean)
            for (int64_t c = 0; c < d; c++) a = fmaxf(a, fabsf(op->mean[j * d + c]) / MEAN_HEADROOM_FP8);
        float scale, inv = vcattn_e4m3_scale(a, &scale);
        for (int64_t i = t0 * d; i < t1 * d; i++) op->val[i] = vcattn_round_e4m3(r[i] * inv);
        if (op->mean)
            for (int64_t c = 0; c < d; c++)
                op->mean[j * d + c] = vcattn_round_f16(op->mean[j * d + c] * inv);
        op->tile_mul[j] = scale;
    }
    /* Tile scales near the float maximum would overflow the tile's partial
     * product (up to 128 * 256 * 448); move their common power of two into
     * the channel multiplier, applied after the division by the row sum. */
    float top = 0.0f;
    for (int64_t j = 0; j < op->tiles; j++) top = fmaxf(top, op->tile_mul[j]);
    if (top > HUGE_V) {
        const int e = ilogbf(top);
        for (int64_t j = 0; j < op->tiles; j++) op->tile_mul[j] = ldexpf(op->tile_mul[j], -e);
        for (int64_t c = 0; c < d; c++) op->chan_mul[c] = ldexpf(1.0f, e);
    }
}

/* Exact values near the float maximum would overflow the accumulators (a sum
 * of up to Nk values times P <= 256): such a channel is scaled by a power of
 * two (exact) and the channel multiplier undoes it after the division. */
static void exact_values(float *val, int64_t n, int64_t d, value_operand *op) {
    for (int64_t c = 0; c < d; c++) {
        float a = 0.0f;
        for (int64_t t = 0; t < n; t++) a = fmaxf(a, fabsf(val[t * d + c]));
        if (op->mean)
            for (int64_t j = 0; j < op->tiles; j++) a = fmaxf(a, fabsf(op->mean[j * d + c]));
        op->chan_mul[c] = 1.0f;
        if (a > HUGE_V) {
            const int e = ilogbf(a);
            for (int64_t t = 0; t < n; t++) val[t * d + c] = ldexpf(val[t * d + c], -e);
            if (op->mean)
                for (int64_t j = 0; j < op->tiles; j++) op->mean[j * d + c] = ldexpf(op->mean[j * d + c], -e);
            op->chan_mul[c] = ldexpf(1.0f, e);
        }
    }
}

/* The head's NVFP4 tensor scale for residual rows r and block centres mean
 * (NULL: none), which must stay within MEAN_HEADROOM_FP4 of it. */
static float nvfp4_head_scale(const float *r, const float *mean, int64_t n, int64_t d, int64_t tiles) {
    float a = amax_rows(r, d, 0, n);
    if (mean)
        for (int64_t i = 0; i < tiles * d; i++) a = fmaxf(a, fabsf(mean[i]) / MEAN_HEADROOM_FP4);
    return vcattn_nvfp4_tensor_scale(a);
}

/* NVFP4 along the contraction (token) axis: 16 consecutive tokens of one
 * channel share an E4M3 scale; the head's tensor scale is the epilogue's. */
static void nvfp4_values(const float *r, int64_t n, int64_t d, value_operand *op) {
    const float ts = nvfp4_head_scale(r, op->mean, n, d, op->tiles);
    for (int64_t c = 0; c < d; c++) {
        for (int64_t t0 = 0; t0 < n; t0 += VCATTN_NVFP4_BLOCK) {
            int64_t t1 = t0 + VCATTN_NVFP4_BLOCK < n ? t0 + VCATTN_NVFP4_BLOCK : n;
            float ba = 0.0f;
            for (int64_t t = t0; t < t1; t++) ba = fmaxf(ba, fabsf(r[t * d + c]));
            float bs = vcattn_e4m3_decode(vcattn_nvfp4_block_scale_code(ba, ts));
            for (int64_t t = t0; t < t1; t++)
                op->val[t * d + c] = vcattn_e2m1_decode(vcattn_nvfp4_encode(r[t * d + c], bs * ts)) * bs;
        }
        op->chan_mul[c] = ts;
    }
    if (op->mean)
        for (int64_t i = 0; i < op->tiles * d; i++) op->mean[i] = vcattn_round_f16(op->mean[i] / ts);
}

/* Squared error of channel c of rows [t0, t1) of v (stride d, scaled by
 * pre) through NVFP4 at tensor scale ts, plus the centre mu as restored
 * (f16 of mu/ts), each row's weighted by weight[t] (the attention probe's;
 * NULL: 1). */
static double nvfp4_block_error(const float *v, float pre, const double *weight, int64_t t0, int64_t t1,
                                int64_t d, int64_t c, float mu, float ts) {
    const float restored = vcattn_round_f16(mu / ts) * ts;
    double e = 0.0;
    for (int64_t s0 = t0; s0 < t1; s0 += VCATTN_NVFP4_BLOCK) {
        const int64_t s1 = s0 + VCATTN_NVFP4_BLOCK < t1 ? s0 + VCATTN_NVFP4_BLOCK : t1;
        float ba = 0.0f;
        for (int64_t t = s0; t < s1; t++) ba = fmaxf(ba, fabsf(v[t * d + c] * pre - mu));
        const float bs = vcattn_e4m3_decode(vcattn_nvfp4_block_scale_code(ba, ts));
        for (int64_t t = s0; t < s1; t++) {
            const float x = v[t * d + c] * pre;
            const double q = (double)vcattn_e2m1_decode(vcattn_nvfp4_encode(x - mu, bs * ts)) * bs * ts + restored;
            e += (weight ? weight[t] : 1.0) * (q - x) * (q - x);
        }
    }
    return e;
}

/* NVFP4's scales follow each 16-token run's amax, so a block centre helps a
 * channel only where its tokens share more than they spread. Per block and
 * channel, the centre stays where it gives the smaller NVFP4 error, and is
 * dropped (the raw rows quantized) where it does not: a block never
 * quantizes worse, channel by channel, than it would undemeaned. The choice
 * is made at the tensor scale of the demeaned rows, then again at the one
 * that choice leaves (raw channels raise the head's amax). With the
 * attention probe's weights the error is the one the output sees (a token's
 * error reaches row i as p_ij e_j, so it counts as sum_i p_ij^2:
 * docs/fidelity.md); without them, every token alike. v and pre: the rows
 * and their per-channel pre-scale; op->val holds the scaled residual and
 * op->mean the scaled centres. 0, or -1 out of memory. */
static int nvfp4_keep_helpful_centres(const float *v, const float *pre, const double *weight, int64_t n,
                                       int64_t d, value_operand *op) {
    float *centre = malloc((size_t)(op->tiles * d) * sizeof(float));
    if (!centre) return -1;
    memcpy(centre, op->mean, (size_t)(op->tiles * d) * sizeof(float));
    /* Twice: first at the tensor scale nvfp4_values would give the demeaned
     * rows, then at the one the first choice leaves */
    for (int pass = 0; pass < 2; pass++) {
        const float ts = nvfp4_head_scale(op->val, op->mean, n, d, op->tiles);
        for (int64_t t0 = 0, j = 0; t0 < n; t0 += VCATTN_TILE, j++) {
            const int64_t t1 = t0 + VCATTN_TILE < n ? t0 + VCATTN_TILE : n;
            for (int64_t c = 0; c < d; c++) {
                const float mu = centre[j * d + c];
                const int keep = mu != 0.0f && nvfp4_block_error(v, pre[c], weight, t0, t1, d, c, mu, ts) <
                                                   nvfp4_block_error(v, pre[c], weight, t0, t1, d, c, 0.0f, ts);
                op->mean[j * d + c] = keep ? mu : 0.0f;
                for (int64_t t = t0; t < t1; t++) op->val[t * d + c] = v[t * d + c] * pre[c] - (keep ? mu : 0.0f);
            }
        }
    }
    free(centre);
    return 0;
}

vcattn_status quantize_values(vcattn_v_format fmt, int demean, float sink_guard, const float *v,
                              const double *weight, int64_t n, int64_t d, value_operand *op) {
    memset(op, 0, sizeof *op);
    op->n = n;
    op->d = d;
    op->tiles = (n + VCATTN_TILE - 1) / VCATTN_TILE;
    op->val = malloc((size_t)(n * d) * sizeof(float));
    op->chan_mul = malloc((size_t)d * sizeof(float));
    op->chan_pow2 = malloc((size_t)d * sizeof(float));
    if (demean) op->mean = malloc((size_t)(op->tiles * d) * sizeof(float));
    if (fmt == VCATTN_V_FP8_BLOCK) op->tile_mul = malloc((size_t)op->tiles * sizeof(float));
    if (!op->val || !op->chan_mul || !op->chan_pow2 || (demean && !op->mean) ||
        (fmt == VCATTN_V_FP8_BLOCK && !op->tile_mul)) {
        value_operand_free(op);
        return VCATTN_ERR_OUT_OF_MEMORY;
    }
    /* Channels near the float limits are scaled by a power of two first (the
     * GPU's v_scales_kernel decides the same way) and multiplied back last;
     * the sink guard has seen the unscaled block means. */
    /* Formats whose scales span channels (per tile, or NVFP4's tensor scale)
     * take one power of two for the head, so the channels keep their ratios. */
    const int across_channels = fmt == VCATTN_V_FP8_BLOCK || fmt == VCATTN_V_NVFP4;
    float pre[VCATTN_MAX_HEAD_DIM], head_amax = 0.0f;
    int exp2_of[VCATTN_MAX_HEAD_DIM];
    for (int64_t i = 0; i < d; i++) {
        pre[i] = amax_column(v, n, d, i);  /* the column's amax, for now */
        head_amax = fmaxf(head_amax, pre[i]);
    }
    for (int64_t i = 0; i < d; i++) {
        exp2_of[i] = vcattn_v_prescale_exp(across_channels ? head_amax : pre[i]);
        pre[i] = vcattn_pow2f(-exp2_of[i]);
    }
    /* NVFP4 keeps the plain mean as its centre and weighs the choice below
     * with the probe instead (a weighted centre cost one layer 1.1 dB) */
    if (demean) block_means(v, n, d, sink_guard, fmt == VCATTN_V_NVFP4 ? NULL : weight, op->mean);
    /* Residual (into op->val for now): V minus its block mean, both scaled
     * (a multiply by 1 where nothing is scaled: the same bits). */
    for (int64_t t = 0; t < n; t++)
        for (int64_t i = 0; i < d; i++)
            op->val[t * d + i] = demean ? v[t * d + i] * pre[i] - op->mean[(t / VCATTN_TILE) * d + i] * pre[i]
                                        : v[t * d + i] * pre[i];
    if (demean)
        for (int64_t j = 0; j < op->tiles; j++)
            for (int64_t i = 0; i < d; i++) op->mean[j * d + i] = op->mean[j * d + i] * pre[i];
    switch (fmt) {
    case VCATTN_V_EXACT: exact_values(op->val, n, d, op); break;  /* demeaning stays exact */
    case VCATTN_V_FP8_CHANNEL: fp8_values_per_channel(op->val, n, d, op); break;
    case VCATTN_V_FP8_BLOCK: fp8_values_per_tile(op->val, n, d, op); break;
    case VCATTN_V_NVFP4:
        if (demean && nvfp4_keep_helpful_centres(v, pre, weight, n, d, op)) {
            value_operand_free(op);
            return VCATTN_ERR_OUT_OF_MEMORY;
        }
        nvfp4_values(op->val, n, d, op);
        break;
    }
    for (int64_t i = 0; i < d; i++) op->chan_pow2[i] = vcattn_pow2f(exp2_of[i]);
    return VCATTN_OK;
}
