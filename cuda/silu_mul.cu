// SwiGLU gate on the GPU: out = silu(gate) * up, gate and up the two halves of one (M, 2I) projection.
#include "common.cuh"

namespace dl::gpu {

// ---- kernels ----
// gateUp: (M, 2I); out: (M, I). silu(g) = g / (1 + exp(-g)) in f32.
__global__ void siluMulKernel(const void* gateUp, DType gt, void* out, DType ot, int64_t M, int64_t I) {
  pdlStart();  // cuda/pdl.cuh
  int64_t n = M * I;
  for (int64_t idx = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; idx < n; idx += int64_t(gridDim.x) * blockDim.x) {
    int64_t m = idx / I, i = idx % I;
    float g = loadF(gateUp, m * 2 * I + i, gt), u = loadF(gateUp, m * 2 * I + I + i, gt);
    storeF(out, idx, ot, g / (1.0f + expf(-g)) * u);
  }
}

// ---- launchers ----
void siluMul(const View& gateUp, const View& out) {
  const char* op = "siluMul";
  requireCuda(op, "gateUp", gateUp), requireCuda(op, "out", out);
  requireFloatT(op, "gateUp", gateUp), requireFloatT(op, "out", out);
  if (gateUp.ndim != 2 || out.ndim != 2 || out.shape[0] != gateUp.shape[0] || gateUp.shape[1] != 2 * out.shape[1])
    fail(op, "gateUp must be (M, 2I) for out (M, I)");
  int64_t n = out.numel();
  int blocks = int(std::min<int64_t>(ceilDiv(n, 256), 65536));
  launchKernel("siluMulKernel", siluMulKernel, blocks, 256, 0, gateUp.data, gateUp.dtype, out.data,
               out.dtype, out.shape[0], out.shape[1]);
}

}  // namespace dl::gpu
