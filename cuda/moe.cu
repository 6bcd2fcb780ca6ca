// The mixture-of-experts MLP on the GPU (kernels.h MoeArgs): router GEMM (gemm.cu), routing one thread per token,
// slots grouped by expert in one CTA, a grouped SIMT GEMM per projection whose tiles each belong to one expert (only
// active experts' weights are read), siluMul between, then each token's weighted sum in ascending expert id. Every
// size is a function of T, so a step's launches are the same whatever the routing (CUDA graphs replay them).
// Not tuned: correct and batch-invariant first (no GPU measured it yet).
#include "common.cuh"
#include "moe_route.h"

namespace dl::gpu {
namespace {

constexpr int kTileN = 64, kTileK = 32, kThreads = 256;
constexpr int kTileM = int(kMoeTileRows);
static_assert(kTileM * kTileN == 4 * kThreads, "each thread computes 4 outputs of a tile");

// ---- kernels ----

// logits [T,E] f32 in place -> probabilities; ids, w [T,k]: moeRouteRow per token.
__global__ void moeRouteKernel(float* logits, int64_t T, int E, int k, bool normTopK, int32_t* ids, float* w) {
  pdlStart();
  const int64_t t = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (t < T) moeRouteRow(logits + t * E, E, k, normTopK, ids + t * k, w + t * k);
}

// One CTA of >= E threads. Groups the R slots by expert (ascending id; a group's slots ascending): rowOfSlot,
// slotOfRow [R]; tiles [maxTiles, 3]: (expert, first row, rows) of each kTileM-row piece of a group, -1 past the last.
__global__ void moeGroupKernel(const int32_t* ids, int64_t R, int E, int32_t* rowOfSlot, int32_t* slotOfRow,
                               int32_t* tiles, int64_t maxTiles) {
  pdlStart();
  extern __shared__ int32_t first[];  // [E + 1]
  const int e = threadIdx.x;
  int32_t n = 0;
  if (e < E)
    for (int64_t s = 0; s < R; s++) n += ids[s] == e;
  if (e < E) first[e + 1] = n;
  __syncthreads();
  if (e == 0) {
    first[0] = 0;
    for (int i = 0; i < E; i++) first[i + 1] += first[i];
    int64_t t = 0;
    for (int i = 0; i < E; i++)
      for (int32_t r = first[i]; r < first[i + 1]; r += kTileM, t++)
        tiles[3 * t] = i, tiles[3 * t + 1] = r, tiles[3 * t + 2] = min(kTileM, first[i + 1] - r);
    for (; t < maxTiles; t++) tiles[3 * t] = -1, tiles[3 * t + 1] = 0, tiles[3 * t + 2] = 0;
  }
  __syncthreads();
  if (e < E) {
    int32_t r = first[e];
    for (int64_t s = 0; s < R; s++)
      if (ids[s] == e) rowOfSlot[s] = r, slotOfRow[r] = int32_t(s), r++;
  }
}

// Y[row, n] = sum_k X[src(row), k] * W[expert * N + n, k] for the rows of tile blockIdx.x and n in the CTA's kTileN
// columns; src(row) = slotOfRow[row] / gatherK with gatherK > 0 (x rows of each slot's token), else row. Each output is
// one chain: K cut into splitK partitions [K p / splitK, K (p+1) / splitK), each summed by fmaf in ascending k from 0,
// partials added in order; a row's bits depend on K and splitK only, never on the tile's other rows.
__global__ void __launch_bounds__(kThreads) moeGemmKernel(const void* X, DType xt, const int32_t* slotOfRow, int gatherK,
                                                          const void* W, DType wt, void* Y, DType yt, int64_t N,
                                                          int64_t K, int splitK, const int32_t* tiles) {
  pdlStart();
  __shared__ float xs[kTileM][kTileK + 1];
  __shared__ float ws[kTileN][kTileK + 1];
  const int32_t expert = tiles[3 * blockIdx.x], r0 = tiles[3 * blockIdx.x + 1], nr = tiles[3 * blockIdx.x + 2];
  if (expert < 0) return;
  const int tid = threadIdx.x, tx = tid % kTileN, ty = tid / kTileN;  // rows ty * 4 .. + 3, column tx
  const int64_t n0 = int64_t(blockIdx.y) * kTileN;
  const int64_t wBase = int64_t(expert) * N;
  float total[4] = {0.f, 0.f, 0.f, 0.f};
  for (int p = 0; p < splitK; p++) {
    const int64_t kb = K * p / splitK, ke = K * (p + 1) / splitK;
    float acc[4] = {0.f, 0.f, 0.f, 0.f};
    for (int64_t k0 = kb; k0 < ke; k0 += kTileK) {
      for (int i = tid; i < kTileM * kTileK; i += kThreads) {
        const int r = i / kTileK, kk = i % kTileK;
        float v = 0.f;
        if (r < nr && k0 + kk < ke) {
          const int64_t row = r0 + r, src = gatherK > 0 ? slotOfRow[row] / gatherK : row;
          v = loadF(X, src * K + k0 + kk, xt);
        }
        xs[r][kk] = v;
      }
      for (int i = tid; i < kTileN * kTileK; i += kThreads) {
        const int r = i / kTileK, kk = i % kTileK;
        ws[r][kk] = n0 + r < N && k0 + kk < ke ? loadF(W, (wBase + n0 + r) * K + k0 + kk, wt) : 0.f;
      }
      __syncthreads();
#pragma unroll 8
      for (int kk = 0; kk < kTileK; kk++) {
        const float wv = ws[tx][kk];
#pragma unroll
        for (int i = 0; i < 4; i++) acc[i] = fmaf(xs[ty * 4 + i][kk], wv, acc[i]);
      }
      __syncthreads();
    }
#pragma unroll
    for (int i = 0; i < 4; i++) total[i] = p == 0 ? acc[i] : total[i] + acc[i];
  }
  if (n0 + tx >= N) return;
#pragma unroll
  for (int i = 0; i < 4; i++) {
    const int r = ty * 4 + i;
    if (r < nr) storeF(Y, (r0 + r) * N + n0 + tx, yt, total[i]);
  }
}

// out[t, c] = sum over j < k (ascending expert id) of w[t, j] * ys[rowOfSlot[t * k + j], c]: an fmaf chain from 0.
__global__ void moeCombineKernel(const float* ys, const float* w, const int32_t* rowOfSlot, int k, int64_t T, int64_t C,
                                 void* out, DType ot) {
  pdlStart();
  for (int64_t idx = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; idx < T * C; idx += int64_t(gridDim.x) * blockDim.x) {
    const int64_t t = idx / C, c = idx % C;
    float acc = 0.f;
    for (int j = 0; j < k; j++) acc = fmaf(w[t * k + j], ys[int64_t(rowOfSlot[t * k + j]) * C + c], acc);
    storeF(out, idx, ot, acc);
  }
}

View rowsOf(const View& m, int64_t n, int64_t K) {
  View v = m;
  v.ndim = 2, v.shape[0] = n, v.shape[1] = K;
  return v;
}

}  // namespace

// ---- launchers ----
void moe(const MoeArgs& a) {
  const char* op = "moe";
  for (const View* v : {&a.x, &a.router, &a.gateUp, &a.down, &a.out}) requireCuda(op, "x, router, gateUp, down, out", *v);
  checkMoe(a);
  const int64_t T = a.x.shape[0], C = a.x.shape[1], E = a.router.shape[0], I = a.gateUp.shape[0] / (2 * E);
  const int k = a.topK;
  const int64_t R = T * k, maxTiles = moeMaxTiles(R, E);
  if (T == 0) return;
  if (maxTiles > INT32_MAX) fail(op, "too many rows: " + std::to_string(R) + " routed slots");

  View logits = rowsOf(a.logits, T, E);
  gemm(a.x, a.router, View{}, logits, int(std::min<int64_t>(a.splitK, C)));
  launchKernel("moeRouteKernel", moeRouteKernel, unsigned(ceilDiv(T, 128)), 128, 0, a.logits.as<float>(), T, int(E), k,
               a.normTopK, a.expertIds.as<int32_t>(), a.weights.as<float>());
  const int groupThreads = int(ceilDiv(E, 32) * 32);
  launchKernel("moeGroupKernel", moeGroupKernel, 1, groupThreads, size_t(E + 1) * 4, a.expertIds.as<int32_t>(), R,
               int(E), a.rowOfSlot.as<int32_t>(), a.slotOfRow.as<int32_t>(), a.tiles.as<int32_t>(), maxTiles);
  const int skC = int(std::min<int64_t>(a.splitK, C)), skI = int(std::min<int64_t>(a.splitK, I));
  launchKernel("moeGemmKernel", moeGemmKernel, dim3(unsigned(maxTiles), unsigned(ceilDiv(2 * I, kTileN))), kThreads, 0,
               a.x.data, a.x.dtype, a.slotOfRow.as<int32_t>(), k, a.gateUp.data, a.gateUp.dtype, a.gu.data, a.gu.dtype,
               2 * I, C, skC, a.tiles.as<int32_t>());
  siluMul(rowsOf(a.gu, R, 2 * I), rowsOf(a.act, R, I));
  launchKernel("moeGemmKernel", moeGemmKernel, dim3(unsigned(maxTiles), unsigned(ceilDiv(C, kTileN))), kThreads, 0,
               a.act.data, a.act.dtype, a.slotOfRow.as<int32_t>(), 0, a.down.data, a.down.dtype, a.ys.data, DType::f32,
               C, I, skI, a.tiles.as<int32_t>());
  launchKernel("moeCombineKernel", moeCombineKernel, unsigned(std::min<int64_t>(ceilDiv(T * C, 256), 65536)), 256, 0,
               a.ys.as<float>(), a.weights.as<float>(), a.rowOfSlot.as<int32_t>(), k, T, C, a.out.data, a.out.dtype);
}

}  // namespace dl::gpu
