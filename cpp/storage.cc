#include "storage.h"

#include <cstdlib>
#include <cstring>
#include <sys/mman.h>
#include "gpu_runtime.h"

namespace dl {
namespace {
std::atomic<int64_t> live[2];
}

Storage::Storage(Device d, size_t n, bool zero) : device(d), bytes(n) {
  if (d == Device::cpu) {
    // 64-byte aligned for AVX-512 loads; one extra cache line so vector tails may over-read safely. Buffers of
    // 2 MiB and more (weights, the KV pool, large scratch) are 2 MiB aligned and asked for transparent huge pages:
    // a decode step streams every weight once, and with 4 KiB pages each 4 KiB of the stream is a TLB miss (bf16
    // GEMV on a SmolLM-135M shape, Zen 4, 1 thread: median decode step 15.1 against 16.0 ms without, 3 runs each).
    constexpr size_t kHuge = size_t(2) << 20;
    const bool huge = n >= kHuge;
    size_t rounded = huge ? (n + 64 + kHuge - 1) / kHuge * kHuge : ((n + 63) / 64) * 64 + 64;
    data = std::aligned_alloc(huge ? kHuge : 64, rounded);
    if (!data) throw Error("out of host memory: could not allocate " + std::to_string(n) + " bytes");
#ifdef MADV_HUGEPAGE
    if (huge) madvise(data, rounded, MADV_HUGEPAGE);  // advice only: without THP the pages stay 4 KiB
#endif
    // The bytes asked for and the over-read line; a huge buffer's rounding past them stays untouched (not resident).
    if (zero) std::memset(data, 0, ((n + 63) / 64) * 64 + 64);
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
