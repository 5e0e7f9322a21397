// What the launches need from the runtime on every call, asked once: each
// runtime call costs a few microseconds of host time, and a short call is
// host-bound when it makes a dozen more than it launches.
#pragma once
#include <cuda_runtime.h>

// Lets `kernel` launch with `bytes` of dynamic shared memory on the current
// device (cudaFuncAttributeMaxDynamicSharedMemorySize), set once per kernel
// and device and again only for a larger size. Per device means per primary
// context, the one the runtime API (and PyTorch) uses.
cudaError_t allow_dynamic_smem(const void *kernel, int bytes);

// The current device's multiprocessor count.
cudaError_t multiprocessor_count(int *sms);
