// Owned device or host memory with live-bytes accounting per device. Shared by a JS Tensor and any op in flight,
// so dispose() during an async op frees the memory only when the op is done.
#pragma once
#include <atomic>
#include <memory>
#include "common.h"

namespace dl {

struct Storage {
  // zero = false (CPU): the caller writes every byte; pages stay untouched (not resident) until it does.
  Storage(Device device, size_t bytes, bool zero = true);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  Device device;
  size_t bytes;
  void* data = nullptr;
};

int64_t liveBytes(Device d);

}  // namespace dl
