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

}  // namespace dl::gpu
