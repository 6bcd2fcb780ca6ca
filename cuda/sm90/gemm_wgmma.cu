// bf16 GEMM on Hopper's warpgroup tensor cores: Y[M,N] = X[M,K] . W[N,K]^T, TMA loads into a STAGES-deep ring of
// 128-byte-swizzled shared tiles, one producer warpgroup and CONSUMERS consumer warpgroups of 64 x BN outputs.
// Built for sm_90a only (binding.gyp, target deliberate_sm90): wgmma has no other target, and a file with no
// sm_90 image keeps the loader from ever picking a stub; gemmWgmma() reports whether it can run.
//
// Reduction schedule: the same partition rule as cuda/gemm.cu (partitionRange); inside a partition every output is
// one chain of wgmma k16 steps in ascending k, started from zero; partials go through the same epilogue and the
// same ordered second pass (gemm.cu). Whether a wgmma k16 step rounds exactly as mma.sync's m16n8k16 does is not
// documented, so scripts/device/check.sh ran the bitwise batch-invariance test with wgmma for the large batch and
// mma.sync for its sub-batches: bitwise equal on an H100 and an H200 (36 of 36), so GEMMs of more than
// 64 rows, and unsplit wide ones of 33-64, take wgmma by default (cuda/gemm.cu wgmmaConfig; DL_GEMM_WGMMA=0 turns it off).
#include <cuda.h>
#include <cudaTypedefs.h>

#include <cstring>
#include <mutex>
#include <unordered_map>

#include "gemm_args.cuh"
#include "wgmma.cuh"

namespace dl::gpu {
namespace {

// ---- PTX: shared addresses, mbarriers, TMA, wgmma fences ----
__device__ __forceinline__ uint32_t smemAddr(const void* p) { return uint32_t(__cvta_generic_to_shared(p)); }

__device__ __forceinline__ void mbarInit(uint64_t* bar, int count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(smemAddr(bar)), "r"(count));
}
__device__ __forceinline__ void mbarArrive(uint64_t* bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(smemAddr(bar)) : "memory");
}
// Arrives and announces `bytes` of TMA transactions for the barrier's current phase.
__device__ __forceinline__ void mbarExpectTx(uint64_t* bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(smemAddr(bar)), "r"(bytes) : "memory");
}
__device__ __forceinline__ uint64_t globalTimerNs() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;\n" : "=l"(t));
  return t;
}
// Blocks until the phase with parity `phase` has completed. A wait of 2 s is a protocol bug (this kernel was written
// without a GPU to run it on): trap, so the launch fails with an error instead of hanging the process and the
// session's GPU time; every later CUDA call then reports that error. Timed on the global clock, not by counting
// polls: each failed try_wait may suspend the thread for a hardware-chosen while.
__device__ __forceinline__ void mbarWait(uint64_t* bar, int phase) {
  uint32_t done = 0;
  uint64_t start = 0;
  for (uint32_t polls = 0; !done; polls++) {
    asm volatile(
        "{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(smemAddr(bar)), "r"(phase)
        : "memory");
    if (done || (polls & 255) != 255) continue;
    const uint64_t now = globalTimerNs();
    if (start == 0) start = now;
    else if (now - start > 2000000000ull) __trap();
  }
}
// A box of the 2-D tensor map at (c0 = k, c1 = row) into shared memory; out-of-range elements land as zeros and
// count toward the barrier's bytes like the rest.
__device__ __forceinline__ void tmaLoad(void* dst, const CUtensorMap* map, uint64_t* bar, int c0, int c1) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4}], [%2];\n" ::"r"(
          smemAddr(dst)),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(smemAddr(bar)), "r"(c0), "r"(c1)
      : "memory");
}
__device__ __forceinline__ void wgFence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgCommit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgWaitAll() { asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory"); }
__device__ __forceinline__ void wgWaitOne() { asm volatile("wgmma.wait_group.sync.aligned 1;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void setMaxRegsInc() { asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(N)); }
template <int N>
__device__ __forceinline__ void setMaxRegsDec() { asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(N)); }
// Named barrier 1 over the consumer warpgroups only (the producer may have exited).
template <int THREADS>
__device__ __forceinline__ void consumerSync() { asm volatile("bar.sync 1, %0;\n" ::"n"(THREADS) : "memory"); }

// Shared-memory matrix descriptor of a K-major tile of rows of 64 bf16 (128 bytes), 128-byte swizzle: 8-row groups
// 1024 bytes apart (stride byte offset), leading byte offset unused by swizzled K-major layouts (1 by convention).
// Stepping k by 16 inside the 128-byte row moves the start address by 32 bytes; the swizzle is applied by address.
__device__ __forceinline__ uint64_t smemDesc(const void* p) {
  return (uint64_t(smemAddr(p) & 0x3FFFF) >> 4) | (uint64_t(1) << 16) | (uint64_t(1024 >> 4) << 32) | (uint64_t(1) << 62);
}

template <int BN, int CONSUMERS, int STAGES>
struct Shape {
  static constexpr int BM = 64 * CONSUMERS, kThreads = (CONSUMERS + 1) * 128;
  static constexpr int aElems = BM * 64, bElems = BN * 64, stageBytes = (aElems + bElems) * 2;
  static constexpr int stagePitch = BN + 8;  // f32 epilogue staging row (even: float2 stores)
  static constexpr int ringBytes = STAGES * stageBytes;
  static_assert(BM * stagePitch * 4 <= ringBytes, "epilogue staging must fit in the ring");
  // + 1024 to align the ring by hand (128-byte swizzle atoms are 1024-byte aligned), + the barriers.
  static constexpr int smemBytes = 1024 + ringBytes + 2 * STAGES * 8;
};

template <int BN, int CONSUMERS, int STAGES>
__global__ void __launch_bounds__((CONSUMERS + 1) * 128, 1)
    gemmWgmmaKernel(const __grid_constant__ CUtensorMap tmX, const __grid_constant__ CUtensorMap tmW, GemmArgs a) {
  pdlStart();  // cuda/pdl.cuh
  using S = Shape<BN, CONSUMERS, STAGES>;
  extern __shared__ uint8_t smemRaw[];
  uint8_t* ring = smemRaw + ((1024 - (smemAddr(smemRaw) & 1023)) & 1023);
  uint16_t* sA = reinterpret_cast<uint16_t*>(ring);  // STAGES x BM x 64
  uint16_t* sB = sA + STAGES * S::aElems;             // STAGES x BN x 64
  uint64_t* full = reinterpret_cast<uint64_t*>(ring + S::ringBytes);
  uint64_t* empty = full + STAGES;

  const int m0 = blockIdx.x * S::BM, n0 = blockIdx.y * BN, split = blockIdx.z;
  int kBegin, kEnd;
  partitionRange(a, split, kBegin, kEnd);
  const int nk = kEnd > kBegin ? (kEnd - kBegin + kPartK - 1) / kPartK : 0;
  const int wg = threadIdx.x / 128, t = threadIdx.x % 128;

  if (threadIdx.x == 0) {
    for (int s = 0; s < STAGES; s++) mbarInit(&full[s], 1), mbarInit(&empty[s], CONSUMERS);
    asm volatile("fence.mbarrier_init.release.cluster;\nfence.proxy.async.shared::cta;\n" ::: "memory");
  }
  __syncthreads();

  if (wg == CONSUMERS) {  // producer: one thread issues every load
    if constexpr (CONSUMERS > 1) setMaxRegsDec<24>();
    if (t == 0) {
      for (int kt = 0; kt < nk; kt++) {
        const int s = kt % STAGES;
        mbarWait(&empty[s], (kt / STAGES) & 1);  // round r waits for the r-th release (round 0: the pre-arrivals)
        mbarExpectTx(&full[s], S::stageBytes);
        tmaLoad(sA + s * S::aElems, &tmX, &full[s], kBegin + kt * kPartK, m0);
        tmaLoad(sB + s * S::bElems, &tmW, &full[s], kBegin + kt * kPartK, n0);
      }
    }
    return;
  }

  if constexpr (CONSUMERS > 1) setMaxRegsInc<240>();
  if (t == 0)
    for (int s = 0; s < STAGES; s++) mbarArrive(&empty[s]);  // every slot starts free
  float d[BN / 8][4];
#pragma unroll
  for (int j = 0; j < BN / 8; j++) d[j][0] = d[j][1] = d[j][2] = d[j][3] = 0.f;

  // One stage's wgmmas stay in flight while the next stage's are issued (wgmmas on one accumulator run in issue
  // order, so the chain is still ascending k); a stage is released once the group that read it has completed.
  for (int kt = 0; kt < nk; kt++) {
    const int s = kt % STAGES;
    mbarWait(&full[s], (kt / STAGES) & 1);
    const uint16_t* tA = sA + s * S::aElems + wg * 64 * 64;
    const uint16_t* tB = sB + s * S::bElems;
    wgFence();
#pragma unroll
    for (int kk = 0; kk < 4; kk++) wg::mma<BN>(d, smemDesc(tA + kk * 16), smemDesc(tB + kk * 16));  // ascending k
    wgCommit();
    wgWaitOne();  // the previous stage's group is done
    if (kt > 0 && t == 0) mbarArrive(&empty[(kt - 1) % STAGES]);
  }
  wgWaitAll();
  if (nk > 0 && t == 0) mbarArrive(&empty[(nk - 1) % STAGES]);

  // Epilogue: stage the f32 tile in the (now idle) ring, then store it row by row through the shared storePair
  // (bias, dtype, split-K partials). Both consumer warpgroups must be done reading the ring first.
  consumerSync<CONSUMERS * 128>();
  float* stage = reinterpret_cast<float*>(ring);
  const int warp = t / 32, lane = t % 32;
  const int r = wg * 64 + warp * 16 + lane / 4;
#pragma unroll
  for (int j = 0; j < BN / 8; j++) {
    const int c = j * 8 + (lane % 4) * 2;
    *reinterpret_cast<float2*>(stage + r * S::stagePitch + c) = make_float2(d[j][0], d[j][1]);
    *reinterpret_cast<float2*>(stage + (r + 8) * S::stagePitch + c) = make_float2(d[j][2], d[j][3]);
  }
  consumerSync<CONSUMERS * 128>();
  for (int i = threadIdx.x; i < S::BM * (BN / 2); i += CONSUMERS * 128) {
    const int row = i / (BN / 2), col = (i % (BN / 2)) * 2;
    const float2 v = *reinterpret_cast<const float2*>(stage + row * S::stagePitch + col);
    storePair(a, split, m0 + row, n0 + col, v.x, v.y);
  }
}

// ---- host ----

PFN_cuTensorMapEncodeTiled_v12000 encodeFn() {
  static const PFN_cuTensorMapEncodeTiled_v12000 fn = [] {
    void* p = nullptr;
    cudaDriverEntryPointQueryResult q{};
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000, cudaEnableDefault, &q) != cudaSuccess ||
        q != cudaDriverEntryPointSuccess) {
      (void)cudaGetLastError();
      p = nullptr;
    }
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(p);
  }();
  return fn;
}

// TMA descriptor of a row-major (rows, K) bf16 matrix read in boxes of (boxRows, 64). Cached by its arguments: a
// model's weights and scratch buffers keep their addresses, and encoding costs host time on every call otherwise.
bool tensorMap(CUtensorMap& out, const void* ptr, int64_t rows, int64_t K, int boxRows) {
  struct Key {
    const void* p;
    int64_t rows, K;
    int box;
    bool operator==(const Key& o) const { return p == o.p && rows == o.rows && K == o.K && box == o.box; }
  };
  struct Hash {
    size_t operator()(const Key& k) const {
      return std::hash<const void*>()(k.p) ^ (size_t(k.rows) * 0x9E3779B97F4A7C15ull) ^ (size_t(k.K) << 20) ^ size_t(k.box);
    }
  };
  static std::mutex mu;
  static std::unordered_map<Key, CUtensorMap, Hash> cache;
  const Key key{ptr, rows, K, boxRows};
  std::lock_guard<std::mutex> lock(mu);
  if (auto it = cache.find(key); it != cache.end()) return out = it->second, true;
  auto encode = encodeFn();
  if (!encode) return false;
  cuuint64_t dims[2] = {cuuint64_t(K), cuuint64_t(rows)};
  cuuint64_t strides[1] = {cuuint64_t(K) * 2};
  cuuint32_t box[2] = {64, cuuint32_t(boxRows)};
  cuuint32_t elementStrides[2] = {1, 1};
  CUtensorMap m;
  std::memset(&m, 0, sizeof m);
  if (encode(&m, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, const_cast<void*>(ptr), dims, strides, box, elementStrides,
             CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
             CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) != CUDA_SUCCESS)
    return false;
  if (cache.size() >= 4096) cache.clear();  // addresses churn only in tests; keep the map bounded
  cache.emplace(key, m);
  out = m;
  return true;
}

template <int BN, int CONSUMERS, int STAGES>
bool launch(const GemmArgs& a) {
  using S = Shape<BN, CONSUMERS, STAGES>;
  auto kernel = gemmWgmmaKernel<BN, CONSUMERS, STAGES>;
  static const bool configured =
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, S::smemBytes) == cudaSuccess;
  if (!configured) return (void)cudaGetLastError(), false;
  CUtensorMap tmX, tmW;
  if (!tensorMap(tmX, a.x, a.M, a.K, S::BM) || !tensorMap(tmW, a.w, a.N, a.K, BN)) return false;
  dim3 grid(unsigned(ceilDiv(a.M, S::BM)), unsigned(ceilDiv(a.N, BN)), unsigned(a.splitK));
  launchKernel("gemmWgmmaKernel", kernel, grid, S::kThreads, S::smemBytes, tmX, tmW, a);
  return true;
}

}  // namespace

bool wgmmaAvailable() {
  static const bool ok = [] {
    int dev = 0, major = 0, minor = 0;
    if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev) != cudaSuccess) {
      (void)cudaGetLastError();
      return false;
    }
    if (major != 9 || minor != 0 || !encodeFn()) return false;
    cudaFuncAttributes attr;  // is there an image of this file's kernels for the device?
    if (cudaFuncGetAttributes(&attr, gemmWgmmaKernel<256, 2, 4>) != cudaSuccess) return (void)cudaGetLastError(), false;
    return true;
  }();
  return ok;
}

bool gemmWgmma(const GemmArgs& a, int config) {
  if (!wgmmaAvailable()) return false;
  switch (config) {
    case 0: return launch<256, 2, 4>(a);  // 4 x 48 KB
    case 1: return launch<128, 2, 6>(a);  // 6 x 32 KB
    default: return launch<128, 1, 8>(a);  // 8 x 24 KB
  }
}

}  // namespace dl::gpu
