// The fixed tree of cpu_gemm.h over a group's 16 lane accumulators: lanes i + i+8, then i + i+4, then i + i+2, then
// 0 + 1. One definition for every kernel file (AVX2: lanes 0-7 and 8-15 in two ymm; AVX-512: one zmm).
#pragma once
#include <immintrin.h>

namespace dl::cpu::gemm_detail {

inline float reduce16(__m256 lo, __m256 hi) {
  __m256 s8 = _mm256_add_ps(lo, hi);
  __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
  __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
  return _mm_cvtss_f32(s2) + _mm_cvtss_f32(_mm_shuffle_ps(s2, s2, 1));
}

__attribute__((target("avx512f,avx512dq"))) inline float reduce16(__m512 v) {
  return reduce16(_mm512_castps512_ps256(v), _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
}

}  // namespace dl::cpu::gemm_detail
