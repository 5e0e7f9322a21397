/* Symmetric INT8: scale = amax / 127, code = RNE(x * (127 / amax)) clamped to
 * [-127, 127] (what cvt.rni.sat gives for the same product). An all-zero
 * block has scale 0 and codes 0, never 0/0; so has a block whose amax is so
 * small that 127 / amax overflows. The reciprocal is an IEEE
 * division on both backends (CUDA: __fdiv_rn, no fast-math). */
#ifndef VCATTN_INT8_H
#define VCATTN_INT8_H

#include "format_common.h"

typedef struct {
    float scale;      /* dequantized value = code * scale */
    float inv_scale;  /* 127 / amax, or 0 for an all-zero block */
} vcattn_int8_scale;

VCATTN_HD vcattn_int8_scale vcattn_int8_scale_from_amax(float amax) {
    vcattn_int8_scale s;
    s.inv_scale = amax > 0.0f ? 127.0f / amax : 0.0f;
    if (!(s.inv_scale <= 3.402823466e38f)) s.inv_scale = 0.0f;  /* amax < ~3.7e-37 counts as zero */
    s.scale = s.inv_scale > 0.0f ? amax / 127.0f : 0.0f;
    return s;
}

VCATTN_HD int8_t vcattn_int8_encode(float x, float inv_scale) {
    float v = x * inv_scale;
    /* NaN (only reachable with check_finite off) clamps to -127, as the GPU's
     * fminf(fmaxf(v, -127), 127) does: no float-to-int conversion of NaN. */
    v = v > 127.0f ? 127.0f : (v >= -127.0f ? v : -127.0f);
    return (int8_t)vcattn_rne_small(v);
}

#endif
