// Internal to the CPU GEMM: grouped-quantized W (View::groups, dtype u8: 4 or 8 bits, groups of G along K, an f32
// scale and a zero point per group; the format: ts/model/quantFormat.ts), X f32, Y f32. One summation schedule for
// every path (decode panels, prefill tiles, AVX-512 or AVX2, any thread count or M), so a row's bits depend on K, G
// and splitK only:
//   x' = x[perm[k]] (x itself without perm); q' = q - zero, an exact small integer in f32.
//   The K / G groups are cut into splitK contiguous partitions (partition p: groups [ng * p / splitK, ng * (p + 1) /
//   splitK), possibly empty). For each partition: 16 lane accumulators acc[l] = 0; for each group g ascending:
//     16 lane group sums s[l] = 0; for each block of 32 columns k0 of the group ascending:
//       4 bits: s[l] = fma(x'[k0 + 2l], q'[k0 + 2l], s[l]), then s[l] = fma(x'[k0 + 2l + 1], q'[k0 + 2l + 1], s[l])
//               (lane l takes byte l of the block: its low nibble, then its high one)
//       8 bits: s[l] = fma(x'[k0 + l], q'[k0 + l], s[l]), then s[l] = fma(x'[k0 + 16 + l], q'[k0 + 16 + l], s[l])
//     acc[l] = fma(scale_g, s[l], acc[l])
//   then the fixed tree of cpu_gemm.h over acc (s8[i] = a[i] + a[i+8], ...).
//   y = partial_0; y = y + partial_p for p = 1.. in order; y = y + bias last.
// The zero point is applied to the integers (exact) and the scale once per group and lane: the products are those
// of x and the dequantized weights up to that one scaling per group.
#pragma once
#include "common.h"

namespace dl::cpu::gemm_detail {

// Y[M, N] = X[M, K] . W^T (+ bias f32 [N] or nullptr) for a grouped W (w.groups.bits 4 or 8). Checks its
// arguments (dl::Error naming the problem).
void gemmGrouped(const View& x, const View& w, const float* bias, const View& y, int splitK);

}  // namespace dl::cpu::gemm_detail
