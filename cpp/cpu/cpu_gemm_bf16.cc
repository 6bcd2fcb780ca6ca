// bf16 x bf16 GEMM accumulation kernels (schedule in cpu_gemm.h): the kernel of cpu_gemm_bf16.inc instantiated for
// AVX2 (two FMAs per pair, lanes in two ymm), AVX-512 without BF16 (two FMAs, one zmm) and AVX512-BF16 (vdpbf16ps).
// All three give identical bits; each is compiled for its instruction set per function and chosen at run time.
// GCC 12 flags its own _mm512_undefined_* helpers inside the AVX-512 intrinsics.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <utility>

#include "cpu_gemm.h"
#include "cpu_gemm_reduce.h"

namespace dl::cpu::gemm_detail {

// AVX2: lanes 0-7 take k g..g+15 of a group (pairs as 8 dwords), lanes 8-15 take g+16..g+31. A dword holding the
// pair (k, k+1) is x[k+1] << 16 | x[k]: masking the low half gives x[k+1] as f32, shifting left gives x[k].
namespace avx2 {
#define DL_TARGET
struct V {
  static constexpr int kHalves = 2;
  static constexpr bool kMasked = false;  // no 16-bit masked loads: edges go through a zero-padded copy
  using Vec = __m256;
  using In = __m256i;
  static In loadMasked(const uint16_t*, uint32_t) { return _mm256_setzero_si256(); }  // not used
  struct Prep {
    __m256 odd, even;
  };
  static Vec zero() { return _mm256_setzero_ps(); }
  static Vec loadAcc(const float* p) { return _mm256_loadu_ps(p); }
  static void storeAcc(float* p, Vec v) { _mm256_storeu_ps(p, v); }
  static In load(const uint16_t* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }
  static Prep prep(In v) {
    return {_mm256_castsi256_ps(_mm256_and_si256(v, _mm256_set1_epi32(int(0xffff0000u)))),
            _mm256_castsi256_ps(_mm256_slli_epi32(v, 16))};
  }
  static void barrier(Prep& p) { __asm__("" : "+x"(p.odd), "+x"(p.even)); }
  static void dot(Vec& acc, const Prep& x, const Prep& w) {
    acc = _mm256_fmadd_ps(x.even, w.even, _mm256_fmadd_ps(x.odd, w.odd, acc));
  }
  static void reduceAll(const Vec* a, int n, float* sums) {
    for (int o = 0; o < n; o++) sums[o] = reduce16(a[2 * o], a[2 * o + 1]);
  }
};
#include "cpu_gemm_bf16.inc"
#undef DL_TARGET
constexpr auto kTable = tableOf<kAvx2Bf16NR>(std::make_integer_sequence<int, kAvx2Bf16MR>{});
constexpr auto kRowTable = rowOf<1>(std::make_integer_sequence<int, kAvx2Bf16RowNR>{});
}  // namespace avx2

// AVX-512: one zmm of 16 lanes; lane l takes the pair at dword l of the group.
#define DL_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16,fma")))
struct V512Base {
  static constexpr int kHalves = 1;
  static constexpr bool kMasked = true;
  using Vec = __m512;
  using In = __m512i;
  DL_TARGET static Vec zero() { return _mm512_setzero_ps(); }
  DL_TARGET static Vec loadAcc(const float* p) { return _mm512_loadu_ps(p); }
  DL_TARGET static void storeAcc(float* p, Vec v) { _mm512_storeu_ps(p, v); }
  DL_TARGET static In load(const uint16_t* p) { return _mm512_loadu_si512(p); }
  DL_TARGET static In loadMasked(const uint16_t* p, uint32_t m) { return _mm512_maskz_loadu_epi16(__mmask32(m), p); }
  DL_TARGET __attribute__((always_inline)) static void reduceAll(const Vec* a, int n, float* sums) { gemm_detail::reduceAll(a, n, sums); }
};

namespace avx512 {
struct V : V512Base {
  struct Prep {
    __m512 odd, even;
  };
  DL_TARGET static Prep prep(In v) {
    return {_mm512_castsi512_ps(_mm512_and_si512(v, _mm512_set1_epi32(int(0xffff0000u)))),
            _mm512_castsi512_ps(_mm512_slli_epi32(v, 16))};
  }
  DL_TARGET static void barrier(Prep& p) { __asm__("" : "+v"(p.odd), "+v"(p.even)); }
  DL_TARGET static void dot(Vec& acc, const Prep& x, const Prep& w) {
    acc = _mm512_fmadd_ps(x.even, w.even, _mm512_fmadd_ps(x.odd, w.odd, acc));
  }
};
#include "cpu_gemm_bf16.inc"
constexpr auto kTable = tableOf<kAvx512Bf16NR>(std::make_integer_sequence<int, kAvx512Bf16MR>{});
}  // namespace avx512

namespace native {
struct V : V512Base {
  using Prep = __m512bh;
  DL_TARGET static Prep prep(In v) { return reinterpret_cast<__m512bh&>(v); }
  DL_TARGET static void barrier(Prep& p) { __asm__("" : "+v"(p)); }
  DL_TARGET static void dot(Vec& acc, const Prep& x, const Prep& w) { acc = _mm512_dpbf16_ps(acc, x, w); }
};
#include "cpu_gemm_bf16.inc"
constexpr auto kTable = tableOf<kAvx512NR>(std::make_integer_sequence<int, kAvx512MR>{});
}  // namespace native
#undef DL_TARGET

AccumFn accumBf16Avx2(int mr, int nr) { return avx2::kTable[mr - 1][nr - 1]; }
AccumFn accumBf16Avx2Row(int nr) { return avx2::kRowTable[nr - 1]; }
AccumFn accumBf16Avx512(int mr, int nr) { return avx512::kTable[mr - 1][nr - 1]; }
AccumFn accumBf16Avx512Native(int mr, int nr) { return native::kTable[mr - 1][nr - 1]; }

}  // namespace dl::cpu::gemm_detail
