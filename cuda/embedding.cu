// Embedding gather on the GPU: out[t, :] = table[ids[t], :]; out-of-range ids are reported, never read.
#include "common.cuh"

namespace dl::gpu {

// ---- kernels ----
// ids: (T) i32; table: (V, C); out: (T, C). One block per token; a bad id writes zeros and records the error.
__global__ void embeddingKernel(const int32_t* ids, const void* table, DType tt, void* out, DType ot, int64_t V,
                                int64_t C, DeviceErrorSlot* err) {
  pdlStart();  // cuda/pdl.cuh
  int64_t t = blockIdx.x;
  int64_t id = ids[t];
  bool ok = id >= 0 && id < V;
  if (!ok && threadIdx.x == 0) reportDeviceError(err, DeviceErrorCode::embeddingId, id, V);
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x)
    storeF(out, t * C + c, ot, ok ? loadF(table, id * C + c, tt) : 0.f);
}

// ---- launchers ----
void embedding(const View& ids, const View& table, const View& out) {
  const char* op = "embedding";
  requireCuda(op, "ids", ids), requireCuda(op, "table", table), requireCuda(op, "out", out);
  requireI32(op, "ids", ids), requireFloatT(op, "table", table), requireFloatT(op, "out", out);
  if (table.ndim != 2 || out.ndim != 2 || out.shape[0] != ids.numel() || out.shape[1] != table.shape[1])
    fail(op, "out must be (T, C) for ids (T) and table (V, C)");
  int64_t T = ids.numel();
  if (T == 0) return;
  launchKernel("embeddingKernel", embeddingKernel, unsigned(T), 256, 0, ids.as<int32_t>(), table.data,
               table.dtype, out.data, out.dtype, table.shape[0], table.shape[1], deviceErrorSlot());
}

}  // namespace dl::gpu
