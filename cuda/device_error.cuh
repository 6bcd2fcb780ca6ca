// Bad indices found by a kernel (token ids, page ids, slots) cannot throw on the device: the kernel skips the
// access and records the first such error here (host-mapped memory); gpu::synchronize() turns it into a dl::Error.
#pragma once
#include <cstdint>

namespace dl::gpu {

enum class DeviceErrorCode : int32_t {
  none = 0,
  embeddingId = 1,   // value = token id, limit = vocabulary size
  kvWriteSlot = 2,   // value = slot, limit = numPages * pageSize
  pageCopyPage = 3,  // value = page id, limit = numPages
  decodePage = 4,    // value = page id, limit = numPages
  prefillPage = 5,   // value = page id, limit = numPages
  seqLength = 6,     // value = tokens the page table holds, limit = tokens asked for (prefill: qLen > kvLen)
  sampleParam = 7,   // value = row with a bad temperature / topP / topK
  queryLength = 8,   // value = a sequence's query count, limit = the launch's maxQueryLen
  maskRow = 9,       // value = a rowOf entry of maskLogits, limit = the mask's rows R
};

struct DeviceErrorSlot {
  int32_t code;
  int32_t pad;
  long long value;
  long long limit;
};

// Device-visible pointer to the one error slot (host-mapped, allocated on first use).
DeviceErrorSlot* deviceErrorSlot();
// Reads and clears the slot after a synchronize; throws dl::Error describing the first recorded error.
void throwIfDeviceError();

#if defined(__CUDACC__)
__device__ __forceinline__ void reportDeviceError(DeviceErrorSlot* slot, DeviceErrorCode code, long long value,
                                                  long long limit) {
  if (atomicCAS(&slot->code, 0, -1) == 0) {  // first error wins; -1 marks "being written"
    slot->value = value;
    slot->limit = limit;
    __threadfence_system();
    atomicExch(&slot->code, int32_t(code));
  }
}
#endif

}  // namespace dl::gpu
