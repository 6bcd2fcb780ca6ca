// Device memory the native model owns (weights, KV pages, scratch), and host<->device copies that work the same on
// either backend, so the forward code never branches on the device except through the op dispatch.
#pragma once
#include <cstring>
#include <initializer_list>
#include <memory>
#include "common.h"
#include "gpu_runtime.h"
#include "storage.h"

namespace dl {

inline void copyToDevice(Device d, void* dst, const void* src, size_t bytes) {
  if (bytes == 0) return;
  if (d == Device::cpu) std::memcpy(dst, src, bytes);
  else gpu::copyHostToDevice(dst, src, bytes);
}
inline void copyToHost(Device d, void* dst, const void* src, size_t bytes) {
  if (bytes == 0) return;
  if (d == Device::cpu) std::memcpy(dst, src, bytes);
  else gpu::copyDeviceToHost(dst, src, bytes);
}
inline void copyOnDevice(Device d, void* dst, const void* src, size_t bytes) {
  if (bytes == 0) return;
  if (d == Device::cpu) std::memcpy(dst, src, bytes);
  else gpu::copyDeviceToDevice(dst, src, bytes);
}

// A View over n contiguous elements of `dtype` at `data`, with the given shape (1..4 dims).
inline View makeView(void* data, DType dtype, Device device, std::initializer_list<int64_t> shape) {
  View v;
  v.data = data;
  v.dtype = dtype;
  v.device = device;
  v.ndim = int(shape.size());
  int i = 0;
  for (int64_t s : shape) v.shape[i++] = s;
  return v;
}

// One owned allocation of `capacity` elements of one dtype. Scratch buffers grow (never shrink) to the largest
// step seen, so steady-state steps allocate nothing.
class Buffer {
 public:
  Buffer() = default;
  Buffer(Device d, DType t, int64_t n) { reset(d, t, n); }

  void reset(Device d, DType t, int64_t n, bool zero = true) {
    mem_ = std::make_shared<Storage>(d, size_t(n > 0 ? n : 1) * dtypeSize(t), zero);
    device_ = d;
    dtype_ = t;
    capacity_ = n;
  }
  // Grows to at least n elements (contents are not kept).
  void ensure(Device d, DType t, int64_t n) {
    if (!mem_ || capacity_ < n || dtype_ != t || device_ != d) reset(d, t, n);
  }
  void release() {
    mem_.reset();
    capacity_ = 0;
  }

  explicit operator bool() const { return bool(mem_); }
  DType dtype() const { return dtype_; }
  Device device() const { return device_; }
  int64_t capacity() const { return capacity_; }
  size_t bytes() const { return mem_ ? mem_->bytes : 0; }
  uint8_t* data() const { return mem_ ? static_cast<uint8_t*>(mem_->data) : nullptr; }
  // Address of element i.
  uint8_t* at(int64_t i) const { return data() + size_t(i) * dtypeSize(dtype_); }

  // A View of the elements [offset, offset + prod(shape)).
  View view(std::initializer_list<int64_t> shape, int64_t offset = 0) const {
    int64_t n = 1;
    for (int64_t s : shape) n *= s;
    if (!mem_ || offset + n > capacity_)
      throw Error("internal: buffer view of " + std::to_string(n) + " elements at " + std::to_string(offset) +
                  " exceeds capacity " + std::to_string(capacity_));
    return makeView(at(offset), dtype_, device_, shape);
  }

 private:
  std::shared_ptr<Storage> mem_;
  Device device_ = Device::cpu;
  DType dtype_ = DType::f32;
  int64_t capacity_ = 0;
};

}  // namespace dl
