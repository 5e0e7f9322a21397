// Online softmax of one 64x128 score tile held in wgmma accumulator
// registers, and the encoding of P as E4M3 bytes packed straight into the
// A-operand registers of the PV wgmma (docs/cuda-design.md sections 5, 6).
#pragma once
#include "ptx.cuh"

// Row maximum (log2 units) of the thread's two rows over the quad; `A` are
// the rows' dequantization multipliers (>= 0, so max(dot) * A = max(dot * A));
// s holds dot + off (off 0, or the offset of row_state.cuh: exact to remove).
static __device__ __forceinline__ void tile_row_max(const float *s, float off, float A0, float A1,
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
    max0 = fmaxf((d0 - off) * A0, -INFINITY);  // fmaxf drops the NaN of -inf * 0
    max1 = fmaxf((d1 - off) * A1, -INFINITY);
#pragma unroll
    for (int o = 1; o <= 2; o <<= 1) {
        max0 = fmaxf(max0, __shfl_xor_sync(0xffffffffu, max0, o));
        max1 = fmaxf(max1, __shfl_xor_sync(0xffffffffu, max1, o));
    }
}

// ExpCast's argument x = dot 8A + (120 + beta) - 8m, one FMA as the CPU's
// fmaf(dot, 8 mult, bias); pack_p rounds and clamps it to the byte.
static __device__ __forceinline__ uint32_t expcast_word(float dot, float a8, float bias) {
    return __float_as_uint(__fmaf_rn(dot, a8, bias));
}

// P of the tile as 64 words, one per score, in the registers of the scores:
// ExpCast leaves its argument x, exp-then-cast the float to convert.
// pack_p turns them into the PV A registers; keeping the two apart lets the
// words wait for the registers of the P that the previous tile's PV wgmma
// still reads. Masked keys come in as dot = -inf: ExpCast's conversion
// saturates them (and the NaN of -inf * 0) to code 0; exp-then-cast (TAIL
// only) clamps the exponent so that ex2 flushes them to 0.
template <bool EXPCAST, bool TAIL>
static __device__ __forceinline__ void encode_words(const float *s, float off, float A0, float A1, float m0,
                                                    float m1, float expcast_bias, uint32_t *w) {
    if constexpr (EXPCAST) {
        const float a0 = 8.0f * A0, a1 = 8.0f * A1;
        // off: the dot's offset (row_state.cuh), folded into the addend as the CPU's vcattn_expcast_dot_arg
        const float c0 = __fmaf_rn(-off, a0, expcast_bias - 8.0f * m0);
        const float c1 = __fmaf_rn(-off, a1, expcast_bias - 8.0f * m1);
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
// ExpCast's byte is clip(RNE(x), 0, 255), which is the CPU's
// clip(RNE(x), 0, 120): x <= 120 + beta + 8 ulp(m) / 2 < 120.5 for every
// score the check admits (|m| < 2^20).
template <bool EXPCAST>
static __device__ __forceinline__ void pack_p(const uint32_t *w, uint32_t *a) {
#pragma unroll
    for (int kc = 0; kc < 4; kc++) {
        const uint32_t *x = w + 16 * kc;
        const auto e = [&](int i) { return __uint_as_float(x[i]); };
        if constexpr (EXPCAST) {
            a[4 * kc + 0] = round_pack_u8x4(e(0), e(1), e(4), e(5));
            a[4 * kc + 1] = round_pack_u8x4(e(2), e(3), e(6), e(7));
            a[4 * kc + 2] = round_pack_u8x4(e(8), e(9), e(12), e(13));
            a[4 * kc + 3] = round_pack_u8x4(e(10), e(11), e(14), e(15));
        } else {
            a[4 * kc + 0] = cvt_e4m3x2(e(0), e(1)) | (cvt_e4m3x2(e(4), e(5)) << 16);
            a[4 * kc + 1] = cvt_e4m3x2(e(2), e(3)) | (cvt_e4m3x2(e(6), e(7)) << 16);
            a[4 * kc + 2] = cvt_e4m3x2(e(8), e(9)) | (cvt_e4m3x2(e(12), e(13)) << 16);
            a[4 * kc + 3] = cvt_e4m3x2(e(10), e(11)) | (cvt_e4m3x2(e(14), e(15)) << 16);
        }
    }
}
