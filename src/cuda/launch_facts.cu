// Kernel attributes and device facts remembered per device (launch_facts.h).
// A lock guards the table: threads may call on several devices at once.
#include "launch_facts.h"

#include <atomic>
#include <mutex>

namespace {

struct smem_grant {
    const void *kernel;
    int device, bytes;
};

constexpr int kGrants = 256;  // kernels x devices in use; past it every launch asks the runtime again
std::mutex grants_lock;
smem_grant grants[kGrants];
int grant_count;

constexpr int kDevices = 64;
std::atomic<int> sm_counts[kDevices];  // 0: not asked yet

}  // namespace

cudaError_t allow_dynamic_smem(const void *kernel, int bytes) {
    int device = 0;
    cudaError_t err = cudaGetDevice(&device);
    if (err != cudaSuccess) return err;
    std::lock_guard<std::mutex> hold(grants_lock);
    smem_grant *grant = nullptr;
    for (int i = 0; i < grant_count && !grant; i++)
        if (grants[i].kernel == kernel && grants[i].device == device) grant = &grants[i];
    if (grant && grant->bytes >= bytes) return cudaSuccess;
    if ((err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes)) != cudaSuccess)
        return err;
    if (grant) grant->bytes = bytes;
    else if (grant_count < kGrants) grants[grant_count++] = {kernel, device, bytes};
    return cudaSuccess;
}

cudaError_t multiprocessor_count(int *sms) {
    int device = 0;
    cudaError_t err = cudaGetDevice(&device);
    if (err != cudaSuccess) return err;
    if (device < kDevices && (*sms = sm_counts[device].load(std::memory_order_relaxed)) > 0) return cudaSuccess;
    if ((err = cudaDeviceGetAttribute(sms, cudaDevAttrMultiProcessorCount, device)) != cudaSuccess) return err;
    if (device < kDevices) sm_counts[device].store(*sms, std::memory_order_relaxed);
    return cudaSuccess;
}
