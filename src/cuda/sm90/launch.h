// One method's kernels at one head dim: each attention_d<D>_<method>.cu
// compiles one instantiation, so the build runs them in parallel.
#pragma once
#include "attention.h"

namespace sm90 {
template <int D, bool EXPCAST, bool VSMOOTH>
cudaError_t launch_method(const vc_attention_params &p, cudaStream_t stream);
}

// Head dim 64 (kernel_wg.cu).
cudaError_t vc_attention_sm90_d64(const vc_attention_params &p, bool expcast, bool vsmooth, cudaStream_t stream);
