// Constrained-decoding token masks on the GPU: logits [B,V] f32 in place, mask [R,W] i32 in XGrammar's bitmask
// layout (W = ceil(V / 32); id t allowed iff bit (t & 31) of word t >> 5 is set), rowOf [B] (mask row of logits
// row b, -1 = unmasked). A disallowed id's logit becomes -inf; unmasked rows and allowed ids are not written, the
// same rule as cpp/cpu/cpu_mask_logits.cc.
#include "common.cuh"

namespace dl::gpu {
namespace {

constexpr int kThreads = 256;
constexpr int kIdsPerBlock = 8192;  // ids one block covers (32 per thread): a 152k vocabulary is 19 blocks a row
constexpr int kMaxChunks = 64;      // blocks per row at most (past 512k ids a block covers more)

// ---- kernels ----
// Grid (B, chunks): block (b, c) covers ids (c + k * chunks) * blockDim + threadIdx of row b, k = 0, 1, ...; one
// thread per id, so a warp's writes are contiguous and its 32 lanes read one mask word. An unmasked row's blocks
// exit at once.
__global__ void maskLogitsKernel(float* logits, const int32_t* mask, const int32_t* rowOf, int64_t V, int64_t W, int R,
                                 DeviceErrorSlot* err) {
  pdlStart();  // cuda/pdl.cuh
  const int64_t b = blockIdx.x;
  const int r = rowOf[b];
  if (r == -1) return;
  if (r < -1 || r >= R) {
    if (threadIdx.x == 0 && blockIdx.y == 0) reportDeviceError(err, DeviceErrorCode::maskRow, r, R);
    return;
  }
  const uint32_t* words = reinterpret_cast<const uint32_t*>(mask) + int64_t(r) * W;
  float* l = logits + b * V;
  for (int64_t t = int64_t(blockIdx.y) * blockDim.x + threadIdx.x; t < V; t += int64_t(gridDim.y) * blockDim.x)
    if (!((words[t >> 5] >> (t & 31)) & 1u)) l[t] = -INFINITY;
}

}  // namespace

// ---- launchers ----
void maskLogits(const View& logits, const View& mask, const View& rowOf) {
  const char* op = "maskLogits";
  requireCuda(op, "logits", logits), requireCuda(op, "mask", mask), requireCuda(op, "rowOf", rowOf);
  checkMaskLogits(logits, mask, rowOf);
  const int64_t B = logits.shape[0], V = logits.shape[1], R = mask.shape[0], W = mask.shape[1];
  if (B == 0 || V == 0) return;
  if (B > 0x7fffffff || R > 0x7fffffff) fail(op, "more than 2^31 - 1 rows");
  const unsigned chunks = unsigned(std::min<int64_t>(ceilDiv(V, kIdsPerBlock), kMaxChunks));
  launchKernel("maskLogitsKernel", maskLogitsKernel, dim3(unsigned(B), chunks), kThreads, 0, logits.as<float>(),
               mask.as<int32_t>(), rowOf.as<int32_t>(), V, W, int(R), deviceErrorSlot());
}

}  // namespace dl::gpu
