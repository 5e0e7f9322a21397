// The sage2 kernels at head dim 128 (each method and head dim compiles alone).
#include "launch.cuh"

template cudaError_t sm90::launch_method<128, false, false>(const vc_attention_params &, cudaStream_t);
