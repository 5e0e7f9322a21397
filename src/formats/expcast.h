/* ExpCast-FP8 (paper eq. 7): the E4M3 byte of a probability straight from its
 * log-domain score. With u = (s - m) * log2(e) <= 0 and the row maximum mapped
 * to 2^8 = 256, the byte read as the integer 8e + m is 8 log2(v) + 56 + eps, so
 *     c(u) = clip_[0,120]( RNE( 8 (u + 8) + 56 + beta ) ),  beta = -0.35.
 * Callers form the argument with one FMA (x = fma(s, a, b) with the scales
 * folded into a and b) and pass it here: clamp, then round by the magic-number
 * add (no F2I), and the low bits are the byte. */
#ifndef VCATTN_EXPCAST_H
#define VCATTN_EXPCAST_H

#include "e4m3.h"

#define VCATTN_EXPCAST_BETA (-0.35f)
#define VCATTN_EXPCAST_MAX_CODE 120.0f      /* 0x78 = 256, the row maximum */
#define VCATTN_P_SCALE_LOG2 8.0f            /* row maximum at 2^8 */

/* The pre-rounding argument for a log2-domain u (scalar form of the FMA). */
VCATTN_HD float vcattn_expcast_arg(float u, float beta) {
    return 8.0f * (u + VCATTN_P_SCALE_LOG2) + 56.0f + beta;
}

/* clip(RNE(x), 0, 120) == RNE(clamp(x, 0, 120)) as 0 and 120 are integers;
 * NaN clamps to 0. */
VCATTN_HD uint8_t vcattn_expcast_code(float x) {
    x = x > 0.0f ? x : 0.0f;
    x = x < VCATTN_EXPCAST_MAX_CODE ? x : VCATTN_EXPCAST_MAX_CODE;
    return (uint8_t)vcattn_rne_small(x);
}

/* The kernel reads a score's integer dot (|dot| <= 128 * 128 * 128 = 2^21)
 * as the float 1.5 * 2^23 + dot, by one integer add on the accumulator's bits
 * (a conversion instruction costs about three times an FMA there), and folds
 * the offset into the addend of ExpCast's FMA, which rounds it once:
 *     x = fma(1.5 * 2^23 + dot, a, fma(-1.5 * 2^23, a, b)).
 * Against fma(dot, a, b) the addend's rounding moves x by at most 2^-24 of
 * |b - 1.5 * 2^23 a| <= (0.75 + 0.125) a: under one unit of the dot, whose
 * own INT8 rounding error is many units. */
#define VCATTN_EXPCAST_DOT_OFFSET 12582912.0f /* 1.5 * 2^23 */
VCATTN_HD float vcattn_expcast_dot_arg(float dot, float a, float b) {
    return fmaf(dot + VCATTN_EXPCAST_DOT_OFFSET, a, fmaf(-VCATTN_EXPCAST_DOT_OFFSET, a, b));
}

/* The conventional path it replaces: FP32 exponential, then the E4M3 cast. */
VCATTN_HD uint8_t vcattn_expthencast_code(float u) {
    return vcattn_e4m3_encode(exp2f(u + VCATTN_P_SCALE_LOG2));
}

#endif
