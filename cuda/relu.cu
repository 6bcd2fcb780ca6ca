// ReLU on the GPU: out = max(x, 0) elementwise, same shape and dtype (in place allowed); NaN stays NaN.
#include "common.cuh"

namespace dl::gpu {

// ---- kernels ----
// x, out: n elements of dtype t. Grid-stride loop, one element per thread per step.
__global__ void reluKernel(const void* x, void* out, int64_t n, DType t) {
  pdlStart();  // cuda/pdl.cuh
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const float v = loadF(x, i, t);
    storeF(out, i, t, v > 0.f || v != v ? v : 0.f);
  }
}

// ---- launchers ----
void relu(const View& x, const View& out) {
  const char* op = "relu";
  requireCuda(op, "x", x), requireCuda(op, "out", out);
  requireFloatT(op, "x", x);
  if (x.dtype != out.dtype) fail(op, "x and out must share one dtype");
  if (x.numel() != out.numel()) fail(op, "x and out must have the same number of elements");
  const int64_t n = x.numel();
  int blocks = int(std::max<int64_t>(1, std::min<int64_t>(ceilDiv(n, 256), 65536)));
  launchKernel("reluKernel", reluKernel, blocks, 256, 0, x.data, out.data, n, x.dtype);
}

}  // namespace dl::gpu
