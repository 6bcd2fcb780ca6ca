// Scratch device memory for split partials (GEMM split-K, split-KV attention), grow-only.
// Ops run on one stream but may be launched from several worker threads: a caller holds the returned lock from
// before it takes the workspace until its last kernel using it is enqueued, so stream order keeps users apart.
#pragma once
#include <cstddef>
#include <mutex>

namespace dl::gpu {

struct Workspace {
  std::unique_lock<std::mutex> lock;
  void* data;
};
Workspace workspace(size_t bytes);
// Arrival counters for kernels whose last CTA finishes a split reduction (split-KV decode): at least n
// ints, zero on entry, and every user leaves the ones it used at zero. Grow-only; call it while holding a Workspace
// (its lock orders the growth with the other users).
int* splitCounters(size_t n);

}  // namespace dl::gpu
