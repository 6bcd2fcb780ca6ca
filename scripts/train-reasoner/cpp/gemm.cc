// GEMM: packed AVX2/FMA 6x16 micro-kernel for float; a plain loop for double (the gradient-check build).
#include "gemm.h"

#include <algorithm>
#include <cstring>
#include <vector>

#if !defined(TR_REAL_DOUBLE) && defined(__AVX2__) && defined(__FMA__)
#define TR_GEMM_AVX2 1
#include <immintrin.h>
#endif

namespace tr {

#ifdef TR_GEMM_AVX2

namespace {
constexpr int MR = 6, NR = 16;

// Packs one panel of B (columns j0..j0+width) as Bp[k][NR], zero-padded past width.
void packB(int width, int K, const float* B, int ldb, bool transB, int j0, float* dst) {
  for (int k = 0; k < K; k++) {
    float* row = dst + (size_t)k * NR;
    for (int j = 0; j < width; j++) row[j] = transB ? B[(size_t)(j0 + j) * ldb + k] : B[(size_t)k * ldb + j0 + j];
    for (int j = width; j < NR; j++) row[j] = 0.f;
  }
}

// Packs MR rows of A starting at i0: Ap[k][MR], zero-padded past M.
void packA(int M, int K, const float* A, int lda, bool transA, int i0, float* Ap) {
  const int height = std::min(MR, M - i0);
  for (int k = 0; k < K; k++) {
    float* col = Ap + (size_t)k * MR;
    for (int r = 0; r < height; r++) col[r] = transA ? A[(size_t)k * lda + i0 + r] : A[(size_t)(i0 + r) * lda + k];
    for (int r = height; r < MR; r++) col[r] = 0.f;
  }
}

// tile[MR][NR] = sum_k Ap[k][:] outer Bp[k][:], k ascending.
inline void micro(int K, const float* a, const float* b, float* tile) {
  __m256 c[MR][2];
  for (int r = 0; r < MR; r++) c[r][0] = c[r][1] = _mm256_setzero_ps();
  for (int k = 0; k < K; k++) {
    const __m256 b0 = _mm256_loadu_ps(b + (size_t)k * NR), b1 = _mm256_loadu_ps(b + (size_t)k * NR + 8);
    const float* ak = a + (size_t)k * MR;
    for (int r = 0; r < MR; r++) {
      const __m256 ar = _mm256_broadcast_ss(ak + r);
      c[r][0] = _mm256_fmadd_ps(ar, b0, c[r][0]);
      c[r][1] = _mm256_fmadd_ps(ar, b1, c[r][1]);
    }
  }
  for (int r = 0; r < MR; r++) {
    _mm256_storeu_ps(tile + r * NR, c[r][0]);
    _mm256_storeu_ps(tile + r * NR + 8, c[r][1]);
  }
}
}  // namespace

// GotoBLAS-style: K in chunks of KC (a packed B chunk stays in L2), rows of C split across threads. Each C element
// sums its chunks in order, k ascending inside a chunk: the same order for any thread count.
void gemm(int M, int N, int K, const real* A, int lda, bool transA, const real* B, int ldb, bool transB, real* C,
          int ldc, bool accumulate) {
  if (M <= 0 || N <= 0) return;
  if (K <= 0) {
    if (!accumulate)
      for (int i = 0; i < M; i++) std::memset(C + (size_t)i * ldc, 0, sizeof(float) * N);
    return;
  }
  constexpr int KC = 256;
  const int panels = (N + NR - 1) / NR, blocks = (M + MR - 1) / MR;
  std::vector<float> Bp((size_t)panels * std::min(K, KC) * NR);
#pragma omp parallel
  {
    std::vector<float> Ap((size_t)std::min(K, KC) * MR);
    float tile[MR * NR];
    for (int k0 = 0; k0 < K; k0 += KC) {
      const int kc = std::min(KC, K - k0);
      const bool add = accumulate || k0 > 0;
      // Offsetting the operands by k0 turns the chunk into a plain K=kc product.
      const float* Bk = transB ? B + k0 : B + (size_t)k0 * ldb;
      const float* Ak = transA ? A + (size_t)k0 * lda : A + k0;
#pragma omp for schedule(static)
      for (int p = 0; p < panels; p++) packB(std::min(NR, N - p * NR), kc, Bk, ldb, transB, p * NR, Bp.data() + (size_t)p * kc * NR);
#pragma omp for schedule(static)
      for (int blk = 0; blk < blocks; blk++) {
        const int i0 = blk * MR, height = std::min(MR, M - i0);
        packA(M, kc, Ak, lda, transA, i0, Ap.data());
        for (int p = 0; p < panels; p++) {
          micro(kc, Ap.data(), Bp.data() + (size_t)p * kc * NR, tile);
          const int j0 = p * NR, width = std::min(NR, N - j0);
          for (int r = 0; r < height; r++) {
            float* c = C + (size_t)(i0 + r) * ldc + j0;
            const float* t = tile + r * NR;
            if (add)
              for (int j = 0; j < width; j++) c[j] += t[j];
            else
              for (int j = 0; j < width; j++) c[j] = t[j];
          }
        }
      }  // implicit barrier: the next chunk repacks Bp
    }
  }
}

#else

void gemm(int M, int N, int K, const real* A, int lda, bool transA, const real* B, int ldb, bool transB, real* C,
          int ldc, bool accumulate) {
#pragma omp parallel
  {
    std::vector<real> acc(N > 0 ? N : 1);
#pragma omp for schedule(static)
    for (int i = 0; i < M; i++) {
      std::fill(acc.begin(), acc.end(), real(0));
      for (int k = 0; k < K; k++) {
        const real a = transA ? A[(size_t)k * lda + i] : A[(size_t)i * lda + k];
        for (int j = 0; j < N; j++) acc[j] += a * (transB ? B[(size_t)j * ldb + k] : B[(size_t)k * ldb + j]);
      }
      real* c = C + (size_t)i * ldc;
      for (int j = 0; j < N; j++) c[j] = accumulate ? c[j] + acc[j] : acc[j];
    }
  }
}

#endif

}  // namespace tr
