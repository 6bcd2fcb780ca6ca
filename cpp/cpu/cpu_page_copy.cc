// Page copy on the CPU (copy-on-write of a shared page): whole pages src[i] -> dst[i] in both caches, in order.
// Every page index is checked first; a bad one throws naming the entry and leaves the caches untouched.
#include <cstring>

#include "kernels.h"

namespace dl::cpu {

void pageCopy(const View& kCache, const View& vCache, const View& src, const View& dst) {
  const int64_t numPages = kCache.shape[0], n = src.numel();
  const size_t pageBytes = size_t(kCache.numel() / numPages) * dtypeSize(kCache.dtype);
  for (int64_t i = 0; i < n; i++)
    for (const auto& [name, idx] : {std::pair{"src", &src}, std::pair{"dst", &dst}}) {
      const int32_t p = idx->as<int32_t>()[i];
      if (p < 0 || p >= numPages)
        throw Error(std::string("pageCopy: ") + name + "[" + std::to_string(i) + "] = page " + std::to_string(p) +
                    " is outside the cache's " + std::to_string(numPages) + " pages");
    }
  // Sequential on purpose: a page may be the destination of one pair and the source of a later one.
  for (int64_t i = 0; i < n; i++) {
    const size_t s = size_t(src.as<int32_t>()[i]) * pageBytes, d = size_t(dst.as<int32_t>()[i]) * pageBytes;
    if (s == d) continue;
    std::memcpy(static_cast<char*>(kCache.data) + d, static_cast<const char*>(kCache.data) + s, pageBytes);
    std::memcpy(static_cast<char*>(vCache.data) + d, static_cast<const char*>(vCache.data) + s, pageBytes);
  }
}

}  // namespace dl::cpu
