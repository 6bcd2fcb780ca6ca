// Times the dl::gpu launchers with CUDA events (median of N, L2 flushed before each run) and prints one JSON array.
// Built by scripts/device/build-bench.sh against the addon's CUDA objects; run by scripts/bench/cuda.ts.
//   bench_kernels [--quick]
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "check.cuh"
#include "gpu_runtime.h"
#include "kernels.h"

using namespace dl;

namespace {
int iters = 15;
void* flushBuf = nullptr;
const size_t kFlushBytes = size_t(256) << 20;  // > L2 (50 MB on H100): every run reads its operands from HBM

View dev(DType t, std::vector<int64_t> shape) {
  View v;
  v.dtype = t, v.device = Device::cuda, v.ndim = int(shape.size());
  for (int i = 0; i < v.ndim; i++) v.shape[i] = shape[i];
  CUDA_CHECK(cudaMalloc(&v.data, size_t(v.numel()) * dtypeSize(t)));
  return v;
}
void release(View& v) { cudaFree(v.data), v.data = nullptr; }

__global__ void fillRandom(uint16_t* p, int64_t n, uint32_t seed, float scale) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    uint32_t h = uint32_t(i) * 2654435761u ^ seed;
    h ^= h >> 16, h *= 0x85ebca6bu, h ^= h >> 13;
    float f = ((h & 0xffffff) / 16777216.0f * 2.f - 1.f) * scale;
    if (f == 0.f) f = scale * 0.5f;
    uint32_t u;
    memcpy(&u, &f, 4);
    p[i] = uint16_t(u >> 16);
  }
}
void randomBf16(const View& v, uint32_t seed, float scale = 1.f) {
  fillRandom<<<1024, 256>>>(static_cast<uint16_t*>(v.data), v.numel(), seed, scale);
  CUDA_CHECK_LAUNCH("fillRandom");
}
__global__ void fillI32(int32_t* p, int64_t n, int mode, int a) {  // mode 0: p[i] = i * a; 1: p[i] = a
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    p[i] = mode == 0 ? int32_t(i * a) : a;
}

// Median milliseconds of fn over `iters` runs, each after an L2 flush, timed on the backend stream.
double timeMs(const std::function<void()>& fn) {
  cudaStream_t s = gpu::stream();
  cudaEvent_t a, b;
  CUDA_CHECK(cudaEventCreate(&a)), CUDA_CHECK(cudaEventCreate(&b));
  std::vector<double> ms;
  for (int i = 0; i < iters + 2; i++) {
    CUDA_CHECK(cudaMemsetAsync(flushBuf, i & 0xff, kFlushBytes, s));
    CUDA_CHECK(cudaEventRecord(a, s));
    fn();
    CUDA_CHECK(cudaEventRecord(b, s));
    CUDA_CHECK(cudaEventSynchronize(b));
    float t = 0;
    CUDA_CHECK(cudaEventElapsedTime(&t, a, b));
    if (i >= 2) ms.push_back(t);
  }
  cudaEventDestroy(a), cudaEventDestroy(b);
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

bool first = true;
void emit(const char* op, const std::string& shape, const std::string& variant, double ms, double flops, double bytes) {
  printf("%s\n  {\"op\":\"%s\",\"shape\":\"%s\",\"variant\":\"%s\",\"ms\":%.5f,\"flops\":%.6g,\"bytes\":%.6g}",
         first ? "" : ",", op, shape.c_str(), variant.c_str(), ms, flops, bytes);
  first = false;
  fflush(stdout);
}
}  // namespace

int main(int argc, char** argv) {
  bool quick = false;
  std::string only;  // --only gemm|decode|qwen: the tuning sweeps of scripts/device/check.sh
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--quick")) quick = true;
    if (!strcmp(argv[i], "--only") && i + 1 < argc) only = argv[++i];
  }
  if (quick) iters = 5;
  try {
    CUDA_CHECK(cudaMalloc(&flushBuf, kFlushBytes));
    const bool wgmma = gpu::wgmmaGemm();
    fprintf(stderr, "bench_kernels: wgmma GEMM %s\n", wgmma ? "available (timed as variants wgmma6-8)" : "unavailable on this GPU/build");
    printf("[");
    // GEMM: Llama-3.1-8B projections, bf16 x bf16 -> bf16; splitK swept, 1 = the fixed schedule.
    const int64_t KN[4][2] = {{4096, 4096}, {4096, 14336}, {14336, 4096}, {4096, 128256}};
    const int64_t Ms[5] = {1, 8, 32, 128, 2048};
    for (auto& kn : KN) {
      if (!only.empty() && only != "gemm") break;
      int64_t K = kn[0], N = kn[1];
      View w = dev(DType::bf16, {N, K});
      randomBf16(w, 7, 0.05f);
      for (int64_t M : Ms) {
        View x = dev(DType::bf16, {M, K}), y = dev(DType::bf16, {M, N});
        randomBf16(x, 11);
        std::string shape = "M=" + std::to_string(M) + " K=" + std::to_string(K) + " N=" + std::to_string(N);
        double flops = 2.0 * M * N * K, bytes = 2.0 * (N * K + M * K + M * N);
        std::vector<int> splits = M >= 2048 ? std::vector<int>{1, 2} : std::vector<int>{1, 2, 3, 4, 6, 8};
        if (quick) splits = {1, 4};
        for (int sk : splits) {
          double ms = timeMs([&] { gpu::gemm(x, w, View{}, y, sk); });
          emit("gemm", shape, "splitK=" + std::to_string(sk), ms, flops, bytes);
        }
        // The sm_90a wgmma kernels (the addon's default above 64 rows), each config forced, when this GPU runs them.
        if (wgmma && !getenv("DL_GEMM_TILE"))
          for (int tile = 6; tile <= 8; tile++)
            for (int sk : splits) {
              int before = gpu::setGemmTile(tile);
              double ms = timeMs([&] { gpu::gemm(x, w, View{}, y, sk); });
              gpu::setGemmTile(before);
              emit("gemm", shape, "wgmma" + std::to_string(tile) + " splitK=" + std::to_string(sk), ms, flops, bytes);
            }
        release(x), release(y);
      }
      release(w);
    }
    // --only qwen: the GEMMs of a Qwen2.5-1.5B decode / verify step as the model issues them (q, k and v as three
    // GEMMs when a step has several rows), at the step sizes the engine runs, every splitK and kernel config: the
    // table to choose the GPU's fast schedule from (ts/engine/kernelSchedule.ts).
    if (only == "qwen") {
      struct Proj { const char* name; int64_t K, N; };
      const Proj projs[] = {{"q", 1536, 1536}, {"k|v", 1536, 256}, {"o", 1536, 1536}, {"gateUp", 1536, 17920},
                            {"down", 8960, 1536}, {"lmHead", 1536, 151936}};
      for (const Proj& pj : projs) {
        View w = dev(DType::bf16, {pj.N, pj.K});
        randomBf16(w, 7, 0.05f);
        for (int64_t M : {1, 16, 64, 256}) {
          View x = dev(DType::bf16, {M, pj.K}), y = dev(DType::bf16, {M, pj.N});
          randomBf16(x, 11);
          std::string shape = std::string(pj.name) + " M=" + std::to_string(M) + " K=" + std::to_string(pj.K) + " N=" + std::to_string(pj.N);
          double flops = 2.0 * M * pj.N * pj.K, bytes = 2.0 * (pj.N * pj.K + M * pj.K + M * pj.N);
          for (int tile = -1; tile <= (wgmma ? 8 : 5); tile++)
            for (int sk : {1, 2, 4, 8}) {
              int before = gpu::setGemmTile(tile);
              double ms = timeMs([&] { gpu::gemm(x, w, View{}, y, sk); });
              gpu::setGemmTile(before);
              emit("gemm", shape, (tile < 0 ? std::string("auto") : "tile" + std::to_string(tile)) + " splitK=" + std::to_string(sk), ms, flops, bytes);
            }
          release(x), release(y);
        }
        release(w);
      }
    }
    // Decode attention: batch 64, context 4096, 8 KV heads, 32 query heads, head dim 128, page size 16, bf16.
    if (only.empty() || only == "decode") {  // (also skipped by --only qwen)
      const int64_t B = 64, ctx = 4096, Hk = 8, Hq = 32, D = 128, ps = 16, pagesPer = ctx / ps, P = B * pagesPer;
      PagedKV kv;
      kv.pageSize = int(ps);
      kv.kCache = dev(DType::bf16, {P, ps, Hk, D}), kv.vCache = dev(DType::bf16, {P, ps, Hk, D});
      randomBf16(kv.kCache, 3), randomBf16(kv.vCache, 5);
      kv.indptr = dev(DType::i32, {B + 1}), kv.indices = dev(DType::i32, {P}), kv.lastPageLen = dev(DType::i32, {B});
      fillI32<<<64, 256>>>(kv.indptr.as<int32_t>(), B + 1, 0, int(pagesPer));
      fillI32<<<256, 256>>>(kv.indices.as<int32_t>(), P, 0, 1);
      fillI32<<<64, 256>>>(kv.lastPageLen.as<int32_t>(), B, 1, int(ps));
      View q = dev(DType::bf16, {B, Hq, D}), out = dev(DType::bf16, {B, Hq, D});
      randomBf16(q, 9);
      CUDA_CHECK(cudaDeviceSynchronize());
      double bytes = 2.0 * B * ctx * Hk * D * 2;
      std::string shape = "B=64 ctx=4096 Hq=32 Hk=8 D=128 page=16";
      // 3 and 6 too: 64 x 8 CTA columns x splits fill 132 SMs x 3 CTAs in whole waves at 3 (1536 / 396 = 3.9) but not
      // at 2 or 4 (2.6, 5.2 waves): the tail wave may decide between them.
      for (int s : quick ? std::vector<int>{1, 3, 4} : std::vector<int>{1, 2, 3, 4, 6, 8}) {
        double ms = timeMs([&] { gpu::attentionDecode(q, kv, out, 0.08838834764f, s); });
        emit("attentionDecode", shape, "kvSplits=" + std::to_string(s), ms, 4.0 * B * Hq * ctx * D, bytes);
      }
      // Device-to-device copy of the same bytes: the bandwidth ceiling (bytes read + written).
      double ms = timeMs([&] { CUDA_CHECK(cudaMemcpyAsync(kv.vCache.data, kv.kCache.data, size_t(bytes / 2), cudaMemcpyDeviceToDevice, gpu::stream())); });
      emit("copy", "d2d " + std::to_string(int64_t(bytes / 2)) + " B", "cudaMemcpy", ms, 0, bytes);
      // Prefill: one 2048-token prompt, causal, same heads.
      const int64_t T = 2048, pp = T / ps;
      View pIndptr = dev(DType::i32, {2}), pLast = dev(DType::i32, {1}), qIndptr = dev(DType::i32, {2});
      fillI32<<<1, 32>>>(pIndptr.as<int32_t>(), 2, 0, int(pp));
      fillI32<<<1, 32>>>(qIndptr.as<int32_t>(), 2, 0, int(T));
      fillI32<<<1, 32>>>(pLast.as<int32_t>(), 1, 1, int(ps));
      PagedKV pkv = kv;
      pkv.indptr = pIndptr, pkv.lastPageLen = pLast;
      View pq = dev(DType::bf16, {T, Hq, D}), pout = dev(DType::bf16, {T, Hq, D});
      randomBf16(pq, 13);
      double pms = timeMs([&] { gpu::attentionPrefill(pq, qIndptr, pkv, pout, 0.08838834764f, T); });
      const char* mmaEnv = getenv("DL_PREFILL_MMA");  // the tensor-core kernel (the default) unless set to 0
      emit("attentionPrefill", "T=2048 Hq=32 Hk=8 D=128 causal", mmaEnv && !strcmp(mmaEnv, "0") ? "fixed" : "mma", pms, 2.0 * T * T * Hq * D, 2.0 * T * (Hq + 2 * Hk) * D * 2);
    }
    // Sampling: batch 64 over the Llama-3 vocabulary, top-k 50 + top-p 0.9, and greedy.
    if (only.empty()) {
      const int64_t B = 64, V = 128256;
      SampleArgs s;
      s.logits = dev(DType::f32, {B, V});
      View half = s.logits;
      half.dtype = DType::bf16, half.shape[1] = 2 * V;
      randomBf16(half, 17, 4.f);  // random bit patterns of finite floats
      s.temperature = dev(DType::f32, {B}), s.topK = dev(DType::i32, {B}), s.topP = dev(DType::f32, {B});
      s.seeds = dev(DType::i32, {B, 2}), s.positions = dev(DType::i32, {B}), s.tokens = dev(DType::i32, {B});
      s.logprobs = dev(DType::f32, {B});
      float one = 1.f, p9 = 0.9f;
      std::vector<float> t(B, one), p(B, p9);
      CUDA_CHECK(cudaMemcpy(s.temperature.data, t.data(), B * 4, cudaMemcpyHostToDevice));
      CUDA_CHECK(cudaMemcpy(s.topP.data, p.data(), B * 4, cudaMemcpyHostToDevice));
      fillI32<<<1, 64>>>(s.topK.as<int32_t>(), B, 1, 50);
      fillI32<<<1, 128>>>(s.seeds.as<int32_t>(), 2 * B, 0, 3);
      fillI32<<<1, 64>>>(s.positions.as<int32_t>(), B, 0, 1);
      double ms = timeMs([&] { gpu::sample(s); });
      emit("sample", "B=64 V=128256 topK=50 topP=0.9", "gumbel", ms, 0, 4.0 * B * V);
      std::fill(t.begin(), t.end(), 0.f);
      CUDA_CHECK(cudaMemcpy(s.temperature.data, t.data(), B * 4, cudaMemcpyHostToDevice));
      ms = timeMs([&] { gpu::sample(s); });
      emit("sample", "B=64 V=128256", "greedy", ms, 0, 4.0 * B * V);
    }
    gpu::synchronize();
    printf("\n]\n");
  } catch (const std::exception& e) {
    fprintf(stderr, "bench_kernels: %s\n", e.what());
    printf("\n]\n");
    return 1;
  }
  return 0;
}
