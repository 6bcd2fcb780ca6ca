// Prefill / verify attention over the paged cache on the GPU: T queries per sequence, causal, tiled.
//
// Any head dim D <= 256: the kernel is instantiated for a padded width DP (32, 64, 96, 128, 256) with the dims
// D..DP-1 zero in shared memory; they add exact zeros to the scores, so a row's bits are those of width D.
// Schedule (depends on nothing but the head dim): a CTA takes up to 64 (query token, query head) rows of one
// sequence and one KV head (all query heads of the group, so K/V are read once per tile), walks the keys from
// position 0 up in chunks of kKeys = 32 with an online softmax, and each row's chunk reduction is a fixed
// butterfly. A row's bits depend only on its query, its keys and its position: not on B, Ttot or its tile.
#include <cstdlib>

#include "common.cuh"
#include "gemm_mma.cuh"
#include "paged_kv.cuh"
#include "knobs.h"

namespace dl::gpu {
namespace {

constexpr int kRows = 64, kKeys = 32, kThreads = 128, kRowsPerWarp = kRows / (kThreads / 32);
constexpr float kLog2e = 1.4426950408889634f;

struct PrefillArgs {
  const void* q;  // (Ttot, Hq, D)
  void* out;      // (Ttot, Hq, D)
  const int32_t* qIndptr;  // (B + 1)
  DType qt, ot;
  PagedKVDev kv;
  int D, Hq, G, tokensPerTile, tilesPerSeq;  // D: the real head dim (<= the kernel's DP)
  int maxQueryLen;                           // tilesPerSeq * tokensPerTile >= it: queries past it are not computed
  float scaleLog2;
  DeviceErrorSlot* err;
};

// The (sequence, KV head, tile) a CTA of either prefill kernel serves: grid = (tilesPerSeq, Hk, B), rows r in
// [0, rows) are (query token tok0 + r / G, query head kvh * G + r % G).
struct PrefillTile {
  int b, kvh, qBegin, qLen, kvLen, tok0, rows, maxPos;  // maxPos: the tile's last query position
  // Row of q / out (in units of a head) of tile row r.
  __device__ int64_t qRow(const PrefillArgs& a, int r) const {
    return int64_t(qBegin + tok0 + r / a.G) * a.Hq + kvh * a.G + r % a.G;
  }
  // Position of tile row r's query, -1 for a padding row.
  __device__ int pos(const PrefillArgs& a, int r) const { return r < rows ? kvLen - qLen + tok0 + r / a.G : -1; }
};

// False when this CTA has no rows (its tile is past the sequence's queries, or the sequence is bad: reported once).
__device__ __forceinline__ bool prefillTile(const PrefillArgs& a, PrefillTile& t) {
  const int tile = blockIdx.x, first = tile == 0 && blockIdx.y == 0 && threadIdx.x == 0;
  t.b = blockIdx.z, t.kvh = blockIdx.y;
  t.qBegin = a.qIndptr[t.b], t.qLen = a.qIndptr[t.b + 1] - t.qBegin, t.kvLen = seqTokens(a.kv, t.b);
  t.tok0 = tile * a.tokensPerTile;
  if (t.tok0 >= t.qLen) return false;
  if (t.qLen > t.kvLen) {
    if (first) reportDeviceError(a.err, DeviceErrorCode::seqLength, t.kvLen, t.qLen);
    return false;
  }
  if (first && t.qLen > a.maxQueryLen) reportDeviceError(a.err, DeviceErrorCode::queryLength, t.qLen, a.maxQueryLen);
  const int tokEnd = min(t.qLen, t.tok0 + a.tokensPerTile);
  t.rows = (tokEnd - t.tok0) * a.G;
  t.maxPos = t.kvLen - t.qLen + tokEnd - 1;
  return true;
}

// ---- kernels ----

// grid = (tilesPerSeq, Hk, B); 128 threads; warp w owns rows [16w, 16w + 16), row r = (token r / G, head r % G).
// Scores: lane = key of the chunk, a 16-row column of dot products; P.V: lane owns DP/32 consecutive dims.
// Shared memory is laid out with the padded width DP (named D below); global rows have a.D elements.
template <int D>
__global__ void __launch_bounds__(kThreads) prefillKernel(PrefillArgs a) {
  pdlStart();  // cuda/pdl.cuh
  constexpr int DL = D / 32;  // dims per lane in P.V
  const int Dg = a.D;         // real head dim: global row stride, dims >= Dg are zero
  extern __shared__ __align__(16) float sm[];
  float* sQ = sm;                      // kRows x D, pre-scaled queries
  float* sK = sQ + kRows * D;          // kKeys x (D + 1): the pad makes lane-per-key reads conflict-free
  float* sV = sK + kKeys * (D + 1);    // kKeys x D
  float* sP = sV + kKeys * D;          // warps x kKeys x kRowsPerWarp probabilities

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  PrefillTile pt;
  if (!prefillTile(a, pt)) return;
  const int b = pt.b, kvh = pt.kvh, kvLen = pt.kvLen, rows = pt.rows, maxPos = pt.maxPos;

  for (int e = tid; e < kRows * D; e += kThreads) {
    int r = e / D, d = e % D;
    float v = 0.f;
    if (r < rows && d < Dg) v = loadF(a.q, pt.qRow(a, r) * Dg + d, a.qt) * a.scaleLog2;
    sQ[e] = v;
  }

  float m[kRowsPerWarp], l[kRowsPerWarp], acc[kRowsPerWarp][DL];
  int pos[kRowsPerWarp];  // query position of each of this warp's rows; -1 for padding rows
#pragma unroll
  for (int i = 0; i < kRowsPerWarp; i++) {
    int r = warp * kRowsPerWarp + i;
    pos[i] = pt.pos(a, r);
    m[i] = -INFINITY, l[i] = 0.f;
#pragma unroll
    for (int e = 0; e < DL; e++) acc[i][e] = 0.f;
  }
  float* P = sP + warp * kKeys * kRowsPerWarp;
  const bool active = warp * kRowsPerWarp < rows;  // warp-uniform

  for (int k0 = 0; k0 <= maxPos; k0 += kKeys) {
    __syncthreads();  // previous chunk's readers are done (and sQ is written, first time round)
    for (int e = tid; e < kKeys * D; e += kThreads) {
      int kk = e / D, d = e % D, t = k0 + kk;
      float kvK = 0.f, kvV = 0.f;
      if (t < kvLen && d < Dg) {
        int64_t row = tokenRow(a.kv, b, t, kvh, a.err, DeviceErrorCode::prefillPage);
        if (row >= 0) kvK = loadF(a.kv.k, row + d, a.kv.t), kvV = loadF(a.kv.v, row + d, a.kv.t);
      }
      sK[kk * (D + 1) + d] = kvK;
      sV[kk * D + d] = kvV;
    }
    __syncthreads();
    // A warp whose rows are all padding (a tile of few rows: a 1-token fixed row uses G of the 64) only helps load.
    if (!active) continue;

    float s[kRowsPerWarp];
#pragma unroll
    for (int i = 0; i < kRowsPerWarp; i++) s[i] = 0.f;
    const float* qw = sQ + warp * kRowsPerWarp * D;
    for (int d = 0; d < D; d += 4) {
      float k4[4];
#pragma unroll
      for (int e = 0; e < 4; e++) k4[e] = sK[lane * (D + 1) + d + e];
#pragma unroll
      for (int i = 0; i < kRowsPerWarp; i++) {
        float4 q4 = *reinterpret_cast<const float4*>(qw + i * D + d);
        s[i] = fmaf(q4.x, k4[0], s[i]);
        s[i] = fmaf(q4.y, k4[1], s[i]);
        s[i] = fmaf(q4.z, k4[2], s[i]);
        s[i] = fmaf(q4.w, k4[3], s[i]);
      }
    }
    const int key = k0 + lane;
#pragma unroll
    for (int i = 0; i < kRowsPerWarp; i++) {
      float x = key <= pos[i] ? s[i] : -INFINITY;
      float mNew = fmaxf(m[i], warpMax(x));
      float p = 0.f, alpha = 1.f;
      if (mNew != -INFINITY) p = exp2f(x - mNew), alpha = exp2f(m[i] - mNew);
      l[i] = l[i] * alpha + warpSum(p);
      m[i] = mNew;
      P[lane * kRowsPerWarp + i] = p;
#pragma unroll
      for (int e = 0; e < DL; e++) acc[i][e] *= alpha;
    }
    __syncwarp();
    for (int kk = 0; kk < kKeys; kk++) {
      float v[DL];
#pragma unroll
      for (int e = 0; e < DL; e++) v[e] = sV[kk * D + lane * DL + e];
#pragma unroll
      for (int i4 = 0; i4 < kRowsPerWarp; i4 += 4) {
        float4 p4 = *reinterpret_cast<const float4*>(P + kk * kRowsPerWarp + i4);
        float pv[4] = {p4.x, p4.y, p4.z, p4.w};
        // Keys past a row's position are skipped, not added as 0 * v: in a longer verify window they are real values
        // (an inf or nan there would poison the row, and 0 * v can turn a -0 sum into +0), in a shorter one zeros,
        // and a position's bits must not depend on the window around it.
#pragma unroll
        for (int i = 0; i < 4; i++)
          if (k0 + kk <= pos[i4 + i])
#pragma unroll
            for (int e = 0; e < DL; e++) acc[i4 + i][e] = fmaf(pv[i], v[e], acc[i4 + i][e]);
      }
    }
  }

#pragma unroll
  for (int i = 0; i < kRowsPerWarp; i++) {
    int r = warp * kRowsPerWarp + i;
    if (r >= rows) continue;
    const int64_t oRow = pt.qRow(a, r);
#pragma unroll
    for (int e = 0; e < DL; e++)
      if (lane * DL + e < Dg) storeF(a.out, oRow * Dg + lane * DL + e, a.ot, l[i] > 0.f ? acc[i][e] / l[i] : 0.f);
  }
}

// ---- tensor-core variant (default where it applies; DL_PREFILL_MMA=0 for the SIMT kernel) ----
// bf16 q and cache, D in {64, 128}. The SIMT kernel's grid and row tiles (64 (token, head) rows of one sequence and
// KV head per CTA, warp w owns rows [16w, 16w + 16)), keys in chunks of kMmaKeys from position 0 through a two-stage
// cp.async ring: S = Q.K^T and O += P.V on mma.sync m16n8k16 (P rounded to bf16, as FlashAttention-2 does), online
// softmax per chunk with each row's max and sum over its quad in one shuffle order. A row's bits depend on its
// query, its keys, its position and D only (which tile or warp row it lands in moves none of them; a chunk wholly
// past a row's position adds exact zeros), so it is batch-invariant like the SIMT kernel, with bits of its own:
// one kernel per deployment, never both.
constexpr int kMmaKeys = 64;

using mma::packBf16;
using mma::swzD;

template <int D>
__global__ void __launch_bounds__(kThreads) prefillMmaKernel(PrefillArgs a) {
  pdlStart();  // cuda/pdl.cuh
  constexpr int CH = D / 8;
  extern __shared__ __align__(128) uint16_t smem16[];
  uint16_t* sQ = smem16;                 // kRows x D
  uint16_t* sK = sQ + kRows * D;         // 2 x kMmaKeys x D
  uint16_t* sV = sK + 2 * kMmaKeys * D;  // 2 x kMmaKeys x D
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  PrefillTile pt;
  if (!prefillTile(a, pt)) return;
  const int b = pt.b, kvh = pt.kvh, kvLen = pt.kvLen, rows = pt.rows, nChunks = pt.maxPos / kMmaKeys + 1;
  const uint16_t* Q = static_cast<const uint16_t*>(a.q);
  const uint16_t* K = static_cast<const uint16_t*>(a.kv.k);
  const uint16_t* V = static_cast<const uint16_t*>(a.kv.v);

  // Q tile: row r is (token tok0 + r / G, head kvh * G + r % G); rows past `rows` are zeros.
  for (int e = tid; e < kRows * CH; e += kThreads) {
    const int r = e / CH, c = e % CH;
    const bool ok = r < rows;
    const int64_t qRow = ok ? pt.qRow(a, r) : 0;
    mma::cpAsync16(sQ + swzD<D>(r, c), Q + qRow * D + c * 8, ok ? 16 : 0);
  }
  auto loadChunk = [&](int stage, int k0) {
    for (int e = tid; e < kMmaKeys * CH; e += kThreads) {
      const int r = e / CH, c = e % CH, t = k0 + r;
      const int64_t row = t < kvLen ? tokenRow(a.kv, b, t, kvh, a.err, DeviceErrorCode::prefillPage) : -1;
      const int64_t off = row >= 0 ? row + c * 8 : 0;
      mma::cpAsync16(sK + stage * kMmaKeys * D + swzD<D>(r, c), K + off, row >= 0 ? 16 : 0);
      mma::cpAsync16(sV + stage * kMmaKeys * D + swzD<D>(r, c), V + off, row >= 0 ? 16 : 0);
    }
  };
  loadChunk(0, 0);
  mma::cpAsyncCommit();  // Q and chunk 0

  const int g = lane >> 2, t4 = lane & 3;
  int pos[2];  // query positions of this thread's rows g and g + 8 of the warp's 16; -1 for padding rows
#pragma unroll
  for (int i = 0; i < 2; i++) {
    const int r = warp * 16 + g + 8 * i;
    pos[i] = pt.pos(a, r);
  }
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};
  float o[D / 8][4];
#pragma unroll
  for (int j = 0; j < D / 8; j++) o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.f;
  unsigned qf[D / 16][4];

  for (int c = 0; c < nChunks; c++) {
    if (c + 1 < nChunks) loadChunk((c + 1) & 1, (c + 1) * kMmaKeys);
    mma::cpAsyncCommit();
    mma::cpAsyncWait<1>();  // everything but the chunk just asked for has landed
    __syncthreads();
    if (c == 0)
#pragma unroll
      for (int kk = 0; kk < D / 16; kk++) mma::ldmatrixX4(qf[kk], sQ + swzD<D>(warp * 16 + (lane & 15), kk * 2 + (lane >> 4)));
    const uint16_t* tK = sK + (c & 1) * kMmaKeys * D;
    const uint16_t* tV = sV + (c & 1) * kMmaKeys * D;

    // S = Q K^T for the warp's 16 rows and the chunk's keys (n-tile j: keys 8j .. 8j + 7), k ascending over D.
    float s[kMmaKeys / 8][4];
#pragma unroll
    for (int j = 0; j < kMmaKeys / 8; j++) s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.f;
#pragma unroll
    for (int kk = 0; kk < D / 16; kk++)
#pragma unroll
      for (int np = 0; np < kMmaKeys / 16; np++) {
        unsigned bk[4];
        mma::ldmatrixX4(bk, tK + swzD<D>(np * 16 + (lane & 7) + ((lane >> 4) << 3), kk * 2 + ((lane >> 3) & 1)));
        mma::mmaBf16(s[2 * np], qf[kk], bk[0], bk[1]);
        mma::mmaBf16(s[2 * np + 1], qf[kk], bk[2], bk[3]);
      }

    // Scale to the exp2 domain, mask, and the online softmax of rows g (e = 0, 1) and g + 8 (e = 2, 3).
#pragma unroll
    for (int j = 0; j < kMmaKeys / 8; j++)
#pragma unroll
      for (int e = 0; e < 4; e++) {
        const int i = e >> 1, key = c * kMmaKeys + j * 8 + t4 * 2 + (e & 1);
        s[j][e] = key <= pos[i] ? s[j][e] * a.scaleLog2 : -INFINITY;
      }
    mma::softmaxTile(s, m, l, o);

    // O += P V over the chunk in steps of 16 keys (k ascending); V^T fragments by transposing ldmatrix.
#pragma unroll
    for (int kj = 0; kj < kMmaKeys / 16; kj++) {
      const unsigned pa[4] = {packBf16(s[2 * kj][0], s[2 * kj][1]), packBf16(s[2 * kj][2], s[2 * kj][3]),
                              packBf16(s[2 * kj + 1][0], s[2 * kj + 1][1]), packBf16(s[2 * kj + 1][2], s[2 * kj + 1][3])};
#pragma unroll
      for (int dp = 0; dp < D / 16; dp++) {
        unsigned bv[4];
        mma::ldmatrixX4Trans(bv, tV + swzD<D>(kj * 16 + (lane & 15), dp * 2 + (lane >> 4)));
        mma::mmaBf16(o[2 * dp], pa, bv[0], bv[1]);
        mma::mmaBf16(o[2 * dp + 1], pa, bv[2], bv[3]);
      }
    }
    __syncthreads();  // the stage this chunk used is refilled next round
  }
  mma::cpAsyncWait<0>();

#pragma unroll
  for (int i = 0; i < 2; i++) {
    const int r = warp * 16 + g + 8 * i;
    if (r >= rows) continue;
    const int64_t oRow = pt.qRow(a, r);
    const float inv = l[i] > 0.f ? 1.f / l[i] : 0.f;
#pragma unroll
    for (int j = 0; j < D / 8; j++) {
      const int d = j * 8 + t4 * 2;
      storeF(a.out, oRow * D + d, a.ot, o[j][2 * i] * inv);
      storeF(a.out, oRow * D + d + 1, a.ot, o[j][2 * i + 1] * inv);
    }
  }
}

// ---- launchers ----

template <int D>
void launchPrefillMma(const PrefillArgs& a, int B) {
  constexpr int smemBytes = (kRows * D + 4 * kMmaKeys * D) * 2;
  constexpr auto kernel = prefillMmaKernel<D>;
  allowDynamicSmem<kernel>(smemBytes);
  dim3 grid(unsigned(a.tilesPerSeq), unsigned(a.kv.Hk), unsigned(B));
  launchKernel("prefillMmaKernel", kernel, grid, kThreads, smemBytes, a);
}

// The tensor-core kernel where it applies (bf16 q and cache, head dim 64 or 128), unless DL_PREFILL_MMA=0. Default
// since its H100 run: attention, model and determinism tests pass on it, and a 2048-token causal prefill
// (32 heads, D 128) takes 0.40 ms against the SIMT kernel's 5.72.
bool mmaPrefill() {
  return knob::knobs().prefillMma;
}

template <int D>
void launchPrefill(const PrefillArgs& a, int B) {
  constexpr int smemBytes = (kRows * D + kKeys * (D + 1) + kKeys * D + kRows * kKeys) * 4;
  constexpr auto kernel = prefillKernel<D>;
  allowDynamicSmem<kernel>(smemBytes);
  dim3 grid(unsigned(a.tilesPerSeq), unsigned(a.kv.Hk), unsigned(B));
  launchKernel("prefillKernel", kernel, grid, kThreads, smemBytes, a);
}

}  // namespace

void attentionPrefill(const View& q, const View& qIndptr, const PagedKV& kv, const View& out, float scale,
                      int maxQueryLen) {
  const char* op = "attentionPrefill";
  requireCuda(op, "q", q), requireCuda(op, "out", out), requireCuda(op, "qIndptr", qIndptr);
  requireFloatT(op, "q", q), requireFloatT(op, "out", out), requireI32(op, "qIndptr", qIndptr);
  checkPagedKV(op, kv);
  const int64_t B = kv.lastPageLen.numel(), T = q.shape[0], Hq = q.shape[1], D = q.shape[2], Hk = kv.kCache.shape[2];
  if (q.ndim != 3 || out.numel() != q.numel()) fail(op, "q and out must be (Ttot, Hq, D)");
  if (qIndptr.numel() != B + 1) fail(op, "qIndptr must be (B + 1) like indptr");
  if (D != kv.kCache.shape[3] || Hq % Hk) fail(op, "q's head dim must match the cache and Hq be a multiple of Hk");
  if (D < 1 || D > 256) fail(op, "head dim must be in [1, 256], got " + std::to_string(D));
  const int G = int(Hq / Hk);
  if (G > kRows) fail(op, "query heads per KV head must be <= 64, got " + std::to_string(G));
  if (B == 0 || T == 0) return;
  if (B > 65535 || Hk > 65535) fail(op, "at most 65535 sequences and KV heads");
  if (maxQueryLen < 0) fail(op, "maxQueryLen must be >= 0 (0: up to the total query rows)");
  PrefillArgs a{q.data, out.data, qIndptr.as<int32_t>(), q.dtype, out.dtype, pagedKVDev(kv), int(D), int(Hq), G,
                kRows / G, 0, 0, scale * kLog2e, deviceErrorSlot()};
  // The grid covers the longest sequence's queries (at most Ttot); tiles past a shorter sequence's exit at once.
  a.maxQueryLen = int(maxQueryLen > 0 ? std::min<int64_t>(maxQueryLen, T) : T);
  a.tilesPerSeq = int(ceilDiv(a.maxQueryLen, a.tokensPerTile));
  const bool mma = mmaPrefill() && q.dtype == DType::bf16 && kv.kCache.dtype == DType::bf16 && (D == 64 || D == 128) &&
                   aligned16(q.data) && aligned16(kv.kCache.data) && aligned16(kv.vCache.data);
  if (mma && D == 64) launchPrefillMma<64>(a, int(B));
  else if (mma) launchPrefillMma<128>(a, int(B));
  else if (D <= 32) launchPrefill<32>(a, int(B));
  else if (D <= 64) launchPrefill<64>(a, int(B));
  else if (D <= 96) launchPrefill<96>(a, int(B));
  else if (D <= 128) launchPrefill<128>(a, int(B));
  else launchPrefill<256>(a, int(B));
}

}  // namespace dl::gpu
