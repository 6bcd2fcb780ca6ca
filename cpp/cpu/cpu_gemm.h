// Internal to the CPU GEMM: the SIMD accumulation kernels (cpu_gemm_avx2.cc, cpu_gemm_avx512.cc, cpu_gemm_bf16.cc)
// and the summation schedules that every path follows, so a row's bits never depend on M, its place in the batch,
// the block or tile it falls in, the path (decode panel or large-M tiles), or the thread count.
// W f32 or f16 (X f32):
//   for each K partition p = [kBounds[p], kBounds[p+1]) (contiguous, splitK of them):
//     16 lane accumulators per output; lane l sums x[k]*w[k] (one fused multiply-add each) over the k of the
//     partition with k % 16 == l, in ascending order (groups of 16 at absolute k, so loads stay aligned; the
//     lanes of a partition's first and last group that fall outside it add fma(0, 0, acc));
//     then a fixed tree: s8[i] = a[i] + a[i+8], s4[i] = s8[i] + s8[i+4], s2[i] = s4[i] + s4[i+2], s2[0] + s2[1].
//   y = partial_0; y = y + partial_p for p = 1.. in order; y = y + bias last.
// W bf16: X is first rounded to bf16 (round to nearest even, subnormals to zero), as llama.cpp and PyTorch's CPU
// bf16 matmul do, so that every product is exact and the multiply rate doubles (vdpbf16ps). Same partitions, lane
// accumulators, tree and partial/bias order; within a partition, groups of 32 at absolute k, lane l taking the pair
// (k, k+1) with k % 32 == 2l: acc = fma(x[k+1], w[k+1], acc), then acc = fma(x[k], w[k], acc) (the order and
// rounding of vdpbf16ps: on Zen 4, 32 M random pairs gave identical bits), elements outside the partition as 0.
// Where the CPU lacks AVX512-BF16 the two FMAs are issued as such. The instruction reads subnormal inputs as zero
// and flushes subnormal sums: X never holds subnormals after rounding; W with subnormal bf16 weights or sums
// below 2^-126 are the only inputs where native and emulated paths could differ.
// AVX-512 holds the 16 lanes in one zmm, AVX2 in two ymm (lanes 0-7, 8-15): every path gives identical bits.
#pragma once
#include <cstring>

#include "common.h"

namespace dl::cpu::gemm_detail {

// acc[i][j][0..16) += the lanes of x row i . w row j over k in [k, k1), for i < mr, j < nr.
// x: [mr, ldx] f32 (bf16 for the bf16 kernels); w: [nr, ldw] of the kernel's W dtype; [k, k1) lies in one partition.
// acc: [mr, nr, 16] f32 (bit-exact spills, so a partition may be fed in several chunks): loaded first unless
// flags has kStartAtZero; stored at the end unless flags has kReduce, which writes sums[i * nr + j] instead (the
// fixed tree above, in registers).
// kPackedW: w is a panel of packed W (below): row j's values of the group of 32 at k = g are at w + j * ldw + g *
// kPackRows (ldw = 32), not at w + j * ldw + g.
// kNoPrefetch: a packed call that does not prefetch ahead (another m-tile's call of the same panel does).
constexpr int kStartAtZero = 1, kReduce = 2, kPackedW = 4, kNoPrefetch = 8;
using AccumFn = void (*)(const void* x, int64_t ldx, const void* w, int64_t ldw, int64_t k, int64_t k1, float* acc,
                         float* sums, int flags);

constexpr int kAvx2MR = 2, kAvx2NR = 3;      // 12 accumulator pairs + 2 X + 1 W of the 16 ymm registers
constexpr int kAvx512MR = 4, kAvx512NR = 6;  // 24 accumulators + 4 X + 1 W of the 32 zmm registers
// bf16 kernels that split each input into odd and even halves: AVX2 8 accumulator pairs + 4 X + 2 W of 16 ymm,
// AVX-512 16 accumulators + 8 X + 2 W of 32 zmm. With vdpbf16ps the bf16 kernel takes the f32 kernels' tile.
constexpr int kAvx2Bf16MR = 2, kAvx2Bf16NR = 2;
// One-row AVX2 bf16 tile (M = 1, memory-bound): 12 accumulators + 2 X + 2 W, so a decode panel is 6 W rows, not 2.
constexpr int kAvx2Bf16RowNR = 6;
constexpr int kAvx512Bf16MR = 4, kAvx512Bf16NR = 4;

// The f32-X kernel for a tile of mr x nr outputs (1 <= mr <= MR, 1 <= nr <= NR) and W dtype f32 or f16.
AccumFn accumAvx2(DType w, int mr, int nr);
AccumFn accumAvx512(DType w, int mr, int nr);
// bf16 x bf16 kernels (pairs, schedule above) at the same MR x NR as the f32 kernels of each level.
AccumFn accumBf16Avx2(int mr, int nr);
AccumFn accumBf16Avx2Row(int nr);  // mr = 1, nr <= kAvx2Bf16RowNR
AccumFn accumBf16Avx512(int mr, int nr);
AccumFn accumBf16Avx512Native(int mr, int nr);

// Packed W (bf16, CPUs with AVX512-BF16): the decode GEMV streams W once per step, and row-major panels are
// kAvx512NR separate streams of K * 2 bytes each, restarted every panel; packed, a panel is one contiguous stream.
// Layout of W [N, K]: panels of kPackRows rows (the last padded with zero rows), each panel ceil(K / 32) groups, a
// group kPackRows rows x 32 values (k past K zero). A panel is the decode path's tile (kAvx512NR rows), so the
// kernels, their order of operations and so every bit are those of row-major W.
constexpr int kPackRows = kAvx512NR;
inline int64_t packedPanelElems(int64_t K) { return View::packedPanelElems(K, kPackRows); }
inline int64_t packedElems(int64_t N, int64_t K) { return (N + kPackRows - 1) / kPackRows * packedPanelElems(K); }
// Row r's values of its first group (those of the group of 32 at k = g follow at + g * kPackRows).
template <class T> T* packedRow(T* packed, int64_t K, int64_t r) {
  return packed + (r / kPackRows) * packedPanelElems(K) + (r % kPackRows) * 32;
}
// src [N, K] row-major bf16 -> dst (packedElems(N, K) values).
void packBf16(const uint16_t* src, int64_t N, int64_t K, uint16_t* dst);
// The padding of a packed [N, K] W (rows past N in the last panel, k past K in each row's last group) set to zero.
void zeroPackedPadding(uint16_t* packed, int64_t N, int64_t K);
// n values of a row-major [N, K] W, starting at element e0 (row e0 / K, column e0 % K), written to their packed
// places (a checkpoint tensor arriving in pieces); src may be unaligned.
void packValuesBf16(const void* src, int64_t K, int64_t e0, int64_t n, uint16_t* packed);
void unpackRowBf16(const uint16_t* packed, int64_t K, int64_t n, uint16_t* dst);  // row n into dst[0, K)
// Whether this CPU runs packed W (AVX512-BF16).
bool packedWSupported();
// x rounded to bf16 for the bf16 kernels (and the 4-bit and e4m3 ones): round to nearest even, subnormals to signed
// zero, NaN quiet. roundToBf16: n of them (AVX2), the same bits.
inline uint16_t xToBf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return (u & 0x7f800000u) == 0 ? uint16_t(u >> 16 & 0x8000u) : f32ToBf16(f);
}
void roundToBf16(const float* src, int64_t n, uint16_t* dst);
// Packed i8 W (quantized per row at load, View::rowScale): the same layout, a value a byte (a group of a panel
// kPackRows x 32 bytes), so the decode GEMV streams a panel as one contiguous run, as it does packed bf16. Read by
// the AVX-512 i8 kernels (gemvI8, the f32 kernels' i8 tiles, the large-M path's widening); kernels, order of
// operations and bits those of row-major W.
void zeroPackedPaddingI8(int8_t* packed, int64_t N, int64_t K);
void packValuesI8(const int8_t* src, int64_t K, int64_t e0, int64_t n, int8_t* packed);
void packI8(const int8_t* src, int64_t N, int64_t K, int8_t* dst);  // src [N, K] row-major -> dst, padding zeroed
// Whether this CPU runs packed i8 W (AVX-512).
bool packedI8Supported();
// Element offset of column k (a multiple of 16) of a row in W's layout: packed, the group of 32 at k & ~31 lies
// kPackRows rows of 32 apart; row-major, k itself. ks = kPackRows packed, else 1.
inline int64_t packedCol(int64_t k, int64_t ks) { return (k & ~int64_t(31)) * ks + (k & 31); }

}  // namespace dl::cpu::gemm_detail
