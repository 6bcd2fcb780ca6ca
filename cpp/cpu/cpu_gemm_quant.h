// Internal to the CPU GEMM: grouped-quantized W (View::groups, dtype u8: 4 or 8 bits, groups of G along K, an f32
// scale and a zero point per group; the format: ts/model/quantFormat.ts), X f32, Y f32. One summation schedule per
// bit width for every path (decode panels, prefill tiles, AVX512-BF16, AVX-512 or AVX2, any thread count or M), so a
// row's bits depend on K, G and splitK only:
//   8 bits: q' = q - zero, an exact small integer (in f32). 4 bits: q'' = 128 + q (exact in bf16 and f32: the
//   bits 0x4300 | q), and c = 128 + zero (136 symmetric); the zero point enters as each octet's starting value.
//   4 bits: x' = bf16(x[perm[k]]) (x itself without perm; rounded as the dense bf16 GEMM rounds X, cpu_gemm.h:
//   nearest even, subnormals to signed zero), so every product x' * q'' is exact. K is cut into chunks of 128
//   columns at k0 = 0, 128, ... (the last one 32, 64 or 96 wide when 128 does not divide K; missing columns are
//   zeros). The chunks are cut into splitK contiguous partitions (partition p: chunks [nc * p / splitK,
//   nc * (p + 1) / splitK), possibly empty). For each partition: 16 lane accumulators acc[l] = 0; for each chunk
//   ascending: lane l takes the octet of columns k0 + 8l .. k0 + 8l + 7 (in one group, since G is a multiple of 32):
//     X = +0; for t = 0..3: X = X + x'[k0 + 8l + 4 + t], then X = X + x'[k0 + 8l + t]   (the octet's sum, once per
//     X row and chunk; c of the octet's group: c * X is the octet's dot with the constant 128 + zero)
//     s = fnmadd(c, X, 0) = -(c * X) rounded (a lane without columns: +0)
//     for t = 0..3: s = fma(x'[k0 + 8l + 4 + t], q''[k0 + 8l + 4 + t], s), then s = fma(x'[k0 + 8l + t],
//     q''[k0 + 8l + t], s)   (vdpbf16ps's pairs and order: the high word first, cpu_gemm.h)
//     acc[l] = fma(scale of the octet's group, s, acc[l])   (a lane without columns adds fma(0, 0, acc))
//   8 bits: x' = x[perm[k]] in f32. The K / G groups are cut into splitK contiguous partitions (partition p: groups
//   [ng * p / splitK, ng * (p + 1) / splitK), possibly empty). For each partition: 16 lane accumulators acc[l] = 0;
//   for each group g ascending: 16 lane group sums s[l] = 0; for each block of 32 columns k0 of the group ascending:
//       s[l] = fma(x'[k0 + l], q'[k0 + l], s[l]), then s[l] = fma(x'[k0 + 16 + l], q'[k0 + 16 + l], s[l])
//     acc[l] = fma(scale_g, s[l], acc[l])
//   then the fixed tree of cpu_gemm.h over acc (s8[i] = a[i] + a[i+8], ...).
//   y = partial_0; y = y + partial_p for p = 1.. in order; y = y + bias last.
//   FP8 (View::Groups::e4m3): x' = bf16(x) (as for 4 bits), q' = the e4m3fn value of the code (exact in bf16 and
//   f32: its subnormals are normal bf16), so every product x' * q' is exact. K is cut into chunks of G columns (G
//   32, 64 or 128: a group, one scale; the last chunk partial when G does not divide K, its missing columns zeros),
//   the chunks into splitK contiguous partitions as for 4 bits. For each partition: 16 lane accumulators acc[l] = 0;
//   for each chunk ascending: s = 0; for each block of 32 columns k0 of the chunk ascending, lane l takes the pair
//   (k0 + 2l, k0 + 2l + 1): s = fma(x'[k0 + 2l + 1], q'[..], s), then s = fma(x'[k0 + 2l], q'[..], s) (the dense bf16
//   GEMM's pairs, vdpbf16ps's order); acc[l] = fma(scale of the chunk, s, acc[l]). Then the fixed tree, partials in
//   order, bias last. A NaN code (0x7f, 0xff) makes its row's output NaN; loaders refuse them (ts/model/quantized).
// 8 bits: the zero point is applied to the integers (exact) and the scale once per group and lane: the products
// are those of x' and the dequantized weights up to that one scaling. 4 bits: the products x' * (128 + q) are
// exact, and the octet's x' * (128 + zero) leaves with one rounded product at the start; sums run about 30x the
// size of the result, so ~30x the rounding of summing x' * (q - zero) (relative ~1e-6 of a row's dot, far below
// bf16 x's 4e-3), in exchange for no table lookup (bench/RESULTS.md). As with bf16 W, the
// AVX512-BF16 instruction reads subnormal inputs as zero and flushes subnormal sums; x' holds no subnormals, so only
// sums below 2^-126 could differ between it and the emulating paths. 4-bit zero points must be in [0, 16] (16:
// GPTQ v1's zero point of 0).
#pragma once
#include "common.h"

namespace dl::cpu::gemm_detail {

// Y[M, N] = X[M, K] . W^T (+ bias f32 [N] or nullptr) for a grouped W (w.groups.bits 4 or 8, or e4m3). Checks its
// arguments (dl::Error naming the problem) but for the 4-bit zero points' range, [0, 16], checked where they enter
// (the gemm op, ModelWeights::setGrouped).
void gemmGrouped(const View& x, const View& w, const float* bias, const View& y, int splitK);

// The decode GEMV (M = 1) for an i8 W quantized per output row (View::rowScale) on AVX-512: the f32 kernels'
// schedule (cpu_gemm.h: lanes k % 16 over the partitions kBounds, the fixed tree, partials in order, then times the
// row's scale, bias last), so the same bits as the general path; panels of 8 rows (packed W: its panels of
// kPackRows), the next prefetched as one is read. Returns false (nothing done) where it does not apply: M > 1,
// another W, AVX2.
bool gemvI8(const View& x, const View& w, const float* bias, const View& y, const int64_t* kBounds, int splitK);

}  // namespace dl::cpu::gemm_detail
