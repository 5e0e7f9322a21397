/* FP8 E4M3 ("fn" variant): bias 7, max 448, no infinity, NaN = S.1111.111.
 * Encoding is round-to-nearest-even with saturation to +-448, what the PTX
 * instruction cvt.rn.satfinite.e4m3x2.f32 does; NaN encodes as 0x7f.
 * (PyTorch's .to(float8_e4m3fn) does not saturate: never use it as oracle.) */
#ifndef VCATTN_E4M3_H
#define VCATTN_E4M3_H

#include "format_common.h"

#define VCATTN_E4M3_MAX 448.0f
#define VCATTN_E4M3_NAN 0x7fu

VCATTN_HD uint8_t vcattn_e4m3_encode(float x) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
    /* The instruction this codec is defined by (tests check the two agree). */
    unsigned short pair;
    asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(pair) : "f"(0.0f), "f"(x));
    return (uint8_t)(pair & 0xffu);
#endif
    uint32_t u = vcattn_f32_bits(x);
    uint8_t sign = (uint8_t)((u >> 24) & 0x80u);
    uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return VCATTN_E4M3_NAN;
    if (a >= 0x43e80000u) return (uint8_t)(sign | 0x7eu);   /* >= 464 rounds past 448 */
    if (a < 0x3c800000u) {                                 /* < 2^-6: subnormal, step 2^-9 */
        float m = vcattn_f32_from_bits(a) * 512.0f;        /* exact scaling */
        return (uint8_t)(sign | (uint8_t)vcattn_rne_small(m)); /* 8 = smallest normal */
    }
    a += 0x7ffffu + ((a >> 20) & 1u);                      /* RNE to 3 mantissa bits */
    uint32_t e = (a >> 23) - 120u;                         /* rebias 127 -> 7 */
    uint32_t code = (e << 3) | ((a >> 20) & 7u);
    if (code > 0x7eu) code = 0x7eu;
    return (uint8_t)(sign | code);
}

VCATTN_HD float vcattn_e4m3_decode(uint8_t b) {
    uint32_t sign = (uint32_t)(b & 0x80u) << 24;
    uint32_t e = (b >> 3) & 15u, m = b & 7u;
    if (e == 15u && m == 7u) return vcattn_f32_from_bits(0x7fc00000u | sign);
    if (e == 0u) {
        float v = (float)m * (1.0f / 512.0f);
        return sign ? -v : v;
    }
    return vcattn_f32_from_bits(sign | ((e + 120u) << 23) | (m << 20));
}

/* Scaling an amax onto the E4M3 range: x * inv with inv = 448 / amax. An amax
 * so small that inv overflows (below 448 / FLT_MAX, about 1.3e-36) counts as
 * zero: scale 0, codes 0, instead of infinities and NaN. Returns inv and
 * writes the dequantization scale amax / 448 (or 0). */
VCATTN_HD float vcattn_e4m3_scale(float amax, float *scale) {
    float inv = amax > 0.0f ? VCATTN_E4M3_MAX / amax : 0.0f;
    if (!(inv <= 3.402823466e38f)) inv = 0.0f;
    *scale = inv > 0.0f ? amax / VCATTN_E4M3_MAX : 0.0f;
    return inv;
}

/* V channels far from 1 are scaled by 2^-k before demeaning and quantizing,
 * and multiplied by 2^k after everything else in the epilogue (exact both
 * ways). An amax reaching 2^65 gets k >= 1 (into [2^64, 2^65)), so the
 * residual x - mean (up to twice the amax) stays finite. A nonzero amax
 * below 2^-64 gets k <= -1 (into [2^-64, 2^-63), or at least 2^-86 from a
 * subnormal), so 448 / amax stays finite and no code flushes to zero. k = 0
 * in between: ordinary values are not touched. amax is finite and >= 0. */
VCATTN_HD int vcattn_v_prescale_exp(float amax) {
    const int biased = (int)((vcattn_f32_bits(amax) >> 23) & 0xffu);
    if (biased > 127 + 64) return biased - (127 + 64);
    if (amax > 0.0f && biased < 127 - 64) return biased - (127 - 64);
    return 0;
}

/* 2^k as a float for k in [-126, 127]. */
VCATTN_HD float vcattn_pow2f(int k) {
    return vcattn_f32_from_bits((uint32_t)(127 + k) << 23);
}

VCATTN_HD float vcattn_round_e4m3(float x) {
    return vcattn_e4m3_decode(vcattn_e4m3_encode(x));
}

/* Is x on the E4M3 grid at the scale that maps amax (its channel's largest
 * |x|) to 448, so that it encodes exactly? amax 0 (an all-zero channel)
 * counts as on the grid. */
VCATTN_HD int vcattn_e4m3_exact_at(float x, float amax) {
    if (!(amax > 0.0f)) return 1;
    const float y = x * (448.0f / amax);
    return vcattn_round_e4m3(y) == y;
}

#endif
