// Which SIMD level this CPU offers, detected once at run time (one binary runs on any x86-64-v3 machine).
#pragma once
namespace dl {
enum class Simd { avx2, avx512 };
Simd simdLevel();
const char* simdName(Simd s);
}  // namespace dl
