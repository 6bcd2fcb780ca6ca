// Programmatic dependent launch (Hopper and later; opt-in: DL_PDL=1). A kernel launched with it may start while the
// kernel before it on the stream is still finishing: its CTAs get resident, do the work that depends on nothing
// earlier (a GEMM's first weight tiles), then wait at griddepcontrol.wait until every earlier kernel has completed
// and its writes are visible. That overlaps each kernel's launch, ramp-up and weight fetch with its predecessor's
// tail: the per-kernel floor of a decode step (bench/CUDA_NOTES.md). Without a programmatic launch (the default,
// any op called outside a model step, or a device before sm_90) the wait returns at once and nothing changes.
//
// Rule for every kernel: pdlStart() (or pdlRelease() ... pdlWait()) before any access to global memory that an
// earlier kernel may write or read; only reads of memory no kernel of the step writes (weights) may come before the
// wait. Launches go through launchKernel(), which adds the attribute only inside a PdlScope (the model forward's
// enqueue: its GEMMs' W are weights).
#pragma once
#include <cuda_runtime.h>

#include <utility>

#include "check.cuh"
#include "gpu_runtime.h"

namespace dl::gpu {

// Let the next kernel on the stream launch now (its CTAs wait in pdlWait until this grid has completed).
__device__ __forceinline__ void pdlRelease() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}
// Wait until the kernels before this one on the stream have completed and their memory is visible.
__device__ __forceinline__ void pdlWait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void pdlStart() { pdlRelease(), pdlWait(); }

// pdlEnabled() (gpu_runtime.h) and this thread is inside a PdlScope (runtime.cu).
bool pdlActive();

// kernel<<<grid, block, smem, stream()>>>(args...), checked, with the programmatic-serialization attribute when
// pdlActive().
template <typename... P, typename... A>
void launchKernel(const char* name, void (*kernel)(P...), dim3 grid, dim3 block, size_t smem, A&&... args) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream();
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = attr;
  cfg.numAttrs = pdlActive() ? 1 : 0;
  check(cudaLaunchKernelEx(&cfg, kernel, std::forward<A>(args)...), name, __FILE__, __LINE__);
}

}  // namespace dl::gpu
