// The CPU GEMM's layouts under guard pages: every operand (x, y, W, its per-row scales, grouped scales and zero
// points) lies flush against a PROT_NONE page, after its end in one pass and before its start in the other, so a
// real load or store outside a buffer faults (a prefetch of such an address does not: prefetches past a weight's end
// are allowed). Over edge shapes (N not a multiple of the 6-row packed panel or the 8-row scale panel, K not a
// multiple of 16, 32 or 128, M = 1 GEMV to the large-M path, splitK 1, 3 and K) it runs i8 W row-major and packed,
// bf16 W row-major and packed, 4-bit W (symmetric and with zero points) and e4m3 W with scales by row, by group and
// by panel of 8, and gemmBlocks' q | k | v cuts on the packed and by-panel layouts; and it checks that each CPU
// layout gives the bytes of the row-major / by-row one. The vitest kernel tests hold the same bits through the
// addon; this is the out-of-bounds check they cannot make (ASan does not see masked loads, and the addon's buffers
// are larger than a weight's bytes). Build and run from the repository root (each SIMD level the CPU has):
//   g++ -std=c++17 -O2 -march=x86-64-v3 -fno-math-errno -pthread -Icpp -Icpp/cpu scripts/asan/guardGemm.cc \
//       cpp/cpu/cpu_gemm.cc cpp/cpu/cpu_gemm_quant.cc cpp/cpu/cpu_gemm_avx512.cc cpp/cpu/cpu_gemm_avx2.cc \
//       cpp/cpu/cpu_gemm_bf16.cc cpp/cpu/threadpool.cc cpp/knobs.cc cpp/cpu/cpu_features.cc cpp/common.cc -o /tmp/guardGemm
//   /tmp/guardGemm && DELIBERATE_SIMD=avx512 /tmp/guardGemm && DELIBERATE_SIMD=avx2 /tmp/guardGemm
// Prints "ok: <calls> gemm calls on <simd>" and exits 0, or dies on the first fault / names the first mismatch.
#include <sys/mman.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#include "common.h"
#include "cpu_features.h"
#include "cpu_gemm.h"
#include "kernels.h"

using namespace dl;

namespace {

constexpr size_t kPage = 4096;
bool flushStart = false;  // the pass: buffers start right after a guard page (else: end right before one)

// `bytes` of zeroed memory between two PROT_NONE pages, flush against one of them.
struct Guarded {
  char* base = nullptr;
  size_t total = 0;
  void* p = nullptr;
  explicit Guarded(size_t bytes) {
    total = ((bytes + kPage - 1) / kPage + 2) * kPage;
    base = static_cast<char*>(mmap(nullptr, total, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
    if (base == MAP_FAILED) std::abort();
    mprotect(base, kPage, PROT_NONE);
    mprotect(base + total - kPage, kPage, PROT_NONE);
    p = flushStart ? base + kPage : base + total - kPage - bytes;
  }
  Guarded(const Guarded&) = delete;
  ~Guarded() { munmap(base, total); }
  template <class T> T* as() const { return static_cast<T*>(p); }
};

View matrix(void* p, DType t, int64_t rows, int64_t cols) {
  View v;
  v.data = p, v.dtype = t, v.ndim = 2, v.shape[0] = rows, v.shape[1] = cols;
  return v;
}

std::mt19937 rng(1);
float uniform() { return std::uniform_real_distribution<float>(-1, 1)(rng); }
long calls = 0;

// y of gemm(x, w) into a guarded buffer, returned as bytes.
std::vector<char> run(const View& x, const View& w, int splitK) {
  const int64_t M = x.shape[0], N = w.shape[0];
  Guarded y(size_t(M * N) * 4);
  cpu::gemm(x, w, View{}, matrix(y.p, DType::f32, M, N), splitK);
  calls++;
  return std::vector<char>(y.as<char>(), y.as<char>() + M * N * 4);
}

// gemmBlocks(x, w) with q | k | v cut at cut1, cut2 (whole panels of the layout): the blocks' bytes must be those of
// the plain GEMM's columns.
void expectBlocks(const View& x, const View& w, int splitK, int64_t cut1, int64_t cut2, const std::vector<char>& plain,
                  const char* what) {
  const int64_t M = x.shape[0], N = w.shape[0];
  Guarded y(size_t(M * N) * 4);
  View yv = matrix(y.p, DType::f32, M, N);
  cpu::gemmBlocks(x, w, View{}, yv, splitK, cut1, cut2, M, 0);
  calls++;
  const int64_t cuts[4] = {0, cut1, cut2, N};
  for (int j = 0; j < 3; j++)
    for (int64_t m = 0; m < M; m++)
      for (int64_t c = cuts[j]; c < cuts[j + 1]; c++) {
        const int64_t n = cuts[j + 1] - cuts[j];
        if (std::memcmp(y.as<char>() + (M * cuts[j] + m * n + (c - cuts[j])) * 4, plain.data() + (m * N + c) * 4, 4)) {
          std::printf("MISMATCH gemmBlocks %s: M=%lld N=%lld K=%lld splitK=%d cuts %lld %lld\n", what, (long long)M,
                      (long long)N, (long long)x.shape[1], splitK, (long long)cut1, (long long)cut2);
          std::exit(1);
        }
      }
}

void expectSame(const std::vector<char>& a, const std::vector<char>& b, const char* what, int64_t M, int64_t N,
                int64_t K, int splitK) {
  if (a == b) return;
  std::printf("MISMATCH %s: M=%lld N=%lld K=%lld splitK=%d\n", what, (long long)M, (long long)N, (long long)K, splitK);
  std::exit(1);
}

}  // namespace

int main() {
  const int64_t Ks[] = {1, 15, 16, 17, 31, 32, 33, 63, 64, 65, 96, 100, 127, 128, 129, 160, 200, 384, 1100};
  const int64_t Ns[] = {1, 5, 6, 7, 8, 9, 13, 17, 24};
  const int64_t Ms[] = {1, 2, 4, 5, 17, 65};
  const bool packedI8 = cpu::gemm_detail::packedI8Supported(), packedBf16 = cpu::gemm_detail::packedWSupported();
  constexpr int64_t P = cpu::gemm_detail::kPackRows;
  for (int pass = 0; pass < 2; pass++) {
    flushStart = pass == 1;
    for (int64_t K : Ks)
      for (int64_t N : Ns)
        for (int64_t M : Ms) {
          Guarded x(size_t(M * K) * 4);
          for (int64_t i = 0; i < M * K; i++) x.as<float>()[i] = uniform();
          const View xv = matrix(x.p, DType::f32, M, K);
          for (int splitK : {1, 3, int(K)}) {
            if (splitK > K || (splitK == int(K) && K > 200)) continue;
            {  // i8 W quantized per row: row-major and packed
              Guarded q(size_t(N * K)), scale(size_t(N) * 4);
              for (int64_t i = 0; i < N * K; i++) q.as<int8_t>()[i] = int8_t(int(rng() % 255) - 127);
              for (int64_t i = 0; i < N; i++) scale.as<float>()[i] = 0.01f + 0.001f * float(i);
              View w = matrix(q.p, DType::i8, N, K);
              w.rowScale = scale.as<float>();
              const std::vector<char> plain = run(xv, w, splitK);
              if (packedI8) {
                Guarded packed(size_t(cpu::gemm_detail::packedElems(N, K)));
                cpu::gemm_detail::packI8(q.as<int8_t>(), N, K, packed.as<int8_t>());
                View wp = w;
                wp.data = packed.p, wp.packRows = int(P);
                expectSame(run(xv, wp, splitK), plain, "packed i8", M, N, K, splitK);
                if (N > 2 * P) expectBlocks(xv, wp, splitK, P, 2 * P, plain, "packed i8");
              }
            }
            {  // bf16 W: row-major and packed
              Guarded b(size_t(N * K) * 2);
              for (int64_t i = 0; i < N * K; i++) b.as<uint16_t>()[i] = f32ToBf16(uniform());
              const View w = matrix(b.p, DType::bf16, N, K);
              const std::vector<char> plain = run(xv, w, splitK);
              if (packedBf16) {
                Guarded packed(size_t(cpu::gemm_detail::packedElems(N, K)) * 2);
                cpu::gemm_detail::packBf16(b.as<uint16_t>(), N, K, packed.as<uint16_t>());
                View wp = w;
                wp.data = packed.p, wp.packRows = int(P);
                expectSame(run(xv, wp, splitK), plain, "packed bf16", M, N, K, splitK);
                if (N > 2 * P) expectBlocks(xv, wp, splitK, P, 2 * P, plain, "packed bf16");
              }
            }
            // 4-bit (groups dividing K) and e4m3 (any K): scales [and zeros] by row, by group [ng, N], by panel of 8
            for (int e4m3 = 0; e4m3 < 2; e4m3++)
              for (int64_t G : {32, 64, 96, 128}) {
                if (e4m3 ? G == 96 : K % G != 0) continue;
                const int64_t ng = (K + G - 1) / G, padded = (N + 7) / 8 * 8, qBytes = e4m3 ? N * K : N * K / 2;
                Guarded q{size_t(qBytes)};
                for (int64_t i = 0; i < qBytes; i++) {
                  uint8_t c = uint8_t(rng());
                  q.as<uint8_t>()[i] = e4m3 && (c & 0x7f) == 0x7f ? 0 : c;  // no NaN codes
                }
                std::vector<float> sc(size_t(N * ng));
                std::vector<uint8_t> zr(size_t(N * ng));
                for (auto& s : sc) s = 0.01f * uniform();
                for (auto& z : zr) z = uint8_t(rng() % 17);
                for (int asym = 0; asym < (e4m3 ? 1 : 2); asym++) {
                  std::vector<char> byRow;
                  for (int layout = 0; layout < 3; layout++) {  // by row, by group, by panel
                    const int64_t rows = layout == 2 ? padded : N;
                    Guarded scales(size_t(rows * ng) * 4), zeros(size_t(rows * ng));
                    for (int64_t n = 0; n < N; n++)
                      for (int64_t g = 0; g < ng; g++) {
                        const int64_t at = layout == 0 ? n * ng + g : layout == 1 ? g * N + n : n / 8 * ng * 8 + g * 8 + n % 8;
                        scales.as<float>()[at] = sc[size_t(n * ng + g)];
                        zeros.as<uint8_t>()[at] = zr[size_t(n * ng + g)];
                      }
                    View w = matrix(q.p, DType::u8, N, K);
                    w.groups.bits = e4m3 ? 8 : 4, w.groups.size = int(G), w.groups.e4m3 = e4m3;
                    w.groups.scales = scales.as<float>(), w.groups.zeros = asym ? zeros.as<uint8_t>() : nullptr;
                    if (layout == 1) w.groups.byGroup = N;
                    if (layout == 2) w.groups.panel = 8;
                    std::vector<char> y = run(xv, w, splitK);
                    if (layout == 0) byRow = y;
                    else expectSame(y, byRow, e4m3 ? "e4m3 by group / panel" : "4-bit by group / panel", M, N, K, splitK);
                    if (layout == 2 && N > 16) expectBlocks(xv, w, splitK, 8, 16, byRow, e4m3 ? "e4m3 by panel" : "4-bit by panel");
                  }
                }
              }
          }
        }
  }
  std::printf("ok: %ld gemm calls on %s\n", calls, simdName(simdLevel()));
  return 0;
}
