// AVX-512 GEMM accumulation kernels (compiled for AVX-512 per function, chosen at run time): an MR x NR tile of
// outputs, each with one zmm of 16 lane accumulators (schedule in cpu_gemm.h).
// GCC 12 flags its own _mm512_undefined_* helpers inside the AVX-512 intrinsics.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <utility>

#include "cpu_gemm.h"
#include "cpu_gemm_reduce.h"

#define DL_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,fma,f16c")))

namespace dl::cpu::gemm_detail {
namespace {

constexpr int kMR = kAvx512MR, kNR = kAvx512NR;

template <DType WD> DL_AVX512 inline __m512 widen16(__m256i h) { return _mm512_cvtph_ps(h); }

template <DType WD> DL_AVX512 inline __m512 load16(const void* w, int64_t i) {
  if constexpr (WD == DType::f32) return _mm512_loadu_ps(static_cast<const float*>(w) + i);
  else if constexpr (WD == DType::i8)  // int8 -> f32 is exact: the products are those of the dequantized q
    return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(static_cast<const int8_t*>(w) + i))));
  else return widen16<WD>(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(static_cast<const uint16_t*>(w) + i)));
}

// Lanes where mask is set from w[i..], the rest zero.
template <DType WD> DL_AVX512 inline __m512 load16Masked(const void* w, int64_t i, __mmask16 m) {
  if constexpr (WD == DType::f32) return _mm512_maskz_loadu_ps(m, static_cast<const float*>(w) + i);
  else if constexpr (WD == DType::i8)
    return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_maskz_loadu_epi8(m, static_cast<const int8_t*>(w) + i)));
  else return widen16<WD>(_mm256_maskz_loadu_epi16(m, static_cast<const uint16_t*>(w) + i));
}

// One masked group of 16 at k = g added to the accumulators in memory: a partition's partial first or last group,
// kept out of accum()'s main loop so that its accumulators stay in registers. ks: packed W's group stride (cpu_gemm.h
// packedCol; 1 row-major).
template <int MR, int NR, DType WD>
DL_AVX512 __attribute__((noinline)) void edge(const float* x, int64_t ldx, const char* w, int64_t ldw, int64_t ks,
                                              int64_t g, __mmask16 mask, float* accIO) {
  for (int j = 0; j < NR; j++) {
    const __m512 wv = load16Masked<WD>(w + size_t(j * ldw) * dtypeSize(WD), packedCol(g, ks), mask);
    for (int i = 0; i < MR; i++) {
      float* a = accIO + (i * NR + j) * 16;
      _mm512_storeu_ps(a, _mm512_fmadd_ps(_mm512_maskz_loadu_ps(mask, x + i * ldx + g), wv, _mm512_loadu_ps(a)));
    }
  }
}

template <int MR, int NR, DType WD>
DL_AVX512 void accum(const void* xv, int64_t ldx, const void* wv, int64_t ldw, int64_t k, int64_t k1, float* accIO,
                     float* sums, int flags) {
  const float* x = static_cast<const float*>(xv);
  const char* w = static_cast<const char*>(wv);
  const size_t wsz = dtypeSize(WD);
  constexpr int kLanes = MR * NR * 16;
  // packed W (the i8 tiles of a packed panel, cpu_gemm.h): the group of 32 at k lies at packedCol(k, kPackRows)
  const int64_t ks = flags & kPackedW ? kPackRows : 1;
  // Groups of 16 at absolute k (aligned loads when rows are); a partition's partial first and last group masked.
  int64_t g = k & ~int64_t(15);
  bool zero = flags & kStartAtZero;
  if (g < k) {
    if (zero) std::fill(accIO, accIO + kLanes, 0.f);
    zero = false;
    __mmask16 mask = __mmask16(0xffffu << (k - g));
    if (k1 < g + 16) mask &= __mmask16((1u << (k1 - g)) - 1);
    edge<MR, NR, WD>(x, ldx, w, ldw, ks, g, mask, accIO);
    g += 16;
  }
  __m512 acc[MR][NR];
#pragma GCC unroll 4
  for (int i = 0; i < MR; i++)
#pragma GCC unroll 6
    for (int j = 0; j < NR; j++) acc[i][j] = zero ? _mm512_setzero_ps() : _mm512_loadu_ps(accIO + (i * NR + j) * 16);
  for (; g + 16 <= k1; g += 16) {
    __m512 xv[MR];
#pragma GCC unroll 4
    for (int i = 0; i < MR; i++) xv[i] = _mm512_loadu_ps(x + i * ldx + g);
    const int64_t gw = packedCol(g, ks);
#pragma GCC unroll 6
    for (int j = 0; j < NR; j++) {
      __m512 wj = load16<WD>(w + size_t(j * ldw) * wsz, gw);
      __asm__("" : "+v"(wj));  // one load per W vector: keeps GCC from re-loading it in every FMA
#pragma GCC unroll 4
      for (int i = 0; i < MR; i++) acc[i][j] = _mm512_fmadd_ps(xv[i], wj, acc[i][j]);
    }
  }
  const bool tail = g < k1;
  if ((flags & kReduce) && !tail) {
    reduceAll(&acc[0][0], MR * NR, sums);
    return;
  }
#pragma GCC unroll 4
  for (int i = 0; i < MR; i++)
#pragma GCC unroll 6
    for (int j = 0; j < NR; j++) _mm512_storeu_ps(accIO + (i * NR + j) * 16, acc[i][j]);
  if (tail) {
    edge<MR, NR, WD>(x, ldx, w, ldw, ks, g, __mmask16((1u << (k1 - g)) - 1), accIO);
    if (flags & kReduce)
      for (int o = 0; o < MR * NR; o++) sums[o] = reduce16(_mm512_loadu_ps(accIO + o * 16));
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

AccumFn accumAvx512(DType w, int mr, int nr) {
  switch (w) {
    case DType::f32: return kTable<DType::f32>[mr - 1][nr - 1];
    case DType::f16: return kTable<DType::f16>[mr - 1][nr - 1];
    case DType::i8: return kTable<DType::i8>[mr - 1][nr - 1];
    default: throw Error("gemm: the f32 kernels take w as f32, f16 or i8 (bf16 has its own)");
  }
}

}  // namespace dl::cpu::gemm_detail
