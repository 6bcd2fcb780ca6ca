// Device-side view of one layer's paged KV cache (flashinfer CSR form) shared by the attention kernels.
#pragma once
#include "common.cuh"

namespace dl::gpu {

struct PagedKVDev {
  const void* k;  // (numPages, pageSize, Hk, D)
  const void* v;
  const int32_t* indptr;       // (B + 1)
  const int32_t* indices;      // page ids
  const int32_t* lastPageLen;  // (B)
  int numPages, pageSize, Hk, D;
  DType t;
};

inline PagedKVDev pagedKVDev(const PagedKV& kv) {
  return PagedKVDev{kv.kCache.data, kv.vCache.data, kv.indptr.as<int32_t>(), kv.indices.as<int32_t>(),
                    kv.lastPageLen.as<int32_t>(), int(kv.kCache.shape[0]), kv.pageSize, int(kv.kCache.shape[2]),
                    int(kv.kCache.shape[3]), kv.kCache.dtype};
}

// Launcher-side checks common to both attention ops.
inline void checkPagedKV(const char* op, const PagedKV& kv) {
  requireCuda(op, "kCache", kv.kCache), requireCuda(op, "vCache", kv.vCache), requireCuda(op, "indptr", kv.indptr);
  requireCuda(op, "indices", kv.indices), requireCuda(op, "lastPageLen", kv.lastPageLen);
  requireI32(op, "indptr", kv.indptr), requireI32(op, "indices", kv.indices), requireI32(op, "lastPageLen", kv.lastPageLen);
  requireFloatT(op, "kCache", kv.kCache);
  if (kv.kCache.ndim != 4 || kv.vCache.numel() != kv.kCache.numel() || kv.kCache.dtype != kv.vCache.dtype)
    fail(op, "kCache and vCache must be (numPages, pageSize, Hk, D) of one dtype");
  if (kv.pageSize != kv.kCache.shape[1]) fail(op, "pageSize must equal kCache.shape[1]");
  if (kv.indptr.numel() != kv.lastPageLen.numel() + 1) fail(op, "indptr must be (B + 1) for lastPageLen (B)");
  // The CUDA kernels do not mask a sliding window yet: refuse rather than attend to keys the model must not see.
  if (kv.slidingWindow > 0)
    fail(op, "sliding-window attention (window " + std::to_string(kv.slidingWindow) + ") is not implemented on CUDA yet; "
             "load this model with device: \"cpu\"");
}

#if defined(__CUDACC__)
// Tokens sequence b holds: (pages - 1) * pageSize + lastPageLen, 0 for no pages.
__device__ __forceinline__ int seqTokens(const PagedKVDev& kv, int b) {
  int pages = kv.indptr[b + 1] - kv.indptr[b];
  return pages > 0 ? (pages - 1) * kv.pageSize + kv.lastPageLen[b] : 0;
}
// Element offset of token t's row for KV head h in page `page` (the page id that holds t), or -1 (and an error
// report) if that id is out of range.
__device__ __forceinline__ int64_t pageRow(const PagedKVDev& kv, int page, int t, int h, DeviceErrorSlot* err,
                                           DeviceErrorCode code) {
  if (page < 0 || page >= kv.numPages) {
    reportDeviceError(err, code, page, kv.numPages);
    return -1;
  }
  return ((int64_t(page) * kv.pageSize + t % kv.pageSize) * kv.Hk + h) * kv.D;
}
// The same, looking up the page id of sequence b's token t.
__device__ __forceinline__ int64_t tokenRow(const PagedKVDev& kv, int b, int t, int h, DeviceErrorSlot* err,
                                            DeviceErrorCode code) {
  return pageRow(kv, kv.indices[kv.indptr[b] + t / kv.pageSize], t, h, err, code);
}
#endif

}  // namespace dl::gpu
