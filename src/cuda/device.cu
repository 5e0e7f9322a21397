// Device discovery for the CUDA backend. The attention kernels themselves are
// the next milestone (issue 3); until they land the backend reports itself
// unavailable, with the reason, so AUTO falls back to the CPU backend.
#include <cuda_runtime.h>

#include "cuda_backend.h"
#include "../core/internal.h"

extern "C" int cuda_backend_available(const char **why) {
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
        cudaGetLastError();  // clear the sticky "no device" error
        *why = "no CUDA device is visible";
        return 0;
    }
    int device = 0, major = 0;
    cudaGetDevice(&device);
    cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device);
    if (major != 9) {
        *why = "the CUDA backend needs an sm_90 (Hopper) GPU";
        return 0;
    }
    *why = "the sm_90a attention kernels are not built yet (issue 3)";
    return 0;
}

extern "C" vcattn_status cuda_attention(vcattn_context *ctx, const vcattn_config *,
                                        const vcattn_tensor *, const vcattn_tensor *,
                                        const vcattn_tensor *, const vcattn_tensor *, float *,
                                        const vcattn_rope *, vcattn_layer *) {
    const char *why = "";
    cuda_backend_available(&why);
    return vcattn_fail(ctx, VCATTN_ERR_BACKEND_UNAVAILABLE, "cuda backend: %s", why);
}
