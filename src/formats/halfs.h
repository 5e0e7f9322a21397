/* IEEE binary16 and bfloat16 <-> float32, round-to-nearest-even, NaN kept. */
#ifndef VCATTN_HALFS_H
#define VCATTN_HALFS_H

#include "format_common.h"

VCATTN_HD float vcattn_bf16_to_f32(uint16_t h) {
    return vcattn_f32_from_bits((uint32_t)h << 16);
}

VCATTN_HD uint16_t vcattn_f32_to_bf16(float x) {
    uint32_t u = vcattn_f32_bits(x);
    if (vcattn_isnan_f32(x)) return (uint16_t)((u >> 16) | 0x0040u);  /* quiet */
    uint32_t lsb = (u >> 16) & 1u;
    u += 0x7fffu + lsb;
    return (uint16_t)(u >> 16);
}

VCATTN_HD float vcattn_round_bf16(float x) {
    return vcattn_bf16_to_f32(vcattn_f32_to_bf16(x));
}

VCATTN_HD float vcattn_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t man = h & 0x3ffu;
    if (exp == 0x1f) return vcattn_f32_from_bits(sign | 0x7f800000u | (man << 13));
    if (exp == 0) {  /* zero or subnormal: man * 2^-24 */
        float v = (float)man * (1.0f / 16777216.0f);
        return sign ? -v : v;
    }
    return vcattn_f32_from_bits(sign | ((exp + 112u) << 23) | (man << 13));
}

VCATTN_HD uint16_t vcattn_f32_to_f16(float x) {
    uint32_t u = vcattn_f32_bits(x);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return (uint16_t)(sign | 0x7e00u);       /* NaN */
    if (a >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u);      /* >= 65520: inf */
    if (a < 0x38800000u) {                                        /* < 2^-14: subnormal */
        /* value / 2^-24, rounded to nearest even: exact in float arithmetic */
        float v = vcattn_f32_from_bits(a) * 16777216.0f;
        return (uint16_t)(sign | (uint16_t)vcattn_rne_small(v));
    }
    uint32_t lsb = (a >> 13) & 1u;
    a += 0xfffu + lsb;
    return (uint16_t)(sign | (((a >> 13) - (112u << 10)) & 0x7fffu));
}

VCATTN_HD float vcattn_round_f16(float x) {
    return vcattn_f16_to_f32(vcattn_f32_to_f16(x));
}

/* The largest finite float16 and bfloat16 (0x7bff, 0x7f7f). */
#define VCATTN_F16_MAX 65504.0f
#define VCATTN_BF16_MAX 3.38953139e38f

/* x held at +-max when it is finite and past it; NaN and Inf unchanged.
 * Outputs are stored through it: an output is a weighted mean of V's rows,
 * so with V inside the type's range it lies there too up to the method's
 * error, which must not round it to Inf. */
VCATTN_HD float vcattn_saturate(float x, float max) {
    if (!vcattn_isfinite_f32(x)) return x;
    return x > max ? max : x < -max ? -max : x;
}

#endif
