// Rotary position embedding on the GPU, in place, HF rotate-half layout.
#include "common.cuh"
#include "rope_kv.cuh"

namespace dl::gpu {

// ---- kernels ----
// q: (T, Hq, D) and k: (T, Hk, D) in place, one launch for both; positions: (T) i32; invFreq: (D/2) f32. One thread
// per (t, head of q then k, i < D/2) rotates the pair (x[i], x[i + D/2]) (ropeRotate).
__global__ void ropeKernel(void* q, DType qt, int64_t Hq, void* k, DType kt, int64_t Hk, int64_t T, int64_t D,
                           const int32_t* positions, const float* invFreq) {
  pdlStart();  // cuda/pdl.cuh
  const int64_t half = D / 2, H = Hq + Hk, n = T * H * half;
  for (int64_t idx = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; idx < n; idx += int64_t(gridDim.x) * blockDim.x) {
    const int64_t i = idx % half, th = idx / half, tok = th / H, h = th % H;
    const bool isQ = h < Hq;
    void* x = isQ ? q : k;
    const DType t = isQ ? qt : kt;
    const int64_t base = (tok * (isQ ? Hq : Hk) + (isQ ? h : h - Hq)) * D;
    float r1, r2;
    ropeRotate(loadF(x, base + i, t), loadF(x, base + i + half, t), positions[tok], invFreq[i], r1, r2);
    storeF(x, base + i, t, r1);
    storeF(x, base + i + half, t, r2);
  }
}

// ---- launchers ----
void checkRope(const char* op, const View& q, const View& k, const View& positions, const View& invFreq) {
  requireCuda(op, "q", q), requireCuda(op, "k", k), requireCuda(op, "positions", positions);
  requireCuda(op, "invFreq", invFreq), requireI32(op, "positions", positions);
  requireFloatT(op, "q", q), requireFloatT(op, "k", k);
  if (invFreq.dtype != DType::f32) fail(op, "'invFreq' must be f32");
  if (q.ndim != 3 || k.ndim != 3 || q.shape[2] % 2 || k.shape[2] != q.shape[2] || k.shape[0] != q.shape[0] ||
      positions.numel() != q.shape[0] || invFreq.numel() != q.shape[2] / 2)
    fail(op, "q (T, Hq, D), k (T, Hk, D), positions (T) and invFreq (D/2) disagree");
}

void rope(const View& q, const View& k, const View& positions, const View& invFreq) {
  checkRope("rope", q, k, positions, invFreq);
  const int64_t n = q.shape[0] * (q.shape[1] + k.shape[1]) * (q.shape[2] / 2);
  if (n == 0) return;
  int blocks = int(std::min<int64_t>(ceilDiv(n, 256), 65536));
  launchKernel("ropeKernel", ropeKernel, blocks, 256, 0, q.data, q.dtype, q.shape[1], k.data, k.dtype,
               k.shape[1], q.shape[0], q.shape[2], positions.as<int32_t>(), invFreq.as<float>());
}

}  // namespace dl::gpu
