// KV page write on the CPU: kCache[slot] = k[t], vCache[slot] = v[t] with slot = slots[t] = page * pageSize +
// offset. k, v [T,Hk,D] f32 (or the cache's dtype); caches [numPages, pageSize, Hk, D] f32|bf16|f16. Every slot
// is checked before anything is written, so a bad batch leaves the cache untouched.
#include <cstring>

#include "cpu_dtype.h"
#include "kernels.h"
#include "threadpool.h"

namespace dl::cpu {

void kvWrite(const View& k, const View& v, const View& kCache, const View& vCache, const View& slots) {
  if (k.dtype != DType::f32 && k.dtype != kCache.dtype)
    throw Error(std::string("kvWrite: k and v must be f32 or the cache's dtype (") + dtypeName(kCache.dtype) + "), got " +
                dtypeName(k.dtype));
  if (v.dtype != k.dtype) throw Error("kvWrite: k and v must share one dtype");
  const int64_t T = k.shape[0], row = k.shape[1] * k.shape[2];
  const int64_t numSlots = kCache.shape[0] * kCache.shape[1];
  const int32_t* slot = slots.as<int32_t>();
  for (int64_t t = 0; t < T; t++)
    if (slot[t] < 0 || slot[t] >= numSlots)
      throw Error("kvWrite: slots[" + std::to_string(t) + "] = " + std::to_string(slot[t]) + " is outside the cache's " +
                  std::to_string(numSlots) + " slots (" + std::to_string(kCache.shape[0]) + " pages of " +
                  std::to_string(kCache.shape[1]) + ")");
  parallelFor(T, 16, [&](int64_t lo, int64_t hi) {
    for (int64_t t = lo; t < hi; t++) {
      const int64_t dst = int64_t(slot[t]) * row;
      for (const auto& [src, cache] : {std::pair{&k, &kCache}, std::pair{&v, &vCache}}) {
        if (src->dtype == cache->dtype) {
          const size_t es = dtypeSize(cache->dtype);
          std::memcpy(static_cast<char*>(cache->data) + size_t(dst) * es,
                      static_cast<const char*>(src->data) + size_t(t * row) * es, size_t(row) * es);
        } else {
          for (int64_t i = 0; i < row; i++) storeF32(cache->data, cache->dtype, dst + i, src->as<float>()[t * row + i]);
        }
      }
    }
  });
}

// The CPU has no launches to save: the two ops, in order.
void ropeKvWrite(const View& q, const View& k, const View& v, const View& positions, const View& invFreq,
                 const View& kCache, const View& vCache, const View& slots) {
  rope(q, k, positions, invFreq);
  kvWrite(k, v, kCache, vCache, slots);
}

}  // namespace dl::cpu
