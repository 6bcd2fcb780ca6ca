// Row-wise Llama ops with their backward passes. Shapes: rows = tokens of the packed batch (all sequences
// concatenated, no padding), d = feature width. Parallel loops split rows (or columns for weight gradients),
// never a sum, so results do not depend on the thread count.
#pragma once
#include <vector>

#include "common.h"

namespace tr {

// y[rows, d] = x * rsqrt(mean(x^2) + eps) * w; rstd[rows] saved for backward.
void rmsnormForward(int rows, int d, const real* x, const real* w, double eps, real* y, real* rstd);
// dx[rows, d] += d/dx; dw[d] += sum over rows.
void rmsnormBackward(int rows, int d, const real* dy, const real* x, const real* w, const real* rstd, real* dx,
                     real* dw);

// HF rotate-half RoPE tables: cos/sin [maxPos, headDim/2].
struct Rope {
  int half = 0;
  std::vector<real> cos, sin;
  Rope(int maxPos, int headDim, double theta);
};
// Rotates every head of x[rows, heads*headDim] at positions pos[rows]; inverse = the backward pass.
void ropeApply(const Rope& r, int rows, int heads, const int* pos, real* x, bool inverse);

// h = silu(g) * u, all [rows, f].
void swigluForward(size_t n, const real* g, const real* u, real* h);
// dg, du from dh (all [rows, f]).
void swigluBackward(size_t n, const real* dh, const real* g, const real* u, real* dg, real* du);

// Cross-entropy over logits[rows, vocab] for rows with target >= 0. Overwrites logits with d(loss)/d(logits) where
// loss = sum of -log p(target) * scale (rows without a target get 0). Returns the unscaled sum of -log p. With
// alt (soft targets), a row with alt[i] >= 0 takes -((1 - altMass[i]) log p(target) + altMass[i] log p(alt)).
double crossEntropy(int rows, int vocab, const int* targets, real* logits, double scale, const int* alt = nullptr,
                    const real* altMass = nullptr);

}  // namespace tr
