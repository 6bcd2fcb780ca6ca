// Single-thread CPU GEMM on a SmolLM-135M-shaped stack of 30 layers (bf16 W, 212 MB, far larger than the L3) so
// that W streams from DRAM as in a real decode step, then the 49152 x 576 head; per M, the best of 5 passes in
// thread CPU time (stable on a shared machine). Build and run from the repository root:
//   g++ -std=c++17 -O3 -march=x86-64-v3 -fno-math-errno -pthread -Icpp -Icpp/cpu scripts/bench/gemmStream.cc cpp/cpu/cpu_gemm.cc
//       cpp/cpu/cpu_gemm_avx512.cc cpp/cpu/cpu_gemm_avx2.cc cpp/cpu/cpu_gemm_bf16.cc cpp/cpu/threadpool.cc cpp/knobs.cc cpp/cpu/cpu_features.cc cpp/common.cc -o /tmp/gemmStream
//   /tmp/gemmStream 1 1 4 16 64        # threads, then the row counts M
//   DELIBERATE_SIMD=avx2 /tmp/gemmStream 1 16   # the AVX2 path
//   PACKED=1 /tmp/gemmStream 1 1                 # W packed as a model's bf16 weights are by default (DELIBERATE_PACK_WEIGHTS=0: row-major)
//   (every weight in one 2 MiB-aligned allocation advised for transparent huge pages, as cpp/storage.cc does)
//   SK=4 /tmp/gemmStream 1 1                     # every GEMM on splitK 4 (the CPU fast schedule's 1-row steps)
// It first prints the plain read bandwidth (a sum over as many bytes as the layer stack), and each GEMV's share of it.
#include <immintrin.h>
#include <time.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "common.h"
#include "threadpool.h"
#include "cpu_gemm.h"
#include <sys/mman.h>

namespace dl::cpu {
void gemm(const View& x, const View& w, const View& bias, const View& y, int splitK);
}
using namespace dl;

static double cpuNow() {
  timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return double(t.tv_sec) + double(t.tv_nsec) * 1e-9;
}
static View mk(void* p, DType t, int64_t a, int64_t b) {
  View v;
  v.data = p, v.dtype = t, v.ndim = 2, v.shape[0] = a, v.shape[1] = b;
  return v;
}

int main(int argc, char** argv) {
  setNumThreads(argc > 1 ? atoi(argv[1]) : 1);
  const int L = 30, C = 576, I = 1536, V = 49152;
  struct Shape { int N, K; };
  const std::vector<Shape> shapes = {{576, 576}, {192, 576}, {192, 576}, {576, 576}, {3072, 576}, {576, 1536}};  // q k v o gate|up down
  auto filled = [](size_t n) {
    std::vector<uint16_t> w(n);
    for (size_t i = 0; i < n; i++) w[i] = f32ToBf16(float((i * 2654435761u) % 1000) * 1e-4f - 0.05f);
    return w;
  };
  std::vector<std::vector<uint16_t>> ws;
  for (int l = 0; l < L; l++)
    for (const Shape& s : shapes) ws.push_back(filled(size_t(s.N) * s.K));
  const std::vector<uint16_t> head = filled(size_t(V) * C);
  // PACKED=1: every weight packed (cpu_gemm.h) into one arena on huge pages, as a loaded model's are.
  const bool packed = getenv("PACKED") && atoi(getenv("PACKED")) == 1;
  std::vector<View> wv;
  size_t arenaElems = 0;
  for (int l = 0; l < L; l++)
    for (const Shape& s : shapes) arenaElems += size_t(cpu::gemm_detail::packedElems(s.N, s.K));
  arenaElems += size_t(cpu::gemm_detail::packedElems(V, C));
  const size_t arenaBytes = (arenaElems * 2 + (size_t(2) << 20) - 1) / (size_t(2) << 20) * (size_t(2) << 20);
  uint16_t* arena = packed ? static_cast<uint16_t*>(std::aligned_alloc(size_t(2) << 20, arenaBytes)) : nullptr;
  if (packed) madvise(arena, arenaBytes, MADV_HUGEPAGE);
  size_t at = 0;
  auto viewOf = [&](const std::vector<uint16_t>& w, int N, int K) {
    View v = mk(const_cast<uint16_t*>(w.data()), DType::bf16, N, K);
    if (!packed) return v;
    cpu::gemm_detail::packBf16(w.data(), N, K, arena + at);
    v.data = arena + at, v.packRows = cpu::gemm_detail::kPackRows;
    at += size_t(cpu::gemm_detail::packedElems(N, K));
    return v;
  };
  {
    size_t wi = 0;
    for (int l = 0; l < L; l++)
      for (const Shape& s : shapes) wv.push_back(viewOf(ws[wi++], s.N, s.K));
  }
  const View headView = viewOf(head, V, C);
  std::vector<int> rowsList;
  for (int i = 2; i < argc; i++) rowsList.push_back(atoi(argv[i]));
  if (rowsList.empty()) rowsList = {1, 16, 64};
  double layerMacs = 0;
  for (const Shape& s : shapes) layerMacs += double(s.N) * s.K;
  // The machine's plain read bandwidth in the same run and the same way (thread CPU time, best of 5): a STREAM-style
  // sum over as many bytes as the layer stack, 4 independent AVX2 accumulators. The GEMV's GB/s below is also given
  // as a share of it.
  double readGBs = 0;
  {
    const size_t n = size_t(L * layerMacs);  // bf16 elements of the stack
    std::vector<uint16_t> buf(n, 0x3f80);
    double bestRead = 1e9;
    float sink = 0;
    for (int rep = 0; rep < 5; rep++) {
      const double t0 = cpuNow();
      __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
      const float* f = reinterpret_cast<const float*>(buf.data());
      const size_t nf = n / 2;
      for (size_t i = 0; i + 32 <= nf; i += 32) {
        a0 = _mm256_add_ps(a0, _mm256_loadu_ps(f + i));
        a1 = _mm256_add_ps(a1, _mm256_loadu_ps(f + i + 8));
        a2 = _mm256_add_ps(a2, _mm256_loadu_ps(f + i + 16));
        a3 = _mm256_add_ps(a3, _mm256_loadu_ps(f + i + 24));
      }
      alignas(32) float lanes[8];
      _mm256_store_ps(lanes, _mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
      sink += lanes[0];
      bestRead = std::min(bestRead, cpuNow() - t0);
    }
    readGBs = double(n) * 2 / bestRead / 1e9;
    printf("read %.1f GB/s (plain sum over %.0f MB, 4 KiB pages; %g)\n", readGBs, double(n) * 2 / 1e6, double(sink) * 0);
  }
  for (int M : rowsList) {
    std::vector<float> x(size_t(M) * I, 0.01f), y(size_t(M) * V);
    double best = 1e9, bestHead = 1e9;
    for (int rep = 0; rep < 5; rep++) {
      const double t0 = cpuNow();
      size_t wi = 0;
      for (int l = 0; l < L; l++)
        for (const Shape& s : shapes)
          cpu::gemm(mk(x.data(), DType::f32, M, s.K), wv[wi++], View{}, mk(y.data(), DType::f32, M, s.N), getenv("SK") ? atoi(getenv("SK")) : 1);
      const double t1 = cpuNow();
      cpu::gemm(mk(x.data(), DType::f32, M, C), headView, View{}, mk(y.data(), DType::f32, M, V), getenv("SK") ? atoi(getenv("SK")) : 1);
      const double t2 = cpuNow();
      best = std::min(best, t1 - t0), bestHead = std::min(bestHead, t2 - t1);
    }
    const double fl = 2.0 * M * L * layerMacs, by = L * layerMacs * 2, flh = 2.0 * M * V * C, byh = double(V) * C * 2;
    printf("M=%3d layers %.2f ms %.1f GFLOP/s %.1f GB/s (%.0f%% of read) | head %.2f ms %.1f GFLOP/s %.1f GB/s\n", M, best * 1e3, fl / best / 1e9,
           by / best / 1e9, 100 * by / best / 1e9 / readGBs, bestHead * 1e3, flh / bestHead / 1e9, byh / bestHead / 1e9);
  }
}
