// exp(x) in f32 for the CPU kernels (SiLU, attention's softmax), 8 lanes (AVX2 + FMA: the build's baseline is
// x86-64-v3) and one lane, with the same operations in the same order, so a value's bits never depend on whether it
// fell in a vector or in a loop's tail, nor on the C library (glibc's expf differs between versions).
// x = q ln2 + s (q = rint(x / ln2), ln2 in two parts, Cody-Waite), e^s = 1 + (s + s^2 u(s)) with SLEEF's degree-5
// minimax u (expf_u10: within 1 ulp), times 2^q as 2^(q>>1) * 2^(q - (q>>1)) (exact; one rounding when the result
// is subnormal). x < -104 gives +0, x > log(FLT_MAX) gives +inf, NaN stays NaN.
#pragma once
#include <immintrin.h>

#include <cmath>
#include <cstdint>
#include <cstring>

namespace dl::cpu {

namespace expf_detail {
constexpr float kLog2e = 1.442695040888963407359924681001892137f;
constexpr float kLn2Hi = 0.693145751953125f, kLn2Lo = 1.428606765330187045e-06f;
constexpr float kC[6] = {0.000198527617612853646278381f, 0.00139304355252534151077271f, 0.00833336077630519866943359f,
                         0.0416664853692054748535156f, 0.166666671633720397949219f, 0.5f};
constexpr float kLo = -104.f, kHi = 88.72283935546875f;  // below: +0; above: +inf (log(FLT_MAX) = 88.7228391)
}  // namespace expf_detail

inline __m256 exp8(__m256 x) {
  using namespace expf_detail;
  const __m256 xc = _mm256_min_ps(_mm256_set1_ps(89.f), _mm256_max_ps(_mm256_set1_ps(kLo - 1.f), x));  // NaN kept
  const __m256 q = _mm256_round_ps(_mm256_mul_ps(xc, _mm256_set1_ps(kLog2e)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 s = _mm256_fnmadd_ps(q, _mm256_set1_ps(kLn2Hi), xc);
  s = _mm256_fnmadd_ps(q, _mm256_set1_ps(kLn2Lo), s);
  __m256 u = _mm256_set1_ps(kC[0]);
#pragma GCC unroll 5
  for (int i = 1; i < 6; i++) u = _mm256_fmadd_ps(u, s, _mm256_set1_ps(kC[i]));
  u = _mm256_add_ps(_mm256_set1_ps(1.f), _mm256_fmadd_ps(_mm256_mul_ps(s, s), u, s));
  const __m256i qi = _mm256_cvtps_epi32(q), q1 = _mm256_srai_epi32(qi, 1), q2 = _mm256_sub_epi32(qi, q1);
  const __m256i bias = _mm256_set1_epi32(127);
  u = _mm256_mul_ps(u, _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(q1, bias), 23)));
  u = _mm256_mul_ps(u, _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(q2, bias), 23)));
  u = _mm256_andnot_ps(_mm256_cmp_ps(x, _mm256_set1_ps(kLo), _CMP_LT_OQ), u);
  return _mm256_blendv_ps(u, _mm256_set1_ps(INFINITY), _mm256_cmp_ps(x, _mm256_set1_ps(kHi), _CMP_GT_OQ));
}

inline float exp1(float x) {
  using namespace expf_detail;
  if (x != x) return x;
  if (x < kLo) return 0.f;
  if (x > kHi) return INFINITY;
  const float q = std::nearbyint(x * kLog2e);
  float s = std::fma(-q, kLn2Hi, x);
  s = std::fma(-q, kLn2Lo, s);
  float u = kC[0];
#pragma GCC unroll 5
  for (int i = 1; i < 6; i++) u = std::fma(u, s, kC[i]);
  u = 1.f + std::fma(s * s, u, s);
  const int32_t qi = int32_t(q), q1 = qi >> 1, q2 = qi - q1;
  auto pow2 = [](int32_t e) {
    const uint32_t b = uint32_t(e + 127) << 23;
    float f;
    std::memcpy(&f, &b, 4);
    return f;
  };
  return u * pow2(q1) * pow2(q2);
}

}  // namespace dl::cpu
