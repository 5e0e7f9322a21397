// Picks the sm_90a kernel for a call: the warp-specialized kernel
// (kernel.cuh, one instantiation per method in attention_d128_*.cu) at head
// dim 128, the one-warpgroup kernel (kernel_wg.cu) at 64.
#include "attention.h"
#include "launch.h"

bool vc_attention_sm90_reads_means(int head_dim, bool expcast, bool vsmooth) {
    return head_dim == 128 && (expcast || vsmooth);
}

cudaError_t vc_attention_sm90(const vc_attention_params &p, int head_dim, bool expcast, bool vsmooth,
                              cudaStream_t stream) {
    if (head_dim == 64) return vc_attention_sm90_d64(p, expcast, vsmooth, stream);
    if (head_dim != 128) return cudaErrorInvalidValue;
    // ExpCast without V-Smooth runs the V-Smooth kernel: the means are zeros
    // then, and r * 0 adds nothing (vc_attention_sm90_reads_means).
    if (expcast) return sm90::launch_method<128, true, true>(p, stream);
    return vsmooth ? sm90::launch_method<128, false, true>(p, stream)
                   : sm90::launch_method<128, false, false>(p, stream);
}
