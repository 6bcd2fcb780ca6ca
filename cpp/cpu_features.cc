#include "cpu_features.h"
#include <cstdlib>
#include <cstring>

namespace dl {
Simd simdLevel() {
  static const Simd level = [] {
    // DELIBERATE_SIMD=avx2 forces the AVX2 path (tests and benchmarks compare both).
    const char* force = std::getenv("DELIBERATE_SIMD");
    if (force && std::strcmp(force, "avx2") == 0) return Simd::avx2;
    __builtin_cpu_init();
    bool a512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
    return a512 ? Simd::avx512 : Simd::avx2;
  }();
  return level;
}
const char* simdName(Simd s) { return s == Simd::avx512 ? "avx512" : "avx2"; }
}  // namespace dl
