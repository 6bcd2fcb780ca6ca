// Elementwise add on the GPU: out = a + b (same shape and dtype; 16-bit dtypes added in f32, rounded once).
#include "common.cuh"

namespace dl::gpu {

// ---- kernels ----
// a, b, out: n elements of dtype t. Grid-stride loop, one element per thread per step.
__global__ void addKernel(const void* a, const void* b, void* out, int64_t n, DType t) {
  pdlStart();  // cuda/pdl.cuh
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    storeF(out, i, t, loadF(a, i, t) + loadF(b, i, t));
}

// ---- launchers ----
void add(const View& a, const View& b, const View& out) {
  const char* op = "add";
  requireCuda(op, "a", a), requireCuda(op, "b", b), requireCuda(op, "out", out);
  requireFloatT(op, "a", a);
  if (a.dtype != b.dtype || a.dtype != out.dtype) fail(op, "a, b and out must share one dtype");
  if (a.numel() != b.numel() || a.numel() != out.numel()) fail(op, "a, b and out must have the same number of elements");
  int64_t n = a.numel();
  int blocks = int(std::min<int64_t>(ceilDiv(n, 256), 65536));
  launchKernel("addKernel", addKernel, blocks, 256, 0, a.data, b.data, out.data, n, a.dtype);
}

}  // namespace dl::gpu
