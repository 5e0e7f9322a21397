/* The CPU backend: the whole VC-Attention pipeline in portable C11, with the
 * tiling of the GPU kernel (128-key tiles), multi-threaded with OpenMP. It is
 * the oracle every other backend is tested against. */
#ifndef VCATTN_CPU_BACKEND_H
#define VCATTN_CPU_BACKEND_H

#include "../core/internal.h"

/* Arguments already validated and the call resolved by vcattn_attention; a
 * call that groups (plan COLD or WARM with a layer) hands its grouping back
 * in *grouping (untouched otherwise). */
vcattn_status cpu_attention(vcattn_context *ctx, const vcattn_call *call, const vcattn_tensor *q,
                            const vcattn_tensor *k, const vcattn_tensor *v, const vcattn_tensor *out,
                            float *lse, const vcattn_rope *rope, vcattn_new_grouping *grouping);

/* The operands cpu_attention would build for this call (INT8 Q/K, FP8 V). */
vcattn_status cpu_quantize_for_test(vcattn_context *ctx, const vcattn_call *call, const vcattn_tensor *q,
                                    const vcattn_tensor *k, const vcattn_tensor *v, const vcattn_rope *rope,
                                    vcattn_quantized *out);

/* The OpenMP threads a call with cfg runs on: cfg->num_threads (0: all
 * cores), fewer when no more can be started (cpu_startable_threads), so a
 * process short of memory for thread stacks gets a slower call, not an exit
 * from inside libgomp. */
int cpu_thread_count(const vcattn_config *cfg);
int cpu_startable_threads(int wanted);

/* In-place normalized Walsh-Hadamard transform of x[d], d a power of two. */
void cpu_hadamard(float *x, int64_t d);

/* Rotates row x[d] in place by its token's table rows (d/2 entries each). */
void cpu_rope_row(float *x, int64_t d, const float *cos_row, const float *sin_row, vcattn_rope_style style);

/*
 * The value path alone, for analyses: quantizes one head's V [n][d] (already
 * in the order wanted) as cfg's v_format and vsmooth say, and writes the
 * reconstruction (what the kernel effectively multiplies, means restored) to
 * v_hat [n][d].
 */
vcattn_status cpu_value_roundtrip(const vcattn_config *cfg, const float *v, int64_t n,
                                  int64_t d, float *v_hat);

#endif
