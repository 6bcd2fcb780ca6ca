// What the GEMM kernels share (cuda/gemm.cu: mma.sync and SIMT; cuda/sm90/gemm_wgmma.cu: wgmma on sm_90a): the
// launch arguments, the split-K partition rule and the epilogue store. See cuda/gemm.cu for the reduction schedule.
#pragma once
#include "common.cuh"

namespace dl::gpu {

constexpr int kPartK = 64;  // partition granularity in K, and the k-depth of one pipeline stage

struct GemmArgs {
  const void* x;  // (M, K)
  const void* w;  // (N, K)
  const void* bias;
  void* y;         // (M, N)
  float* partial;  // (splitK, M, N) when splitK > 1, summed by gemm.cu's gemmReduceKernel
  int M, N, K, splitK, kTiles;
  DType xt, wt, bt, yt;
  // Y's layout (gemmBlocks): columns cut at cut1 <= cut2 into blocks, block j a (yRows, n_j) matrix at y + yRows * c_j,
  // row m of this GEMM its row yRow0 + m. The plain (M, N) layout is cut1 = cut2 = N, yRows = M, yRow0 = 0.
  int cut1, cut2, yRows, yRow0;
  // i8 W (W8A16, the SIMT kernel): f32 (N), each output's sum over all partitions times its row's scale, before the bias.
  const float* wScale = nullptr;
};

// Where output (row, col) goes in y.
__device__ __forceinline__ int64_t yIndex(const GemmArgs& a, int row, int col) {
  const int64_t r = int64_t(a.yRow0) + row;
  if (col < a.cut1) return r * a.cut1 + col;
  if (col < a.cut2) return int64_t(a.yRows) * a.cut1 + r * (a.cut2 - a.cut1) + (col - a.cut1);
  return int64_t(a.yRows) * a.cut2 + r * (a.N - a.cut2) + (col - a.cut2);
}

// Partition `split` covers k in [k0, k1): whole 64-wide k tiles, the last one cut at K.
__device__ __forceinline__ void partitionRange(const GemmArgs& a, int split, int& k0, int& k1) {
  k0 = int(int64_t(split) * a.kTiles / a.splitK) * kPartK;
  k1 = min(int(int64_t(split + 1) * a.kTiles / a.splitK) * kPartK, a.K);
}

// Writes a pair of outputs (row, col), (row, col + 1): the final value when splitK == 1, else an f32 partial.
// Not inlined: inlining the dtype switch into every unrolled epilogue site makes cicc take many minutes.
static __device__ __noinline__ void storePair(const GemmArgs& a, int split, int row, int col, float v0, float v1) {
  if (row >= a.M) return;
  if (a.splitK > 1) {
    float* p = a.partial + (int64_t(split) * a.M + row) * a.N + col;
    if (col + 1 < a.N && (a.N % 2 == 0)) {
      *reinterpret_cast<float2*>(p) = make_float2(v0, v1);
    } else {
      if (col < a.N) p[0] = v0;
      if (col + 1 < a.N) p[1] = v1;
    }
    return;
  }
  if (a.wScale) {
    if (col < a.N) v0 = v0 * a.wScale[col];
    if (col + 1 < a.N) v1 = v1 * a.wScale[col + 1];
  }
  if (col < a.N) storeF(a.y, yIndex(a, row, col), a.yt, a.bias ? v0 + loadF(a.bias, col, a.bt) : v0);
  if (col + 1 < a.N) storeF(a.y, yIndex(a, row, col + 1), a.yt, a.bias ? v1 + loadF(a.bias, col + 1, a.bt) : v1);
}

// The wgmma path (cuda/sm90/gemm_wgmma.cu, built for sm_90a only). Config 0: 128 x 256 CTA tiles (two consumer
// warpgroups of 64 x 256), 1: 128 x 128, 2: 64 x 128 (one consumer). bf16 X and W, K % 8 == 0, 16-byte aligned.
// Returns false, enqueueing nothing, where it cannot run (not an sm_90 device, no sm_90a image in this build, the
// driver lacks TMA descriptors); the caller then takes the mma.sync path.
constexpr int kWgmmaConfigs = 3;
constexpr int kWgmmaBM[kWgmmaConfigs] = {128, 128, 64};
constexpr int kWgmmaBN[kWgmmaConfigs] = {256, 128, 128};
bool wgmmaAvailable();
bool gemmWgmma(const GemmArgs& a, int config);

}  // namespace dl::gpu
