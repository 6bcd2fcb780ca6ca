#include "cpu_features.h"
#include <cstdlib>
#include <cstring>

namespace dl {
Simd simdLevel() {
  static const Simd level = [] {
    // DELIBERATE_SIMD=avx2 or avx512 caps the level (tests and benchmarks compare the paths).
    const char* force = std::getenv("DELIBERATE_SIMD");
    if (force && std::strcmp(force, "avx2") == 0) return Simd::avx2;
    __builtin_cpu_init();
    bool a512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
    if (!a512) return Simd::avx2;
    if (force && std::strcmp(force, "avx512") == 0) return Simd::avx512;
    return __builtin_cpu_supports("avx512bf16") ? Simd::avx512bf16 : Simd::avx512;
  }();
  return level;
}
const char* simdName(Simd s) { return s == Simd::avx512bf16 ? "avx512-bf16" : s == Simd::avx512 ? "avx512" : "avx2"; }
}  // namespace dl
