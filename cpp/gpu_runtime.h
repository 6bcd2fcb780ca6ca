// The CUDA runtime as the rest of the addon sees it. Implemented in cuda/runtime.cu when built with CUDA, and by
// stubs (cpp/gpu_stub.cc) otherwise; either way every call reports failure by throwing dl::Error.
#pragma once
#include <cstddef>
#include <string>
#include <vector>

namespace dl::gpu {

struct DeviceInfo {
  int index;
  std::string name;
  int major, minor;  // compute capability
  size_t totalMemoryBytes, freeMemoryBytes;
  int multiprocessors;
};

bool compiled();              // built with CUDA?
bool available(std::string* reason);  // a usable device is present (reason says why not)
std::vector<DeviceInfo> devices();
std::string runtimeVersion();

void* malloc(size_t bytes);
void free(void* p) noexcept;
void copyHostToDevice(void* dst, const void* src, size_t bytes);
void copyDeviceToHost(void* dst, const void* src, size_t bytes);
void copyDeviceToDevice(void* dst, const void* src, size_t bytes);
void synchronize();  // waits for the backend stream; throws on any asynchronous error

}  // namespace dl::gpu
