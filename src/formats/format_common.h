/* Shared by every codec header: host/device qualifiers and float bit casts.
 * The codecs are static inline so the CPU backend and the CUDA kernels compile
 * the very same arithmetic (bit-identical results given the same inputs). */
#ifndef VCATTN_FORMAT_COMMON_H
#define VCATTN_FORMAT_COMMON_H

#include <stdint.h>
#include <math.h>
#include <string.h>

/* log2(e): scores are scaled by it so the softmax runs on exp2 (float, and
 * the double the CPU uses where it keeps a double product). */
#define VCATTN_LOG2E 1.4426950408889634f
#define VCATTN_LOG2E_F64 1.4426950408889634

#ifdef __CUDACC__
#define VCATTN_HD static __host__ __device__ __forceinline__
#else
#define VCATTN_HD static inline
#endif

VCATTN_HD uint32_t vcattn_f32_bits(float x) {
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return u;
}

VCATTN_HD float vcattn_f32_from_bits(uint32_t u) {
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}

VCATTN_HD int vcattn_isnan_f32(float x) {
    return (vcattn_f32_bits(x) & 0x7fffffffu) > 0x7f800000u;
}

VCATTN_HD int vcattn_isfinite_f32(float x) {
    return (vcattn_f32_bits(x) & 0x7f800000u) != 0x7f800000u;
}

/* Round to nearest integer, ties to even, for |x| < 2^22, without F2I: adding
 * 1.5 * 2^23 leaves the rounded integer in the low mantissa bits (the FFMA
 * "magic number" trick the GPU kernels use). Result as float. */
VCATTN_HD float vcattn_rne_small(float x) {
    const float magic = 12582912.0f; /* 1.5 * 2^23 */
    float t = x + magic;
    return t - magic;
}

#endif
