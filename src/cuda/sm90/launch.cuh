// Host-side launch of one method's kernels (the out dtype and Q smoothing
// chosen at run time). Each attention_d<D>_<method>.cu instantiates one.
#pragma once
#include "kernel.cuh"
#include "launch.h"
#include "launch_common.cuh"

namespace sm90 {

template <int D, bool EXPCAST, bool VSMOOTH, bool QSMOOTH>
cudaError_t launch_dtype(const vc_attention_params &p, cudaStream_t stream) {
    return with_out_type(p.out_dtype, [&](auto out) {
        return launch<D, EXPCAST, VSMOOTH, QSMOOTH, typename decltype(out)::type>(p, stream);
    });
}

template <int D, bool EXPCAST, bool VSMOOTH>
cudaError_t launch_method(const vc_attention_params &p, cudaStream_t stream) {
    return p.key_bias ? launch_dtype<D, EXPCAST, VSMOOTH, true>(p, stream)
                      : launch_dtype<D, EXPCAST, VSMOOTH, false>(p, stream);
}

}  // namespace sm90
