// Host-side launch of one method's kernels (the out dtype and Q smoothing
// chosen at run time). Each attention_d<D>_<method>.cu instantiates one.
#pragma once
#include "kernel.cuh"
#include "launch.h"
#include "vcattn.h"

namespace sm90 {

template <int D, bool EXPCAST, bool VSMOOTH, bool QSMOOTH>
cudaError_t launch_dtype(const vc_attention_params &p, cudaStream_t stream) {
    switch (p.out_dtype) {
    case VCATTN_DTYPE_BF16: return launch<D, EXPCAST, VSMOOTH, QSMOOTH, __nv_bfloat16>(p, stream);
    case VCATTN_DTYPE_F16: return launch<D, EXPCAST, VSMOOTH, QSMOOTH, __half>(p, stream);
    default: return launch<D, EXPCAST, VSMOOTH, QSMOOTH, float>(p, stream);
    }
}

template <int D, bool EXPCAST, bool VSMOOTH>
cudaError_t launch_method(const vc_attention_params &p, cudaStream_t stream) {
    return p.key_bias ? launch_dtype<D, EXPCAST, VSMOOTH, true>(p, stream)
                      : launch_dtype<D, EXPCAST, VSMOOTH, false>(p, stream);
}

}  // namespace sm90
