// Grouped-quantized W on the GPU (W4A16 / W8A16, also f32 X): one SIMT kernel for decode and prefill, one signature
// (gemm / gemmBlocks of kernels.h with a grouped w, View::groups).
//
// Reduction schedule, fixed by K, G and splitK only (never M, the row's place, the grid): a warp computes one W row
// n for up to kRows X rows. The K / G groups are cut into splitK partitions as on the CPU (groups [ng * p / splitK,
// ng * (p + 1) / splitK)); in a partition, q is read as 32-bit words (8 columns at 4 bits, 4 at 8 bits), word w of
// the partition to lane w % 32 in ascending w. A word's columns are summed in ascending k, s = fma(x'[k], q'[k], s)
// from 0 (q' = q - zero exact, x' = x[perm[k]] in f32), then the lane's acc = fma(scale_g, s, acc); the 32 lanes'
// accs are added by the xor butterfly (offsets 16, 8, 4, 2, 1), lane 0's sum taken; partitions added in order, the
// bias last. The bits differ from the CPU's (another lane layout), never between calls of either.
//
// FP8 e4m3 W (View::Groups::e4m3, W8A16-style: the codes stay 1 byte in memory): the same warp-per-row kernel shape.
// The ceil(K / G) chunks of G columns (one scale each; the last partial when G does not divide K) are cut into splitK
// partitions as on the CPU; in a partition, columns are read in units of 4 (unit u = columns 4u .. 4u + 3 below K),
// unit u of the partition to lane u % 32 in ascending u; a unit's columns summed in ascending k, s = fma(x[k], q'[k],
// s) from 0, q' the code's exact value (cuda_fp8.h's e4m3 -> half conversion: every e4m3 value is a normal half; x as
// loaded, bf16 or f32, in f32), then acc = fma(scale of the chunk, s, acc); the butterfly, partitions in order, bias
// last. NOT YET RUN ON A GPU: written and compiled without one; test/kernels/gemmFp8.cuda.test.ts holds it to the
// float64 reference when a GPU is lent (scripts/device/check.sh), and until then the model loader keeps FP8 checkpoints
// dequantized on CUDA (ts/model/quantized/upload.ts).
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include "common.cuh"
#include "gemm_grouped.cuh"
#include "pdl.cuh"

namespace dl::gpu {
namespace {

constexpr int kWarps = 4;  // W rows per CTA
constexpr int kRows = 8;   // X rows per warp (prefill); decode launches the 1-row instance

struct GroupedArgs {
  GemmArgs a;
  const float* scales;
  const uint8_t* zeros;
  const int32_t* perm;
  int G, bits;
  int64_t byGroup;  // View::Groups::byGroup: scales and zeros (n, g) at [g * byGroup + n]; 0: [n * ng + g]
};

template <int BITS, int MT>
__global__ void __launch_bounds__(kWarps * 32) gemmGroupedKernel(GroupedArgs ga) {
  pdlStart();
  const GemmArgs& a = ga.a;
  const int lane = threadIdx.x & 31, n = blockIdx.x * kWarps + (threadIdx.x >> 5), m0 = blockIdx.y * MT;
  if (n >= a.N) return;
  constexpr int kCols = 32 / BITS;  // columns per 32-bit word
  constexpr uint32_t kMask = (1u << BITS) - 1;
  const int ng = a.K / ga.G, wordsPerGroup = ga.G / kCols, mid = 1 << (BITS - 1);
  const uint32_t* q = static_cast<const uint32_t*>(a.w) + int64_t(n) * (a.K / kCols);
  // (n, g) at sc[g * gs]: row-major or by group
  const int64_t first = ga.byGroup ? n : int64_t(n) * ng, gs = ga.byGroup ? ga.byGroup : 1;
  const float* sc = ga.scales + first;
  const uint8_t* zr = ga.zeros ? ga.zeros + first : nullptr;
  float total[MT];
#pragma unroll
  for (int i = 0; i < MT; i++) total[i] = 0.f;
  for (int p = 0; p < a.splitK; p++) {
    const int g0 = int(int64_t(ng) * p / a.splitK), g1 = int(int64_t(ng) * (p + 1) / a.splitK);
    float acc[MT];
#pragma unroll
    for (int i = 0; i < MT; i++) acc[i] = 0.f;
    for (int w = g0 * wordsPerGroup + lane; w < g1 * wordsPerGroup; w += 32) {
      const uint32_t word = q[w];
      const int g = w / wordsPerGroup, k0 = w * kCols;
      const float scale = sc[g * gs];
      const int z = zr ? int(zr[g * gs]) : mid;
      float s[MT];
#pragma unroll
      for (int i = 0; i < MT; i++) s[i] = 0.f;
#pragma unroll
      for (int c = 0; c < kCols; c++) {
        const float wq = float(int((word >> (BITS * c)) & kMask) - z);
        const int k = ga.perm ? ga.perm[k0 + c] : k0 + c;
#pragma unroll
        for (int i = 0; i < MT; i++)
          if (m0 + i < a.M) s[i] = fmaf(loadF(a.x, int64_t(m0 + i) * a.K + k, a.xt), wq, s[i]);
      }
#pragma unroll
      for (int i = 0; i < MT; i++) acc[i] = fmaf(scale, s[i], acc[i]);
    }
#pragma unroll
    for (int i = 0; i < MT; i++) {
      float v = acc[i];
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
      total[i] = p == 0 ? v : total[i] + v;
    }
  }
  if (lane != 0) return;
#pragma unroll
  for (int i = 0; i < MT; i++)
    if (m0 + i < a.M) {
      const float v = a.bias ? total[i] + loadF(a.bias, n, a.bt) : total[i];
      storeF(a.y, yIndex(a, m0 + i, n), a.yt, v);
    }
}

template <int BITS>
void launch(const GroupedArgs& ga) {
  const dim3 block(kWarps * 32);
  if (ga.a.M == 1) {
    launchKernel("gemmGroupedKernel", gemmGroupedKernel<BITS, 1>, dim3(unsigned(ceilDiv(ga.a.N, kWarps)), 1), block, 0, ga);
  } else {
    const dim3 grid(unsigned(ceilDiv(ga.a.N, kWarps)), unsigned(ceilDiv(ga.a.M, kRows)));
    launchKernel("gemmGroupedKernel", gemmGroupedKernel<BITS, kRows>, grid, block, 0, ga);
  }
}

// The e4m3fn value of a code, exactly (NaN for 0x7f / 0xff).
__device__ __forceinline__ float e4m3Value(uint8_t code) {
  return __half2float(__half(__nv_cvt_fp8_to_halfraw(__nv_fp8_storage_t(code), __NV_E4M3)));
}

template <int MT>
__global__ void __launch_bounds__(kWarps * 32) gemmFp8Kernel(GroupedArgs ga) {
  pdlStart();
  const GemmArgs& a = ga.a;
  const int lane = threadIdx.x & 31, n = blockIdx.x * kWarps + (threadIdx.x >> 5), m0 = blockIdx.y * MT;
  if (n >= a.N) return;
  const int nc = (a.K + ga.G - 1) / ga.G, unitsPerChunk = ga.G / 4;
  const uint8_t* q = static_cast<const uint8_t*>(a.w) + int64_t(n) * a.K;
  const int64_t first = ga.byGroup ? n : int64_t(n) * nc, gs = ga.byGroup ? ga.byGroup : 1;
  const float* sc = ga.scales + first;
  float total[MT];
#pragma unroll
  for (int i = 0; i < MT; i++) total[i] = 0.f;
  for (int p = 0; p < a.splitK; p++) {
    const int c0 = int(int64_t(nc) * p / a.splitK), c1 = int(int64_t(nc) * (p + 1) / a.splitK);
    const int u1 = min(c1 * unitsPerChunk, (a.K + 3) / 4);
    float acc[MT];
#pragma unroll
    for (int i = 0; i < MT; i++) acc[i] = 0.f;
    for (int u = c0 * unitsPerChunk + lane; u < u1; u += 32) {
      const float scale = sc[int64_t(u / unitsPerChunk) * gs];
      float s[MT];
#pragma unroll
      for (int i = 0; i < MT; i++) s[i] = 0.f;
#pragma unroll
      for (int c = 0; c < 4; c++) {
        const int k = u * 4 + c;
        if (k >= a.K) break;
        const float wq = e4m3Value(q[k]);
#pragma unroll
        for (int i = 0; i < MT; i++)
          if (m0 + i < a.M) s[i] = fmaf(loadF(a.x, int64_t(m0 + i) * a.K + k, a.xt), wq, s[i]);
      }
#pragma unroll
      for (int i = 0; i < MT; i++) acc[i] = fmaf(scale, s[i], acc[i]);
    }
#pragma unroll
    for (int i = 0; i < MT; i++) {
      float v = acc[i];
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
      total[i] = p == 0 ? v : total[i] + v;
    }
  }
  if (lane != 0) return;
#pragma unroll
  for (int i = 0; i < MT; i++)
    if (m0 + i < a.M) {
      const float v = a.bias ? total[i] + loadF(a.bias, n, a.bt) : total[i];
      storeF(a.y, yIndex(a, m0 + i, n), a.yt, v);
    }
}

void launchFp8(const GroupedArgs& ga) {
  const dim3 block(kWarps * 32);
  if (ga.a.M == 1) {
    launchKernel("gemmFp8Kernel", gemmFp8Kernel<1>, dim3(unsigned(ceilDiv(ga.a.N, kWarps)), 1), block, 0, ga);
  } else {
    const dim3 grid(unsigned(ceilDiv(ga.a.N, kWarps)), unsigned(ceilDiv(ga.a.M, kRows)));
    launchKernel("gemmFp8Kernel", gemmFp8Kernel<kRows>, grid, block, 0, ga);
  }
}

}  // namespace

void gemmGroupedLaunch(const char* op, const GemmArgs& a, const View::Groups& g) {
  if (g.bits != 4 && g.bits != 8) fail(op, "a grouped w has 4 or 8 bits, got " + std::to_string(g.bits));
  if (g.e4m3) {  // FP8: groups of 32, 64 or 128, the last one may be partial; no zero points, no perm
    if (g.bits != 8 || (g.size != 32 && g.size != 64 && g.size != 128))
      fail(op, "an e4m3 w holds 8-bit codes in groups of 32, 64 or 128, got groups of " + std::to_string(g.size));
    if (g.zeros || g.perm) fail(op, "an e4m3 w has no zero points and no perm");
    if (!g.scales) fail(op, "a grouped w needs its scales");
    if (a.M == 0 || a.N == 0) return;
    launchFp8(GroupedArgs{a, g.scales, nullptr, nullptr, g.size, 8, g.byGroup});
    return;
  }
  if (g.size < 32 || g.size % 32 || a.K % g.size)
    fail(op, "a grouped w's group size must be a multiple of 32 dividing K = " + std::to_string(a.K) + ", got " + std::to_string(g.size));
  if (!g.scales) fail(op, "a grouped w needs its scales");
  if (reinterpret_cast<uintptr_t>(a.w) % 4) fail(op, "a grouped w's q must be 4-byte aligned");
  if (a.M == 0 || a.N == 0) return;
  const GroupedArgs ga{a, g.scales, g.zeros, g.perm, g.size, g.bits, g.byGroup};
  if (g.bits == 4) launch<4>(ga);
  else launch<8>(ga);
}

}  // namespace dl::gpu
