// Grow-only scratch buffer shared by the split-reduction kernels (see workspace.cuh for the locking rule).
#include "check.cuh"
#include "workspace.cuh"

namespace dl::gpu {
namespace {
std::mutex mu;
void* buffer = nullptr;
size_t capacity = 0;
}  // namespace

const void* workspaceBuffer() {
  std::lock_guard<std::mutex> lock(mu);
  return buffer;
}

Workspace workspace(size_t bytes) {
  std::unique_lock<std::mutex> lock(mu);
  if (bytes > capacity) {
    cudaStream_t s = stream();
    CUDA_CHECK(cudaStreamSynchronize(s));  // earlier kernels may still read the old buffer
    if (buffer) CUDA_CHECK(cudaFree(buffer));
    buffer = nullptr;
    capacity = 0;
    size_t grow = bytes + bytes / 4;
    cudaError_t e = cudaMalloc(&buffer, grow);
    if (e != cudaSuccess) {
      (void)cudaGetLastError();
      buffer = nullptr;
      throw Error("CUDA workspace: cudaMalloc of " + std::to_string(grow) + " bytes for split partials failed (" +
                  cudaGetErrorString(e) + "); lower splitK/kvSplits or free memory");
    }
    capacity = grow;
  }
  return Workspace{std::move(lock), buffer};
}

}  // namespace dl::gpu
