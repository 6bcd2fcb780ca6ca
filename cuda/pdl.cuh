// Programmatic dependent launch (Hopper and later; opt-in: DL_PDL=1). A kernel launched with it may start while the
// kernel before it on the stream is still finishing: its CTAs get resident, do the work that depends on nothing
// earlier (a GEMM's first weight tiles), then wait at griddepcontrol.wait until every earlier kernel has completed
// and its writes are visible. That overlaps each kernel's launch, ramp-up and weight fetch with its predecessor's
// tail: the per-kernel floor of a decode step (bench/CUDA_NOTES.md). Without a programmatic launch (the default,
// any op called outside a model step, or a device before sm_90) the wait returns at once and nothing changes.
//
// Rule for every kernel: pdlStart() (or pdlRelease() ... pdlWait()) before any access to global memory that earlier
// work on the stream may write or read. Only reads of memory that no earlier work on the stream can still be writing
// may come before the wait: since every kernel releases its dependents at its start, that earlier work is not just
// the step's own kernels but anything queued before the step (a JS op, another model's kernels). Model weights
// qualify (setWeight copies them and waits for the stream). Launches go through launchKernel(), which adds the
// attribute only inside a PdlScope (the model forward's enqueue, whose GEMMs all take a model weight as W).
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

// kernel<<<grid, block, smem, stream()>>>(args...), checked (errors name the kernel and the launching line), with the
// programmatic-serialization attribute when pdlActive(). Use it as launchKernel("name", kernel, grid, block, smem,
// args...).
template <typename... P, typename... A>
void launchKernelAt(const char* file, int line, const char* what, void (*kernel)(P...), dim3 grid, dim3 block,
                    size_t smem, A&&... args) {
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
  check(cudaLaunchKernelEx(&cfg, kernel, std::forward<A>(args)...), what, file, line);
}
// Lets Kernel use `bytes` of dynamic shared memory (past the 48 KB default): set on the first call of each kernel
// (its launcher's constexpr size), skipped after. A failed attempt throws and is retried on the next launch.
template <auto Kernel>
void allowDynamicSmem(int bytes) {
  static bool done = false;  // benign race: the attribute call is idempotent
  if (done) return;
  CUDA_CHECK(cudaFuncSetAttribute(Kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
  done = true;
}
#define launchKernel(name, ...) ::dl::gpu::launchKernelAt(__FILE__, __LINE__, "launch of " name, __VA_ARGS__)

}  // namespace dl::gpu
