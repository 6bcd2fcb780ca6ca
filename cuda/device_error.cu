// The host side of device-reported index errors: one host-mapped slot, read after every synchronize.
#include <mutex>
#include <string>

#include "check.cuh"
#include "device_error.cuh"

namespace dl::gpu {
namespace {
std::once_flag slotOnce;
DeviceErrorSlot* hostSlot = nullptr;
DeviceErrorSlot* devSlot = nullptr;

const char* describe(DeviceErrorCode c) {
  switch (c) {
    case DeviceErrorCode::embeddingId: return "embedding: token id %v is out of range [0, %l); check the ids against the vocabulary size";
    case DeviceErrorCode::kvWriteSlot: return "kvWrite: slot %v is out of range [0, %l) (numPages * pageSize); check the block table";
    case DeviceErrorCode::pageCopyPage: return "pageCopy: page id %v is out of range [0, %l)";
    case DeviceErrorCode::decodePage: return "attentionDecode: page id %v in 'indices' is out of range [0, %l)";
    case DeviceErrorCode::prefillPage: return "attentionPrefill: page id %v in 'indices' is out of range [0, %l)";
    case DeviceErrorCode::seqLength: return "attention: a sequence's page table holds %v tokens but %l are needed; check indptr/lastPageLen/qIndptr";
    case DeviceErrorCode::queryLength: return "attentionPrefill: a sequence has %v queries, more than maxQueryLen %l; pass the longest query count or 0";
    case DeviceErrorCode::maskRow: return "maskLogits: rowOf holds %v, not a mask row in [0, %l) or -1 (unmasked)";
    case DeviceErrorCode::sampleParam: return "sample: row %v has a bad temperature, topP or topK (temperature must be finite and >= 0, topP in (0, 1], topK >= 0)";
    default: return "a kernel reported error %v (limit %l)";
  }
}
}  // namespace

DeviceErrorSlot* deviceErrorSlot() {
  std::call_once(slotOnce, [] {
    void* p = nullptr;
    if (cudaHostAlloc(&p, sizeof(DeviceErrorSlot), cudaHostAllocMapped) != cudaSuccess) {
      (void)cudaGetLastError();
      return;
    }
    hostSlot = static_cast<DeviceErrorSlot*>(p);
    *hostSlot = DeviceErrorSlot{0, 0, 0, 0};
    void* d = nullptr;
    if (cudaHostGetDevicePointer(&d, p, 0) != cudaSuccess) {
      (void)cudaGetLastError();
      hostSlot = nullptr;
      return;
    }
    devSlot = static_cast<DeviceErrorSlot*>(d);
  });
  if (!devSlot) throw Error("CUDA backend: could not allocate the host-mapped error slot (cudaHostAlloc failed)");
  return devSlot;
}

void throwIfDeviceError() {
  if (!hostSlot) return;
  volatile DeviceErrorSlot* s = hostSlot;
  int32_t code = s->code;
  if (code == 0) return;
  long long value = s->value, limit = s->limit;
  s->code = 0;
  std::string m = describe(DeviceErrorCode(code));
  auto put = [&](const char* key, long long v) {
    size_t at = m.find(key);
    if (at != std::string::npos) m.replace(at, 2, std::to_string(v));
  };
  put("%v", value);
  put("%l", limit);
  throw Error(m);
}

}  // namespace dl::gpu
