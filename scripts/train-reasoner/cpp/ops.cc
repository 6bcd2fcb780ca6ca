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

void swigluForward(size_t n, const real* g, const real* u, real* h) {
#pragma omp parallel for simd schedule(static)
  for (size_t i = 0; i < n; i++) h[i] = g[i] * sigmoid(g[i]) * u[i];
}

void swigluBackward(size_t n, const real* dh, const real* g, const real* u, real* dg, real* du) {
#pragma omp parallel for simd schedule(static)
  for (size_t i = 0; i < n; i++) {
    const real s = sigmoid(g[i]);
    du[i] = dh[i] * g[i] * s;
    dg[i] = dh[i] * u[i] * s * (real(1) + g[i] * (real(1) - s));
  }
}

double crossEntropy(int rows, int vocab, const int* targets, real* logits, double scale) {
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
    rowLoss[i] = logSum - z[targets[i]];
    for (int v = 0; v < vocab; v++) z[v] = (real)(std::exp(z[v] - logSum) * scale);
    z[targets[i]] -= (real)scale;
  }
  double total = 0;
  for (int i = 0; i < rows; i++) total += rowLoss[i];
  return total;
}

}  // namespace tr
