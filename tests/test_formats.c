/* Bit-exactness of every codec, checked against independent brute-force
 * references (nearest representable value, ties to the even code). */
#include "testlib.h"
#include "vcattn_inspect.h"

#include <float.h>
#include <stdint.h>

static uint64_t rng_state = 0x1234567ULL;
static uint32_t rng32(void) {
    rng_state = rng_state * 6364136223846793005ULL + 1442695040888963407ULL;
    return (uint32_t)(rng_state >> 32);
}

/* Nearest finite E4M3 code by exhaustive search; ties to the even code;
 * saturates beyond 448 as satfinite does. */
static uint8_t e4m3_reference(float x) {
    if (isnan(x)) return 0x7f;
    double a = fabs((double)x);
    uint8_t sign = signbit(x) ? 0x80 : 0;
    if (a >= 448.0) return sign | 0x7e;
    int best = 0;
    double best_err = INFINITY;
    for (int c = 0; c <= 0x7e; c++) {
        double err = fabs((double)vcattn_e4m3_decode((uint8_t)c) - a);
        if (err < best_err || (err == best_err && (c & 1) == 0)) { best = c; best_err = err; }
    }
    return sign | (uint8_t)best;
}

static void test_e4m3(void) {
    /* Every code decodes and re-encodes to itself (NaN codes to 0x7f). */
    int roundtrip_bad = 0;
    for (int c = 0; c < 256; c++) {
        float v = vcattn_e4m3_decode((uint8_t)c);
        uint8_t back = vcattn_e4m3_encode(v);
        int is_nan = (c & 0x7f) == 0x7f;
        if (is_nan ? !(isnan(v) && back == 0x7f) : back != c) roundtrip_bad++;
    }
    CHECK(roundtrip_bad == 0, "%d E4M3 codes do not round-trip", roundtrip_bad);
    CHECK(vcattn_e4m3_decode(0x7e) == 448.0f, "max code is 448");
    CHECK(vcattn_e4m3_decode(0x01) == 1.0f / 512.0f, "min subnormal is 2^-9");
    CHECK(vcattn_e4m3_decode(0x08) == 1.0f / 64.0f, "min normal is 2^-6");

    /* Midpoints between neighbours round to the even code. */
    int tie_bad = 0;
    for (int c = 0; c < 0x7e; c++) {
        float mid = 0.5f * (vcattn_e4m3_decode((uint8_t)c) + vcattn_e4m3_decode((uint8_t)(c + 1)));
        uint8_t want = (c & 1) ? (uint8_t)(c + 1) : (uint8_t)c;
        if (vcattn_e4m3_encode(mid) != want || vcattn_e4m3_encode(-mid) != (0x80 | want)) tie_bad++;
    }
    CHECK(tie_bad == 0, "%d E4M3 ties not to even", tie_bad);

    /* Saturation, infinities and NaN. */
    CHECK(vcattn_e4m3_encode(463.99f) == 0x7e, "463.99 -> 448");
    CHECK(vcattn_e4m3_encode(464.0f) == 0x7e, "464 saturates to 448, not NaN");
    CHECK(vcattn_e4m3_encode(1e30f) == 0x7e, "huge saturates");
    CHECK(vcattn_e4m3_encode(INFINITY) == 0x7e, "+inf saturates");
    CHECK(vcattn_e4m3_encode(-INFINITY) == 0xfe, "-inf saturates");
    CHECK(vcattn_e4m3_encode(NAN) == 0x7f, "NaN stays NaN");
    CHECK(vcattn_e4m3_encode(-0.0f) == 0x80, "-0 keeps its sign");
    CHECK(vcattn_e4m3_encode(1.0f / 1024.0f) == 0x00, "2^-10 ties to zero (even)");

    /* Random floats over the whole range against the brute-force reference. */
    int rand_bad = 0;
    for (int i = 0; i < 200000; i++) {
        uint32_t bits = rng32();
        float x = vcattn_f32_from_bits((bits & 0x80000000u) | (0x38000000u + (bits % 0x0c000000u)));
        if (vcattn_e4m3_encode(x) != e4m3_reference(x)) rand_bad++;
    }
    CHECK(rand_bad == 0, "%d random floats encode differently from the reference", rand_bad);
}

static void test_int8(void) {
    vcattn_int8_scale s = vcattn_int8_scale_from_amax(127.0f);
    CHECK(s.scale == 1.0f && s.inv_scale == 1.0f, "amax 127 -> scale 1");
    CHECK(vcattn_int8_encode(2.5f, 1.0f) == 2, "2.5 -> 2 (even)");
    CHECK(vcattn_int8_encode(3.5f, 1.0f) == 4, "3.5 -> 4 (even)");
    CHECK(vcattn_int8_encode(-2.5f, 1.0f) == -2, "-2.5 -> -2");
    CHECK(vcattn_int8_encode(-0.5f, 1.0f) == 0, "-0.5 -> 0");
    CHECK(vcattn_int8_encode(126.5f, 1.0f) == 126, "126.5 -> 126");
    CHECK(vcattn_int8_encode(127.5f, 1.0f) == 127, "saturate at 127");
    CHECK(vcattn_int8_encode(-1e9f, 1.0f) == -127, "saturate at -127 (symmetric)");
    CHECK(vcattn_int8_encode(NAN, 1.0f) == -127, "NaN -> -127, as the GPU's fminf(fmaxf(v, -127), 127)");
    CHECK(vcattn_int8_encode(INFINITY, 0.0f) == -127, "inf * 0 (NaN) -> -127");
    vcattn_int8_scale z = vcattn_int8_scale_from_amax(0.0f);
    CHECK(z.scale == 0.0f && z.inv_scale == 0.0f, "all-zero block: no 0/0");
    CHECK(vcattn_int8_encode(0.0f, z.inv_scale) == 0, "all-zero block codes are 0");
    vcattn_int8_scale tiny = vcattn_int8_scale_from_amax(1e-38f);  /* 127 / amax overflows */
    CHECK(tiny.scale == 0.0f && tiny.inv_scale == 0.0f, "tiny amax counts as zero, no inf");
    float e4_scale, e4_inv = vcattn_e4m3_scale(1e-38f, &e4_scale);
    CHECK(e4_inv == 0.0f && e4_scale == 0.0f, "E4M3: tiny amax counts as zero, no inf");
    e4_inv = vcattn_e4m3_scale(448.0f, &e4_scale);
    CHECK(e4_inv == 1.0f && e4_scale == 1.0f, "E4M3: amax 448 -> scale 1");
    /* Every amax maps its own value to +-127 exactly. */
    int bad = 0;
    for (int i = 0; i < 100000; i++) {
        float a = vcattn_f32_from_bits(0x30000000u + rng32() % 0x20000000u);
        vcattn_int8_scale t = vcattn_int8_scale_from_amax(a);
        if (vcattn_int8_encode(a, t.inv_scale) != 127 || vcattn_int8_encode(-a, t.inv_scale) != -127) bad++;
    }
    CHECK(bad == 0, "%d amax values do not map to +-127", bad);
}

static void test_e2m1(void) {
    const float want[8] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6};
    for (int c = 0; c < 16; c++) {
        float v = vcattn_e2m1_decode((uint8_t)c);
        CHECK(v == ((c & 8) ? -want[c & 7] : want[c & 7]), "decode %d", c);
        CHECK(vcattn_e2m1_encode(v) == ((c == 8) ? 8 : c), "round trip %d", c);
    }
    struct { float x; float y; } ties[] = {
        {0.25f, 0}, {0.75f, 1}, {1.25f, 1}, {1.75f, 2}, {2.5f, 2}, {3.5f, 4}, {5.0f, 4},
        {0.26f, 0.5f}, {5.01f, 6}, {6.5f, 6}, {1e9f, 6}, {-2.5f, -2}, {-5.0f, -4}};
    for (size_t i = 0; i < sizeof ties / sizeof ties[0]; i++)
        CHECK(vcattn_e2m1_decode(vcattn_e2m1_encode(ties[i].x)) == ties[i].y, "e2m1(%g) -> %g",
              ties[i].x, ties[i].y);

    /* NVFP4 block: block amax maps to 6 up to the E4M3 rounding of its scale. */
    float ts = vcattn_nvfp4_tensor_scale(12.0f);
    CHECK(ts == 12.0f / 2688.0f, "tensor scale amax/(6*448)");
    CHECK(vcattn_nvfp4_tensor_scale(0.0f) == 1.0f, "all-zero tensor scale is 1, not 0");
    uint8_t sc = vcattn_nvfp4_block_scale_code(12.0f, ts);
    CHECK(vcattn_e4m3_decode(sc) == 448.0f, "tensor amax block gets scale code 448");
    float bs = vcattn_e4m3_decode(sc) * ts;
    CHECK(vcattn_e2m1_decode(vcattn_nvfp4_encode(12.0f, bs)) == 6.0f, "block amax encodes as 6");
    CHECK(vcattn_e2m1_decode(vcattn_nvfp4_encode(-3.0f, bs)) == -1.5f, "-3 of amax 12 -> -1.5");
    CHECK(vcattn_nvfp4_encode(1.0f, 0.0f) == 0, "zero block scale gives code 0");
}

static void test_expcast(void) {
    const float beta = VCATTN_EXPCAST_BETA;
    CHECK(vcattn_expcast_code(vcattn_expcast_arg(-1.60f, beta)) == 107, "worked example: byte 107");
    CHECK(vcattn_e4m3_decode(107) == 88.0f, "byte 107 is 88");
    CHECK(vcattn_expcast_code(vcattn_expcast_arg(0.0f, beta)) == 120, "row max -> 256 (code 120)");
    CHECK(vcattn_e4m3_decode(120) == 256.0f, "code 120 is 256");
    CHECK(vcattn_expcast_code(-3.0f) == 0, "underflow clips to 0");
    CHECK(vcattn_expcast_code(500.0f) == 120, "clips at 120");
    CHECK(vcattn_expcast_code(NAN) == 0, "NaN argument gives 0");
    CHECK(vcattn_expcast_code(2.5f) == 2 && vcattn_expcast_code(3.5f) == 4, "RNE ties");
    /* In the normal range ExpCast is never more than one code from exp-then-cast. */
    int far = 0;
    for (int i = 0; i < 140000; i++) {
        float u = -14.0f * (float)i / 140000.0f;
        int a = vcattn_expcast_code(vcattn_expcast_arg(u, beta)), b = vcattn_expthencast_code(u);
        if (abs(a - b) > 1) far++;
    }
    CHECK(far == 0, "%d scores more than one code from exp-then-cast", far);
    /* The kernel's form of the argument from an integer dot: the offset is
     * exact to add and only the folded addend rounds, by at most 2^-24 of
     * its magnitude (under one unit of the dot, a), beyond the plain FMA's
     * own rounding (half an ulp of each result: 2^-16 together below 128). */
    int over = 0, codes = 0;
    for (int i = 0; i < 200000; i++) {
        const float dot = (float)((int32_t)(rng32() % (2u * 2097152u + 1u)) - 2097152);
        const float a = ldexpf(1.0f + (float)(rng32() % 8388608u) / 8388608.0f, -(int)(rng32() % 24u) - 2);
        const float target = -8.0f + 136.0f * (float)(rng32() % 65536u) / 65536.0f;  /* x where codes change */
        const float b = target - dot * a, y = fmaf(dot, a, b);
        if (!(y > -9.0f && y < 129.0f)) continue;
        const float x = vcattn_expcast_dot_arg(dot, a, b);
        const float addend = fabsf(b - VCATTN_EXPCAST_DOT_OFFSET * a);
        if (!(fabsf(x - y) <= ldexpf(addend, -24) + ldexpf(1.0f, -16)) || !(fabsf(x - y) < a + ldexpf(1.0f, -16)))
            over++;
        codes += vcattn_expcast_code(x) != vcattn_expcast_code(y);
    }
    CHECK(over == 0, "%d folded arguments beyond the addend's rounding", over);
    CHECK(codes < 200000 / 100, "%d of 200000 folded arguments change the code", codes);
    CHECK(vcattn_expcast_dot_arg(-INFINITY, 1.0f, 0.0f) == -INFINITY, "a masked key (-inf) stays -inf");
}

static void test_halfs(void) {
    int bad16 = 0, badbf = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        float f = vcattn_f16_to_f32((uint16_t)h);
        if (isnan(f) ? !isnan(vcattn_f16_to_f32(vcattn_f32_to_f16(f))) : vcattn_f32_to_f16(f) != h) bad16++;
        float g = vcattn_bf16_to_f32((uint16_t)h);
        if (isnan(g) ? !isnan(vcattn_bf16_to_f32(vcattn_f32_to_bf16(g))) : vcattn_f32_to_bf16(g) != h) badbf++;
    }
    CHECK(bad16 == 0, "%d fp16 codes do not round-trip", bad16);
    CHECK(badbf == 0, "%d bf16 codes do not round-trip", badbf);
    CHECK(vcattn_f32_to_bf16(1.0f + 1.0f / 256.0f) == 0x3f80, "bf16 tie to even (down)");
    CHECK(vcattn_f32_to_bf16(1.0f + 3.0f / 256.0f) == 0x3f82, "bf16 tie to even (up)");
    CHECK(vcattn_f32_to_f16(1.0f + 1.0f / 2048.0f) == 0x3c00, "fp16 tie to even");
    CHECK(vcattn_f32_to_f16(65520.0f) == 0x7c00, "fp16 overflow to inf");
    CHECK(vcattn_f32_to_f16(65519.0f) == 0x7bff, "fp16 max");
    CHECK(vcattn_f32_to_f16(1.0f / 16777216.0f / 2.0f) == 0, "fp16 half of min subnormal ties to 0");
    CHECK(vcattn_rne_small(-2.5f) == -2.0f && vcattn_rne_small(-3.5f) == -4.0f, "magic-number RNE");
    /* the output stores' saturation: the largest finite values are the
     * types' own, finite values past them are held there, NaN and Inf stay */
    CHECK(vcattn_f32_to_f16(VCATTN_F16_MAX) == 0x7bff && vcattn_f32_to_bf16(VCATTN_BF16_MAX) == 0x7f7f,
          "the largest finite float16 and bfloat16");
    CHECK(vcattn_f32_to_f16(vcattn_saturate(65520.0f, VCATTN_F16_MAX)) == 0x7bff &&
          vcattn_f32_to_f16(vcattn_saturate(-1.0e30f, VCATTN_F16_MAX)) == 0xfbff &&
          vcattn_f32_to_bf16(vcattn_saturate(FLT_MAX, VCATTN_BF16_MAX)) == 0x7f7f &&
          vcattn_saturate(1.5f, VCATTN_F16_MAX) == 1.5f, "saturation holds finite values at the type's largest");
    CHECK(isinf(vcattn_saturate(INFINITY, VCATTN_F16_MAX)) && isnan(vcattn_saturate(NAN, VCATTN_F16_MAX)),
          "saturation keeps Inf and NaN");
}

int main(int argc, char **argv) {
    tl_args(argc, argv);
    TL_RUN(test_e4m3());
    TL_RUN(test_int8());
    TL_RUN(test_e2m1());
    TL_RUN(test_expcast());
    TL_RUN(test_halfs());
    return tl_finish("test_formats");
}
