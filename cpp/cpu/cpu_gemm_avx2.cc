// AVX2/FMA GEMM accumulation kernels (the x86-64-v3 baseline): an MR x NR tile of outputs, each with 16 lane
// accumulators held in two ymm (lanes 0-7, 8-15), so the bits match the AVX-512 path (schedule in cpu_gemm.h).
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <utility>

#include "cpu_gemm.h"
#include "cpu_gemm_reduce.h"

namespace dl::cpu::gemm_detail {
namespace {

constexpr int kMR = kAvx2MR, kNR = kAvx2NR;

template <DType WD> inline __m256 load8(const void* w, int64_t i) {
  if constexpr (WD == DType::f32) {
    return _mm256_loadu_ps(static_cast<const float*>(w) + i);
  } else if constexpr (WD == DType::i8) {  // int8 -> f32 is exact: the products are those of the dequantized q
    return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(static_cast<const int8_t*>(w) + i))));
  } else {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(static_cast<const uint16_t*>(w) + i)));
  }
}

template <DType WD> inline float toF32(const void* w, int64_t i) {
  if constexpr (WD == DType::f32) return static_cast<const float*>(w)[i];
  else if constexpr (WD == DType::i8) return float(static_cast<const int8_t*>(w)[i]);
  else return f16ToF32(static_cast<const uint16_t*>(w)[i]);
}

// Elements [from, to) of the group of 16 at k = g (the rest zero) added to the accumulators in memory: a
// partition's partial first or last group, kept out of accum()'s main loop so that its accumulators stay in
// registers.
template <int MR, int NR, DType WD>
__attribute__((noinline)) void edge(const float* x, int64_t ldx, const char* w, int64_t ldw, int64_t g, int64_t from,
                                    int64_t to, float* accIO) {
  alignas(32) float xb[MR][16] = {}, wb[NR][16] = {};
  for (int64_t t = from; t < to; t++) {
    for (int i = 0; i < MR; i++) xb[i][t - g] = x[i * ldx + t];
    for (int j = 0; j < NR; j++) wb[j][t - g] = toF32<WD>(w + size_t(j * ldw) * dtypeSize(WD), t);
  }
  for (int i = 0; i < MR; i++)
    for (int j = 0; j < NR; j++)
      for (int h = 0; h < 2; h++) {
        float* a = accIO + (i * NR + j) * 16 + 8 * h;
        _mm256_storeu_ps(a, _mm256_fmadd_ps(_mm256_load_ps(xb[i] + 8 * h), _mm256_load_ps(wb[j] + 8 * h), _mm256_loadu_ps(a)));
      }
}

template <int MR, int NR, DType WD>
void accum(const void* xv, int64_t ldx, const void* wv, int64_t ldw, int64_t k, int64_t k1, float* accIO, float* sums,
           int flags) {
  const float* x = static_cast<const float*>(xv);
  const char* w = static_cast<const char*>(wv);
  const size_t wsz = dtypeSize(WD);
  constexpr int kLanes = MR * NR * 16;
  int64_t g = k & ~int64_t(15);
  bool zero = flags & kStartAtZero;
  if (g < k) {
    if (zero) std::fill(accIO, accIO + kLanes, 0.f);
    zero = false;
    edge<MR, NR, WD>(x, ldx, w, ldw, g, k, std::min(k1, g + 16), accIO);
    g += 16;
  }
  __m256 acc[MR][NR][2];
  for (int i = 0; i < MR; i++)
    for (int j = 0; j < NR; j++)
      for (int h = 0; h < 2; h++)
        acc[i][j][h] = zero ? _mm256_setzero_ps() : _mm256_loadu_ps(accIO + (i * NR + j) * 16 + 8 * h);
  for (; g + 16 <= k1; g += 16) {
#pragma GCC unroll 2
    for (int h = 0; h < 2; h++) {
      __m256 xv[MR];
#pragma GCC unroll 2
      for (int i = 0; i < MR; i++) xv[i] = _mm256_loadu_ps(x + i * ldx + g + 8 * h);
#pragma GCC unroll 3
      for (int j = 0; j < NR; j++) {
        __m256 wj = load8<WD>(w + size_t(j * ldw) * wsz, g + 8 * h);
        __asm__("" : "+x"(wj));  // one load per W vector: keeps GCC from re-loading it in every FMA
#pragma GCC unroll 2
        for (int i = 0; i < MR; i++) acc[i][j][h] = _mm256_fmadd_ps(xv[i], wj, acc[i][j][h]);
      }
    }
  }
  const bool tail = g < k1;
  for (int i = 0; i < MR; i++)
    for (int j = 0; j < NR; j++) {
      if ((flags & kReduce) && !tail) {
        sums[i * NR + j] = reduce16(acc[i][j][0], acc[i][j][1]);
      } else {
        _mm256_storeu_ps(accIO + (i * NR + j) * 16, acc[i][j][0]);
        _mm256_storeu_ps(accIO + (i * NR + j) * 16 + 8, acc[i][j][1]);
      }
    }
  if (tail) {
    edge<MR, NR, WD>(x, ldx, w, ldw, g, g, k1, accIO);
    if (flags & kReduce)
      for (int o = 0; o < MR * NR; o++) sums[o] = reduce16(_mm256_loadu_ps(accIO + o * 16), _mm256_loadu_ps(accIO + o * 16 + 8));
  }
}

template <DType WD, int MR, int... NRs> constexpr auto rowOf(std::integer_sequence<int, NRs...>) {
  return std::array<AccumFn, kNR>{&accum<MR, NRs + 1, WD>...};
}
template <DType WD, int... MRs> constexpr auto tableOf(std::integer_sequence<int, MRs...>) {
  return std::array<std::array<AccumFn, kNR>, kMR>{rowOf<WD, MRs + 1>(std::make_integer_sequence<int, kNR>{})...};
}
template <DType WD> constexpr auto kTable = tableOf<WD>(std::make_integer_sequence<int, kMR>{});

}  // namespace

AccumFn accumAvx2(DType w, int mr, int nr) {
  switch (w) {
    case DType::f32: return kTable<DType::f32>[mr - 1][nr - 1];
    case DType::f16: return kTable<DType::f16>[mr - 1][nr - 1];
    case DType::i8: return kTable<DType::i8>[mr - 1][nr - 1];
    default: throw Error("gemm: the f32 kernels take w as f32, f16 or i8 (bf16 has its own)");
  }
}

}  // namespace dl::cpu::gemm_detail
