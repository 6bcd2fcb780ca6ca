// Paged KV cache writes on the GPU: scatter new tokens' K/V into their slots, and copy whole pages (copy-on-write).
#include <cstdlib>

#include "common.cuh"
#include "rope_kv.cuh"

namespace dl::gpu {

// ---- kernels ----
// k, v: (T, Hk, D); caches: (numPages, pageSize, Hk, D); slots: (T). One block per token writes its Hk*D row.
__global__ void kvWriteKernel(const void* k, const void* v, DType st, void* kCache, void* vCache, DType ct,
                              const int32_t* slots, int64_t rowElems, int64_t numSlots, DeviceErrorSlot* err) {
  pdlStart();  // cuda/pdl.cuh
  int64_t t = blockIdx.x, slot = slots[t];
  if (slot < 0 || slot >= numSlots) {
    if (threadIdx.x == 0) reportDeviceError(err, DeviceErrorCode::kvWriteSlot, slot, numSlots);
    return;
  }
  for (int64_t e = threadIdx.x; e < rowElems; e += blockDim.x) {
    storeF(kCache, slot * rowElems + e, ct, loadF(k, t * rowElems + e, st));
    storeF(vCache, slot * rowElems + e, ct, loadF(v, t * rowElems + e, st));
  }
}

// rope then kvWrite, one block per token: q's heads rotated in place; k's rotated in place and, rounded to k's dtype
// as ropeKernel stores them, written to the token's slot; v copied there. ropeKernel's and kvWriteKernel's
// arithmetic, so their bits, in one launch.
struct RopeKvArgs {
  void* q;
  void* k;
  const void* v;
  DType qt, kt;  // v has k's dtype (checkKvWrite)
  int64_t Hq, Hk, D;
  const int32_t* positions;
  const float* invFreq;
  void* kCache;
  void* vCache;
  DType ct;
  const int32_t* slots;
  int64_t numSlots;
  DeviceErrorSlot* err;
};

__global__ void ropeKvWriteKernel(RopeKvArgs a) {
  pdlStart();  // cuda/pdl.cuh
  const int64_t t = blockIdx.x, half = a.D / 2, rowElems = a.Hk * a.D, slot = a.slots[t];
  const int32_t pos = a.positions[t];
  const bool slotOk = slot >= 0 && slot < a.numSlots;
  if (!slotOk && threadIdx.x == 0) reportDeviceError(a.err, DeviceErrorCode::kvWriteSlot, slot, a.numSlots);
  for (int64_t e = threadIdx.x; e < (a.Hq + a.Hk) * half; e += blockDim.x) {
    const int64_t h = e / half, i = e % half;
    const bool isQ = h < a.Hq;
    void* x = isQ ? a.q : a.k;
    const DType xt = isQ ? a.qt : a.kt;
    const int64_t base = (t * (isQ ? a.Hq : a.Hk) + (isQ ? h : h - a.Hq)) * a.D;
    float r1, r2;
    ropeRotate(loadF(x, base + i, xt), loadF(x, base + i + half, xt), pos, a.invFreq[i], r1, r2);
    storeF(x, base + i, xt, r1);
    storeF(x, base + i + half, xt, r2);
    if (!isQ && slotOk) {
      const int64_t c = slot * rowElems + (h - a.Hq) * a.D;
      storeF(a.kCache, c + i, a.ct, roundTo(r1, xt));
      storeF(a.kCache, c + i + half, a.ct, roundTo(r2, xt));
    }
  }
  if (slotOk)
    for (int64_t e = threadIdx.x; e < rowElems; e += blockDim.x)
      storeF(a.vCache, slot * rowElems + e, a.ct, loadF(a.v, t * rowElems + e, a.kt));
}

// Copies page src[i] -> dst[i] in both caches, 16-byte words; blockIdx.y picks the cache. pageWords: page size in
// 16-byte words (the launcher checks divisibility, else falls back to 4-byte words via the same kernel on uint32).
template <typename Word>
__global__ void pageCopyKernel(void* kCache, void* vCache, const int32_t* src, const int32_t* dst, int64_t pageWords,
                               int64_t numPages, DeviceErrorSlot* err) {
  pdlStart();  // cuda/pdl.cuh
  int64_t i = blockIdx.x;
  int64_t s = src[i], d = dst[i];
  if (s < 0 || s >= numPages || d < 0 || d >= numPages) {
    if (threadIdx.x == 0 && blockIdx.y == 0)
      reportDeviceError(err, DeviceErrorCode::pageCopyPage, (s < 0 || s >= numPages) ? s : d, numPages);
    return;
  }
  Word* cache = static_cast<Word*>(blockIdx.y == 0 ? kCache : vCache);
  for (int64_t w = threadIdx.x; w < pageWords; w += blockDim.x) cache[d * pageWords + w] = cache[s * pageWords + w];
}

// ---- launchers ----
void checkKvWrite(const char* op, const View& k, const View& v, const View& kCache, const View& vCache, const View& slots) {
  requireCuda(op, "k", k), requireCuda(op, "v", v), requireCuda(op, "kCache", kCache);
  requireCuda(op, "vCache", vCache), requireCuda(op, "slots", slots), requireI32(op, "slots", slots);
  requireFloatT(op, "k", k), requireFloatT(op, "kCache", kCache);
  if (k.dtype != v.dtype || kCache.dtype != vCache.dtype) fail(op, "k/v and kCache/vCache must share dtypes");
  if (k.ndim != 3 || kCache.ndim != 4 || k.shape[1] != kCache.shape[2] || k.shape[2] != kCache.shape[3] ||
      slots.numel() != k.shape[0] || v.numel() != k.numel() || vCache.numel() != kCache.numel())
    fail(op, "k, v (T, Hk, D), caches (numPages, pageSize, Hk, D) and slots (T) disagree");
}

void kvWrite(const View& k, const View& v, const View& kCache, const View& vCache, const View& slots) {
  checkKvWrite("kvWrite", k, v, kCache, vCache, slots);
  int64_t T = k.shape[0];
  if (T == 0) return;
  int64_t rowElems = k.shape[1] * k.shape[2];
  launchKernel("kvWriteKernel", kvWriteKernel, unsigned(T), 256, 0, k.data, v.data, k.dtype, kCache.data,
               vCache.data, kCache.dtype, slots.as<int32_t>(), rowElems, kCache.shape[0] * kCache.shape[1],
               deviceErrorSlot());
}

// One launch doing both: the bits of rope then kvWrite (level with the two launches on an H100, bench/RESULTS-gpu.md).
void ropeKvWrite(const View& q, const View& k, const View& v, const View& positions, const View& invFreq,
                 const View& kCache, const View& vCache, const View& slots) {
  const char* op = "ropeKvWrite";
  checkRope(op, q, k, positions, invFreq);
  checkKvWrite(op, k, v, kCache, vCache, slots);
  const int64_t T = q.shape[0];
  if (T == 0) return;
  RopeKvArgs a{q.data, k.data, v.data, q.dtype, k.dtype, q.shape[1], k.shape[1], q.shape[2], positions.as<int32_t>(),
               invFreq.as<float>(), kCache.data, vCache.data, kCache.dtype, slots.as<int32_t>(),
               kCache.shape[0] * kCache.shape[1], deviceErrorSlot()};
  launchKernel("ropeKvWriteKernel", ropeKvWriteKernel, unsigned(T), 256, 0, a);
}

void pageCopy(const View& kCache, const View& vCache, const View& src, const View& dst) {
  const char* op = "pageCopy";
  requireCuda(op, "kCache", kCache), requireCuda(op, "vCache", vCache), requireCuda(op, "src", src);
  requireCuda(op, "dst", dst), requireI32(op, "src", src), requireI32(op, "dst", dst);
  if (kCache.ndim != 4 || vCache.numel() != kCache.numel() || kCache.dtype != vCache.dtype)
    fail(op, "kCache and vCache must be (numPages, pageSize, Hk, D) of one dtype");
  if (src.numel() != dst.numel()) fail(op, "src and dst must hold the same number of pages");
  int64_t n = src.numel();
  if (n == 0) return;
  if (n > 0x7fffffff) fail(op, "too many pages");
  int64_t pageBytes = kCache.numel() / kCache.shape[0] * int64_t(dtypeSize(kCache.dtype));
  dim3 grid(unsigned(n), 2);
  if (pageBytes % 16 == 0 && aligned16(kCache.data) && aligned16(vCache.data)) {
    launchKernel("pageCopyKernel", pageCopyKernel<uint4>, grid, 256, 0, kCache.data, vCache.data,
                 src.as<int32_t>(), dst.as<int32_t>(), pageBytes / 16, kCache.shape[0], deviceErrorSlot());
  } else {
    launchKernel("pageCopyKernel", pageCopyKernel<uint16_t>, grid, 256, 0, kCache.data, vCache.data,
                 src.as<int32_t>(), dst.as<int32_t>(), pageBytes / 2, kCache.shape[0], deviceErrorSlot());
  }
}

}  // namespace dl::gpu
