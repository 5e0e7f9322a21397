/* The float transforms that precede quantization: RoPE and the Hadamard. */
#include "cpu_backend.h"

#include <math.h>

void cpu_rope_row(float *x, int64_t d, const float *c, const float *s, vcattn_rope_style style) {
    int64_t half = d / 2;
    for (int64_t i = 0; i < half; i++) {
        int64_t a = style == VCATTN_ROPE_INTERLEAVED ? 2 * i : i;
        int64_t b = style == VCATTN_ROPE_INTERLEAVED ? 2 * i + 1 : i + half;
        float xa = x[a], xb = x[b];
        x[a] = xa * c[i] - xb * s[i];
        x[b] = xa * s[i] + xb * c[i];
    }
}

/* Sylvester-order fast Walsh-Hadamard transform, scaled by 1/sqrt(d) so the
 * rotation is orthonormal and Q K^T is unchanged. */
void cpu_hadamard(float *x, int64_t d) {
    for (int64_t h = 1; h < d; h *= 2)
        for (int64_t i = 0; i < d; i += 2 * h)
            for (int64_t j = i; j < i + h; j++) {
                float a = x[j], b = x[j + h];
                x[j] = a + b;
                x[j + h] = a - b;
            }
    float scale = 1.0f / sqrtf((float)d);
    for (int64_t i = 0; i < d; i++) x[i] *= scale;
}
