// CPU GEMM for grouped-quantized W (4 or 8 bits, groups of G along K; schedule in cpu_gemm_quant.h). X is copied
// once per call into rows laid out for the kernels (perm applied; 4 bits: each block of 32 as its 16 even columns
// then its 16 odd ones, so the low and high nibbles of a block's 16 bytes meet their x in one vector each).
// Decode (M = 1): panels of several W rows, one accumulator chain each, so the FMA latency hides behind the
// unpacking; larger M: tiles of MR x NR outputs, each W block unpacked once for MR rows of X.
// GCC 12 flags its own _mm512_undefined_* helpers inside the AVX-512 intrinsics.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include "cpu_gemm_quant.h"

#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include "cpu_features.h"
#include "cpu_gemm_reduce.h"
#include "threadpool.h"

#define DL_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,fma,f16c")))

namespace dl::cpu::gemm_detail {
namespace {

// One tile's kernel: sums[i * nr + j] = the partition [g0, g1)'s tree of x row i . W row j (schedule above).
// x: the tile's first X row in the kernels' layout, row i at x + i * ldx; q: W row 0's q, row j at q + j * ldq
// bytes; sc / zr: row 0's scales / zeros (zr nullptr: the middle) by group, row j's of group g at [g * ldg + j].
using TileFn = void (*)(const float* x, int64_t ldx, const uint8_t* q, int64_t ldq, const float* sc, const uint8_t* zr,
                        int64_t ldg, int64_t blocksPerGroup, int64_t g0, int64_t g1, float* sums);
constexpr int kMaxMR = 4, kMaxNR = 6;

template <int BITS, int MR, int NR>
DL_AVX512 void tileAvx512(const float* x, int64_t ldx, const uint8_t* q, int64_t ldq, const float* sc,
                          const uint8_t* zr, int64_t ldg, int64_t bpg, int64_t g0, int64_t g1, float* sums) {
  __m512 acc[MR * NR];
#pragma GCC unroll 24
  for (int o = 0; o < MR * NR; o++) acc[o] = _mm512_setzero_ps();
  // 4 bits: q' = q - zero as f32 by a 16-entry table lookup (vpermps reads the low 4 bits of each index: the low
  // nibble needs no mask), the same values the integer subtraction and conversion give, in 3 uops instead of 6.
  const __m512 iota = _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  const __m512 midTable = _mm512_sub_ps(iota, _mm512_set1_ps(8));
  const __m512i mid = _mm512_set1_epi32(128);
  for (int64_t g = g0; g < g1; g++) {
    __m512 s[MR * NR];
#pragma GCC unroll 24
    for (int o = 0; o < MR * NR; o++) s[o] = _mm512_setzero_ps();
    __m512i z[NR];
    __m512 table[NR];
#pragma GCC unroll 6
    for (int j = 0; j < NR; j++) {
      if constexpr (BITS == 4) table[j] = zr ? _mm512_sub_ps(iota, _mm512_set1_ps(float(zr[g * ldg + j]))) : midTable;
      else z[j] = zr ? _mm512_set1_epi32(zr[g * ldg + j]) : mid;
    }
    for (int64_t b = g * bpg, be = b + bpg; b < be; b++) {
      const float* xb = x + b * 32;
#pragma GCC unroll 6
      for (int j = 0; j < NR; j++) {
        __m512 wa, wb;
        if constexpr (BITS == 4) {
          const __m512i v = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(q + j * ldq + b * 16)));
          wa = _mm512_permutexvar_ps(v, table[j]);
          wb = _mm512_permutexvar_ps(_mm512_srli_epi32(v, 4), table[j]);
        } else {
          const uint8_t* qb = q + j * ldq + b * 32;
          wa = _mm512_cvtepi32_ps(_mm512_sub_epi32(_mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(qb))), z[j]));
          wb = _mm512_cvtepi32_ps(_mm512_sub_epi32(_mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(qb + 16))), z[j]));
        }
#pragma GCC unroll 4
        for (int i = 0; i < MR; i++) {
          s[i * NR + j] = _mm512_fmadd_ps(_mm512_loadu_ps(xb + i * ldx), wa, s[i * NR + j]);
          s[i * NR + j] = _mm512_fmadd_ps(_mm512_loadu_ps(xb + i * ldx + 16), wb, s[i * NR + j]);
        }
      }
    }
#pragma GCC unroll 6
    for (int j = 0; j < NR; j++) {
      const __m512 scale = _mm512_set1_ps(sc[g * ldg + j]);
#pragma GCC unroll 4
      for (int i = 0; i < MR; i++) acc[i * NR + j] = _mm512_fmadd_ps(scale, s[i * NR + j], acc[i * NR + j]);
    }
  }
  reduceAll(acc, MR * NR, sums);
}

// The same schedule with the 16 lanes in two ymm (lanes 0-7, 8-15): the same operations on each lane, same bits.
template <int BITS, int MR, int NR>
void tileAvx2(const float* x, int64_t ldx, const uint8_t* q, int64_t ldq, const float* sc, const uint8_t* zr,
              int64_t ldg, int64_t bpg, int64_t g0, int64_t g1, float* sums) {
  __m256 acc[MR * NR][2];
  for (int o = 0; o < MR * NR; o++) acc[o][0] = acc[o][1] = _mm256_setzero_ps();
  const __m256i mid = _mm256_set1_epi32(BITS == 4 ? 8 : 128), low4 = _mm256_set1_epi32(15);
  auto bytes8 = [](const uint8_t* p) { return _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))); };
  for (int64_t g = g0; g < g1; g++) {
    __m256 s[MR * NR][2];
    for (int o = 0; o < MR * NR; o++) s[o][0] = s[o][1] = _mm256_setzero_ps();
    __m256i z[NR];
    for (int j = 0; j < NR; j++) z[j] = zr ? _mm256_set1_epi32(zr[g * ldg + j]) : mid;
    for (int64_t b = g * bpg, be = b + bpg; b < be; b++) {
      const float* xb = x + b * 32;
      for (int j = 0; j < NR; j++) {
        __m256 wa[2], wb[2];
        for (int h = 0; h < 2; h++) {
          if constexpr (BITS == 4) {
            const __m256i v = bytes8(q + j * ldq + b * 16 + h * 8);
            wa[h] = _mm256_cvtepi32_ps(_mm256_sub_epi32(_mm256_and_si256(v, low4), z[j]));
            wb[h] = _mm256_cvtepi32_ps(_mm256_sub_epi32(_mm256_srli_epi32(v, 4), z[j]));
          } else {
            const uint8_t* qb = q + j * ldq + b * 32 + h * 8;
            wa[h] = _mm256_cvtepi32_ps(_mm256_sub_epi32(bytes8(qb), z[j]));
            wb[h] = _mm256_cvtepi32_ps(_mm256_sub_epi32(bytes8(qb + 16), z[j]));
          }
        }
        for (int i = 0; i < MR; i++)
          for (int h = 0; h < 2; h++) {
            __m256& t = s[i * NR + j][h];
            t = _mm256_fmadd_ps(_mm256_loadu_ps(xb + i * ldx + h * 8), wa[h], t);
            t = _mm256_fmadd_ps(_mm256_loadu_ps(xb + i * ldx + 16 + h * 8), wb[h], t);
          }
      }
    }
    for (int j = 0; j < NR; j++) {
      const __m256 scale = _mm256_set1_ps(sc[g * ldg + j]);
      for (int i = 0; i < MR; i++)
        for (int h = 0; h < 2; h++) acc[i * NR + j][h] = _mm256_fmadd_ps(scale, s[i * NR + j][h], acc[i * NR + j][h]);
    }
  }
  for (int o = 0; o < MR * NR; o++) sums[o] = reduce16(acc[o][0], acc[o][1]);
}

template <int BITS, bool AVX512, int MR, int NR> constexpr TileFn tileOf() {
  if constexpr (AVX512) return tileAvx512<BITS, MR, NR>;
  else return tileAvx2<BITS, MR, NR>;
}
template <int BITS, bool AVX512, int MR, size_t... J>
constexpr std::array<TileFn, kMaxNR> rowOf(std::index_sequence<J...>) {
  return {tileOf<BITS, AVX512, MR, int(J) + 1>()...};
}
template <int BITS, bool AVX512, size_t... I>
constexpr std::array<std::array<TileFn, kMaxNR>, kMaxMR> tableOf(std::index_sequence<I...>) {
  return {rowOf<BITS, AVX512, int(I) + 1>(std::make_index_sequence<kMaxNR>())...};
}
template <int BITS, bool AVX512>
constexpr auto kTiles = tableOf<BITS, AVX512>(std::make_index_sequence<kMaxMR>());

TileFn tileFn(int bits, bool avx512, int mr, int nr) {
  if (bits == 4) return avx512 ? kTiles<4, true>[mr - 1][nr - 1] : kTiles<4, false>[mr - 1][nr - 1];
  return avx512 ? kTiles<8, true>[mr - 1][nr - 1] : kTiles<8, false>[mr - 1][nr - 1];
}

// X rows in the kernels' layout, kept per thread between calls (trimmed after a large one).
std::vector<float>& xScratch() {
  thread_local std::vector<float> buf;
  return buf;
}

}  // namespace

void gemmGrouped(const View& x, const View& w, const float* bias, const View& y, int splitK) {
  const View::Groups& gq = w.groups;
  const int64_t M = x.shape[0], K = x.shape[1], N = w.shape[0];
  if (w.dtype != DType::u8) throw Error(std::string("gemm: a grouped w holds its q as u8, got ") + dtypeName(w.dtype));
  if (gq.bits != 4 && gq.bits != 8) throw Error("gemm: a grouped w has 4 or 8 bits, got " + std::to_string(gq.bits));
  if (gq.size < 32 || gq.size % 32 || K % gq.size)
    throw Error("gemm: a grouped w's group size must be a multiple of 32 dividing K = " + std::to_string(K) + ", got " +
                std::to_string(gq.size));
  if (!gq.scales) throw Error("gemm: a grouped w needs its scales");
  if (w.shape[1] != K) throw Error("gemm: x is [M, " + std::to_string(K) + "] but w has K = " + std::to_string(w.shape[1]));
  if (splitK < 1 || splitK > K) throw Error("gemm: splitK must be in [1, K = " + std::to_string(K) + "]");
  if (M == 0 || N == 0) return;
  const int64_t G = gq.size, ng = K / G, ldq = K * gq.bits / 8;
  if (gq.perm)
    for (int64_t k = 0; k < K; k++)
      if (gq.perm[k] < 0 || gq.perm[k] >= K)
        throw Error("gemm: a grouped w's perm[" + std::to_string(k) + "] = " + std::to_string(gq.perm[k]) + " is outside [0, K)");

  // X in the kernels' layout: row stride K + 16 floats (no 4 KiB aliasing between rows a tile reads together).
  const int64_t ldx = K + 16;
  std::vector<float>& xc = xScratch();
  if (int64_t(xc.size()) < M * ldx) xc.resize(size_t(M * ldx));
  const float* xs = x.as<float>();
  const bool nibbles = gq.bits == 4;
  parallelFor(M, 16, [&](int64_t lo, int64_t hi) {
    for (int64_t m = lo; m < hi; m++) {
      const float* src = xs + m * K;
      float* dst = xc.data() + m * ldx;
      for (int64_t k0 = 0; k0 < K; k0 += 32)
        for (int t = 0; t < 32; t++) {
          const int64_t k = k0 + (nibbles ? (t < 16 ? 2 * t : 2 * (t - 16) + 1) : t);
          dst[k0 + t] = src[gq.perm ? gq.perm[k] : k];
        }
    }
  });

  // The kernels read scales and zeros by group (View::Groups::byGroup, as loaded models hold them); row-major ones
  // (the gemm op's) are transposed here first.
  const float* scales = gq.scales;
  const uint8_t* zeros = gq.zeros;
  int64_t ldg = gq.byGroup;
  thread_local std::vector<float> scT;
  thread_local std::vector<uint8_t> zT;
  if (!ldg) {
    scT.resize(size_t(N * ng));
    for (int64_t n = 0; n < N; n++)
      for (int64_t g = 0; g < ng; g++) scT[size_t(g * N + n)] = gq.scales[n * ng + g];
    scales = scT.data();
    if (zeros) {
      zT.resize(size_t(N * ng));
      for (int64_t n = 0; n < N; n++)
        for (int64_t g = 0; g < ng; g++) zT[size_t(g * N + n)] = gq.zeros[n * ng + g];
      zeros = zT.data();
    }
    ldg = N;
  }

  std::vector<int64_t> gBounds(size_t(splitK) + 1);
  for (int p = 0; p <= splitK; p++) gBounds[size_t(p)] = ng * p / splitK;
  const bool avx512 = simdLevel() != Simd::avx2;
  // M = 1: one X row, several W rows (independent chains hide the FMA latency behind the unpacking); else tiles.
  const int MR = M == 1 ? 1 : avx512 ? 4 : 2, NR = M == 1 ? (avx512 ? 6 : 3) : (avx512 ? 3 : 2);
  const int64_t panels = (N + NR - 1) / NR, bpg = G / 32;
  float* ys = y.as<float>();
  parallelFor(panels, 1, [&](int64_t lo, int64_t hi) {
    float total[kMaxMR * kMaxNR], partial[kMaxMR * kMaxNR];
    for (int64_t t = lo; t < hi; t++) {
      const int64_t n0 = t * NR;
      const int nr = int(std::min<int64_t>(NR, N - n0));
      const uint8_t* q = static_cast<const uint8_t*>(w.data) + n0 * ldq;
      const float* sc = scales + n0;
      const uint8_t* zr = zeros ? zeros + n0 : nullptr;
      for (int64_t m0 = 0; m0 < M; m0 += MR) {
        const int mr = int(std::min<int64_t>(MR, M - m0));
        const TileFn fn = tileFn(gq.bits, avx512, mr, nr);
        for (int p = 0; p < splitK; p++) {
          fn(xc.data() + m0 * ldx, ldx, q, ldq, sc, zr, ldg, bpg, gBounds[size_t(p)], gBounds[size_t(p) + 1], p == 0 ? total : partial);
          if (p > 0)
            for (int o = 0; o < mr * nr; o++) total[o] = total[o] + partial[o];
        }
        for (int i = 0; i < mr; i++)
          for (int j = 0; j < nr; j++) {
            const float v = total[i * nr + j];
            ys[(m0 + i) * N + n0 + j] = bias ? v + bias[n0 + j] : v;
          }
      }
    }
  });
  if (xc.size() > (size_t(1) << 22)) std::vector<float>().swap(xc);  // a prefill's copy is not kept
}

}  // namespace dl::cpu::gemm_detail
