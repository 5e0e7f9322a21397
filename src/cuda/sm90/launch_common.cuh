// Host-side pieces every kernel launch shares: the output element type
// picked at run time, and a launch with more than 48 KB of shared memory.
#pragma once
#include "attention.h"
#include "../launch_facts.h"
#include "vcattn.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

template <typename T> struct OutType { using type = T; };

// f(OutType<T>{}) for the output element type T of `dtype`.
template <typename F> cudaError_t with_out_type(int dtype, F &&f) {
    switch (dtype) {
    case VCATTN_DTYPE_BF16: return f(OutType<__nv_bfloat16>{});
    case VCATTN_DTYPE_F16: return f(OutType<__half>{});
    default: return f(OutType<float>{});
    }
}

template <typename Kernel>
cudaError_t launch_kernel(Kernel kernel, dim3 grid, int threads, int smem, const vc_attention_params &p,
                          cudaStream_t stream) {
    cudaError_t err = allow_dynamic_smem((const void *)kernel, smem);
    if (err != cudaSuccess) return err;
    kernel<<<grid, threads, smem, stream>>>(p);
    return cudaGetLastError();
}
