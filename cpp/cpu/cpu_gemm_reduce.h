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

// The same tree for 16 accumulators at once, transposed (the same additions of the same pairs, so the same bits as
// reduce16 on each): 15 adds and 31 shuffles instead of 16 x 7 instructions. sums[o] = tree(v[o]) for o < n;
// v[n..16) are not read.
__attribute__((target("avx512f,avx512dq"), always_inline)) inline void reduce16x16(const __m512* v, int n, float* sums) {
  __m512 in[16], s8[8], s4[4], s2[2];
#pragma GCC unroll 16
  for (int i = 0; i < 16; i++) in[i] = i < n ? v[i] : _mm512_setzero_ps();
  // s8[p]: 128-bit lanes 0-1 hold the 8 sums of v[2p], lanes 2-3 those of v[2p+1]
#pragma GCC unroll 8
  for (int p = 0; p < 8; p++) {
    const __m512 a = in[2 * p], b = in[2 * p + 1];
    s8[p] = _mm512_add_ps(_mm512_shuffle_f32x4(a, b, 0x44), _mm512_shuffle_f32x4(a, b, 0xEE));
  }
  // s4[q]: 128-bit lane L holds the 4 sums of v[4q + L]
#pragma GCC unroll 4
  for (int q = 0; q < 4; q++)
    s4[q] = _mm512_add_ps(_mm512_shuffle_f32x4(s8[2 * q], s8[2 * q + 1], 0x88),
                          _mm512_shuffle_f32x4(s8[2 * q], s8[2 * q + 1], 0xDD));
  // s2[r]: lane L elements 0-1 hold the 2 sums of v[8r + L], elements 2-3 those of v[8r + 4 + L]
#pragma GCC unroll 2
  for (int r = 0; r < 2; r++)
    s2[r] = _mm512_add_ps(_mm512_shuffle_ps(s4[2 * r], s4[2 * r + 1], 0x44),
                          _mm512_shuffle_ps(s4[2 * r], s4[2 * r + 1], 0xEE));
  // element 4L + e holds the sum of v[4e + L]; permuted into order
  const __m512 s = _mm512_add_ps(_mm512_shuffle_ps(s2[0], s2[1], 0x88), _mm512_shuffle_ps(s2[0], s2[1], 0xDD));
  const __m512i order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
  _mm512_mask_storeu_ps(sums, __mmask16(n >= 16 ? 0xffffu : (1u << n) - 1), _mm512_permutexvar_ps(order, s));
}

// n accumulators (any n), 16 at a time.
__attribute__((target("avx512f,avx512dq"), always_inline)) inline void reduceAll(const __m512* v, int n, float* sums) {
#pragma GCC unroll 4
  for (int o = 0; o < n; o += 16) reduce16x16(v + o, n - o < 16 ? n - o : 16, sums + o);
}

}  // namespace dl::cpu::gemm_detail
