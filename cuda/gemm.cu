// Split-K GEMM on the GPU, Y[M,N] = X[M,K] . W[N,K]^T (+ bias): tensor cores for bf16 x bf16, SIMT otherwise.
//
// Reduction schedule (the contract of kernels.h): K is cut into splitK partitions on multiples of kPartK = 64,
// partition s = k-tiles [s*T/splitK, (s+1)*T/splitK) of the T = ceil(K/64) tiles. Inside a partition every
// output is accumulated by one chain of mma.sync m16n8k16 (or FMAs on the SIMT path) in ascending k; partitions
// are added in order 0..splitK-1 (never atomics), then the bias, by a second kernel (gemmReduceKernel). The tile shape
// (chosen from M) changes how outputs are spread over warps, never that chain, so a row's bits depend on (K, splitK)
// only. (A finish by each tile's last CTA, saving that launch, lost on an H100 at every row count, 1 row included:
// bench/RESULTS-gpu.md; removed.)
// On sm_90 the wgmma kernels (cuda/sm90/gemm_wgmma.cu) follow the same schedule with k16 wgmma steps and take GEMMs of
// more than 64 rows and unsplit wide ones of 33-64 (wgmmaConfig); H100 and H200 runs (check.sh) showed
// their bits equal these kernels'.
#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>

#include "common.cuh"
#include "gemm_args.cuh"
#include "gemm_grouped.cuh"
#include "gemm_mma.cuh"
#include "workspace.cuh"
#include "knobs.h"

namespace dl::gpu {
namespace {

// ---- kernels ----

// bf16 x bf16 on tensor cores. CTA tile BM x BN, WM x WN warps, STAGES-deep cp.async pipeline of 64-wide k tiles.
// grid = (ceil(M/BM), ceil(N/BN), splitK): M tiles fastest, so the CTAs sharing a W tile run together (W once
// through DRAM). Needs K % 8 == 0 and 16-byte aligned X and W (16-byte cp.async chunks).
template <int BM, int BN, int WM, int WN, int STAGES>
__global__ void __launch_bounds__(WM* WN * 32) gemmBf16Kernel(GemmArgs a) {
  constexpr int kThreads = WM * WN * 32, WTM = BM / WM, WTN = BN / WN, MT = WTM / 16, NT = WTN / 8;
  static_assert(WTM % 16 == 0 && WTN % 16 == 0, "warp tile must be a multiple of 16 x 16");
  extern __shared__ __align__(128) uint16_t smem[];
  uint16_t* sA = smem;                      // STAGES x BM x 64
  uint16_t* sB = smem + STAGES * BM * 64;   // STAGES x BN x 64
  const uint16_t* X = static_cast<const uint16_t*>(a.x);
  const uint16_t* W = static_cast<const uint16_t*>(a.w);
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, wm = warp / WN, wn = warp % WN;
  const int m0 = blockIdx.x * BM, n0 = blockIdx.y * BN, split = blockIdx.z;
  int kBegin, kEnd;
  partitionRange(a, split, kBegin, kEnd);
  const int nk = kEnd > kBegin ? (kEnd - kBegin + kPartK - 1) / kPartK : 0;

  auto loadX = [&](int stage, int kt) {
    const int k = kBegin + kt * kPartK;
    for (int c = tid; c < BM * 8; c += kThreads) {
      int r = c >> 3, ch = c & 7, gm = m0 + r, gk = k + ch * 8;
      bool ok = gm < a.M && gk < kEnd;
      mma::cpAsync16(sA + stage * BM * 64 + mma::swz(r, ch), ok ? X + int64_t(gm) * a.K + gk : X, ok ? 16 : 0);
    }
  };
  auto loadW = [&](int stage, int kt) {
    const int k = kBegin + kt * kPartK;
    for (int c = tid; c < BN * 8; c += kThreads) {
      int r = c >> 3, ch = c & 7, gn = n0 + r, gk = k + ch * 8;
      bool ok = gn < a.N && gk < kEnd;
      mma::cpAsync16(sB + stage * BN * 64 + mma::swz(r, ch), ok ? W + int64_t(gn) * a.K + gk : W, ok ? 16 : 0);
    }
  };

  float acc[MT][NT][4];
#pragma unroll
  for (int i = 0; i < MT; i++)
#pragma unroll
    for (int j = 0; j < NT; j++) acc[i][j][0] = acc[i][j][1] = acc[i][j][2] = acc[i][j][3] = 0.f;

  // Programmatic dependent launch (cuda/pdl.cuh): the first stages' weight tiles (W: model weights, which no earlier
  // work on the stream writes) are fetched while the kernel before this one may still run; X only after it completes.
  // The first commit group then holds those W tiles and X tile 0, so the waits below stay sufficient.
  pdlRelease();
#pragma unroll
  for (int s = 0; s < STAGES - 1; s++)
    if (s < nk) loadW(s, s);
  pdlWait();
#pragma unroll
  for (int s = 0; s < STAGES - 1; s++) {
    if (s < nk) loadX(s, s);
    mma::cpAsyncCommit();
  }
  for (int kt = 0; kt < nk; kt++) {
    mma::cpAsyncWait<STAGES - 2>();
    __syncthreads();  // tile kt landed for everyone; everyone is done with the stage we refill next
    if (kt + STAGES - 1 < nk) {
      loadX((kt + STAGES - 1) % STAGES, kt + STAGES - 1);
      loadW((kt + STAGES - 1) % STAGES, kt + STAGES - 1);
    }
    mma::cpAsyncCommit();
    const uint16_t* tA = sA + (kt % STAGES) * BM * 64;
    const uint16_t* tB = sB + (kt % STAGES) * BN * 64;
#pragma unroll
    for (int kk = 0; kk < 4; kk++) {
      unsigned af[MT][4], bfr[NT / 2][4];
#pragma unroll
      for (int mt = 0; mt < MT; mt++)
        mma::ldmatrixX4(af[mt], tA + mma::swz(wm * WTM + mt * 16 + (lane & 15), kk * 2 + (lane >> 4)));
#pragma unroll
      for (int np = 0; np < NT / 2; np++)
        mma::ldmatrixX4(bfr[np], tB + mma::swz(wn * WTN + np * 16 + (lane & 7) + ((lane >> 4) << 3),
                                               kk * 2 + ((lane >> 3) & 1)));
#pragma unroll
      for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int nt = 0; nt < NT; nt++)
          mma::mmaBf16(acc[mt][nt], af[mt], bfr[nt / 2][(nt & 1) * 2], bfr[nt / 2][(nt & 1) * 2 + 1]);
    }
  }
  mma::cpAsyncWait<0>();

#pragma unroll
  for (int mt = 0; mt < MT; mt++)
#pragma unroll
    for (int nt = 0; nt < NT; nt++) {
      int row = m0 + wm * WTM + mt * 16 + (lane >> 2), col = n0 + wn * WTN + nt * 8 + (lane & 3) * 2;
      storePair(a, split, row, col, acc[mt][nt][0], acc[mt][nt][1]);
      storePair(a, split, row + 8, col, acc[mt][nt][2], acc[mt][nt][3]);
    }
}

// Any dtypes (f32/bf16/f16 X and W) on CUDA cores: 64 x 64 tile, 256 threads with 4 x 4 outputs each, one FMA
// chain per output in ascending k. grid = (ceil(M/64), ceil(N/64), splitK).
__global__ void __launch_bounds__(256) gemmSimtKernel(GemmArgs a) {
  pdlStart();  // cuda/pdl.cuh
  __shared__ float sX[16][64 + 1], sW[16][64 + 1];
  const int tx = threadIdx.x & 15, ty = threadIdx.x >> 4;
  const int m0 = blockIdx.x * 64, n0 = blockIdx.y * 64, split = blockIdx.z;
  int kBegin, kEnd;
  partitionRange(a, split, kBegin, kEnd);
  float acc[4][4] = {};
  for (int k = kBegin; k < kEnd; k += 16) {
    for (int e = threadIdx.x; e < 64 * 16; e += 256) {
      int r = e >> 4, kk = e & 15, gk = k + kk;
      sX[kk][r] = (m0 + r < a.M && gk < kEnd) ? loadF(a.x, int64_t(m0 + r) * a.K + gk, a.xt) : 0.f;
      sW[kk][r] = (n0 + r < a.N && gk < kEnd) ? loadF(a.w, int64_t(n0 + r) * a.K + gk, a.wt) : 0.f;
    }
    __syncthreads();
    int steps = min(16, kEnd - k);  // padding k adds nothing, but skipping it keeps the chain K-exact
    for (int kk = 0; kk < steps; kk++) {
      float xv[4], wv[4];
#pragma unroll
      for (int i = 0; i < 4; i++) xv[i] = sX[kk][ty * 4 + i], wv[i] = sW[kk][tx * 4 + i];
#pragma unroll
      for (int i = 0; i < 4; i++)
#pragma unroll
        for (int j = 0; j < 4; j++) acc[i][j] = fmaf(xv[i], wv[j], acc[i][j]);
    }
    __syncthreads();
  }
#pragma unroll
  for (int i = 0; i < 4; i++) {
    storePair(a, split, m0 + ty * 4 + i, n0 + tx * 4, acc[i][0], acc[i][1]);
    storePair(a, split, m0 + ty * 4 + i, n0 + tx * 4 + 2, acc[i][2], acc[i][3]);
  }
}

// Second pass of split-K: y = ((p_0 + p_1) + ... + p_{S-1}) + bias, partitions in order. One thread per output.
__global__ void gemmReduceKernel(GemmArgs a) {
  pdlStart();  // cuda/pdl.cuh
  const int64_t total = int64_t(a.M) * a.N;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    float s = a.partial[i];
    for (int p = 1; p < a.splitK; p++) s += a.partial[int64_t(p) * total + i];
    if (a.wScale) s = s * a.wScale[i % a.N];
    if (a.bias) s += loadF(a.bias, i % a.N, a.bt);
    storeF(a.y, yIndex(a, int(i / a.N), int(i % a.N)), a.yt, s);
  }
}

// ---- launchers ----

template <int BM, int BN, int WM, int WN, int STAGES>
void launchBf16(const GemmArgs& a) {
  constexpr int smemBytes = STAGES * (BM + BN) * 64 * 2;
  constexpr auto kernel = gemmBf16Kernel<BM, BN, WM, WN, STAGES>;
  allowDynamicSmem<kernel>(smemBytes);
  dim3 grid(unsigned(ceilDiv(a.M, BM)), unsigned(ceilDiv(a.N, BN)), unsigned(a.splitK));
  launchKernel("gemmBf16Kernel", kernel, grid, WM * WN * 32, smemBytes, a);
}

// CTA tile (BM x BN) of each tensor-core config, as launched in gemm() below.
constexpr int kConfigBM[] = {16, 32, 64, 64, 128, 128};
constexpr int kConfigBN[] = {64, 64, 64, 128, 128, 256};

int smCount() {
  static const int n = [] {
    int dev = 0, count = 0;
    if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess) {
      (void)cudaGetLastError();
      return 0;
    }
    return count;
  }();
  return n;
}

// DL_GEMM_TILE=<0..5> forces an mma.sync tile config, <6..8> wgmma config 0..2 (for the benchmark's sweep and the
// check.sh test reruns); -1: chosen by shape.
std::atomic<int>& forcedTileSetting() {
  static std::atomic<int> forced{knob::knobs().gemmTile};
  return forced;
}
int forcedTile() { return forcedTileSetting().load(std::memory_order_relaxed); }

// Tile config for the mma.sync path (any config gives the same bits: see the header).
int tileConfig(int64_t M, int64_t N, int splitK) {
  if (forcedTile() >= 0 && forcedTile() < 6) return forcedTile();
  // Measured on H100 (bench/CUDA_NOTES.md): 128 x 256 tiles win for large M and for the LM head at M = 128.
  int c = M <= 16 ? 0 : M <= 32 ? 1 : M <= 64 ? 2 : (M <= 128 && N < 32768) ? 4 : 5;
  // 33-64 rows of a wide projection (gate|up, the LM head at a 64-row decode batch): 64 x 128 tiles, when their grid
  // alone (splitK 1) covers the SMs. Qwen2.5-1.5B at 64 rows, splitK 1 (bench/RESULTS-gpu.md): gate|up 50.9
  // against 69.3 us on an H200 (51.4 against 73.0 on an H100), the LM head 236 against 299 (271 against 320). Narrow
  // split-K GEMMs keep the 64 x 64 tile (there 64 x 128 was level or slower: q at 64 rows, splitK 8, 16.3 against 15.3).
  const int64_t sms = smCount();
  auto ctas = [&](int k) { return ceilDiv(M, kConfigBM[k]) * ceilDiv(N, kConfigBN[k]) * splitK; };
  if (c == 2 && sms > 0 && ceilDiv(M, kConfigBM[3]) * ceilDiv(N, kConfigBN[3]) >= sms) c = 3;
  // A grid that leaves most SMs idle (a narrow projection at mid-size M on splitK 1, e.g. N = 576 at M = 256 is six
  // 128 x 256 CTAs for 132 SMs): smaller tiles until the CTAs cover the SMs. Not measured yet (no GPU lent when it
  // was written); the cases it leaves alone (at least half the SMs busy) are the measured ones.
  if (sms > 0 && 2 * ctas(c) < sms)
    while (c > 0 && ctas(c) < sms) c--;
  return c;
}

// The wgmma config (cuda/sm90/gemm_wgmma.cu) for this shape, or -1 for mma.sync. The batch-invariance contract spans
// both kernel families (a batch on wgmma, its sub-batches on mma.sync must agree): check.sh's DL_GEMM_WGMMA=1 rerun
// tests exactly that, and passed on an H100 (36 of 36 results bitwise equal), so it is on by default
// (DL_GEMM_WGMMA=0 turns it off). From 65 rows, the largest tiles whose grid keeps at least half the SMs busy:
// measured there, M = 2048 GEMMs 1.6-1.9x faster than mma.sync, a 128-row decode step 24% shorter. At 33-64 rows
// only an unsplit wide projection, where such a grid exists (H200: gate|up at 64 rows 44.7 us on the 128 x
// 256 config, 48.4 on 128 x 128, 52.7 on 64 x 128, against mma.sync's best 50.9; the LM head 230 / 242 / 236 against
// 236: so the largest config whose grid qualifies, half its rows zero); narrow or split-K GEMMs of up to 64 rows
// stay on mma.sync, which is ahead there (q at 64 rows, splitK 8: 15.1 against 16.6; k|v 10.5 against 14.9;
// bench/RESULTS-gpu.md).
int wgmmaConfig(int64_t M, int64_t N, int splitK) {
  if (forcedTile() >= 6) return forcedTile() - 6 < kWgmmaConfigs ? forcedTile() - 6 : -1;
  if (knob::knobs().gemmWgmma == 0 || M <= 32 || (M <= 64 && splitK > 1) || forcedTile() >= 0) return -1;
  const int64_t sms = std::max(smCount(), 2);
  for (int c = 0; c < kWgmmaConfigs; c++)
    if (2 * ceilDiv(M, kWgmmaBM[c]) * ceilDiv(N, kWgmmaBN[c]) * splitK >= sms) return c;
  return M <= 64 ? -1 : kWgmmaConfigs - 1;
}

bool runWgmma(const GemmArgs& a) {
  const int c = wgmmaConfig(a.M, a.N, a.splitK);
  if (c < 0) return false;
  if (gemmWgmma(a, c)) return true;
  static bool warned = false;
  if (!warned && (forcedTile() >= 6 || knob::knobs().gemmWgmma == 1)) {
    warned = true;
    std::fprintf(stderr, "deliberate: the wgmma GEMM was asked for (DL_GEMM_TILE / DL_GEMM_WGMMA) but cannot run here "
                         "(it needs an sm_90 GPU and a build with nvcc's sm_90a target); using the mma.sync kernels\n");
  }
  return false;
}

}  // namespace

int setGemmTile(int tile) { return forcedTileSetting().exchange(tile < 0 ? -1 : tile); }

// A fast-schedule GEMM splits K to make parallel work when its grid alone cannot fill the SMs; where the grid at
// splitK 1 already gives every SM a CTA, splitting only adds partial traffic and the finish. H100
// (bench/gpu-2026-11-27/qwen-gemms.json, Qwen2.5-1.5B shapes, splitK 1 vs 4): gate|up (N = 17920, 280 CTAs) 35.2 vs
// 39.6 us at 1 row, 36.8 vs 46.3 at 16, 75.8 vs 119.7 at 64; the LM head 192.5 vs 225.3, 199.4 vs 282.8, 320.3 vs
// 720.5; the N = 1536 projections (24 CTAs) want the split (q at 1 row: 18.8 vs 10.8). The CTA count is the mma.sync
// tiles' at splitK 1 (so DL_GEMM_WGMMA never changes the answer; the engine splits only GEMMs of <= 64 rows, which
// wgmma takes only unsplit), and depends on M only through ceil(M / tile rows), tile rows multiples of 8 (the 64 x 128
// tile of 33-64 rows is chosen only where the 64 x 64 one's grid covers the SMs too), so a decode batch and its
// padding bucket always get the same answer.
int fastGemmSplitK(int64_t M, int64_t N, int splitK) {
  const int64_t sms = smCount();
  if (splitK <= 1 || M <= 0 || N <= 0 || sms <= 0) return splitK;
  const int c = tileConfig(M, N, 1);
  return ceilDiv(M, kConfigBM[c]) * ceilDiv(N, kConfigBN[c]) >= sms ? 1 : splitK;
}

namespace {

// Both entry points after their own checks of y: x, w, bias, splitK, then the launch. Layout: see GemmArgs.
void run(const char* op, const View& x, const View& w, const View& bias, const View& y, int splitK, int64_t cut1,
         int64_t cut2, int64_t yRows, int64_t yRow0) {
  requireCuda(op, "x", x), requireCuda(op, "w", w), requireCuda(op, "y", y);
  requireFloatT(op, "x", x), requireFloatT(op, "y", y);
  if (w.dtype == DType::u8 && !w.groups.bits) fail(op, "a u8 w is the q of a grouped w and needs its groups");
  // the CPU's layouts (packed panels, scales by panel) never reach the GPU: CUDA models hold row-major / by group
  if (w.packRows || w.groups.panel) fail(op, "w is in a CPU layout (packed panels or scales by panel); CUDA takes row-major w, scales by group");
  if (w.groups.bits) {  // grouped quantized W (W4A16 / W8A16): cuda/gemm_int4.cu, its own schedule
    requireFloatT(op, "x", x), requireFloatT(op, "y", y);
    if (x.ndim != 2 || w.ndim != 2 || w.shape[1] != x.shape[1]) fail(op, "shapes must be x (M, K), w (N, K)");
    const int64_t M = x.shape[0], K = x.shape[1], N = w.shape[0];
    if (bias) {
      requireCuda(op, "bias", bias), requireFloatT(op, "bias", bias);
      if (bias.numel() != N) fail(op, "bias must be (N) = (" + std::to_string(N) + ")");
    }
    if (M > 0x7fffffff / 2 || N > 0x7fffffff / 2 || K > 0x7fffffff / 2 || yRows > 0x7fffffff / 2) fail(op, "dimensions must be below 2^30");
    if (splitK < 1 || splitK > K) fail(op, "splitK must be in [1, K = " + std::to_string(K) + "], got " + std::to_string(splitK));
    GemmArgs a{x.data, w.data, bias ? bias.data : nullptr, y.data, nullptr, int(M), int(N), int(K), splitK,
               int(ceilDiv(K, kPartK)), x.dtype, w.dtype, bias.dtype, y.dtype, int(cut1), int(cut2), int(yRows), int(yRow0)};
    gemmGroupedLaunch(op, a, w.groups);
    return;
  }
  // i8 W (quantized per row, View::rowScale): the SIMT kernel reads q exactly and scales each row's sum (W8A16)
  if (w.dtype != DType::i8) requireFloatT(op, "w", w);
  else if (!w.rowScale) fail(op, "an i8 w needs its per-row scales (wScale, f32 [N])");
  if (x.ndim != 2 || w.ndim != 2) fail(op, "x and w must be 2-D");
  const int64_t M = x.shape[0], K = x.shape[1], N = w.shape[0];
  if (w.shape[1] != K) fail(op, "shapes must be x (M, K), w (N, K)");
  if (bias) {
    requireCuda(op, "bias", bias), requireFloatT(op, "bias", bias);
    if (bias.numel() != N) fail(op, "bias must be (N) = (" + std::to_string(N) + ")");
  }
  if (M > 0x7fffffff / 2 || N > 0x7fffffff / 2 || K > 0x7fffffff / 2 || yRows > 0x7fffffff / 2) fail(op, "dimensions must be below 2^30");
  if (splitK < 1 || splitK > K) fail(op, "splitK must be in [1, K = " + std::to_string(K) + "], got " + std::to_string(splitK));
  if (M == 0 || N == 0) return;
  GemmArgs a{x.data, w.data, bias ? bias.data : nullptr, y.data, nullptr, int(M), int(N), int(K), splitK,
             int(ceilDiv(K, kPartK)), x.dtype, w.dtype, bias.dtype, y.dtype, int(cut1), int(cut2), int(yRows), int(yRow0)};
  a.wScale = w.dtype == DType::i8 ? w.rowScale : nullptr;
  Workspace ws{};
  if (splitK > 1) {
    ws = workspace(size_t(splitK) * size_t(M) * size_t(N) * sizeof(float));
    a.partial = static_cast<float*>(ws.data);
  }
  const bool tensorCores = x.dtype == DType::bf16 && w.dtype == DType::bf16 && K % 8 == 0 && aligned16(x.data) &&
                           aligned16(w.data);
  if (!tensorCores) {
    dim3 grid(unsigned(ceilDiv(M, 64)), unsigned(ceilDiv(N, 64)), unsigned(splitK));
    launchKernel("gemmSimtKernel", gemmSimtKernel, grid, 256, 0, a);
  } else if (!runWgmma(a)) {
    switch (tileConfig(M, N, splitK)) {
      case 0: launchBf16<16, 64, 1, 4, 6>(a); break;   // decode: bandwidth-bound, narrow N tiles, deep pipeline
      case 1: launchBf16<32, 64, 1, 4, 6>(a); break;
      case 2: launchBf16<64, 64, 2, 2, 5>(a); break;
      case 3: launchBf16<64, 128, 2, 2, 4>(a); break;
      case 4: launchBf16<128, 128, 2, 4, 4>(a); break;
      default: launchBf16<128, 256, 2, 4, 3>(a); break;  // large M: 64 x 64 warp tiles
    }
  }
  if (splitK > 1) {
    int64_t total = M * N;
    int blocks = int(std::min<int64_t>(ceilDiv(total, 256), 8192));
    launchKernel("gemmReduceKernel", gemmReduceKernel, blocks, 256, 0, a);
  }
}

}  // namespace

void gemm(const View& x, const View& w, const View& bias, const View& y, int splitK) {
  if (y.ndim != 2 || x.ndim != 2 || w.ndim != 2 || y.shape[0] != x.shape[0] || y.shape[1] != w.shape[0])
    fail("gemm", "x, w and y must be 2-D with shapes x (M, K), w (N, K), y (M, N)");
  run("gemm", x, w, bias, y, splitK, w.shape[0], w.shape[0], x.shape[0], 0);
}

// One launch writing the blocks: the bits of one plain GEMM per block, as the CPU runs it. (The per-block launches
// cost a Qwen2.5-1.5B token 12% on an H100, bench/RESULTS-gpu.md; removed.)
void gemmBlocks(const View& x, const View& w, const View& bias, const View& y, int splitK, int64_t cut1, int64_t cut2,
                int64_t rows, int64_t row0) {
  checkGemmBlocks(x, w, y, cut1, cut2, rows, row0);
  run("gemmBlocks", x, w, bias, y, splitK, cut1, cut2, rows, row0);
}

}  // namespace dl::gpu
