// CPU GEMM: Y[M,N] = X[M,K] . W[N,K]^T (+ bias[N]); X, Y f32, W f32|bf16|f16|i8, bias f32 or W's dtype (bf16 W: X is
// rounded to bf16 first, cpu_gemm.h). i8 W (quantized per output row, View::rowScale): the f32 kernels' schedule
// over x . q (each q widened to f32 exactly), then y = sum * rowScale[n] (+ bias): one rounding more than a dense
// row, and still a function of K and splitK only.
// Threads take whole output blocks, never part of a reduction; every output follows the one schedule of
// cpu_gemm.h whatever block, tile, path or thread computes it, so a row's bits depend on K and splitK only.
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <immintrin.h>
#include <vector>

#include "cpu_features.h"
#include "cpu_gemm.h"
#include "cpu_gemm_quant.h"
#include "kernels.h"
#include "threadpool.h"

namespace dl::cpu {
namespace {

using gemm_detail::AccumFn;

// Up to here: decode panels (W streamed once, split over N). Measured (SmolLM-135M layer stack, bf16 W from DRAM,
// Zen 4, 1 thread), panels against large-M tiles: AVX-512 M = 32 79 vs 73 GFLOP/s, M = 64 84 vs 81, M = 128 87 vs
// 87, M = 512 84 vs 89 (X no longer fits L2); AVX2 M = 32 64 vs 61, M = 64 67 vs 70.
constexpr int64_t kSmallM = 64, kSmallMAvx2 = 32;
// Decode panels feed K to the kernels in equal chunks (multiples of 16) of at most this many: each chunk costs
// an accumulator spill and reload, so a short last chunk is waste (K = 576 in chunks of 512 + 64 ran M = 16 at
// 61 GFLOP/s, in one chunk at 68: SmolLM-135M layer stack from DRAM, Zen 4, 1 thread). With one m-tile per panel
// the chunks are what spreads the W prefetch (below) over the panel: there 512 (M = 1: 13.9 GB/s at 1024, 18.5
// at 512; M = 4: 44 and 53 GFLOP/s; M = 8, two m-tiles: 70 and 68).
constexpr int64_t kPanelK = 1024, kPanelKOneTile = 512;
constexpr int64_t kBlockCols = 48;  // large M: a block of W rows kept in L2 ...
constexpr int64_t kBlockRows = 64;  // ... while blocks of X rows pass (one outputs() call each: <= kSmallM)
static_assert(kBlockRows <= kSmallM, "outputs() holds at most kSmallM rows");
constexpr int64_t kKeepFloats = 1 << 20;  // a larger X copy buffer is freed after the call
// Decode panels: W rows are prefetched (into L2) this many panels ahead of the one being computed, a few lines
// before each kernel call of a panel. The hardware prefetchers stop at every 4 KiB page of the W stream; issued
// all at once, a panel's lines fill the miss buffers. Measured on a SmolLM-135M-shaped layer stack streamed from
// DRAM (AMD EPYC Zen 4, 1 thread), M = 16: 57 GFLOP/s without, 62 all at once, 83 spread; M = 1: 10.6 -> 14 GB/s.
constexpr int64_t kPrefetchPanels = 3;

// Exact widening of n bf16/f16 values to f32 (a widened W block is fed to the f32 kernels: same bits).
void widen(const uint16_t* src, DType t, int64_t n, float* dst) {
  int64_t i = 0;
  if (t == DType::bf16) {
    for (; i + 8 <= n; i += 8) {
      __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i));
      _mm256_storeu_ps(dst + i, _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16)));
    }
    for (; i < n; i++) dst[i] = bf16ToF32(src[i]);
  } else {
    for (; i + 8 <= n; i += 8)
      _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i))));
    for (; i < n; i++) dst[i] = f16ToF32(src[i]);
  }
}

// Exact widening of n int8 values to f32 (a widened i8 W block is fed to the f32 kernels: same bits).
void widenI8(const int8_t* src, int64_t n, float* dst) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(dst + i, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(src + i)))));
  for (; i < n; i++) dst[i] = float(src[i]);
}

}  // namespace

void gemm_detail::roundToBf16(const float* src, int64_t n, uint16_t* dst) {
  const __m256i expBits = _mm256_set1_epi32(0x7f800000), signBit = _mm256_set1_epi32(int(0x80000000u));
  const __m256i absBits = _mm256_set1_epi32(0x7fffffff), half = _mm256_set1_epi32(0x7fff), one = _mm256_set1_epi32(1);
  const __m256i quiet = _mm256_set1_epi32(0x00400000);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256i u = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i));
    u = _mm256_blendv_epi8(u, _mm256_and_si256(u, signBit), _mm256_cmpeq_epi32(_mm256_and_si256(u, expBits), _mm256_setzero_si256()));
    const __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, absBits), expBits);
    __m256i r = _mm256_add_epi32(u, _mm256_add_epi32(half, _mm256_and_si256(_mm256_srli_epi32(u, 16), one)));
    r = _mm256_srli_epi32(_mm256_blendv_epi8(r, _mm256_or_si256(u, quiet), nan), 16);
    const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(r, r), 0b1000);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i), _mm256_castsi256_si128(packed));
  }
  for (; i < n; i++) dst[i] = xToBf16(src[i]);
}

namespace {
using gemm_detail::roundToBf16;

// Row stride of copied operands: a multiple of 16 floats (aligned loads) plus one cache line, so that rows do not
// all fall on one L1 set (4 KiB aliasing).
int64_t paddedStride(int64_t k) { return (k + 15) / 16 * 16 + 16; }
// The same for bf16 rows (in elements): a multiple of 32 plus one cache line.
int64_t paddedStrideBf16(int64_t k) { return (k + 31) / 32 * 32 + 32; }

// Per-thread work buffers kept between calls (fresh pages on every call would cost page faults); trimmed back
// after a call that needed a large one.
struct AlignedFloats {
  float* data = nullptr;
  int64_t capacity = 0;
  ~AlignedFloats() { std::free(data); }
  void trim(int64_t keep) {
    if (capacity <= keep) return;
    std::free(data);
    data = nullptr, capacity = 0;
  }
  void reserve(int64_t n) {
    if (n <= capacity) return;
    std::free(data);
    capacity = (n + 15) / 16 * 16;
    data = static_cast<float*>(std::aligned_alloc(64, size_t(capacity) * 4));
    if (!data) {
      capacity = 0;
      throw Error("gemm: out of host memory for a " + std::to_string(n * 4) + "-byte work buffer");
    }
  }
};
AlignedFloats& scratch(int which, int64_t n) {
  thread_local AlignedFloats buffers[2];
  buffers[which].reserve(n);
  return buffers[which];
}

struct Problem {
  const void* x;
  int64_t ldx;     // elements
  size_t xsz;      // bytes per element of x: 4, or 2 for the bf16 kernels
  const float* bias;  // f32 [N] or nullptr
  float* y;
  int64_t N;
  const int64_t* kBounds;
  int splitK;
  int MR, NR;
  AccumFn (*kernel)(DType, int, int);
  const float* scale = nullptr;  // i8 W: f32 [N], each output's sum times its row's scale before the bias
};

// The tile shape and kernels for W's dtype and M on this CPU (bf16: X as bf16, cpu_gemm.h). The tile never
// changes a result's bits (cpu_gemm.h), only the speed.
void chooseKernels(Problem& P, DType w, int64_t M) {
  const Simd simd = simdLevel();
  if (w == DType::bf16) {
    P.xsz = 2;
    if (simd == Simd::avx512bf16) {
      P.MR = gemm_detail::kAvx512MR, P.NR = gemm_detail::kAvx512NR;
      P.kernel = [](DType, int mr, int nr) { return gemm_detail::accumBf16Avx512Native(mr, nr); };
    } else if (simd == Simd::avx512) {
      P.MR = gemm_detail::kAvx512Bf16MR, P.NR = gemm_detail::kAvx512Bf16NR;
      P.kernel = [](DType, int mr, int nr) { return gemm_detail::accumBf16Avx512(mr, nr); };
    } else if (M == 1) {
      P.MR = 1, P.NR = gemm_detail::kAvx2Bf16RowNR;
      P.kernel = [](DType, int, int nr) { return gemm_detail::accumBf16Avx2Row(nr); };
    } else {
      P.MR = gemm_detail::kAvx2Bf16MR, P.NR = gemm_detail::kAvx2Bf16NR;
      P.kernel = [](DType, int mr, int nr) { return gemm_detail::accumBf16Avx2(mr, nr); };
    }
    return;
  }
  P.xsz = 4;
  const bool avx512 = simd != Simd::avx2;
  P.MR = avx512 ? gemm_detail::kAvx512MR : gemm_detail::kAvx2MR;
  P.NR = avx512 ? gemm_detail::kAvx512NR : gemm_detail::kAvx2NR;
  P.kernel = avx512 ? gemm_detail::accumAvx512 : gemm_detail::accumAvx2;
}

// Cache lines [a, e) to fetch into L2, `step` of them at a time (asm: GCC 12 at -O1 and above drops
// _mm_prefetch / __builtin_prefetch in these loops).
struct Prefetch {
  const char* a = nullptr;
  const char* e = nullptr;
  int64_t step = 0;
  void some(int64_t n) {
    for (; n > 0 && a < e; n--, a += 64) __asm__ volatile("prefetcht1 %0" : : "m"(*a));
  }
};

// Outputs y[m0 + i, n0 + j] (i < rows <= kSmallM, j < nr <= NR). Each partition is fed to the kernels in chunks
// (edges at multiples of `chunk`) with the m-tiles innermost, so one W chunk serves all rows from L1; the
// partials are summed in partition order, bias last. pf's lines are fetched a few before each kernel call (spread
// out, they do not fill the miss buffers at once), the rest at the end.
// (No loop here may become a memcpy / memmove call: the copies are a few floats each, thousands a step, and as libc
// calls they took ~20% of the GEMM kernels' time on a 16-row tiny-model step. Partition 0's sums go straight to
// `total`, and a row's nr <= NR outputs are stored by a loop of constant trip count, unrolled.)
void outputs(const Problem& P, int64_t m0, int64_t rows, int64_t n0, int nr, const void* w, DType wtype,
             int64_t ldw, int64_t chunk, Prefetch pf = {}, int wFlags = 0) {
  alignas(64) float acc[kSmallM * gemm_detail::kAvx512NR * 16];
  float partial[kSmallM * gemm_detail::kAvx512NR], total[kSmallM * gemm_detail::kAvx512NR];
  for (int p = 0; p < P.splitK; p++) {
    float* sums = p == 0 ? total : partial;
    const int64_t k0 = P.kBounds[p], k1 = P.kBounds[p + 1];
    for (int64_t k = k0, ke; k < k1; k = ke) {
      ke = std::min(k1, (k / chunk + 1) * chunk);
      const int flags = (k == k0 ? gemm_detail::kStartAtZero : 0) | (ke == k1 ? gemm_detail::kReduce : 0) | wFlags;
      for (int64_t m = 0; m < rows; m += P.MR) {
        const int mr = int(std::min<int64_t>(P.MR, rows - m));
        pf.some(pf.step);
        // packed W: only the first m-tile's call may prefetch ahead; the others read the same lines
        const int f = m == 0 ? flags : flags | gemm_detail::kNoPrefetch;
        P.kernel(wtype, mr, nr)(static_cast<const char*>(P.x) + size_t((m0 + m) * P.ldx) * P.xsz, P.ldx, w, ldw, k, ke, acc + m * nr * 16, sums + m * nr, f);
      }
    }
    if (p > 0)
      for (int64_t o = 0; o < rows * nr; o++) total[o] = total[o] + partial[o];
  }
  pf.some(INT64_MAX);
  static_assert(gemm_detail::kAvx2NR <= gemm_detail::kAvx512NR, "nr <= kAvx512NR on every path");
  for (int64_t i = 0; i < rows; i++) {
    const float* t = total + i * nr;
    float* yRow = P.y + (m0 + i) * P.N + n0;
#pragma GCC unroll 8
    for (int j = 0; j < gemm_detail::kAvx512NR; j++)
      if (j < nr) {
        const float v = P.scale ? t[j] * P.scale[n0 + j] : t[j];
        yRow[j] = P.bias ? v + P.bias[n0 + j] : v;
      }
  }
}

}  // namespace

namespace gemm_detail {
void unpackRowBf16(const uint16_t* packed, int64_t K, int64_t n, uint16_t* dst) {
  const uint16_t* row = packedRow(packed, K, n);
  int64_t g = 0;
  for (; g + 32 <= K; g += 32) std::memcpy(dst + g, row + g * kPackRows, 64);  // one line: inlined
  if (g < K) std::memcpy(dst + g, row + g * kPackRows, size_t(K - g) * 2);
}
namespace {
// The packed layout's writers for either value size (bf16: uint16_t, i8: int8_t).
template <class T> void zeroPadding(T* packed, int64_t N, int64_t K) {
  const int64_t rows = (N + kPackRows - 1) / kPackRows * kPackRows, groups = (K + 31) / 32;
  for (int64_t r = 0; r < rows; r++) {
    T* row = packedRow(packed, K, r);
    if (r >= N) {  // a padding row: every group
      for (int64_t g = 0; g < groups; g++) std::fill_n(row + g * 32 * kPackRows, 32, T(0));
    } else if (K % 32) {  // k past K in the row's last group
      std::fill_n(row + (groups - 1) * 32 * kPackRows + K % 32, 32 - K % 32, T(0));
    }
  }
}
template <class T> void packValues(const void* src, int64_t K, int64_t e0, int64_t n, T* packed) {
  const char* from = static_cast<const char*>(src);
  const int64_t end = e0 + n;
  for (int64_t r = e0 / K, c = e0 % K; r * K + c < end; r++, c = 0) {  // row by row: one division per row
    const int64_t rowEnd = std::min(K, end - r * K);
    T* row = packedRow(packed, K, r);
    for (; c < rowEnd;) {
      const int64_t run = std::min(32 - c % 32, rowEnd - c);  // one group's piece of the row
      std::memcpy(row + (c / 32) * 32 * kPackRows + c % 32, from, size_t(run) * sizeof(T));
      from += run * int64_t(sizeof(T));
      c += run;
    }
  }
}
template <class T> void pack(const T* src, int64_t N, int64_t K, T* dst) {
  zeroPadding(dst, N, K);
  parallelFor(N, 64, [&](int64_t lo, int64_t hi) { packValues(src + lo * K, K, lo * K, (hi - lo) * K, dst); });
}
}  // namespace
void zeroPackedPadding(uint16_t* packed, int64_t N, int64_t K) { zeroPadding(packed, N, K); }
void zeroPackedPaddingI8(int8_t* packed, int64_t N, int64_t K) { zeroPadding(packed, N, K); }
void packValuesBf16(const void* src, int64_t K, int64_t e0, int64_t n, uint16_t* packed) { packValues(src, K, e0, n, packed); }
void packValuesI8(const int8_t* src, int64_t K, int64_t e0, int64_t n, int8_t* packed) { packValues(src, K, e0, n, packed); }
void packBf16(const uint16_t* src, int64_t N, int64_t K, uint16_t* dst) { pack(src, N, K, dst); }
void packI8(const int8_t* src, int64_t N, int64_t K, int8_t* dst) { pack(src, N, K, dst); }
bool packedWSupported() { return simdLevel() == Simd::avx512bf16; }
bool packedI8Supported() { return simdLevel() != Simd::avx2; }
}  // namespace gemm_detail

void gemm(const View& x, const View& w, const View& bias, const View& y, int splitK) {
  if (x.dtype != DType::f32) throw Error(std::string("gemm: the CPU backend takes x as f32, got ") + dtypeName(x.dtype));
  if (y.dtype != DType::f32) throw Error(std::string("gemm: the CPU backend writes y as f32, got ") + dtypeName(y.dtype));
  if (w.dtype == DType::i32) throw Error("gemm: w must be f32, bf16, f16 or i8, got i32");
  if ((w.dtype == DType::i8) != (w.rowScale != nullptr))
    throw Error(w.dtype == DType::i8 ? "gemm: an i8 w needs its per-row scales (wScale, f32 [N])" : "gemm: wScale is for an i8 w only");
  if (bias && bias.dtype != DType::f32 && (bias.dtype != w.dtype || w.dtype == DType::i8 || w.dtype == DType::u8))
    throw Error(std::string("gemm: bias must be f32 or w's dtype (") + dtypeName(w.dtype) + "), got " + dtypeName(bias.dtype));
  const int64_t M = x.shape[0], K = x.shape[1], N = w.shape[0];
  if (splitK < 1 || splitK > K) throw Error("gemm: splitK must be in [1, K = " + std::to_string(K) + "]");

  std::vector<int64_t> kBounds(splitK + 1);
  for (int p = 0; p <= splitK; p++) kBounds[p] = K * p / splitK;
  std::vector<float> biasF32;
  if (bias) {
    biasF32.resize(N);
    if (bias.dtype == DType::f32) std::copy(bias.as<float>(), bias.as<float>() + N, biasF32.begin());
    else widen(bias.as<uint16_t>(), bias.dtype, N, biasF32.data());
  }
  // grouped-quantized W (View::groups): its own kernels and schedule (cpu_gemm_quant.h)
  if (w.groups.bits) return gemm_detail::gemmGrouped(x, w, bias ? biasF32.data() : nullptr, y, splitK);
  if (w.dtype == DType::u8) throw Error("gemm: a u8 w is the q of a grouped w and needs its groups (scales, group size)");
  const bool wPacked = w.packRows != 0;
  if (wPacked && (w.packRows != gemm_detail::kPackRows ||
                  !(w.dtype == DType::bf16 ? gemm_detail::packedWSupported()
                                           : w.dtype == DType::i8 && gemm_detail::packedI8Supported())))
    throw Error("gemm: packed W must be bf16 (on a CPU with AVX512-BF16) or i8 (AVX-512) in panels of " +
                std::to_string(gemm_detail::kPackRows) + " rows, got " + dtypeName(w.dtype) + " in panels of " +
                std::to_string(w.packRows) + " on " + simdName(simdLevel()));
  // i8 W at M = 1: its own GEMV, same schedule and bits (cpu_gemm_quant.h)
  if (gemm_detail::gemvI8(x, w, bias ? biasF32.data() : nullptr, y, kBounds.data(), splitK)) return;
  Problem P{x.as<float>(), K, 4, bias ? biasF32.data() : nullptr, y.as<float>(), N, kBounds.data(), splitK, 0, 0, nullptr};
  P.scale = w.rowScale;
  chooseKernels(P, w.dtype, M);
  const bool bf16 = w.dtype == DType::bf16;
  const int64_t smallM = simdLevel() == Simd::avx2 ? kSmallMAvx2 : kSmallM;
  const size_t wsz = dtypeSize(w.dtype);
  auto wRow = [&](int64_t n) { return static_cast<const char*>(w.data) + size_t(n * K) * wsz; };

  // bf16 W: X rounded to bf16 rows. Decode shapes, or rows that are not 64-byte aligned: X copied to aligned rows.
  // Either way padded by one cache line (aligned loads; no 4 KiB set aliasing between the rows that a panel keeps
  // in L1).
  const int64_t ld = bf16 ? paddedStrideBf16(K) : paddedStride(K);
  if (bf16 || M <= smallM || K % 16) {
    AlignedFloats& xCopy = scratch(1, bf16 ? (M * ld + 1) / 2 : M * ld);
    parallelFor(M, 64, [&](int64_t lo, int64_t hi) {
      for (int64_t m = lo; m < hi; m++) {
        if (bf16) roundToBf16(x.as<float>() + m * K, K, reinterpret_cast<uint16_t*>(xCopy.data) + m * ld);
        else std::copy_n(x.as<float>() + m * K, K, xCopy.data + m * ld);
      }
    });
    P.x = xCopy.data;
    P.ldx = ld;
  }

  struct Trim {
    ~Trim() { scratch(1, 0).trim(kKeepFloats); }
  } trimAfter;

  if (M <= smallM) {
    // Decode: X stays in L1/L2; W streams from memory once (bf16/f16 widened in registers, prefetched a few panels
    // ahead), each thread a contiguous range of its rows. Packed W (cpu_gemm.h): a panel (one tile, kPackRows =
    // kAvx512NR rows) is one contiguous stream; with a single m-tile the kernel prefetches 4 KiB ahead of itself as
    // it reads it, in one call over all of K.
    // (packed: panels of kPackRows = P.NR rows; i8 packed at AVX-512, where P.NR is kAvx512NR too)
    const int64_t panels = (N + P.NR - 1) / P.NR, panelElems = wPacked ? gemm_detail::packedPanelElems(K) : 0;
    auto panelAt = [&](int64_t t) {  // the first W byte of panel t (t <= panels)
      return wPacked ? static_cast<const char*>(w.data) + size_t(t * panelElems) * wsz : wRow(std::min(N, t * P.NR));
    };
    auto panelLines = [&](int64_t from, int64_t to) { return Prefetch{panelAt(from), panelAt(to), 0}; };
    // the bf16 kernels fetch a packed panel ahead themselves; the i8 tiles take the panel prefetch below
    const bool kernelPrefetch = wPacked && bf16 && M <= P.MR;
    const int64_t maxChunk = kernelPrefetch ? K : M <= P.MR ? kPanelKOneTile : kPanelK;
    const int64_t group = bf16 ? 32 : 16;  // the kernels' k group
    const int64_t nChunks = (K + maxChunk - 1) / maxChunk, chunk = ((K + nChunks - 1) / nChunks + group - 1) / group * group;
    // kernel calls per panel (at most): m-tiles x (partition, chunk) pieces
    const int64_t calls = (M + P.MR - 1) / P.MR * (splitK + nChunks - 1);
    const int flags = wPacked ? gemm_detail::kPackedW | (kernelPrefetch ? 0 : gemm_detail::kNoPrefetch) : 0;
    parallelFor(panels, 1, [&](int64_t lo, int64_t hi) {
      if (kernelPrefetch) panelLines(lo, hi).some(64);
      else panelLines(lo, std::min(hi, lo + kPrefetchPanels)).some(INT64_MAX);
      for (int64_t t = lo; t < hi; t++) {
        Prefetch pf;
        if (!kernelPrefetch && t + kPrefetchPanels < hi) {
          pf = panelLines(t + kPrefetchPanels, t + kPrefetchPanels + 1);
          pf.step = ((pf.e - pf.a) / 64 + calls - 1) / calls;
        }
        const int64_t n0 = t * P.NR;
        outputs(P, 0, M, n0, int(std::min<int64_t>(P.NR, N - n0)), panelAt(t), w.dtype, wPacked ? 32 : K, chunk, pf, flags);
      }
    });
    return;
  }

  // Large M: per task a block of kBlockCols W rows, copied (f16 widened to f32, bf16 as is) into an aligned buffer with
  // padded rows that stays in L2, against a block of kBlockRows X rows (the copy measured ~1.4x faster than
  // reading W in place: no 4 KiB set aliasing between the W rows of a tile). Each n-tile of the block meets all the
  // block's X rows in one outputs() call (m-tiles innermost, as in the decode panels: the n-tile's W stays in L1;
  // measured against one call per MR x NR tile, layer stack M = 512, 1 thread: 158 -> 165-178 GFLOP/s with
  // vdpbf16ps, AVX2 54 -> 63).
  const int64_t nBlocks = (N + kBlockCols - 1) / kBlockCols, mBlocks = (M + kBlockRows - 1) / kBlockRows;
  parallelFor(nBlocks * mBlocks, 1, [&](int64_t lo, int64_t hi) {
    AlignedFloats& wBlock = scratch(0, bf16 ? (kBlockCols * ld + 1) / 2 : kBlockCols * ld);
    int64_t packed = -1;
    for (int64_t t = lo; t < hi; t++) {
      const int64_t nb = t / mBlocks, mb = t % mBlocks;
      const int64_t n0 = nb * kBlockCols, m0 = mb * kBlockRows;
      const int64_t cols = std::min(kBlockCols, N - n0), rows = std::min(kBlockRows, M - m0);
      if (packed != nb) {
        for (int64_t j = 0; j < cols; j++) {
          if (wPacked && bf16) gemm_detail::unpackRowBf16(w.as<uint16_t>(), K, n0 + j, reinterpret_cast<uint16_t*>(wBlock.data) + j * ld);
          else if (wPacked) {  // packed i8: each group of 32 widened from its place
            const int8_t* row = gemm_detail::packedRow(w.as<int8_t>(), K, n0 + j);
            for (int64_t g = 0; g < K; g += 32) widenI8(row + g * gemm_detail::kPackRows, std::min<int64_t>(32, K - g), wBlock.data + j * ld + g);
          }
          else if (w.dtype == DType::f32) std::copy_n(reinterpret_cast<const float*>(wRow(n0 + j)), K, wBlock.data + j * ld);
          else if (bf16) std::copy_n(reinterpret_cast<const uint16_t*>(wRow(n0 + j)), K, reinterpret_cast<uint16_t*>(wBlock.data) + j * ld);
          else if (w.dtype == DType::i8) widenI8(reinterpret_cast<const int8_t*>(wRow(n0 + j)), K, wBlock.data + j * ld);
          else widen(reinterpret_cast<const uint16_t*>(wRow(n0 + j)), w.dtype, K, wBlock.data + j * ld);
        }
        packed = nb;
      }
      for (int64_t n = 0; n < cols; n += P.NR)
        outputs(P, m0, rows, n0 + n, int(std::min<int64_t>(P.NR, cols - n)),
                reinterpret_cast<const char*>(wBlock.data) + size_t(n * ld) * (bf16 ? 2 : 4), bf16 ? DType::bf16 : DType::f32, ld, K);
    }
  });
}

// Three gemm calls, one per block: W's rows [c, c + n) into the block's (M, n) rows at row0.
void gemmBlocks(const View& x, const View& w, const View& bias, const View& y, int splitK, int64_t cut1, int64_t cut2,
                int64_t rows, int64_t row0) {
  checkGemmBlocks(x, w, y, cut1, cut2, rows, row0);
  forEachGemmBlock(x, w, bias, y, cut1, cut2, rows, row0, [&](const View& wj, const View& bj, const View& yj) { gemm(x, wj, bj, yj, splitK); });
}

}  // namespace dl::cpu
