/* The low-bit operands as the tensor cores see them, emulated in float32.
 *
 * Every score format reduces to "values whose float32 dot product is what the
 * matrix instruction computes" times one multiplier per row of Q and per key
 * of K; every value format to code values, optional block means in the same
 * units, and multipliers per channel (epilogue) or per tile (per-tile scale).
 * One mainloop then runs every method of the paper. */
#ifndef VCATTN_CPU_OPERANDS_H
#define VCATTN_CPU_OPERANDS_H

#include "../core/internal.h"

typedef struct {
    int64_t n, d;
    float *val;     /* [n][d]: INT8 codes, decoded E4M3, decoded NVFP4 (element * block scale), or fp32 */
    float *mul;     /* [n]: dequantization multiplier of each row */
} score_operand;

typedef struct {
    int64_t n, d, tiles;
    float *val;       /* [n][d]: code values of V (or of the V-Smooth residual) */
    float *mean;      /* [tiles][d]: block means in code units, or NULL without V-Smooth */
    float *chan_mul;  /* [d]: applied once in the epilogue, with 1 / l */
    float *chan_pow2; /* [d]: 2^k of the channel's pre-scale, applied last (exact) */
    float *tile_mul;  /* [tiles]: applied to each tile's partial sum, or NULL */
} value_operand;

void score_operand_free(score_operand *op);
void value_operand_free(value_operand *op);

/* Quantizes rows x [n][d] (already rotated and smoothed) as Q or K operand.
 * is_key selects the key granularity (per 128-key tile and lane group for
 * INT8, per 128-key block for FP8). Takes ownership of nothing. */
vcattn_status quantize_scores(vcattn_qk_format fmt, int is_key, const float *x, int64_t n,
                              int64_t d, score_operand *op);

/* Builds the value operand from v [n][d] in key order (already permuted):
 * block centres over 128-row tiles if demean (the mean, weighted by
 * weight[n] when not NULL: the attention probe; 0 for a block with a token of
 * squared norm below sink_guard^2 |centre|^2, in double: the GPU decides the
 * same way), residual quantized as fmt. */
vcattn_status quantize_values(vcattn_v_format fmt, int demean, float sink_guard, const float *v,
                              const double *weight, int64_t n, int64_t d, value_operand *op);

#endif
