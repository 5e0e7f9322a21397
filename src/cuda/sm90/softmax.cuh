// Online softmax of one 64x128 score tile held in wgmma accumulator
// registers, and the encoding of P as E4M3 bytes packed straight into the
// A-operand registers of the PV wgmma (docs/cuda-design.md sections 5, 6).
#pragma once
#include "ptx.cuh"

// Row maximum (log2 units) of the thread's two rows over the quad; `A` are
// the rows' dequantization multipliers (>= 0, so max(dot) * A = max(dot * A)).
static __device__ __forceinline__ void tile_row_max(const float *s, float A0, float A1,
                                                    float &max0, float &max1) {
    // Four independent chains per row (max is exact in any order): the
    // serial chain of 32 dependent FMNMX was on the warp's critical path.
    // Registers 0..15 of even index seed the eight chains.
    float d[2][4];
#pragma unroll
    for (int i = 0; i < 16; i += 2) d[(i >> 1) & 1][(i >> 2) & 3] = s[i];
#pragma unroll
    for (int i = 0; i < 64; i++) {
        if (i < 16 && (i & 1) == 0) continue;
        float &acc = d[(i >> 1) & 1][(i >> 2) & 3];
        acc = fmaxf(acc, s[i]);
    }
    const float d0 = fmaxf(fmaxf(d[0][0], d[0][1]), fmaxf(d[0][2], d[0][3]));
    const float d1 = fmaxf(fmaxf(d[1][0], d[1][1]), fmaxf(d[1][2], d[1][3]));
    max0 = fmaxf(d0 * A0, -INFINITY);  // fmaxf drops the NaN of -inf * 0
    max1 = fmaxf(d1 * A1, -INFINITY);
#pragma unroll
    for (int o = 1; o <= 2; o <<= 1) {
        max0 = fmaxf(max0, __shfl_xor_sync(0xffffffffu, max0, o));
        max1 = fmaxf(max1, __shfl_xor_sync(0xffffffffu, max1, o));
    }
}

static __device__ __forceinline__ float fma_sat(float a, float b, float c) {
    float d;
    asm("fma.rn.sat.f32 %0, %1, %2, %3;\n" : "=f"(d) : "f"(a), "f"(b), "f"(c));
    return d;
}

// ExpCast: byte = RNE(clamp(dot * 8A + (120 + beta) - 8m, 0, 120)) computed on a
// 1/128 scale: FFMA.SAT clamps to [0, 1], the magic-number FFMA rounds, and
// the byte is in the low 8 bits. a = 8A/128, c = ((120 + beta) - 8m)/128.
static __device__ __forceinline__ uint32_t expcast_word(float dot, float a, float c) {
    float y = fma_sat(dot, a, c);
    return __float_as_uint(__fmaf_rn(y, 128.0f, 12582912.0f));
}

// Four codes in the low bytes of w0..w3 -> one register, w0 in byte 0.
static __device__ __forceinline__ uint32_t pack4(uint32_t w0, uint32_t w1, uint32_t w2, uint32_t w3) {
    return prmt(prmt(w0, w1, 0x0040u), prmt(w2, w3, 0x0040u), 0x5410u);
}

// P of the tile as 64 words, one per score, in the registers of the scores:
// ExpCast leaves the E4M3 code in the low byte of each word, exp-then-cast
// leaves the float to convert. pack_p turns them into the PV A registers;
// keeping the two apart lets the words wait for the registers of the P that
// the previous tile's PV wgmma still reads. Masked keys come in as dot = -inf:
// ExpCast saturates them (and the NaN of -inf * 0) to code 0; exp-then-cast
// (TAIL only) clamps the exponent so that ex2 flushes them to 0.
template <bool EXPCAST, bool TAIL>
static __device__ __forceinline__ void encode_words(const float *s, float A0, float A1, float m0,
                                                    float m1, float expcast_bias, uint32_t *w) {
    if constexpr (EXPCAST) {
        const float a0 = A0 * 0.0625f, a1 = A1 * 0.0625f;  // 8A / 128, exact
        const float c0 = (expcast_bias - 8.0f * m0) * 0.0078125f;
        const float c1 = (expcast_bias - 8.0f * m1) * 0.0078125f;
#pragma unroll
        for (int i = 0; i < 64; i++) w[i] = expcast_word(s[i], (i >> 1) & 1 ? a1 : a0, (i >> 1) & 1 ? c1 : c0);
    } else {
        // exp-then-cast: e4m3(exp2(dot * A + 8 - m)), the conventional path.
        const float b0 = 8.0f - m0, b1 = 8.0f - m1;
#pragma unroll
        for (int i = 0; i < 64; i++) {
            float x = __fmaf_rn(s[i], (i >> 1) & 1 ? A1 : A0, (i >> 1) & 1 ? b1 : b0);
            w[i] = __float_as_uint(ex2_approx(TAIL ? fmaxf(x, -256.0f) : x));
        }
    }
}

// The words into 16 A registers. Register 4kc+r of key chunk kc (32 keys)
// takes words 16kc + {0,1,4,5} (r=0), {2,3,6,7}, {8,9,12,13}, {10,11,14,15}.
template <bool EXPCAST>
static __device__ __forceinline__ void pack_p(const uint32_t *w, uint32_t *a) {
#pragma unroll
    for (int kc = 0; kc < 4; kc++) {
        const uint32_t *x = w + 16 * kc;
        if constexpr (EXPCAST) {
            a[4 * kc + 0] = pack4(x[0], x[1], x[4], x[5]);
            a[4 * kc + 1] = pack4(x[2], x[3], x[6], x[7]);
            a[4 * kc + 2] = pack4(x[8], x[9], x[12], x[13]);
            a[4 * kc + 3] = pack4(x[10], x[11], x[14], x[15]);
        } else {
            const auto e = [&](int i) { return __uint_as_float(x[i]); };
            a[4 * kc + 0] = cvt_e4m3x2(e(0), e(1)) | (cvt_e4m3x2(e(4), e(5)) << 16);
            a[4 * kc + 1] = cvt_e4m3x2(e(2), e(3)) | (cvt_e4m3x2(e(6), e(7)) << 16);
            a[4 * kc + 2] = cvt_e4m3x2(e(8), e(9)) | (cvt_e4m3x2(e(12), e(13)) << 16);
            a[4 * kc + 3] = cvt_e4m3x2(e(10), e(11)) | (cvt_e4m3x2(e(14), e(15)) << 16);
        }
    }
}
