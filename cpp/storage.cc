#include "storage.h"

#include <cstdlib>
#include <cstring>
#include "gpu_runtime.h"

namespace dl {
namespace {
std::atomic<int64_t> live[2];
}

Storage::Storage(Device d, size_t n) : device(d), bytes(n) {
  if (d == Device::cpu) {
    // 64-byte aligned for AVX-512 loads; one extra cache line so vector tails may over-read safely.
    size_t rounded = ((n + 63) / 64) * 64 + 64;
    data = std::aligned_alloc(64, rounded);
    if (!data) throw Error("out of host memory: could not allocate " + std::to_string(n) + " bytes");
    std::memset(data, 0, rounded);
  } else {
    data = gpu::malloc(n);
  }
  live[int(d)] += int64_t(n);
}

Storage::~Storage() {
  if (device == Device::cpu) std::free(data);
  else gpu::free(data);
  live[int(device)] -= int64_t(bytes);
}

int64_t liveBytes(Device d) { return live[int(d)].load(); }

}  // namespace dl
