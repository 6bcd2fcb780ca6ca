// CPU GEMM for grouped-quantized W (4 or 8 bits, groups of G along K; schedules in cpu_gemm_quant.h). X is copied
// once per call into rows laid out for the kernels (perm applied).
// 4 bits: X rounded to bf16, each chunk of 128 columns as 4 vectors of 32 (vector p, word w: column 4w + p), so
// that the nibbles of the chunk's 64 bytes of a W row, read as 32 words, become bf16 one nibble position at a time
// (one vpternlogd each: the bits 0x4300 | q are the bf16 128 + q exactly), meet their x in one vdpbf16ps each; a lane
// sums one octet of columns, starting from -(128 + zero) times the octet's sum of x (computed once per X row and
// chunk, shared by every W row), and takes its group's scale once per chunk. (The table lookup this replaced, a
// vpermw on the port the products use, bound the decode GEMV: bench/RESULTS.md.)
// 8 bits: X f32, natural order; the f32 FMA kernels.
// Decode (M = 1): panels of several W rows, one accumulator chain each, so the latencies hide behind the unpacking;
// larger M: tiles of MR x NR outputs, each W chunk unpacked once for MR rows of X.
// GCC 12 flags its own _mm512_undefined_* helpers inside the AVX-512 intrinsics.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include "cpu_gemm_quant.h"

#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "cpu_features.h"
#include "cpu_gemm.h"
#include "cpu_gemm_reduce.h"
#include "threadpool.h"

#define DL_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,fma,f16c")))
#define DL_BF16 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16,fma")))

namespace dl::cpu::gemm_detail {
namespace {

// ---- 8 bits: X f32 (schedule in cpu_gemm_quant.h) ----

// One tile's kernel: sums[i * nr + j] = the partition [g0, g1)'s tree of x row i . W row j (schedule above).
// x: the tile's first X row (f32, natural order), row i at x + i * ldx; q: W row 0's q, row j at q + j * ldq
// bytes; sc / zr: row 0's scales / zeros (zr nullptr: the middle) by group, row j's of group g at [g * ldg + j].
using TileFn8 = void (*)(const float* x, int64_t ldx, const uint8_t* q, int64_t ldq, const float* sc, const uint8_t* zr,
                         int64_t ldg, int64_t blocksPerGroup, int64_t g0, int64_t g1, float* sums);
constexpr int kMaxMR = 4, kMaxNR = 6;

template <int MR, int NR>
DL_AVX512 void tile8Avx512(const float* x, int64_t ldx, const uint8_t* q, int64_t ldq, const float* sc,
                           const uint8_t* zr, int64_t ldg, int64_t bpg, int64_t g0, int64_t g1, float* sums) {
  __m512 acc[MR * NR];
#pragma GCC unroll 24
  for (int o = 0; o < MR * NR; o++) acc[o] = _mm512_setzero_ps();
  const __m512i mid = _mm512_set1_epi32(128);
  for (int64_t g = g0; g < g1; g++) {
    __m512 s[MR * NR];
#pragma GCC unroll 24
    for (int o = 0; o < MR * NR; o++) s[o] = _mm512_setzero_ps();
    __m512i z[NR];
#pragma GCC unroll 6
    for (int j = 0; j < NR; j++) z[j] = zr ? _mm512_set1_epi32(zr[g * ldg + j]) : mid;
    for (int64_t b = g * bpg, be = b + bpg; b < be; b++) {
      const float* xb = x + b * 32;
#pragma GCC unroll 6
      for (int j = 0; j < NR; j++) {
        const uint8_t* qb = q + j * ldq + b * 32;
        const __m512 wa = _mm512_cvtepi32_ps(_mm512_sub_epi32(_mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(qb))), z[j]));
        const __m512 wb = _mm512_cvtepi32_ps(_mm512_sub_epi32(_mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(qb + 16))), z[j]));
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
template <int MR, int NR>
void tile8Avx2(const float* x, int64_t ldx, const uint8_t* q, int64_t ldq, const float* sc, const uint8_t* zr,
               int64_t ldg, int64_t bpg, int64_t g0, int64_t g1, float* sums) {
  __m256 acc[MR * NR][2];
  for (int o = 0; o < MR * NR; o++) acc[o][0] = acc[o][1] = _mm256_setzero_ps();
  const __m256i mid = _mm256_set1_epi32(128);
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
          const uint8_t* qb = q + j * ldq + b * 32 + h * 8;
          wa[h] = _mm256_cvtepi32_ps(_mm256_sub_epi32(bytes8(qb), z[j]));
          wb[h] = _mm256_cvtepi32_ps(_mm256_sub_epi32(bytes8(qb + 16), z[j]));
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

template <bool AVX512, int MR, size_t... J>
constexpr std::array<TileFn8, kMaxNR> rowOf8(std::index_sequence<J...>) {
  if constexpr (AVX512) return {tile8Avx512<MR, int(J) + 1>...};
  else return {tile8Avx2<MR, int(J) + 1>...};
}
template <bool AVX512, size_t... I>
constexpr std::array<std::array<TileFn8, kMaxNR>, kMaxMR> tableOf8(std::index_sequence<I...>) {
  return {rowOf8<AVX512, int(I) + 1>(std::make_index_sequence<kMaxNR>())...};
}
template <bool AVX512> constexpr auto kTiles8 = tableOf8<AVX512>(std::make_index_sequence<kMaxMR>());

// ---- 4 bits: X bf16, chunks of 128 columns (schedule in cpu_gemm_quant.h) ----

// What every tile needs of chunk c (columns [128c, 128c + width)): lane l holds the octet of columns 128c + 8l ..
// + 7, of group g0 + d_l (d_l < 4: a chunk meets at most 4 groups of >= 32 columns).
struct Chunk4 {
  alignas(64) int32_t sIdx[16];  // d_l * 8: lane l's scale (and 128 + zero) in [V_0 | .. | V_3] (8 rows each), + row j
  alignas(32) int32_t d[16];     // d_l; 4 for a lane without columns (the AVX2 kernel's index of a zero)
  int64_t g0 = 0;
  int nd = 0;            // groups the chunk meets
  uint32_t lanes = 0;    // mask of the lanes with columns (width / 8 of them)
  uint64_t bytes = 0;    // mask of the chunk's q bytes in a row (width / 2 of them)
  bool full = false;     // width 128
};

// The chunks of a K-column row for groups of G (no divisions per lane: G is a multiple of 32 >= one octet).
void chunksOf(int64_t K, int64_t G, std::vector<Chunk4>& out) {
  const int64_t n = (K + 127) / 128;
  out.resize(size_t(n));
  for (int64_t c = 0; c < n; c++) {
    Chunk4& ch = out[size_t(c)];
    const int64_t k0 = c * 128, width = std::min<int64_t>(128, K - k0);
    ch.g0 = k0 / G;
    ch.full = width == 128;
    ch.lanes = uint32_t((uint64_t(1) << (width / 8)) - 1);
    ch.bytes = width == 128 ? ~uint64_t(0) : (uint64_t(1) << (width / 2)) - 1;
    int64_t d = 0, next = (ch.g0 + 1) * G;
    for (int l = 0; l < 16; l++) {
      const int64_t col = k0 + 8 * l;
      if (col < K) {
        while (col >= next) d++, next += G;
        ch.nd = int(d) + 1;
      }
      const int dl = col < K ? int(d) : 0;
      ch.sIdx[l] = dl * 8;
      ch.d[l] = col < K ? dl : 4;
    }
  }
}

// Decode (M = 1) streams W once, a panel of rows at a time: each panel's kernel fetches into L2 the q bytes of the
// panel about kPrefetchBytes ahead, and its scales. The scales by group ([ng, N]) lie N floats apart, a line per
// group and 16 rows, which no hardware prefetcher follows: fetched ahead, int4 decode on SmolLM-135M's shapes (one
// thread, Sapphire Rapids) went from 9.4 to ~7.8 ms a token of projections (bench/RESULTS.md).
constexpr int64_t kPrefetchBytes = 8192;
inline int64_t panelsAhead(int64_t panelBytes) { return (kPrefetchBytes + panelBytes - 1) / panelBytes; }
// The rows ahead whose scales a panel fetches, scales by group: at least 16, since a line holds 16 rows of a group's
// scales (8 rows on is often the panel's own line).
inline int64_t scaleRowsAhead(int64_t aheadRows) { return std::max<int64_t>(aheadRows, 16); }
// A thread's range of panels [lo, hi) starts cold: fetch its first panelsAhead() panels (each panel's kernel fetches
// the ones after as it reads its own).
inline void prefetchFirstPanels(const void* w, int64_t lo, int64_t hi, int64_t N, int64_t NR, int64_t ldq) {
  const char* base = static_cast<const char*>(w);
  for (int64_t b = lo * NR * ldq, e = std::min(hi * NR, N) * ldq, f = std::min(e, b + NR * ldq * panelsAhead(NR * ldq));
       b < f; b += 64)
    __asm__ volatile("prefetcht1 %0" : : "m"(base[b]));
}

// One tile's kernel: sums[i * nr + j] = the partition of chunks [c0, c1)'s tree of x row i . W row j.
// x: the tile's first X row in the 4-bit layout (bf16), row i at x + i * ldx; xsum: its octets' sums of x (chunk c,
// lane l at xsum + i * ldxs + 16c + l: octetSums); q, sc, zr, ldg as for 8 bits.
// prefetch: fetch a panel ahead (above) into L2 as this one is read (M = 1: W streams once), and its scales, scAhead
// floats on (ByGroup::scalesAhead).
using TileFn4 = void (*)(const uint16_t* x, int64_t ldx, const float* xsum, int64_t ldxs, const uint8_t* q, int64_t ldq, const float* sc,
                         const uint8_t* zr, int64_t ldg, const Chunk4* chunks, int64_t c0, int64_t c1, bool prefetch,
                         int64_t scAhead, float* sums);
constexpr int kMaxMR4 = 4, kMaxNR4 = 8;
// Prefill from this many X rows up: W rows looked up into bf16 once per block of kExpandRows (gemm4).
constexpr int64_t kExpandM = 16, kExpandRows = 32;

// AVX512-BF16. q'' = 128 + q as bf16: the nibble ORed into 0x4300 (vpternlogd: (n & 15) | 0x4300 per word).
// MODE kExpanded: q points at W rows already made bf16 (expand4, below: per chunk the 4 vectors of 32 bf16 q'' that
// the same operations give, row j at q + j * ldq bytes), so the same products in the same order; kAsym: zero points.
enum W4Mode { kSym = 0, kAsym = 1, kExpanded = 2 };
template <int MODE, int MR, int NR>
DL_BF16 void tile4Bf16(const uint16_t* x, int64_t ldx, const float* xsum, int64_t ldxs, const uint8_t* q, int64_t ldq,
                       const float* sc, const uint8_t* zr, int64_t ldg, const Chunk4* chunks, int64_t c0, int64_t c1,
                       bool prefetch, int64_t scAhead, float* sums) {
  static_assert(NR <= 8, "scales of a chunk's groups: 8 rows per group in two zmm");
  constexpr bool ASYM = (MODE & kAsym) != 0, EXP = (MODE & kExpanded) != 0;
  __m512 acc[MR][NR];
#pragma GCC unroll 4
  for (int i = 0; i < MR; i++)
#pragma GCC unroll 8
    for (int j = 0; j < NR; j++) acc[i][j] = _mm512_setzero_ps();
  const __m512i low4 = _mm512_set1_epi16(15), bf16Of128 = _mm512_set1_epi16(0x4300);
  const __m512 zero = _mm512_setzero_ps();
  constexpr __mmask8 rows = __mmask8((1u << NR) - 1);
  // prefetch: the panel panelsAhead() after this one, line by line as this one's chunks go by (NR lines a chunk:
  // a panel's q is NR * ldq contiguous bytes, about as many lines as its chunks read), and the scales of the
  // chunk's groups scAhead floats on (ByGroup::scalesAhead: that panel's, by panel; by group at least 16 rows on,
  // since a line holds 16 rows' scales of a group)
  const char* ahead = reinterpret_cast<const char*>(q) + NR * panelsAhead(NR * ldq) * ldq;
  for (int64_t c = c0; c < c1; c++) {
    const Chunk4& ch = chunks[c];
    // the scales of the chunk's groups for the tile's rows: [V_0 | V_1], [V_2 | V_3]
    const float* sg = sc + ch.g0 * ldg;
    if (prefetch)
      for (int d = 0; d < ch.nd; d++) __asm__ volatile("prefetcht1 %0" : : "m"(sg[d * ldg + scAhead]));
    __m256 v[4];
#pragma GCC unroll 4
    for (int d = 0; d < 4; d++) v[d] = d < ch.nd ? _mm256_maskz_loadu_ps(rows, sg + d * ldg) : _mm256_setzero_ps();
    const __m512 s01 = _mm512_insertf32x8(_mm512_castps256_ps512(v[0]), v[1], 1);
    const __m512 s23 = _mm512_insertf32x8(_mm512_castps256_ps512(v[2]), v[3], 1);
    const __m512i sIdx = _mm512_load_si512(ch.sIdx);
    // the octets' sums of x; symmetric: every lane starts at -(136 * sum); with zero points at -((128 + zero) * sum),
    // 128 + zero in the scales' shape
    __m512 xo[MR], start[MR], c01, c23;
#pragma GCC unroll 4
    for (int i = 0; i < MR; i++) {
      xo[i] = _mm512_loadu_ps(xsum + i * ldxs + c * 16);
      if constexpr (!ASYM) start[i] = _mm512_fnmadd_ps(_mm512_set1_ps(136.f), xo[i], zero);
    }
    if constexpr (ASYM) {
      const uint8_t* zg = zr + ch.g0 * ldg;
      __m256 z[4];
#pragma GCC unroll 4
      for (int d = 0; d < 4; d++)
        z[d] = d < ch.nd ? _mm256_add_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_maskz_loadu_epi8(rows, zg + d * ldg))),
                                         _mm256_set1_ps(128.f))
                         : _mm256_setzero_ps();
      c01 = _mm512_insertf32x8(_mm512_castps256_ps512(z[0]), z[1], 1);
      c23 = _mm512_insertf32x8(_mm512_castps256_ps512(z[2]), z[3], 1);
    }
    const uint16_t* xc = x + c * 128;
#pragma GCC unroll 8
    for (int j = 0; j < NR; j++) {
      const uint8_t* qj = q + j * ldq + c * (EXP ? 256 : 64);
      if (prefetch) __asm__ volatile("prefetcht1 %0" : : "m"(ahead[(c * NR + j) * 64]));
      __m512i bytes;
      if constexpr (!EXP) bytes = ch.full ? _mm512_loadu_si512(qj) : _mm512_maskz_loadu_epi8(ch.bytes, qj);
      const __m512i idx = _mm512_add_epi32(sIdx, _mm512_set1_epi32(j));
      __m512 s[MR];
      if constexpr (ASYM) {
        const __m512 cj = _mm512_maskz_permutex2var_ps(__mmask16(ch.lanes), c01, idx, c23);
#pragma GCC unroll 4
        for (int i = 0; i < MR; i++) s[i] = _mm512_fnmadd_ps(cj, xo[i], zero);
      } else {
#pragma GCC unroll 4
        for (int i = 0; i < MR; i++) s[i] = start[i];
      }
#pragma GCC unroll 4
      for (int p = 0; p < 4; p++) {
        __m512i wp;
        if constexpr (EXP) wp = _mm512_loadu_si512(qj + p * 64);
        else wp = _mm512_ternarylogic_epi32(p == 0 ? bytes : _mm512_srli_epi16(bytes, 4 * p), low4, bf16Of128, 0xea);
#pragma GCC unroll 4
        for (int i = 0; i < MR; i++)
          s[i] = _mm512_dpbf16_ps(s[i], reinterpret_cast<__m512bh>(_mm512_loadu_si512(xc + i * ldx + p * 32)),
                                  reinterpret_cast<const __m512bh&>(wp));
      }
      const __m512 scale = _mm512_maskz_permutex2var_ps(__mmask16(ch.lanes), s01, idx, s23);
#pragma GCC unroll 4
      for (int i = 0; i < MR; i++) acc[i][j] = _mm512_fmadd_ps(scale, s[i], acc[i][j]);
    }
  }
  reduceAll(&acc[0][0], MR * NR, sums);
}

// The same schedule on AVX2 (lanes 0-7 and 8-15 in two ymm): a lane's dword of x holds (column 8l + p, 8l + 4 + p)
// of vector p as (low, high) bf16, its dword of q the octet's 8 nibbles (column 8l + t at bits 4t); the lane starts
// at -(c * sum) as there (c = 136, or 128 + zero; 0 for a lane without columns), then the two FMAs per pair in
// vdpbf16ps's order (the high word first), q'' = 128 + q exact in f32. Same bits as the AVX512-BF16 kernel.
template <bool ASYM, int MR, int NR>
void tile4Avx2(const uint16_t* x, int64_t ldx, const float* xsum, int64_t ldxs, const uint8_t* q, int64_t ldq,
               const float* sc, const uint8_t* zr, int64_t ldg, const Chunk4* chunks, int64_t c0, int64_t c1, bool,
               int64_t, float* sums) {
  __m256 acc[MR][NR][2];
  for (int i = 0; i < MR; i++)
    for (int j = 0; j < NR; j++) acc[i][j][0] = acc[i][j][1] = _mm256_setzero_ps();
  const __m256i low4 = _mm256_set1_epi32(15), i128 = _mm256_set1_epi32(128), highWord = _mm256_set1_epi32(int(0xffff0000u));
  const __m256 zero = _mm256_setzero_ps();
  for (int64_t c = c0; c < c1; c++) {
    const Chunk4& ch = chunks[c];
    const uint16_t* xc = x + c * 128;
    for (int j = 0; j < NR; j++) {
      const uint8_t* qj = q + j * ldq + c * 64;
      alignas(32) uint8_t tail[64];
      if (!ch.full) {  // a row's last, partial chunk: its bytes, then zeros (no read past the row)
        std::memset(tail, 0, 64);
        std::memcpy(tail, qj, size_t(__builtin_popcountll(ch.bytes)));
        qj = tail;
      }
      // the scales and 128 + zero points of the chunk's groups for row j; lanes without columns take index 4 (zero)
      alignas(32) float sv[8] = {}, cv[8] = {};
      for (int d = 0; d < ch.nd; d++) {
        sv[d] = sc[(ch.g0 + d) * ldg + j];
        cv[d] = ASYM ? 128.f + float(zr[(ch.g0 + d) * ldg + j]) : 136.f;
      }
      const __m256 s4 = _mm256_load_ps(sv), c4 = _mm256_load_ps(cv);
      for (int h = 0; h < 2; h++) {
        const __m256i lanesD = _mm256_load_si256(reinterpret_cast<const __m256i*>(ch.d + 8 * h));
        const __m256 scale = _mm256_permutevar8x32_ps(s4, lanesD), cl = _mm256_permutevar8x32_ps(c4, lanesD);
        const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qj + 32 * h));
        __m256 s[MR];
        for (int i = 0; i < MR; i++) s[i] = _mm256_fnmadd_ps(cl, _mm256_loadu_ps(xsum + i * ldxs + c * 16 + 8 * h), zero);
        for (int p = 0; p < 4; p++) {
          const __m256 qHigh = _mm256_cvtepi32_ps(_mm256_or_si256(_mm256_and_si256(_mm256_srli_epi32(v, 16 + 4 * p), low4), i128));
          const __m256 qLow = _mm256_cvtepi32_ps(_mm256_or_si256(_mm256_and_si256(_mm256_srli_epi32(v, 4 * p), low4), i128));
          for (int i = 0; i < MR; i++) {
            const __m256i xv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xc + i * ldx + p * 32 + 16 * h));
            s[i] = _mm256_fmadd_ps(_mm256_castsi256_ps(_mm256_and_si256(xv, highWord)), qHigh, s[i]);
            s[i] = _mm256_fmadd_ps(_mm256_castsi256_ps(_mm256_slli_epi32(xv, 16)), qLow, s[i]);
          }
        }
        for (int i = 0; i < MR; i++) acc[i][j][h] = _mm256_fmadd_ps(scale, s[i], acc[i][j][h]);
      }
    }
  }
  for (int i = 0; i < MR; i++)
    for (int j = 0; j < NR; j++) sums[i * NR + j] = reduce16(acc[i][j][0], acc[i][j][1]);
}

// MODE: W4Mode bits on AVX512-BF16; without it kSym / kAsym (no expanded W: the AVX2 kernel unpacks as it goes).
template <bool NATIVE, int MODE, int MR, size_t... J>
constexpr std::array<TileFn4, kMaxNR4> rowOf4(std::index_sequence<J...>) {
  if constexpr (NATIVE) return {tile4Bf16<MODE, MR, int(J) + 1>...};
  else return {tile4Avx2<(MODE & kAsym) != 0, MR, int(J) + 1>...};
}
template <bool NATIVE, int MODE, size_t... I>
constexpr std::array<std::array<TileFn4, kMaxNR4>, kMaxMR4> tableOf4(std::index_sequence<I...>) {
  return {rowOf4<NATIVE, MODE, int(I) + 1>(std::make_index_sequence<kMaxNR4>())...};
}
template <bool NATIVE, int MODE> constexpr auto kTiles4 = tableOf4<NATIVE, MODE>(std::make_index_sequence<kMaxMR4>());

TileFn4 tileFn4(bool native, int mode, int mr, int nr) {
  if (native)
    switch (mode) {
      case kSym: return kTiles4<true, kSym>[mr - 1][nr - 1];
      case kAsym: return kTiles4<true, kAsym>[mr - 1][nr - 1];
      case kExpanded: return kTiles4<true, kExpanded>[mr - 1][nr - 1];
      default: return kTiles4<true, kExpanded | kAsym>[mr - 1][nr - 1];
    }
  return mode == kAsym ? kTiles4<false, kAsym>[mr - 1][nr - 1] : kTiles4<false, kSym>[mr - 1][nr - 1];
}

// Whole chunks [0, n) of an X row in the 4-bit kernels' layout (gemm4: vector p's word w is bf16(x[128c + 4w + p]),
// no perm): each chunk rounded by roundToBf16 (xToBf16's bits), then each vector p gathered from its four vectors
// of 32 words by one index, (4w + p) mod 64, over two pairs. Returns n.
// (Word by word this copy took ~10 us a call at K = 1536, as long as a 256-row projection's GEMV.)
DL_AVX512 int64_t x4Chunks(const float* src, int64_t n, uint16_t* dst) {
  alignas(64) uint16_t idxWords[4][32], rounded[128];
  for (int p = 0; p < 4; p++)
    for (int w = 0; w < 32; w++) idxWords[p][w] = uint16_t((4 * w + p) % 64);
  for (int64_t c = 0; c < n; c++) {
    roundToBf16(src + c * 128, 128, rounded);
    __m512i words[4];  // words[v]: columns 32v .. 32v + 31
    for (int v = 0; v < 4; v++) words[v] = _mm512_load_si512(rounded + 32 * v);
    for (int p = 0; p < 4; p++) {
      const __m512i idx = _mm512_load_si512(idxWords[p]);
      const __m512i lo = _mm512_permutex2var_epi16(words[0], idx, words[1]);  // words 0-15: columns 4w + p < 64
      const __m512i hi = _mm512_permutex2var_epi16(words[2], idx, words[3]);  // words 16-31: columns 64 + ...
      _mm512_storeu_si512(dst + c * 128 + p * 32, _mm512_mask_blend_epi16(__mmask32(0xffff0000u), lo, hi));
    }
  }
  return n;
}

// X rows in the kernels' layout, kept per thread between calls (trimmed after a large one).
std::vector<float>& xScratch() {
  thread_local std::vector<float> buf;
  return buf;
}
std::vector<uint16_t>& xScratch4() {
  thread_local std::vector<uint16_t> buf;
  return buf;
}
std::vector<float>& xSumScratch() {
  thread_local std::vector<float> buf;
  return buf;
}

// The scales and zero points by group ([ng, N]: View::Groups::byGroup, as CUDA models hold them, ldg = N) or by
// panel (View::Groups::panel, as CPU models hold 4-bit and e4m3 weights: ldg = panel, a panel's rows one run);
// row-major ones (the gemm op's) are transposed into per-thread buffers first. A kernel reads the scales of rows
// n0 .. n0 + nr at scales + rowAt(n0), group g's at + g * ldg: by panel, a tile must not cross a panel (the 4-bit
// and e4m3 tiles are at most NR = 8, 4 or 2 rows from a multiple of NR, in blocks of NR or 32 rows).
struct ByGroup {
  const float* scales;
  const uint8_t* zeros;
  int64_t ldg;
  int64_t panel = 0, panelStride = 0;  // by panel: its rows, and the floats (zeros: bytes) from one panel to the next
  int64_t rowAt(int64_t n) const { return panel ? n / panel * panelStride + n % panel : n; }
  // The offset from a row's scales to those of the row aheadRows on (a multiple of the panel), where a decode tile
  // prefetches them: by group at least 16 rows (a line holds 16 rows' scales of a group: 8 rows on is often the
  // panel's own line).
  int64_t scalesAhead(int64_t aheadRows) const { return panel ? aheadRows / panel * panelStride : scaleRowsAhead(aheadRows); }
};
ByGroup byGroup(const View::Groups& gq, int64_t N, int64_t ng) {
  if (gq.panel) return {gq.scales, gq.zeros, gq.panel, gq.panel, ng * gq.panel};
  if (gq.byGroup) return {gq.scales, gq.zeros, gq.byGroup};
  thread_local std::vector<float> scT;
  thread_local std::vector<uint8_t> zT;
  scT.resize(size_t(N * ng));
  for (int64_t n = 0; n < N; n++)
    for (int64_t g = 0; g < ng; g++) scT[size_t(g * N + n)] = gq.scales[n * ng + g];
  if (gq.zeros) {
    zT.resize(size_t(N * ng));
    for (int64_t n = 0; n < N; n++)
      for (int64_t g = 0; g < ng; g++) zT[size_t(g * N + n)] = gq.zeros[n * ng + g];
  }
  return {scT.data(), gq.zeros ? zT.data() : nullptr, N};
}

// y[m0 + i, n0 + j] = total + bias, for the tile's outputs.
inline void store(float* ys, int64_t N, const float* bias, int64_t m0, int64_t n0, int mr, int nr, const float* total) {
  for (int i = 0; i < mr; i++)
    for (int j = 0; j < nr; j++) {
      const float v = total[i * nr + j];
      ys[(m0 + i) * N + n0 + j] = bias ? v + bias[n0 + j] : v;
    }
}

void gemm8(const View& x, const View& w, const float* bias, const View& y, int splitK) {
  const View::Groups& gq = w.groups;
  const int64_t M = x.shape[0], K = x.shape[1], N = w.shape[0], G = gq.size, ng = K / G, ldq = K;
  // X in the kernels' layout: row stride K + 16 floats (no 4 KiB aliasing between rows a tile reads together).
  const int64_t ldx = K + 16;
  std::vector<float>& xc = xScratch();
  if (int64_t(xc.size()) < M * ldx) xc.resize(size_t(M * ldx));
  const float* xs = x.as<float>();
  parallelFor(M, 16, [&](int64_t lo, int64_t hi) {
    for (int64_t m = lo; m < hi; m++)
      for (int64_t k = 0; k < K; k++) xc[size_t(m * ldx + k)] = xs[m * K + (gq.perm ? gq.perm[k] : k)];
  });
  const ByGroup bg = byGroup(gq, N, ng);
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
      const float* sc = bg.scales + n0;
      const uint8_t* zr = bg.zeros ? bg.zeros + n0 : nullptr;
      for (int64_t m0 = 0; m0 < M; m0 += MR) {
        const int mr = int(std::min<int64_t>(MR, M - m0));
        const TileFn8 fn = avx512 ? kTiles8<true>[mr - 1][nr - 1] : kTiles8<false>[mr - 1][nr - 1];
        for (int p = 0; p < splitK; p++) {
          fn(xc.data() + m0 * ldx, ldx, q, ldq, sc, zr, bg.ldg, bpg, gBounds[size_t(p)], gBounds[size_t(p) + 1], p == 0 ? total : partial);
          if (p > 0)
            for (int o = 0; o < mr * nr; o++) total[o] = total[o] + partial[o];
        }
        store(ys, N, bias, m0, n0, mr, nr, total);
      }
    }
  });
  if (xc.size() > (size_t(1) << 22)) std::vector<float>().swap(xc);  // a prefill's copy is not kept
}

// Rows [0, n) of q made bf16 q'' = 128 + q as tile4Bf16 makes them (row r at out + r * ldo words, per chunk the 4
// vectors of 32 words; a partial chunk's missing columns as its masked load gives them): prefill tiles then read
// them instead of repeating the unpacking for every m-tile.
DL_BF16 void expand4(const uint8_t* q, int64_t ldq, const Chunk4* chunks, int64_t nChunks, int64_t n, uint16_t* out,
                     int64_t ldo) {
  const __m512i low4 = _mm512_set1_epi16(15), bf16Of128 = _mm512_set1_epi16(0x4300);
  for (int64_t r = 0; r < n; r++)
    for (int64_t c = 0; c < nChunks; c++) {
      const Chunk4& ch = chunks[c];
      const uint8_t* qr = q + r * ldq + c * 64;
      const __m512i bytes = ch.full ? _mm512_loadu_si512(qr) : _mm512_maskz_loadu_epi8(ch.bytes, qr);
      uint16_t* o = out + r * ldo + c * 128;
#pragma GCC unroll 4
      for (int p = 0; p < 4; p++)
        _mm512_storeu_si512(o + p * 32, _mm512_ternarylogic_epi32(p == 0 ? bytes : _mm512_srli_epi16(bytes, 4 * p), low4, bf16Of128, 0xea));
    }
}

// The octets' sums of x that the 4-bit kernels start from (chunk c, lane l at out[16c + l]), from X row x in their
// layout (n chunks): lane l sums the words 2l + 1 then 2l of vectors 0, 1, 2, 3 in turn (vdpbf16ps's pairs and order),
// from +0, in f32. One copy for every path (so the same bits).
void octetSums(const uint16_t* x, int64_t n, float* out) {
  for (int64_t c = 0; c < n; c++)
    for (int l = 0; l < 16; l++) {
      float s = 0.f;
      for (int p = 0; p < 4; p++) {
        s = s + bf16ToF32(x[c * 128 + p * 32 + 2 * l + 1]);
        s = s + bf16ToF32(x[c * 128 + p * 32 + 2 * l]);
      }
      out[c * 16 + l] = s;
    }
}

void gemm4(const View& x, const View& w, const float* bias, const View& y, int splitK) {
  const View::Groups& gq = w.groups;
  const int64_t M = x.shape[0], K = x.shape[1], N = w.shape[0], G = gq.size, ng = K / G, ldq = K / 2;
  // 4-bit zero points lie in [0, 16] (16: GPTQ v1's zero point of 0, stored minus one as 15, read back plus one),
  // checked where they enter (the gemm op, ModelWeights::setGrouped), not by every call (a scan of N * K / G bytes a
  // GEMV). These kernels would take any byte (a lane starts from -(128 + zero) * sum, exact in f32).
  thread_local std::vector<Chunk4> chunkBuf;  // (a name in the workers' lambdas would be their own thread_local)
  chunksOf(K, G, chunkBuf);
  const Chunk4* chunks = chunkBuf.data();
  const int64_t nChunks = int64_t(chunkBuf.size());
  // X in the kernels' layout: per chunk, vector p's word w is bf16(x[perm[128c + 4w + p]]), zero past K; rows
  // 64-byte aligned, one cache line apart beyond their chunks (no 4 KiB aliasing between rows a tile reads).
  const int64_t ldx = nChunks * 128 + 32;
  std::vector<uint16_t>& xbuf = xScratch4();
  if (int64_t(xbuf.size()) < M * ldx + 32) xbuf.resize(size_t(M * ldx + 32));
  uint16_t* xc = xbuf.data() + (32 - (reinterpret_cast<uintptr_t>(xbuf.data()) % 64) / 2) % 32;
  // and each row's octet sums (octetSums), 16 floats a chunk
  const int64_t ldxs = nChunks * 16 + 16;
  std::vector<float>& xsumBuf = xSumScratch();
  if (int64_t(xsumBuf.size()) < M * ldxs) xsumBuf.resize(size_t(M * ldxs));
  float* xsum = xsumBuf.data();
  const float* xs = x.as<float>();
  parallelFor(M, 16, [&](int64_t lo, int64_t hi) {
    for (int64_t m = lo; m < hi; m++) {
      const float* src = xs + m * K;
      uint16_t* dst = xc + m * ldx;
      // the whole chunks without perm on AVX-512 at once (x4Chunks, same bits), the rest word by word
      const int64_t c0 = !gq.perm && simdLevel() != Simd::avx2 ? x4Chunks(src, K / 128, dst) : 0;
      for (int64_t c = c0; c < nChunks; c++)
        for (int p = 0; p < 4; p++)
          for (int wd = 0; wd < 32; wd++) {
            const int64_t k = c * 128 + 4 * wd + p;
            dst[c * 128 + p * 32 + wd] = k < K ? xToBf16(src[gq.perm ? gq.perm[k] : k]) : 0;
          }
      octetSums(dst, nChunks, xsum + m * ldxs);
    }
  });
  const ByGroup bg = byGroup(gq, N, ng);
  std::vector<int64_t> cBounds(size_t(splitK) + 1);
  for (int p = 0; p <= splitK; p++) cBounds[size_t(p)] = nChunks * p / splitK;
  const bool native = simdLevel() == Simd::avx512bf16;
  // M = 1: one X row, a panel of W rows (independent chains hide the latencies behind the unpacking); else tiles.
  const int MR = M == 1 ? 1 : native ? 4 : 2, NR = M == 1 ? (native ? 8 : 4) : (native ? 4 : 2);
  // Prefill on AVX512-BF16: each task looks up a block of W rows into bf16 once (expand4) and runs every m-tile
  // over it (the block stays in L2), instead of repeating the lookups per m-tile. Same products, same bits.
  const bool expand = native && M >= kExpandM;
  const int64_t blockRows = expand ? kExpandRows : NR, tasks = (N + blockRows - 1) / blockRows;
  const int64_t ldo = nChunks * 128 + 32;  // expanded row stride in words (one line apart beyond its chunks)
  const bool prefetch = M == 1;
  const int64_t scAhead = bg.scalesAhead(NR * panelsAhead(NR * ldq));
  float* ys = y.as<float>();
  parallelFor(tasks, 1, [&](int64_t lo, int64_t hi) {
    float total[kMaxMR4 * kMaxNR4], partial[kMaxMR4 * kMaxNR4];
    if (prefetch) prefetchFirstPanels(w.data, lo, hi, N, NR, ldq);
    thread_local std::vector<uint16_t> wx;  // this worker's expanded block
    for (int64_t b = lo; b < hi; b++) {
      const int64_t r0 = b * blockRows, rows = std::min(blockRows, N - r0);
      const uint8_t* qb = static_cast<const uint8_t*>(w.data) + r0 * ldq;
      const uint8_t* tq = qb;
      int64_t tld = ldq;
      int mode = bg.zeros ? kAsym : kSym;
      if (expand) {
        if (int64_t(wx.size()) < rows * ldo + 32) wx.resize(size_t(rows * ldo + 32));
        uint16_t* wa = wx.data() + (32 - (reinterpret_cast<uintptr_t>(wx.data()) % 64) / 2) % 32;
        expand4(qb, ldq, chunks, nChunks, rows, wa, ldo);
        tq = reinterpret_cast<const uint8_t*>(wa), tld = ldo * 2, mode |= kExpanded;
      }
      for (int64_t m0 = 0; m0 < M; m0 += MR) {
        const int mr = int(std::min<int64_t>(MR, M - m0));
        for (int64_t j0 = 0; j0 < rows; j0 += NR) {
          const int nr = int(std::min<int64_t>(NR, rows - j0));
          const int64_t n0 = r0 + j0;
          const TileFn4 fn = tileFn4(native, mode, mr, nr);
          for (int p = 0; p < splitK; p++) {
            fn(xc + m0 * ldx, ldx, xsum + m0 * ldxs, ldxs, tq + j0 * tld, tld, bg.scales + bg.rowAt(n0), bg.zeros ? bg.zeros + bg.rowAt(n0) : nullptr,
               bg.ldg, chunks, cBounds[size_t(p)], cBounds[size_t(p) + 1], prefetch && b + 1 < hi, scAhead,
               p == 0 ? total : partial);
            if (p > 0)
              for (int o = 0; o < mr * nr; o++) total[o] = total[o] + partial[o];
          }
          store(ys, N, bias, m0, n0, mr, nr, total);
        }
      }
    }
    if (wx.size() > (size_t(1) << 22)) std::vector<uint16_t>().swap(wx);
  });
  if (xbuf.size() > (size_t(1) << 23)) std::vector<uint16_t>().swap(xbuf);  // a prefill's copy is not kept
  if (xsumBuf.size() > (size_t(1) << 21)) std::vector<float>().swap(xsumBuf);
}

// ---- FP8 e4m3: X bf16, chunks of G columns (schedule in cpu_gemm_quant.h) ----

#include "cpu_gemm_fp8.inc"

// ---- i8 W per output row (quantize "int8"), M = 1: the f32 kernels' schedule (cpu_gemm.h) ----

// acc[j] += x[g..g+16) * q row j's [g..g+16) lane by lane, where m is set (the rest fma(0, 0, acc)). Row j at
// q + j * ldq; ks: 1 row-major (ldq = K), kPackRows packed (ldq = 32: cpu_gemm.h packedCol).
template <int NR, bool FULL>
DL_AVX512 __attribute__((always_inline)) inline void gemvI8Group(__m512 (&acc)[NR], const float* x, const int8_t* q,
                                                                 int64_t ldq, int64_t ks, int64_t g, __mmask16 m) {
  const __m512 xv = FULL ? _mm512_loadu_ps(x + g) : _mm512_maskz_loadu_ps(m, x + g);
  const int8_t* qg = q + packedCol(g, ks);
#pragma GCC unroll 16
  for (int j = 0; j < NR; j++) {
    const int8_t* qj = qg + j * ldq;
    const __m128i b = FULL ? _mm_loadu_si128(reinterpret_cast<const __m128i*>(qj)) : _mm_maskz_loadu_epi8(m, qj);
    acc[j] = _mm512_fmadd_ps(xv, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(b)), acc[j]);
  }
}

// Rows [n0, n0 + NR) of y = x . q^T * scale: for each partition, 16 lane accumulators over the groups of 16 at
// absolute k (lanes outside the partition add fma(0, 0, acc), as the f32 kernels' masked edges do), the fixed tree,
// the partials in order. q: the panel's first row, row-major (rows K bytes apart) or packed (a panel of kPackRows
// rows, one contiguous run). ahead: fetched into L2 a line per row and 64 k as this panel is read (about as many
// lines as the panel's), from the next panel's first byte (row-major) or a fixed distance ahead of the reads
// (packed: the panel's lines of 64 k lie NR lines apart), or nullptr.
template <int NR>
DL_AVX512 void gemvI8Panel(const float* x, const int8_t* q, int64_t K, bool packed, const int64_t* kBounds,
                           int splitK, const char* ahead, float* total) {
  float sums[NR];
  const int64_t ldq = packed ? 32 : K, ks = packed ? kPackRows : 1;
  for (int p = 0; p < splitK; p++) {
    const int64_t k0 = kBounds[p], k1 = kBounds[p + 1];
    __m512 acc[NR];
#pragma GCC unroll 16
    for (int j = 0; j < NR; j++) acc[j] = _mm512_setzero_ps();
    int64_t g = k0 & ~int64_t(15);
    if (g < k0) {  // a partial first group
      __mmask16 m = __mmask16(0xffffu << (k0 - g));
      if (k1 < g + 16) m &= __mmask16((1u << (k1 - g)) - 1);
      gemvI8Group<NR, false>(acc, x, q, ldq, ks, g, m);
      g += 16;
    }
    for (; g + 16 <= k1; g += 16) {
      if (ahead && (g & 63) == 0)
#pragma GCC unroll 16
        for (int j = 0; j < NR; j++) __asm__ volatile("prefetcht1 %0" : : "m"(ahead[(g / 64 * NR + j) * 64]));
      gemvI8Group<NR, true>(acc, x, q, ldq, ks, g, 0xffff);
    }
    if (g < k1) gemvI8Group<NR, false>(acc, x, q, ldq, ks, g, __mmask16((1u << (k1 - g)) - 1));
    reduceAll(acc, NR, sums);
    for (int j = 0; j < NR; j++) total[j] = p == 0 ? sums[j] : total[j] + sums[j];
  }
}

template <size_t... J> constexpr auto gemvI8Table(std::index_sequence<J...>) {
  return std::array<decltype(&gemvI8Panel<1>), sizeof...(J)>{&gemvI8Panel<int(J) + 1>...};
}
constexpr int kI8Rows = 8;  // a row-major panel's rows (packed: kPackRows)
// How far ahead of its reads a packed panel's GEMV fetches W (one stream, so a fixed distance; row-major: the next
// panel). Qwen2.5-1.5B-shaped int8 decode, one thread, op profile (bench/RESULTS.md): gateUp / down ms a token 71-77 /
// 35-38 at the next panel (9 / 53 KiB ahead), 75 / 35 at 1 KiB, 67-69 / 31-32 at 2 KiB, 67 / 31 at 3 KiB, 69-70 /
// 33-34 at 4 KiB, 74 / 38 at 16 KiB.
constexpr int64_t kI8PackedAhead = 3072;
static_assert(kPackRows <= kI8Rows, "a packed panel's rows fit the table");
constexpr auto kGemvI8 = gemvI8Table(std::make_index_sequence<kI8Rows>());

}  // namespace

void gemmGrouped(const View& x, const View& w, const float* bias, const View& y, int splitK) {
  const View::Groups& gq = w.groups;
  const int64_t M = x.shape[0], K = x.shape[1], N = w.shape[0];
  if (w.dtype != DType::u8) throw Error(std::string("gemm: a grouped w holds its q as u8, got ") + dtypeName(w.dtype));
  if (gq.bits != 4 && gq.bits != 8) throw Error("gemm: a grouped w has 4 or 8 bits, got " + std::to_string(gq.bits));
  if (gq.e4m3) {  // FP8: groups of 32, 64 or 128 (the last one may be partial), no zero points, no perm
    if (gq.bits != 8 || (gq.size != 32 && gq.size != 64 && gq.size != 128))
      throw Error("gemm: an e4m3 w holds 8-bit codes in groups of 32, 64 or 128, got " + std::to_string(gq.bits) +
                  " bits in groups of " + std::to_string(gq.size));
    if (gq.zeros || gq.perm) throw Error("gemm: an e4m3 w has no zero points and no perm");
    if (gq.panel % 8) throw Error("gemm: scales by panel come in panels of a multiple of 8 rows");
    if (!gq.scales) throw Error("gemm: a grouped w needs its scales");
    if (w.shape[1] != K) throw Error("gemm: x is [M, " + std::to_string(K) + "] but w has K = " + std::to_string(w.shape[1]));
    if (splitK < 1 || splitK > K) throw Error("gemm: splitK must be in [1, K = " + std::to_string(K) + "]");
    if (M == 0 || N == 0) return;
    gemmFp8(x, w, bias, y, splitK);
    return;
  }
  if (gq.panel && (gq.bits != 4 || gq.panel % 8))
    throw Error("gemm: scales by panel are for 4-bit grouped and e4m3 w, in panels of a multiple of 8 rows");
  if (gq.size < 32 || gq.size % 32 || K % gq.size)
    throw Error("gemm: a grouped w's group size must be a multiple of 32 dividing K = " + std::to_string(K) + ", got " +
                std::to_string(gq.size));
  if (!gq.scales) throw Error("gemm: a grouped w needs its scales");
  if (w.shape[1] != K) throw Error("gemm: x is [M, " + std::to_string(K) + "] but w has K = " + std::to_string(w.shape[1]));
  if (splitK < 1 || splitK > K) throw Error("gemm: splitK must be in [1, K = " + std::to_string(K) + "]");
  if (M == 0 || N == 0) return;
  if (gq.perm)
    for (int64_t k = 0; k < K; k++)
      if (gq.perm[k] < 0 || gq.perm[k] >= K)
        throw Error("gemm: a grouped w's perm[" + std::to_string(k) + "] = " + std::to_string(gq.perm[k]) + " is outside [0, K)");
  if (gq.bits == 4) gemm4(x, w, bias, y, splitK);
  else gemm8(x, w, bias, y, splitK);
}

bool gemvI8(const View& x, const View& w, const float* bias, const View& y, const int64_t* kBounds, int splitK) {
  const int64_t M = x.shape[0], K = x.shape[1], N = w.shape[0];
  if (M != 1 || w.dtype != DType::i8 || !w.rowScale || simdLevel() == Simd::avx2) return false;
  // packed (cpu_gemm.h): panels of kPackRows rows, each one contiguous run; row-major: panels of kI8Rows rows
  const bool packed = w.packRows != 0;
  const int64_t rows = packed ? kPackRows : kI8Rows, panelBytes = packed ? packedPanelElems(K) : rows * K;
  const float* xs = x.as<float>();
  const int8_t* q = w.as<int8_t>();
  float* ys = y.as<float>();
  const int64_t panels = (N + rows - 1) / rows;
  parallelFor(panels, 1, [&](int64_t lo, int64_t hi) {
    // the range's first panel (each panel fetches the next as it goes)
    for (int64_t b = lo * panelBytes, e = std::min(packed ? hi * panelBytes : N * K, (lo + 1) * panelBytes); b < e; b += 64)
      __asm__ volatile("prefetcht1 %0" : : "m"(reinterpret_cast<const char*>(q)[b]));
    float total[kI8Rows];
    for (int64_t t = lo; t < hi; t++) {
      const int64_t n0 = t * rows;
      const int nr = int(std::min<int64_t>(rows, N - n0));
      const int8_t* panel = q + t * panelBytes;
      kGemvI8[size_t(nr - 1)](xs, panel, K, packed, kBounds, splitK,
                              t + 1 < hi ? reinterpret_cast<const char*>(panel + (packed ? kI8PackedAhead : panelBytes)) : nullptr, total);
      for (int j = 0; j < nr; j++) {
        float v = total[j] * w.rowScale[n0 + j];
        __asm__("" : "+x"(v));  // two roundings, as the general path: no contraction into one FMA
        ys[n0 + j] = bias ? v + bias[n0 + j] : v;
      }
    }
  });
  return true;
}

}  // namespace dl::cpu::gemm_detail
