#include "ops.h"

#include <algorithm>

namespace tr {

void rmsnormForward(int rows, int d, const real* x, const real* w, double eps, real* y, real* rstd) {
#pragma omp parallel for schedule(static)
  for (int i = 0; i < rows; i++) {
    const real* xi = x + (size_t)i * d;
    double ss = 0;
    for (int c = 0; c < d; c++) ss += (double)xi[c] * xi[c];
    const real r = (real)(1.0 / std::sqrt(ss / d + eps));
    rstd[i] = r;
    real* yi = y + (size_t)i * d;
    for (int c = 0; c < d; c++) yi[c] = w[c] * (xi[c] * r);
  }
}

void rmsnormBackward(int rows, int d, const real* dy, const real* x, const real* w, const real* rstd, real* dx,
                     real* dw) {
#pragma omp parallel for schedule(static)
  for (int i = 0; i < rows; i++) {
    const real *dyi = dy + (size_t)i * d, *xi = x + (size_t)i * d;
    const real r = rstd[i];
    double dot = 0;  // mean(g * xhat), g = dy * w
    for (int c = 0; c < d; c++) dot += (double)dyi[c] * w[c] * xi[c] * r;
    const real m = (real)(dot / d);
    real* dxi = dx + (size_t)i * d;
    for (int c = 0; c < d; c++) dxi[c] += r * (dyi[c] * w[c] - xi[c] * r * m);
  }
  // dw: rows summed in order on one thread (cheap: rows*d multiply-adds), vectorised across columns.
  std::vector<double> acc(d, 0.0);
  for (int i = 0; i < rows; i++) {
    const real *dyi = dy + (size_t)i * d, *xi = x + (size_t)i * d;
    const double r = rstd[i];
    for (int c = 0; c < d; c++) acc[c] += (double)dyi[c] * xi[c] * r;
  }
  for (int c = 0; c < d; c++) dw[c] += (real)acc[c];
}

// inv_freq and angles in float32, as HF's LlamaRotaryEmbedding computes them.
Rope::Rope(int maxPos, int headDim, double theta) : half(headDim / 2) {
  cos.resize((size_t)maxPos * half);
  sin.resize((size_t)maxPos * half);
  for (int j = 0; j < half; j++) {
    const float invFreq = 1.0f / std::pow((float)theta, (float)(2 * j) / (float)headDim);
    for (int p = 0; p < maxPos; p++) {
      const float angle = (float)p * invFreq;
      cos[(size_t)p * half + j] = (real)std::cos((double)angle);
      sin[(size_t)p * half + j] = (real)std::sin((double)angle);
    }
  }
}

// x1' = x1 cos - x2 sin, x2' = x2 cos + x1 sin (x1 = first half of the head, x2 = second half).
void ropeApply(const Rope& r, int rows, int heads, const int* pos, real* x, bool inverse) {
  const int half = r.half, hd = 2 * half;
#pragma omp parallel for schedule(static)
  for (int i = 0; i < rows; i++) {
    const real* cs = r.cos.data() + (size_t)pos[i] * half;
    const real* sn = r.sin.data() + (size_t)pos[i] * half;
    for (int h = 0; h < heads; h++) {
      real* v = x + ((size_t)i * heads + h) * hd;
      for (int j = 0; j < half; j++) {
        const real s = inverse ? -sn[j] : sn[j];
        const real a = v[j], b = v[j + half];
        v[j] = a * cs[j] - b * s;
        v[j + half] = b * cs[j] + a * s;
      }
    }
  }
}

static inline real sigmoid(real z) { return real(1) / (real(1) + std::exp(-z)); }

#if !defined(TR_REAL_DOUBLE) && defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
// exp for 8 floats (Cephes expf: range reduction by ln2, degree-5 polynomial; ~1 ulp): the SwiGLU sigmoids
// otherwise cost as much as a GEMM in scalar expf calls.
static inline __m256 exp8(__m256 x) {
  x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-87.3f)), _mm256_set1_ps(88.3f));
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  x = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
  x = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), x);
  __m256 y = _mm256_set1_ps(1.9875691500e-4f);
  y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(1.3981999507e-3f));
  y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(8.3334519073e-3f));
  y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(4.1665795894e-2f));
  y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(1.6666665459e-1f));
  y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(5.0000001201e-1f));
  y = _mm256_add_ps(_mm256_fmadd_ps(y, _mm256_mul_ps(x, x), x), _mm256_set1_ps(1.0f));
  const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_mul_ps(y, _mm256_castsi256_ps(e));
}
static inline __m256 sigmoid8(__m256 z) {
  const __m256 one = _mm256_set1_ps(1.0f);
  return _mm256_div_ps(one, _mm256_add_ps(one, exp8(_mm256_sub_ps(_mm256_setzero_ps(), z))));
}

void swigluForward(size_t n, const real* g, const real* u, real* h) {
  const long blocks = (long)(n / 8);
#pragma omp parallel for schedule(static)
  for (long b = 0; b < blocks; b++) {
    const __m256 gv = _mm256_loadu_ps(g + 8 * b);
    _mm256_storeu_ps(h + 8 * b, _mm256_mul_ps(_mm256_mul_ps(gv, sigmoid8(gv)), _mm256_loadu_ps(u + 8 * b)));
  }
  for (size_t i = 8 * (size_t)blocks; i < n; i++) h[i] = g[i] * sigmoid(g[i]) * u[i];
}

// dsilu(g)/dg = s (1 + g (1 - s)), s = sigmoid(g).
void swigluBackward(size_t n, const real* dh, const real* g, const real* u, real* dg, real* du) {
  const long blocks = (long)(n / 8);
  const __m256 one = _mm256_set1_ps(1.0f);
#pragma omp parallel for schedule(static)
  for (long b = 0; b < blocks; b++) {
    const __m256 gv = _mm256_loadu_ps(g + 8 * b), dhv = _mm256_loadu_ps(dh + 8 * b), s = sigmoid8(gv);
    _mm256_storeu_ps(du + 8 * b, _mm256_mul_ps(dhv, _mm256_mul_ps(gv, s)));
    const __m256 ds = _mm256_mul_ps(s, _mm256_fmadd_ps(gv, _mm256_sub_ps(one, s), one));
    _mm256_storeu_ps(dg + 8 * b, _mm256_mul_ps(_mm256_mul_ps(dhv, _mm256_loadu_ps(u + 8 * b)), ds));
  }
  for (size_t i = 8 * (size_t)blocks; i < n; i++) {
    const real s = sigmoid(g[i]);
    du[i] = dh[i] * g[i] * s;
    dg[i] = dh[i] * u[i] * s * (real(1) + g[i] * (real(1) - s));
  }
}
#else
void swigluForward(size_t n, const real* g, const real* u, real* h) {
#pragma omp parallel for schedule(static)
  for (size_t i = 0; i < n; i++) h[i] = g[i] * sigmoid(g[i]) * u[i];
}

void swigluBackward(size_t n, const real* dh, const real* g, const real* u, real* dg, real* du) {
#pragma omp parallel for schedule(static)
  for (size_t i = 0; i < n; i++) {
    const real s = sigmoid(g[i]);
    du[i] = dh[i] * g[i] * s;
    dg[i] = dh[i] * u[i] * s * (real(1) + g[i] * (real(1) - s));
  }
}
#endif

double crossEntropy(int rows, int vocab, const int* targets, real* logits, double scale, const int* alt,
                    const real* altMass) {
  std::vector<double> rowLoss(rows, 0.0);
#pragma omp parallel for schedule(static)
  for (int i = 0; i < rows; i++) {
    real* z = logits + (size_t)i * vocab;
    if (targets[i] < 0) {
      std::fill(z, z + vocab, real(0));
      continue;
    }
    real mx = z[0];
    for (int v = 1; v < vocab; v++) mx = std::max(mx, z[v]);
    double sum = 0;
    for (int v = 0; v < vocab; v++) sum += std::exp((double)(z[v] - mx));
    const double logSum = std::log(sum) + mx;
    if (alt && alt[i] >= 0) {  // soft target: mass m on alt, 1 - m on the target
      const double m = altMass[i];
      rowLoss[i] = logSum - (1 - m) * z[targets[i]] - m * z[alt[i]];
      for (int v = 0; v < vocab; v++) z[v] = (real)(std::exp(z[v] - logSum) * scale);
      z[targets[i]] -= (real)((1 - m) * scale);
      z[alt[i]] -= (real)(m * scale);
      continue;
    }
    rowLoss[i] = logSum - z[targets[i]];
    for (int v = 0; v < vocab; v++) z[v] = (real)(std::exp(z[v] - logSum) * scale);
    z[targets[i]] -= (real)scale;
  }
  double total = 0;
  for (int i = 0; i < rows; i++) total += rowLoss[i];
  return total;
}

}  // namespace tr
