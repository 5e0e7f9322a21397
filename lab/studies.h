/* The fidelity studies of `vcattn eval --study` (paper table 1, figure 4,
 * section 3.3): each computed on the CPU from one set of q/k/v. */
#ifndef VCATTN_STUDIES_H
#define VCATTN_STUDIES_H

#include <stdint.h>
#include <stdio.h>

#include "vcattn.h"

/* ---- token orders: V quantization error and block-mean energy share ---- */

enum { STUDY_ORDER_COUNT = 6 };

typedef struct {
    const char *name;      /* "no demeaning", "sequence", "cube TxHxW", "k-means", ... */
    int available;         /* 0 when the order needs a latent grid the inputs lack */
    double v_err_fp8;      /* |V - V_hat|_F / |V|_F, FP8 per channel (demeaned per 128 rows) */
    double v_err_fp4;      /* the same with NVFP4 */
    double energy_share;   /* mean block-mean energy share (paper eq. 5); < 0: not defined */
    char label[48];
} study_order;

/* Orders over every kv head of v: no demeaning (SageAttention2's V), then
 * demeaned in sequence order, in spatiotemporal cubes of 128 tokens (needs
 * the T x H x W grid; frames = 0 when unknown), after k-means (V-Smooth's
 * grouping, cfg's clusters), after size-balanced k-means (one cluster of 128
 * per block), and a Hadamard rotation of the channels instead of an order. */
vcattn_status study_orders(const vcattn_tensor *v, int frames, int height, int width,
                           const vcattn_config *cfg, study_order out[STUDY_ORDER_COUNT]);

/* Shared with eval: V-Smooth's grouping of one head's rows, as a cold-start
 * call of cfg with a layer state does (k-means), or as a call without one
 * does (stateless: the principal order). */
vcattn_status study_group_rows(const vcattn_config *cfg, int stateless, const float *x, int64_t n, int64_t d,
                               uint64_t stream, int32_t *perm);

/* ---- ExpCast row statistics (P alone, exact scores) ---- */

typedef struct {
    int64_t rows;
    double tv_mean[2], tv_max[2];   /* [0] ExpCast, [1] exp-then-cast: total variation to softmax */
    double tau_mean;                /* ExpCast underflow mass (code 0) per row, mean */
    int64_t no_underflow;           /* rows where ExpCast sends no key to code 0 */
    double tv_max_no_underflow;     /* largest ExpCast TV among those rows */
    int64_t violations;             /* rows with TV > tv_bound + tau: must be 0 */
    double worst_slack;             /* min over rows of (tv_bound + tau - TV) */
    double tv_bound;                /* the proven bound without underflow (3.6368%) */
    double entropy_mean;            /* softmax entropy / log(Nk) per row, mean (1: uniform) */
} study_expcast;

vcattn_status study_expcast_rows(const vcattn_tensor *q, const vcattn_tensor *k,
                                 const vcattn_rope *rope, float sm_scale, float beta,
                                 study_expcast *out);

/* ---- the inputs' own statistics (synthetic presets against captured tensors) ---- */

typedef struct {
    double k_mean_share;    /* |channel mean of K|^2 / mean |k|^2 per kv head, mean: what K smoothing removes */
    double k_channel_peak;  /* largest / median channel RMS of K per kv head, mean: massive channels */
    double v_token_peak;    /* largest / median token norm of V per kv head, mean: outlier tokens */
    double v_outlier_frac;  /* share of V tokens whose norm is over 3x their head's median */
} study_stats;

vcattn_status study_tensor_stats(const vcattn_tensor *k, const vcattn_tensor *v, study_stats *out);

/* ---- grouping schedule on a step trajectory (paper table 3) ---- */

enum { STUDY_SCHEDULE_COUNT = 9 };

typedef struct {
    char name[48];
    double err_mean;        /* output rel L2 vs FP64, mean over the steps */
    double err_window;      /* mean over the grouping window (first quarter) */
    double err_after;       /* mean over the remaining steps */
    int groupings;          /* calls that ran k-means */
    double ms;              /* wall time of all calls */
} study_schedule_row;

/* A trajectory of `steps` denoising steps drifting from the workload to an
 * independent one of the same shape (q, k, v rotate by an angle growing
 * linearly to 0.6 rad, end-to-start cosine 0.83; four V channels per head
 * start 3x larger and fade to 1x: timestep-dependent outlier channels), run
 * with vc under the paper's schedule and its alternatives; out has
 * STUDY_SCHEDULE_COUNT rows. */
vcattn_status study_schedule(const char *workload, uint64_t seed, int steps,
                             study_schedule_row out[STUDY_SCHEDULE_COUNT]);
void study_schedule_print(const study_schedule_row rows[STUDY_SCHEDULE_COUNT], int steps, int json,
                          FILE *f);

/* Any of the three may be NULL. */
void study_print(const study_order orders[STUDY_ORDER_COUNT], const study_expcast *ex,
                 const study_stats *stats, int json, FILE *f);

#endif
