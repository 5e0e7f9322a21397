/* FP4 E2M1 and the NVFP4 block format.
 * E2M1 values: +-{0, 0.5, 1, 1.5, 2, 3, 4, 6}; the code is sign<<3 | index.
 * Rounding is to nearest with ties to the even index (0.25->0, 0.75->1,
 * 1.25->1, 2.5->2, 5->4), saturating at 6.
 * NVFP4: 16 elements share an E4M3 scale; a float32 tensor scale
 * (tensor amax / (6 * 448)) sits above, so block scale = e4m3 * tensor scale. */
#ifndef VCATTN_E2M1_H
#define VCATTN_E2M1_H

#include "e4m3.h"

#define VCATTN_NVFP4_BLOCK 16
#define VCATTN_E2M1_MAX 6.0f

VCATTN_HD uint8_t vcattn_e2m1_encode(float x) {
    uint8_t sign = (vcattn_f32_bits(x) >> 31) ? 8u : 0u;
    float a = x < 0.0f ? -x : x;
    uint8_t i;
    if (a <= 0.25f) i = 0;
    else if (a < 0.75f) i = 1;
    else if (a <= 1.25f) i = 2;
    else if (a < 1.75f) i = 3;
    else if (a <= 2.5f) i = 4;
    else if (a < 3.5f) i = 5;
    else if (a <= 5.0f) i = 6;
    else i = 7;                   /* also saturates; NaN is rejected upstream */
    return (uint8_t)(sign | i);
}

VCATTN_HD float vcattn_e2m1_decode(uint8_t c) {
    const float mag[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
    float v = mag[c & 7u];
    return (c & 8u) ? -v : v;
}

/* Tensor scale from the tensor's amax; 1 for an all-zero tensor. */
VCATTN_HD float vcattn_nvfp4_tensor_scale(float amax) {
    return amax > 0.0f ? amax / (VCATTN_E2M1_MAX * VCATTN_E4M3_MAX) : 1.0f;
}

/* E4M3 code of a block's scale, given the block amax and the tensor scale. */
VCATTN_HD uint8_t vcattn_nvfp4_block_scale_code(float block_amax, float tensor_scale) {
    return vcattn_e4m3_encode(block_amax / VCATTN_E2M1_MAX / tensor_scale);
}

/* Element code given the decoded block scale (e4m3 value * tensor scale). */
VCATTN_HD uint8_t vcattn_nvfp4_encode(float x, float block_scale) {
    return block_scale > 0.0f ? vcattn_e2m1_encode(x / block_scale) : 0u;
}

#endif
