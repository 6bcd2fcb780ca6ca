// Rotary position embedding on the GPU, in place, HF rotate-half layout.
#include "common.cuh"

namespace dl::gpu {

// ---- kernels ----
// x: (T, H, D) in place; positions: (T) i32; invFreq: (D/2) f32. One thread per (t, h, i < D/2) rotates the pair
// (x[i], x[i + D/2]) by angle = positions[t] * invFreq[i] (f32 product; precise sincosf as the CPU's std::sin/cos).
__global__ void ropeKernel(void* x, DType t, int64_t T, int64_t H, int64_t D, const int32_t* positions,
                           const float* invFreq) {
  int64_t half = D / 2, n = T * H * half;
  for (int64_t idx = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; idx < n; idx += int64_t(gridDim.x) * blockDim.x) {
    int64_t i = idx % half, th = idx / half, tok = th / H;
    float angle = float(positions[tok]) * invFreq[i];
    float s, c;
    sincosf(angle, &s, &c);
    int64_t base = th * D;
    float x1 = loadF(x, base + i, t), x2 = loadF(x, base + i + half, t);
    storeF(x, base + i, t, x1 * c - x2 * s);
    storeF(x, base + i + half, t, x2 * c + x1 * s);
  }
}

// ---- launchers ----
void rope(const View& q, const View& k, const View& positions, const View& invFreq) {
  const char* op = "rope";
  requireCuda(op, "q", q), requireCuda(op, "k", k), requireCuda(op, "positions", positions);
  requireCuda(op, "invFreq", invFreq), requireI32(op, "positions", positions);
  requireFloatT(op, "q", q), requireFloatT(op, "k", k);
  if (invFreq.dtype != DType::f32) fail(op, "'invFreq' must be f32");
  if (q.ndim != 3 || k.ndim != 3 || q.shape[2] % 2 || k.shape[2] != q.shape[2] || k.shape[0] != q.shape[0] ||
      positions.numel() != q.shape[0] || invFreq.numel() != q.shape[2] / 2)
    fail(op, "q (T, Hq, D), k (T, Hk, D), positions (T) and invFreq (D/2) disagree");
  for (const View* v : {&q, &k}) {
    int64_t n = v->shape[0] * v->shape[1] * (v->shape[2] / 2);
    if (n == 0) continue;
    int blocks = int(std::min<int64_t>(ceilDiv(n, 256), 65536));
    ropeKernel<<<blocks, 256, 0, stream()>>>(v->data, v->dtype, v->shape[0], v->shape[1], v->shape[2],
                                             positions.as<int32_t>(), invFreq.as<float>());
    CUDA_CHECK_LAUNCH("ropeKernel");
  }
}

}  // namespace dl::gpu
