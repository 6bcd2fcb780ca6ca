// CPU decode attention with its KV cold, as in a decode step (the weight stream evicts it between layers), against
// warm: a SmolLM-135M shape (30 layers, 9 query heads, 3 KV heads, D 64, f32 KV, one sequence of `ctx` tokens), one
// attentionDecode per layer, each after streaming 10 MB of other memory (cold), 2 MB (L2 cold, L3 warm), or not
// (warm); best of 7 passes. Also a plain read of the same KV lines (the floor) and two prefetch variants. Build and
// run from the repository root:
//   g++ -std=c++17 -O3 -march=x86-64-v3 -fno-math-errno -pthread -Icpp -Icpp/cpu scripts/bench/attnCold.cc
//       cpp/cpu/cpu_attention.cc cpp/cpu/cpu_attention_decode.cc cpp/cpu/threadpool.cc cpp/knobs.cc cpp/cpu/cpu_features.cc
//       cpp/common.cc -o /tmp/attnCold
//   /tmp/attnCold 200          # ctx tokens; T=2 /tmp/attnCold 200 for two threads; B=16 for 16 sequences
#include <time.h>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>
#include <immintrin.h>
#include "common.h"
#include "kernels.h"
#include "threadpool.h"
namespace dl::cpu { void attentionDecode(const View& q, const PagedKV& kv, const View& out, float scale, int kvSplits); }
using namespace dl;
static double now() { timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec * 1e-9; }
static View mk(void* p, DType t, std::initializer_list<int64_t> s) { View v; v.data = p; v.dtype = t; v.ndim = int(s.size()); int i = 0; for (auto x : s) v.shape[i++] = x; return v; }
int main(int argc, char** argv) {
  const int L = 30, Hq = 9, Hk = 3, D = 64, P = 16;
  const int ctx = argc > 1 ? atoi(argv[1]) : 200;
  const int B = getenv("B") ? atoi(getenv("B")) : 1;  // sequences, each of ctx tokens
  const int pagesPerSeq = (ctx + P - 1) / P, numPages = argc > 2 ? atoi(argv[2]) : B * pagesPerSeq + 8;
  dl::setNumThreads(getenv("T") ? atoi(getenv("T")) : 1);
  std::vector<float*> kc(L), vc(L);
  size_t per = size_t(numPages) * P * Hk * D;
  for (int l = 0; l < L; l++) {
    kc[l] = (float*)aligned_alloc(64, per * 4 + 64); vc[l] = (float*)aligned_alloc(64, per * 4 + 64);
    for (size_t i = 0; i < per; i++) kc[l][i] = float(rand()) / RAND_MAX - 0.5f, vc[l][i] = float(rand()) / RAND_MAX - 0.5f;
  }
  std::vector<int32_t> indptr(B + 1), indices(B * pagesPerSeq), last(B, ctx - (pagesPerSeq - 1) * P);
  for (int b = 0; b <= B; b++) indptr[b] = b * pagesPerSeq;
  for (int i = 0; i < B * pagesPerSeq; i++) indices[i] = i;
  std::vector<float> q(B * Hq * D), out(B * Hq * D);
  for (auto& x : q) x = float(rand()) / RAND_MAX;
  size_t flushN = size_t(300) << 20;
  char* flush = (char*)aligned_alloc(4096, flushN); memset(flush, 1, flushN);
  volatile long sink = 0;
  for (int mode = 0; mode < 6; mode++) {
    double best = 1e9;
    for (int rep = 0; rep < 7; rep++) {
      double tot = 0;
      for (int l = 0; l < L; l++) {
        if (mode >= 1) { size_t chunk = mode == 2 ? (size_t(2) << 20) : flushN / L; long s = 0; for (size_t i = 0; i < chunk; i += 64) s += flush[(size_t(l) * (flushN / L)) + i]; sink += s; }
        if (mode == 3) { long s = 0; for (size_t i = 0; i < per; i += 16) s += long(kc[l][i]) + long(vc[l][i]); sink += s; }
        PagedKV kv;
        kv.kCache = mk(kc[l], DType::f32, {numPages, P, Hk, D}); kv.vCache = mk(vc[l], DType::f32, {numPages, P, Hk, D});
        kv.indptr = mk(indptr.data(), DType::i32, {B + 1}); kv.indices = mk(indices.data(), DType::i32, {B * pagesPerSeq}); kv.lastPageLen = mk(last.data(), DType::i32, {B});
        kv.pageSize = P;
        double t0 = now();
        if (mode == 4 || mode == 5) {
          const int hint = mode;  // 4: prefetcht0, 5: prefetcht2
          for (int p = 0; p < B * pagesPerSeq; p++) for (size_t i = 0; i < size_t(P * Hk * D); i += 16) {
            if (hint == 4) { _mm_prefetch((const char*)(kc[l] + size_t(p) * P * Hk * D + i), _MM_HINT_T0); _mm_prefetch((const char*)(vc[l] + size_t(p) * P * Hk * D + i), _MM_HINT_T0); }
            else { _mm_prefetch((const char*)(kc[l] + size_t(p) * P * Hk * D + i), _MM_HINT_T2); _mm_prefetch((const char*)(vc[l] + size_t(p) * P * Hk * D + i), _MM_HINT_T2); }
          }
        }
        dl::cpu::attentionDecode(mk(q.data(), DType::f32, {B, Hq, D}), kv, mk(out.data(), DType::f32, {B, Hq, D}), 0.125f, 1);
        tot += now() - t0;
      }
      best = std::min(best, tot);
    }
    if (mode == 1) {  // a plain read of the same KV lines after the same flush
      double b2 = 1e9;
      for (int rep = 0; rep < 7; rep++) { double tot = 0; for (int l = 0; l < L; l++) { long s = 0; for (size_t i = 0; i < flushN / L; i += 64) s += flush[(size_t(l) * (flushN / L)) + i]; sink += s;
        double t0 = now(); __m256 acc = _mm256_setzero_ps(); for (int p = 0; p < B * pagesPerSeq; p++) for (size_t i = 0; i < size_t(P * Hk * D); i += 16) { acc = _mm256_add_ps(acc, _mm256_loadu_ps(kc[l] + size_t(p) * P * Hk * D + i)); acc = _mm256_add_ps(acc, _mm256_loadu_ps(vc[l] + size_t(p) * P * Hk * D + i)); } tot += now() - t0; float f[8]; _mm256_storeu_ps(f, acc); sink += long(f[0]); }
        b2 = std::min(b2, tot); }
      printf("plain read of the KV lines, cold: %.1f us per layer\n", b2 / L * 1e6);
    }
    printf("%s: %.1f us per layer (ctx %d), %.2f GB/s of KV\n", mode == 0 ? "warm" : mode == 1 ? "cold (10 MB streamed)" : mode == 2 ? "2 MB streamed (L2 cold, L3 warm)" : mode == 3 ? "10 MB streamed, then KV touched" : mode == 4 ? "cold, prefetcht0 all KV first (timed)" : "cold, prefetcht2 all KV first (timed)", best / L * 1e6, ctx, (2.0 * B * ctx * Hk * D * 4) / (best / L) / 1e9);
  }
}
