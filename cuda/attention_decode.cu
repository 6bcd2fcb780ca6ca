// Paged decode attention on the GPU, FlashDecoding-style: split-KV partials merged by log-sum-exp in split order.
//
// Schedule: sequence b's P pages are cut into kvSplits contiguous parts (pages [s*P/S, (s+1)*P/S)); each part is
// reduced by one CTA in ascending token order, in chunks of kChunk tokens (online softmax, rescale per chunk);
// parts are merged in order 0..S-1. GQA: one CTA serves up to kMaxGroup query heads of one KV head, so K/V are
// read once per 4 query heads (once per KV head for Llama-style groups of 4).
#include <cstdlib>

#include "common.cuh"
#include "gemm_mma.cuh"
#include "paged_kv.cuh"
#include "workspace.cuh"
#include "knobs.h"

namespace dl::gpu {
namespace {

constexpr int kThreads = 128, kMaxGroup = 4;
constexpr float kLog2e = 1.4426950408889634f;

struct DecodeArgs {
  const void* q;  // (B, Hq, D)
  void* out;      // (B, Hq, D)
  DType qt, ot;
  PagedKVDev kv;
  int B, Hq, G, headGroups, splits;
  float scaleLog2;      // scale * log2(e): scores live in the exp2 domain
  float* partialO;      // (B, Hq, splits, D) unnormalized, when splits > 1
  float* partialML;     // (B, Hq, splits, 2): running max (log2 domain) and sum
  DeviceErrorSlot* err;
  int* counters;        // fused merge (fast kernel, splits > 1): per CTA column, 0 on entry and exit; else null
};

// Merged output dim d of row bh = b * Hq + h: sum_s 2^(m_s - M) O_s / sum_s 2^(m_s - M) l_s, splits in order. The one
// merge both the merge kernel and the fast kernel's last CTA run (L2 loads: other CTAs wrote the partials).
__device__ __forceinline__ float mergedValue(const DecodeArgs& a, int64_t bh, int d) {
  const float* ml = a.partialML + bh * a.splits * 2;
  float mx = -INFINITY;
  for (int s = 0; s < a.splits; s++) mx = fmaxf(mx, __ldcg(ml + s * 2));
  float num = 0.f, den = 0.f;
  for (int s = 0; s < a.splits; s++) {
    const float ms = __ldcg(ml + s * 2);
    float w = ms == -INFINITY ? 0.f : exp2f(ms - mx);
    num = fmaf(w, __ldcg(a.partialO + (bh * a.splits + s) * a.kv.D + d), num);
    den = fmaf(w, __ldcg(ml + s * 2 + 1), den);
  }
  return den > 0.f ? num / den : 0.f;
}

// Token range [t0, t1) of split s of sequence b.
__device__ __forceinline__ void splitRange(const DecodeArgs& a, int b, int s, int& t0, int& t1) {
  int pages = a.kv.indptr[b + 1] - a.kv.indptr[b], n = seqTokens(a.kv, b);
  t0 = min(int(int64_t(s) * pages / a.splits) * a.kv.pageSize, n);
  t1 = min(int(int64_t(s + 1) * pages / a.splits) * a.kv.pageSize, n);
}

__device__ __noinline__ void writeResult(const DecodeArgs& a, int b, int h, int s, int d, float o, float m, float l,
                                            bool writeML) {
  if (a.splits == 1) {
    storeF(a.out, (int64_t(b) * a.Hq + h) * a.kv.D + d, a.ot, l > 0.f ? o / l : 0.f);
    return;
  }
  int64_t row = (int64_t(b) * a.Hq + h) * a.splits + s;
  a.partialO[row * a.kv.D + d] = o;
  if (writeML) a.partialML[row * 2] = m, a.partialML[row * 2 + 1] = l;
}

// Split-KV merged by the last of this CTA column's (sequence b, query heads [h0, h0 + nh)) splits CTAs to finish, so
// no merge launch is needed; every thread of the CTA calls it. The column's counter is back to 0 afterwards.
template <int D>
__device__ __forceinline__ void mergeIfLast(const DecodeArgs& a, int b, int h0, int nh) {
  __shared__ int last;
  __threadfence();  // this thread's partials are visible device-wide before the count says so
  __syncthreads();
  if (threadIdx.x == 0) last = atomicAdd(&a.counters[blockIdx.x], 1) == a.splits - 1;
  __syncthreads();
  if (!last) return;
  __threadfence();
  for (int i = threadIdx.x; i < nh * D; i += kThreads) {
    const int64_t bh = int64_t(b) * a.Hq + h0 + i / D;
    storeF(a.out, bh * D + i % D, a.ot, mergedValue(a, bh, i % D));
  }
  if (threadIdx.x == 0) a.counters[blockIdx.x] = 0;
}

__device__ __forceinline__ float2 load2(const uint16_t* p, bool f16) {
  unsigned u = *reinterpret_cast<const unsigned*>(p);
  if (f16) return __half22float2(*reinterpret_cast<const __half2*>(&u));
  return __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&u));
}

// K/V page ids one round ahead, for both decode kernels (decodeKernel says why). Thread r < kRows fetches into a
// register the id of token r of the chunk the next round issues, while this round computes; publish(n), before the
// next round's barrier, stores it in ids[n & 1] (two buffers by chunk parity: a thread writes one while a slower one
// may still read the other); row() reads it back for chunk n, or with `direct` looks the id up (the prologue's
// chunks). Only when bytes move changes: the same bits.
template <int kRows>
struct PagesAhead {
  int (&ids)[2][kRows];  // __shared__, the kernel's
  int next = 0;
  __device__ __forceinline__ void fetch(const DecodeArgs& a, int b, int chunkStart, int t1) {
    const int t = chunkStart + int(threadIdx.x);
    if (threadIdx.x < kRows && t < t1) next = a.kv.indices[a.kv.indptr[b] + t / a.kv.pageSize];
  }
  __device__ __forceinline__ void publish(int n) {
    if (threadIdx.x < kRows) ids[n & 1][threadIdx.x] = next;
  }
  // Element offset of token t (row r of chunk n) for KV head kvh, or -1 (reported) for a bad page id.
  __device__ __forceinline__ int64_t row(const DecodeArgs& a, int b, int n, int r, int t, int kvh, bool direct) const {
    return direct ? tokenRow(a.kv, b, t, kvh, a.err, DeviceErrorCode::decodePage)
                  : pageRow(a.kv, ids[n & 1][r], t, kvh, a.err, DeviceErrorCode::decodePage);
  }
};

// ---- kernels ----

// 16-bit caches, head dim D in {64, 128}, GP >= the query heads this CTA serves (GP <= kMaxGroup); kChunk tokens
// per pipeline stage (32 or 64), kStages stages. grid = (B * Hk * headGroups, splits); 128 threads. Per chunk: cp.async K/V rows -> scores (8 lanes per token,
// each lane D/8 dims, 3-step butterfly) -> per-head online softmax (warp h) -> P.V (a thread owns 2 dims).
template <int D, int GP, int kChunk, int kStages>
__global__ void __launch_bounds__(kThreads) decodeKernel(DecodeArgs a) {
  pdlStart();  // cuda/pdl.cuh
  constexpr int kRowChunks = D / 8;  // 16-byte chunks per K/V row
  extern __shared__ __align__(16) uint16_t smem[];
  uint16_t* sK = smem;                             // kStages x kChunk x D
  uint16_t* sV = sK + kStages * kChunk * D;        // kStages x kChunk x D
  float* sS = reinterpret_cast<float*>(sV + kStages * kChunk * D);  // GP x kChunk scores, then probabilities
  float* sAlpha = sS + GP * kChunk;                                 // GP rescale factors of this chunk

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int hg = blockIdx.x % a.headGroups, kvh = (blockIdx.x / a.headGroups) % a.kv.Hk;
  const int b = blockIdx.x / (a.headGroups * a.kv.Hk), split = blockIdx.y;
  const int h0 = kvh * a.G + hg * kMaxGroup, nh = min(GP, a.G - hg * kMaxGroup);
  const bool f16 = a.kv.t == DType::f16;
  int t0, t1;
  splitRange(a, b, split, t0, t1);
  const int nChunks = (t1 - t0 + kChunk - 1) / kChunk;
  const uint16_t* K = static_cast<const uint16_t*>(a.kv.k);
  const uint16_t* V = static_cast<const uint16_t*>(a.kv.v);

  // Page ids a chunk ahead (PagesAhead), so that loadChunk reads them from shared memory instead of stalling every
  // thread on a dependent global load right after the barrier. The prologue's chunks look their ids up directly, and
  // so does every chunk at D = 64 with four query heads: there the extra registers would cost that kernel its fifth
  // CTA an SM (96 -> 114).
  constexpr bool kAhead = D == 128 || GP <= 2;
  __shared__ int sPage[2][kChunk];
  PagesAhead<kChunk> pages{sPage};
  auto loadChunk = [&](int stage, int c, bool direct) {
    for (int e = tid; e < kChunk * kRowChunks; e += kThreads) {
      int r = e / kRowChunks, ch = e % kRowChunks, t = t0 + c * kChunk + r;
      int64_t row = t < t1 ? pages.row(a, b, c, r, t, kvh, direct) : -1;
      int bytes = row >= 0 ? 16 : 0;
      int64_t off = row >= 0 ? row + ch * 8 : 0;
      mma::cpAsync16(sK + (stage * kChunk + r) * D + ch * 8, K + off, bytes);
      mma::cpAsync16(sV + (stage * kChunk + r) * D + ch * 8, V + off, bytes);
    }
  };

  // This lane's slice of every query head, pre-scaled: dims [j*8, j*8+8) (+ 64 for D = 128), j = lane % 8.
  constexpr int QE = D / 8;
  float q[GP][QE];
  const int j = lane & 7, grp = lane >> 3;
#pragma unroll
  for (int h = 0; h < GP; h++)
#pragma unroll
    for (int e = 0; e < QE; e++) {
      int d = (e < 8 ? j * 8 + e : 64 + j * 8 + (e - 8));
      q[h][e] = h < nh ? loadF(a.q, (int64_t(b) * a.Hq + h0 + h) * D + d, a.qt) * a.scaleLog2 : 0.f;
    }

  // P.V ownership: dims (2*dp, 2*dp+1) of heads hs, hs + HS, ...
  constexpr int HS = kThreads / (D / 2), HPT = (GP + HS - 1) / HS;
  const int dp = tid % (D / 2), hs = tid / (D / 2);
  float acc[HPT][2] = {};
  float m = -INFINITY, l = 0.f;  // warp h < nh keeps head h's running max and sum

#pragma unroll
  for (int s = 0; s < kStages - 1; s++) {
    if (s < nChunks) loadChunk(s, s, true);
    mma::cpAsyncCommit();
  }
  if (kAhead) pages.fetch(a, b, t0 + (kStages - 1) * kChunk, t1);
  for (int c = 0; c < nChunks; c++) {
    mma::cpAsyncWait<kStages - 2>();
    if (kAhead) pages.publish(c + kStages - 1);  // the ids of the chunk this round issues
    __syncthreads();
    if (c + kStages - 1 < nChunks) {
      loadChunk((c + kStages - 1) % kStages, c + kStages - 1, !kAhead);
      if (kAhead) pages.fetch(a, b, t0 + (c + kStages) * kChunk, t1);  // published next round
    }
    mma::cpAsyncCommit();
    const uint16_t* tK = sK + (c % kStages) * kChunk * D;
    const uint16_t* tV = sV + (c % kStages) * kChunk * D;
    const int valid = min(kChunk, t1 - t0 - c * kChunk);

    // Scores: warp w covers tokens [w * kChunk / 4, (w + 1) * kChunk / 4), four at a time (one per 8-lane group).
#pragma unroll
    for (int step = 0; step < kChunk / 16; step++) {
      int r = warp * (kChunk / 4) + step * 4 + grp;
      float dot[GP];
#pragma unroll
      for (int h = 0; h < GP; h++) dot[h] = 0.f;
#pragma unroll
      for (int half = 0; half < QE / 8; half++) {
        uint4 raw = *reinterpret_cast<const uint4*>(tK + r * D + half * 64 + j * 8);
        const uint16_t* kv8 = reinterpret_cast<const uint16_t*>(&raw);
#pragma unroll
        for (int e = 0; e < 8; e += 2) {
          float2 kf = load2(kv8 + e, f16);
#pragma unroll
          for (int h = 0; h < GP; h++) {
            dot[h] = fmaf(q[h][half * 8 + e], kf.x, dot[h]);
            dot[h] = fmaf(q[h][half * 8 + e + 1], kf.y, dot[h]);
          }
        }
      }
#pragma unroll
      for (int h = 0; h < GP; h++) {
#pragma unroll
        for (int o = 1; o < 8; o <<= 1) dot[h] += __shfl_xor_sync(0xffffffffu, dot[h], o);
        if (j == h) sS[h * kChunk + r] = r < valid ? dot[h] : -INFINITY;
      }
    }
    __syncthreads();

    // Online softmax: warp h updates head h over this chunk.
    if (warp < nh) {
      float* s = sS + warp * kChunk;
      float x0 = s[lane], x1 = kChunk == 64 ? s[lane + 32] : -INFINITY;
      float mNew = fmaxf(m, warpMax(fmaxf(x0, x1)));
      float p0 = exp2f(x0 - mNew), p1 = exp2f(x1 - mNew);
      s[lane] = p0;
      if (kChunk == 64) s[lane + 32] = p1;
      float alpha = exp2f(m - mNew);
      l = l * alpha + warpSum(p0 + p1);
      m = mNew;
      if (lane == 0) sAlpha[warp] = alpha;
    }
    __syncthreads();

    // P.V over the chunk's tokens in ascending order.
#pragma unroll
    for (int i = 0; i < HPT; i++) {
      int h = hs + i * HS;
      if (h < nh) {
        float al = sAlpha[h];
        acc[i][0] *= al, acc[i][1] *= al;
      }
    }
    for (int r = 0; r < valid; r++) {
      float2 vf = load2(tV + r * D + dp * 2, f16);
#pragma unroll
      for (int i = 0; i < HPT; i++) {
        int h = hs + i * HS;
        if (h < GP) {
          float p = sS[h * kChunk + r];
          acc[i][0] = fmaf(p, vf.x, acc[i][0]);
          acc[i][1] = fmaf(p, vf.y, acc[i][1]);
        }
      }
    }
  }
  mma::cpAsyncWait<0>();

  // Heads' (m, l) live in warp h; share them through shared memory.
  __syncthreads();
  if (warp < nh && lane == 0) sS[warp * 2] = m, sS[warp * 2 + 1] = l;
  __syncthreads();
#pragma unroll
  for (int i = 0; i < HPT; i++) {
    int h = hs + i * HS;
    if (h < nh) {
      float hm = sS[h * 2], hl = sS[h * 2 + 1];
      writeResult(a, b, h0 + h, split, dp * 2, acc[i][0], hm, hl, dp == 0);
      writeResult(a, b, h0 + h, split, dp * 2 + 1, acc[i][1], hm, hl, false);
    }
  }
  if (a.counters) mergeIfLast<D>(a, b, h0, nh);
}

// ---- tensor-core variant (DL_DECODE_PIPE=mma: opt-in; not yet run on a GPU) ----
// bf16 q and cache, D in {64, 128}. The SIMT kernel above is bound by its instruction chain per token (three CTAs an
// SM at D = 128; the same 1.8 TB/s on an H100 and an H200), not by DRAM. Here a CTA serves up to 16 query heads of
// one KV head as one m16 row tile (rows past the group are zeros) over split s's tokens, in rounds of kMmaRound keys
// through a kMmaStages-deep cp.async ring; warp w takes keys [16w, 16w + 16) of every round with an online softmax of
// its own (S = Q.K^T and O += P.V on mma.sync m16n8k16, P rounded to bf16 as the prefill kernel does), and the four
// warps' (m, l, O) are merged at the end in warp order, then written like the SIMT kernel's (split-KV partials and
// their merge unchanged). Its own bits (the chunking, the bf16 P): one decode kernel per deployment.
constexpr int kMmaRows = 16, kMmaRound = 64, kMmaStages = 3, kMmaWarps = kThreads / 32;
static_assert(kMmaRound == 16 * kMmaWarps, "a round is 16 keys per warp");

template <int D>
__global__ void __launch_bounds__(kThreads) decodeMmaKernel(DecodeArgs a) {
  pdlStart();  // cuda/pdl.cuh
  constexpr int CH = D / 8;  // 16-byte pieces per K/V row
  extern __shared__ __align__(128) uint16_t smem16[];
  uint16_t* sQ = smem16;                           // kMmaRows x D
  uint16_t* sK = sQ + kMmaRows * D;                // kMmaStages x kMmaRound x D
  uint16_t* sV = sK + kMmaStages * kMmaRound * D;  // kMmaStages x kMmaRound x D
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, t4 = lane & 3;
  const int hg = blockIdx.x % a.headGroups, kvh = (blockIdx.x / a.headGroups) % a.kv.Hk;
  const int b = blockIdx.x / (a.headGroups * a.kv.Hk), split = blockIdx.y;
  const int h0 = kvh * a.G + hg * kMmaRows, nh = min(kMmaRows, a.G - hg * kMmaRows);
  int t0, t1;
  splitRange(a, b, split, t0, t1);
  const int nRounds = (t1 - t0 + kMmaRound - 1) / kMmaRound;
  const uint16_t* Q = static_cast<const uint16_t*>(a.q);
  const uint16_t* K = static_cast<const uint16_t*>(a.kv.k);
  const uint16_t* V = static_cast<const uint16_t*>(a.kv.v);

  // Q tile (lands with the first round's group): row r is query head h0 + r; rows past nh are zeros.
  for (int e = tid; e < kMmaRows * CH; e += kThreads) {
    const int r = e / CH, c = e % CH;
    const bool ok = r < nh;
    mma::cpAsync16(sQ + mma::swzD<D>(r, c), Q + (ok ? (int64_t(b) * a.Hq + h0 + r) * D + c * 8 : 0), ok ? 16 : 0);
  }
  // Page ids a round ahead (PagesAhead), as the SIMT kernel does.
  __shared__ int sPage[2][kMmaRound];
  static_assert(kMmaRound <= kThreads, "one thread per key of a round fetches its page id");
  PagesAhead<kMmaRound> pages{sPage};
  auto loadRound = [&](int stage, int c, bool direct) {
    for (int e = tid; e < kMmaRound * CH; e += kThreads) {
      const int r = e / CH, ch = e % CH, t = t0 + c * kMmaRound + r;
      const int64_t row = t < t1 ? pages.row(a, b, c, r, t, kvh, direct) : -1;
      const int64_t off = row >= 0 ? row + ch * 8 : 0;
      mma::cpAsync16(sK + stage * kMmaRound * D + mma::swzD<D>(r, ch), K + off, row >= 0 ? 16 : 0);
      mma::cpAsync16(sV + stage * kMmaRound * D + mma::swzD<D>(r, ch), V + off, row >= 0 ? 16 : 0);
    }
  };
#pragma unroll
  for (int s = 0; s < kMmaStages - 1; s++) {
    if (s < nRounds) loadRound(s, s, true);
    mma::cpAsyncCommit();  // group 0 holds Q too
  }
  pages.fetch(a, b, t0 + (kMmaStages - 1) * kMmaRound, t1);

  // This thread's rows of the warp's tile: g (fragment elements 0, 1) and g + 8 (2, 3).
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};
  float o[D / 8][4];
#pragma unroll
  for (int j = 0; j < D / 8; j++) o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.f;
  unsigned qf[D / 16][4];
  const int kb = warp * 16;  // this warp's keys of each round

  for (int c = 0; c < nRounds; c++) {
    mma::cpAsyncWait<kMmaStages - 2>();
    pages.publish(c + kMmaStages - 1);  // the ids of the round this one issues
    __syncthreads();  // round c (and Q) landed for every thread; round c - 1's stage and sPage's readers are done
    if (c + kMmaStages - 1 < nRounds) {
      loadRound((c + kMmaStages - 1) % kMmaStages, c + kMmaStages - 1, false);
      pages.fetch(a, b, t0 + (c + kMmaStages) * kMmaRound, t1);  // published next round
    }
    mma::cpAsyncCommit();
    if (c == 0)
#pragma unroll
      for (int kk = 0; kk < D / 16; kk++) mma::ldmatrixX4(qf[kk], sQ + mma::swzD<D>(lane & 15, kk * 2 + (lane >> 4)));
    const uint16_t* tK = sK + (c % kMmaStages) * kMmaRound * D;
    const uint16_t* tV = sV + (c % kMmaStages) * kMmaRound * D;

    // S = Q K^T over the warp's 16 keys (n-tile j: keys kb + 8j .. + 7), k ascending over D.
    float s[2][4] = {};
#pragma unroll
    for (int kk = 0; kk < D / 16; kk++) {
      unsigned bk[4];
      mma::ldmatrixX4(bk, tK + mma::swzD<D>(kb + (lane & 7) + ((lane >> 4) << 3), kk * 2 + ((lane >> 3) & 1)));
      mma::mmaBf16(s[0], qf[kk], bk[0], bk[1]);
      mma::mmaBf16(s[1], qf[kk], bk[2], bk[3]);
    }
    // Scale to the exp2 domain, mask keys past the split, online softmax of rows g and g + 8 over the quad.
#pragma unroll
    for (int j = 0; j < 2; j++)
#pragma unroll
      for (int e = 0; e < 4; e++) {
        const int t = t0 + c * kMmaRound + kb + j * 8 + t4 * 2 + (e & 1);
        s[j][e] = t < t1 ? s[j][e] * a.scaleLog2 : -INFINITY;
      }
    mma::softmaxTile(s, m, l, o);
    // O += P V over the 16 keys; V^T fragments by transposing ldmatrix.
    const unsigned pa[4] = {mma::packBf16(s[0][0], s[0][1]), mma::packBf16(s[0][2], s[0][3]),
                            mma::packBf16(s[1][0], s[1][1]), mma::packBf16(s[1][2], s[1][3])};
#pragma unroll
    for (int dp = 0; dp < D / 16; dp++) {
      unsigned bv[4];
      mma::ldmatrixX4Trans(bv, tV + mma::swzD<D>(kb + (lane & 15), dp * 2 + (lane >> 4)));
      mma::mmaBf16(o[2 * dp], pa, bv[0], bv[1]);
      mma::mmaBf16(o[2 * dp + 1], pa, bv[2], bv[3]);
    }
  }
  mma::cpAsyncWait<0>();
  __syncthreads();  // the ring is free: it holds the warps' partial results now

  // The warps' (m, l, O) through shared memory, merged in warp order.
  float* sO = reinterpret_cast<float*>(sK);   // kMmaWarps x kMmaRows x D
  float* sML = reinterpret_cast<float*>(sV);  // kMmaWarps x kMmaRows x 2
  static_assert(kMmaWarps * kMmaRows * D * 4 <= kMmaStages * kMmaRound * D * 2, "the warps' O fit in the K ring");
#pragma unroll
  for (int i = 0; i < 2; i++) {
    const int r = warp * kMmaRows + g + 8 * i;
#pragma unroll
    for (int j = 0; j < D / 8; j++) {
      sO[r * D + j * 8 + t4 * 2] = o[j][2 * i];
      sO[r * D + j * 8 + t4 * 2 + 1] = o[j][2 * i + 1];
    }
    if (t4 == 0) sML[r * 2] = m[i], sML[r * 2 + 1] = l[i];
  }
  __syncthreads();
  for (int e = tid; e < nh * D; e += kThreads) {
    const int r = e / D, d = e % D;
    float mAll = -INFINITY;
#pragma unroll
    for (int w = 0; w < kMmaWarps; w++) mAll = fmaxf(mAll, sML[(w * kMmaRows + r) * 2]);
    float oAll = 0.f, lAll = 0.f;
#pragma unroll
    for (int w = 0; w < kMmaWarps; w++) {
      const float mw = sML[(w * kMmaRows + r) * 2];
      const float wt = mw == -INFINITY ? 0.f : exp2f(mw - mAll);
      oAll = fmaf(wt, sO[(w * kMmaRows + r) * D + d], oAll);
      lAll = fmaf(wt, sML[(w * kMmaRows + r) * 2 + 1], lAll);
    }
    writeResult(a, b, h0 + r, split, d, oAll, mAll, lAll, d == 0);
  }
  if (a.counters) mergeIfLast<D>(a, b, h0, nh);
}

// Any cache dtype and head dim <= 256: one warp per (b, query head, split), token by token (lanes own dims
// lane + 32i). Same split ranges and merge as the fast kernel; slower, for f32 caches and unusual shapes.
__global__ void decodeGenericKernel(DecodeArgs a) {
  pdlStart();  // cuda/pdl.cuh
  const int lane = threadIdx.x & 31;
  const int64_t wid = (blockIdx.x * int64_t(blockDim.x) + threadIdx.x) >> 5;
  if (wid >= int64_t(a.B) * a.Hq * a.splits) return;
  const int split = int(wid % a.splits), h = int((wid / a.splits) % a.Hq), b = int(wid / (int64_t(a.splits) * a.Hq));
  const int kvh = h / a.G, D = a.kv.D;
  int t0, t1;
  splitRange(a, b, split, t0, t1);
  float q[8], acc[8];
  for (int i = 0; i < 8; i++) {
    int d = lane + 32 * i;
    q[i] = d < D ? loadF(a.q, (int64_t(b) * a.Hq + h) * D + d, a.qt) * a.scaleLog2 : 0.f;
    acc[i] = 0.f;
  }
  float m = -INFINITY, l = 0.f;
  for (int t = t0; t < t1; t++) {
    int64_t row = tokenRow(a.kv, b, t, kvh, a.err, DeviceErrorCode::decodePage);
    if (row < 0) continue;
    float dot = 0.f;
    for (int i = 0; i < 8; i++)
      if (lane + 32 * i < D) dot = fmaf(q[i], loadF(a.kv.k, row + lane + 32 * i, a.kv.t), dot);
    dot = warpSum(dot);
    float mNew = fmaxf(m, dot), alpha = exp2f(m - mNew), p = exp2f(dot - mNew);
    l = l * alpha + p;
    for (int i = 0; i < 8; i++)
      if (lane + 32 * i < D) acc[i] = fmaf(p, loadF(a.kv.v, row + lane + 32 * i, a.kv.t), acc[i] * alpha);
    m = mNew;
  }
  for (int i = 0; i < 8; i++)
    if (lane + 32 * i < D) writeResult(a, b, h, split, lane + 32 * i, acc[i], m, l, i == 0 && lane == 0);
}

// out[b, h, :] = sum_s 2^(m_s - M) O_s / sum_s 2^(m_s - M) l_s, splits in order. One block per (b, h).
// Only for the generic kernel, or with DL_DECODE_MERGE=kernel (A/B timing): the fast kernel merges in its last CTA.
__global__ void decodeMergeKernel(DecodeArgs a) {
  pdlStart();  // cuda/pdl.cuh
  const int64_t bh = blockIdx.x;
  for (int d = threadIdx.x; d < a.kv.D; d += blockDim.x) storeF(a.out, bh * a.kv.D + d, a.ot, mergedValue(a, bh, d));
}

// ---- launchers ----

template <int D, int GP, int kChunk, int kStages>
void launchDecode(const DecodeArgs& a) {
  constexpr int smemBytes = 2 * kStages * kChunk * D * 2 + (GP * kChunk + GP) * 4;
  constexpr auto kernel = decodeKernel<D, GP, kChunk, kStages>;
  allowDynamicSmem<kernel>(smemBytes);
  dim3 grid(unsigned(int64_t(a.B) * a.kv.Hk * a.headGroups), unsigned(a.splits));
  launchKernel("decodeKernel", kernel, grid, kThreads, smemBytes, a);
}

// Pipeline shape: 32 tokens x 4 stages by default (64 KB for D = 128: three CTAs per SM). DL_DECODE_PIPE=CxS picks
// another, for the benchmark's sweep: 32x6 and 32x8 (deeper, two CTAs per SM at D = 128) compute the same bits as
// 32x4 (stages move no arithmetic); 64x3 (the old 64 = 64x3) differs in bits, as the chunk sets the rescale points.
// DL_DECODE_PIPE=mma takes decodeMmaKernel where it applies (bf16 q and cache, D 64 / 128; its own bits).
enum class Pipe { c32s4, c32s6, c32s8, c64s3, mma };
Pipe decodePipe() {
  switch (knob::knobs().decodePipe) {
    case knob::DecodePipe::c32s6: return Pipe::c32s6;
    case knob::DecodePipe::c32s8: return Pipe::c32s8;
    case knob::DecodePipe::c64s3: return Pipe::c64s3;
    case knob::DecodePipe::mma: return Pipe::mma;
    default: return Pipe::c32s4;
  }
}

template <int D>
void launchDecodeMma(const DecodeArgs& a) {
  constexpr int smemBytes = (kMmaRows * D + 2 * kMmaStages * kMmaRound * D) * 2;
  constexpr auto kernel = decodeMmaKernel<D>;
  allowDynamicSmem<kernel>(smemBytes);
  dim3 grid(unsigned(int64_t(a.B) * a.kv.Hk * a.headGroups), unsigned(a.splits));
  launchKernel("decodeMmaKernel", kernel, grid, kThreads, smemBytes, a);
}

template <int D, int GP>
void launchDecodePipe(const DecodeArgs& a) {
  switch (decodePipe()) {
    case Pipe::c32s6: return launchDecode<D, GP, 32, 6>(a);
    case Pipe::c32s8: return launchDecode<D, GP, 32, 8>(a);
    case Pipe::c64s3: return launchDecode<D, GP, 64, 3>(a);
    default: return launchDecode<D, GP, 32, 4>(a);
  }
}

template <int D>
void launchDecodeD(const DecodeArgs& a) {
  int gp = std::min(a.G, kMaxGroup);
  if (gp == 1) launchDecodePipe<D, 1>(a);
  else if (gp == 2) launchDecodePipe<D, 2>(a);
  else launchDecodePipe<D, 4>(a);
}

// Split-KV merged by the fast kernel's last CTA per (sequence, head group) (default) or by decodeMergeKernel
// (DL_DECODE_MERGE=kernel, for A/B timing): the same bits either way (mergedValue).
bool fusedMerge() {
  return knob::knobs().decodeMergeFused;
}

}  // namespace

void attentionDecode(const View& q, const PagedKV& kv, const View& out, float scale, int kvSplits) {
  const char* op = "attentionDecode";
  requireCuda(op, "q", q), requireCuda(op, "out", out), requireFloatT(op, "q", q), requireFloatT(op, "out", out);
  checkPagedKV(op, kv);
  const int64_t B = kv.lastPageLen.numel(), Hq = q.shape[1], D = q.shape[2], Hk = kv.kCache.shape[2];
  if (q.ndim != 3 || q.shape[0] != B || out.numel() != q.numel()) fail(op, "q and out must be (B, Hq, D) with B = lastPageLen's length");
  if (D != kv.kCache.shape[3] || Hq % Hk) fail(op, "q's head dim must match the cache and Hq be a multiple of Hk");
  if (D > 256) fail(op, "head dim " + std::to_string(D) + " > 256 is not supported");
  if (kvSplits < 1 || kvSplits > 1024) fail(op, "kvSplits must be in [1, 1024], got " + std::to_string(kvSplits));
  if (B == 0) return;
  DecodeArgs a{q.data, out.data, q.dtype, out.dtype, pagedKVDev(kv), int(B), int(Hq), int(Hq / Hk), 1, kvSplits,
               scale * kLog2e, nullptr, nullptr, deviceErrorSlot(), nullptr};
  const bool fast = kv.kCache.dtype != DType::f32 && (D == 64 || D == 128) && aligned16(kv.kCache.data) &&
                    aligned16(kv.vCache.data);
  const bool mmaKernel = fast && decodePipe() == Pipe::mma && q.dtype == DType::bf16 &&
                         kv.kCache.dtype == DType::bf16 && aligned16(q.data);
  a.headGroups = int(ceilDiv(a.G, mmaKernel ? kMmaRows : kMaxGroup));
  Workspace ws{};
  if (kvSplits > 1) {
    size_t rows = size_t(B) * size_t(Hq) * size_t(kvSplits);
    ws = workspace(rows * size_t(D + 2) * sizeof(float));
    a.partialO = static_cast<float*>(ws.data);
    a.partialML = a.partialO + rows * size_t(D);
  }
  if (fast && kvSplits > 1 && fusedMerge()) a.counters = splitCounters(size_t(B) * size_t(Hk) * size_t(a.headGroups));
  if (mmaKernel && D == 128) launchDecodeMma<128>(a);
  else if (mmaKernel) launchDecodeMma<64>(a);
  else if (fast && D == 128) launchDecodeD<128>(a);
  else if (fast) launchDecodeD<64>(a);
  else {
    int64_t warps = B * Hq * kvSplits;
    launchKernel("decodeGenericKernel", decodeGenericKernel, unsigned(ceilDiv(warps * 32, 128)), 128, 0, a);
  }
  if (kvSplits > 1 && !a.counters) {
    launchKernel("decodeMergeKernel", decodeMergeKernel, unsigned(B * Hq), 128, 0, a);
  }
}

}  // namespace dl::gpu
