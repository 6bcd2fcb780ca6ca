// RMSNorm (+ fused residual add) on the GPU: one block per row, one fixed reduction order per C.
#include "common.cuh"

namespace dl::gpu {

// ---- kernels ----
// x, residual, out: (M, C); weight: (C). With residual: residual += x (stored rounded to residual's dtype), then
// out = rmsnorm(residual) * weight, normalizing the stored values. Block size is a constant (kThreads), so the
// sum of squares is added in the same order for every row and every M.
constexpr int kThreads = 256;
__global__ void __launch_bounds__(kThreads) rmsnormKernel(const void* x, DType xt, void* residual, DType rt,
                                                          const void* weight, DType wt, void* out, DType ot,
                                                          int64_t C, float eps) {
  pdlStart();  // cuda/pdl.cuh
  __shared__ float scratch[32];
  int64_t row = blockIdx.x;
  const int64_t base = row * C;
  float ss = 0.f;
  for (int64_t c = threadIdx.x; c < C; c += kThreads) {
    float v = loadF(x, base + c, xt);
    if (residual) {
      v = roundTo(loadF(residual, base + c, rt) + v, rt);
      storeF(residual, base + c, rt, v);
    }
    ss += v * v;
  }
  float inv = 1.0f / sqrtf(blockSum(ss, scratch) / float(C) + eps);
  const void* src = residual ? residual : x;
  DType st = residual ? rt : xt;
  for (int64_t c = threadIdx.x; c < C; c += kThreads)
    storeF(out, base + c, ot, loadF(src, base + c, st) * inv * loadF(weight, c, wt));
}

// ---- launchers ----
void rmsnorm(const View& x, const View& residual, const View& weight, const View& out, float eps) {
  const char* op = "rmsnorm";
  requireCuda(op, "x", x), requireCuda(op, "weight", weight), requireCuda(op, "out", out);
  if (residual) requireCuda(op, "residual", residual), requireFloatT(op, "residual", residual);
  requireFloatT(op, "x", x), requireFloatT(op, "weight", weight), requireFloatT(op, "out", out);
  if (x.ndim != 2) fail(op, "x must be (M, C)");
  int64_t M = x.shape[0], C = x.shape[1];
  if (weight.numel() != C || out.numel() != M * C || (residual && residual.numel() != M * C))
    fail(op, "weight must be (C) and residual/out (M, C) for x (" + std::to_string(M) + ", " + std::to_string(C) + ")");
  if (M > 0x7fffffff) fail(op, "too many rows");
  launchKernel("rmsnormKernel", rmsnormKernel, unsigned(M), kThreads, 0, x.data, x.dtype,
               residual ? residual.data : nullptr, residual.dtype, weight.data, weight.dtype, out.data, out.dtype, C,
               eps);
}

}  // namespace dl::gpu
