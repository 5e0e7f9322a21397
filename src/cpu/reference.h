/* FP64 reference attention: direct (not online) softmax in double, RoPE in
 * double, no quantization, no Hadamard (it cancels). The yardstick for every
 * fidelity number and for the tolerance of every backend test. */
#ifndef VCATTN_REFERENCE_H
#define VCATTN_REFERENCE_H

#include "vcattn.h"

/* out: double [B][Hq][Nq][D]; lse (optional): double [B][Hq][Nq], natural log.
 * sm_scale 0 means 1/sqrt(D). Shapes as in vcattn_attention; no validation
 * beyond what the caller did. Multi-threaded over rows. */
vcattn_status vcattn_reference_attention(const vcattn_tensor *q, const vcattn_tensor *k,
                                         const vcattn_tensor *v, const vcattn_rope *rope,
                                         float sm_scale, double *out, double *lse);

#endif
