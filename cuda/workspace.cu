// Grow-only scratch buffer shared by the split-reduction kernels (see workspace.cuh for the locking rule).
#include <algorithm>

#include "check.cuh"
#include "workspace.cuh"

namespace dl::gpu {
namespace {
std::mutex mu;
void* buffer = nullptr;
size_t capacity = 0;
}  // namespace

static int* counters = nullptr;
static size_t counterCapacity = 0;

// The buffers as they are now, and the lock that keeps them so (cuda/step_graph.cu: a graph that baked in older ones
// must not be replayed, and another thread's growth must not free them between reading them and the launch).
std::unique_lock<std::mutex> currentBuffers(const void*& work, const void*& count) {
  std::unique_lock<std::mutex> lock(mu);
  work = buffer, count = counters;
  return lock;
}

int* splitCounters(size_t n) {
  if (n > counterCapacity) {
    CUDA_CHECK(cudaStreamSynchronize(stream()));  // earlier kernels may still count in the old buffer
    if (counters) CUDA_CHECK(cudaFree(counters));
    counters = nullptr, counterCapacity = 0;
    const size_t grow = std::max<size_t>(n + n / 4, 4096);
    cudaError_t e = cudaMalloc(&counters, grow * sizeof(int));
    if (e != cudaSuccess) {
      (void)cudaGetLastError();
      counters = nullptr;
      throw Error(std::string("CUDA workspace: cudaMalloc of split counters failed (") + cudaGetErrorString(e) + ")");
    }
    CUDA_CHECK(cudaMemsetAsync(counters, 0, grow * sizeof(int), stream()));  // ordered before their first user
    counterCapacity = grow;
  }
  return counters;
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
