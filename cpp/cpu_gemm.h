// Internal to the CPU GEMM: the SIMD accumulation kernels (cpu_gemm_avx2.cc, cpu_gemm_avx512.cc) and the one
// summation schedule that every path follows, so a row's bits never depend on M, its place in the batch, the
// block or tile it falls in, the path (decode panel or large-M tiles), or the thread count:
//   for each K partition p = [kBounds[p], kBounds[p+1]) (contiguous, splitK of them):
//     16 lane accumulators per output; lane l sums x[k]*w[k] (one fused multiply-add each) over the k of the
//     partition with k % 16 == l, in ascending order (groups of 16 at absolute k, so loads stay aligned; the
//     lanes of a partition's first and last group that fall outside it add fma(0, 0, acc));
//     then a fixed tree: s8[i] = a[i] + a[i+8], s4[i] = s8[i] + s8[i+4], s2[i] = s4[i] + s4[i+2], s2[0] + s2[1].
//   y = partial_0; y = y + partial_p for p = 1.. in order; y = y + bias last.
// AVX-512 holds the 16 lanes in one zmm, AVX2 in two ymm (lanes 0-7, 8-15): both paths give identical bits.
#pragma once
#include "common.h"

namespace dl::cpu::gemm_detail {

// acc[i][j][0..16) += the lanes of x row i . w row j over k in [k, k1), for i < mr, j < nr.
// x: [mr, ldx] f32; w: [nr, ldw] of the kernel's W dtype; [k, k1) lies in one partition.
// acc: [mr, nr, 16] f32 (bit-exact spills, so a partition may be fed in several chunks): loaded first unless
// flags has kStartAtZero; stored at the end unless flags has kReduce, which writes sums[i * nr + j] instead (the
// fixed tree above, in registers).
constexpr int kStartAtZero = 1, kReduce = 2;
using AccumFn = void (*)(const float* x, int64_t ldx, const void* w, int64_t ldw, int64_t k, int64_t k1, float* acc,
                         float* sums, int flags);

constexpr int kAvx2MR = 2, kAvx2NR = 3;      // 12 accumulator pairs + 2 X + 1 W of the 16 ymm registers
constexpr int kAvx512MR = 4, kAvx512NR = 6;  // 24 accumulators + 4 X + 1 W of the 32 zmm registers

// The kernel for a tile of mr x nr outputs (1 <= mr <= MR, 1 <= nr <= NR) and W dtype f32, bf16 or f16.
AccumFn accumAvx2(DType w, int mr, int nr);
AccumFn accumAvx512(DType w, int mr, int nr);

}  // namespace dl::cpu::gemm_detail
