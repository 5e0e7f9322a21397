// Programmatic dependent launch for the preprocessing chain: a kernel
// launched by launch_chained may be scheduled while the kernel before it in
// the stream still runs, so the gap between two short kernels (their launch
// and the ramp of their first blocks) overlaps the tail of the first. Each
// chained kernel starts with chain_begin(), which waits for its
// predecessor to finish and its writes to be visible before anything is
// read: the order of results is the stream's, as with plain launches.
#pragma once
#include <cuda_runtime.h>

// The first statement of every kernel that launch_chained starts (a no-op
// in a kernel launched without the attribute): wait for the previous
// kernel, then let the next one's blocks be scheduled into the SMs left free.
static __device__ __forceinline__ void chain_begin() {
    asm volatile("griddepcontrol.wait;" ::: "memory");
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
}

// kernel<<<grid, block, smem, stream>>>(args...), allowed to start before
// the previous kernel in the stream ends (it must call chain_begin first).
// A launch error is returned and, as a <<<>>> launch's, also left for
// cudaGetLastError, which the launching functions return. Built with
// -DVCATTN_PLAIN_LAUNCHES, launches are plain: profilers then time each
// kernel alone (a chained kernel's span includes its wait).
template <typename... Params, typename... Args>
static cudaError_t launch_chained(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem,
                                  cudaStream_t stream, Args... args) {
    cudaLaunchAttribute attr;
    attr.id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr.val.programmaticStreamSerializationAllowed = 1;
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.dynamicSmemBytes = smem;
    cfg.stream = stream;
    cfg.attrs = &attr;
#ifdef VCATTN_PLAIN_LAUNCHES
    cfg.numAttrs = 0;
#else
    cfg.numAttrs = 1;
#endif
    return cudaLaunchKernelEx(&cfg, kernel, args...);
}
