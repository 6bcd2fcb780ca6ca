// Error checking for every CUDA call and launch: failures become dl::Error (never exit/abort; we live in Node).
#pragma once
#include <cuda_runtime.h>
#include <string>
#include "common.h"

namespace dl::gpu {

cudaStream_t stream();  // the backend's one stream (cuda/runtime.cu)

inline void check(cudaError_t e, const char* what, const char* file, int line) {
  if (e != cudaSuccess) {
    (void)cudaGetLastError();  // clear a sticky non-fatal error so the process carries on
    throw Error(std::string("CUDA error in ") + what + ": " + cudaGetErrorString(e) + " (" + file + ":" +
                std::to_string(line) + ")");
  }
}

}  // namespace dl::gpu

#define CUDA_CHECK(call) ::dl::gpu::check((call), #call, __FILE__, __LINE__)
// After a <<<>>> launch (scripts/device/bench_kernels.cu; the addon's kernels go through launchKernel, cuda/pdl.cuh).
#define CUDA_CHECK_LAUNCH(name) ::dl::gpu::check(cudaGetLastError(), "launch of " name, __FILE__, __LINE__)
