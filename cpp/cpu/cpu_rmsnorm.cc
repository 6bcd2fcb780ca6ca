// RMSNorm on the CPU, optionally fused with the residual add (one pass over the row instead of two):
//   residual[M,C] += x; out = residual * rsqrt(mean(residual^2) + eps) * weight     (residual given)
//   out = x * rsqrt(mean(x^2) + eps) * weight                                        (no residual)
// x, residual, out f32; weight f32|bf16|f16 [C]. The sum of squares of a row has one fixed order per C
// (8 lanes over c % 8 ascending, then a fixed tree), so a row's bits never depend on the batch.
#include <cmath>
#include <vector>

#include "cpu_dtype.h"
#include "kernels.h"
#include "threadpool.h"

namespace dl::cpu {

void rmsnorm(const View& x, const View& residual, const View& weight, const View& out, float eps) {
  requireF32("rmsnorm", "x", x), requireF32("rmsnorm", "out", out);
  if (residual) requireF32("rmsnorm", "residual", residual);
  const int64_t M = x.shape[0], C = x.shape[1];
  std::vector<float> w(C);
  for (int64_t c = 0; c < C; c++) w[c] = loadF32(weight.data, weight.dtype, c);
  parallelFor(M, 16, [&](int64_t lo, int64_t hi) {
    for (int64_t m = lo; m < hi; m++) {
      const float* xr = x.as<float>() + m * C;
      const float* src = xr;
      if (residual) {
        float* rr = residual.as<float>() + m * C;
        for (int64_t c = 0; c < C; c++) rr[c] += xr[c];
        src = rr;
      }
      float lane[8] = {0, 0, 0, 0, 0, 0, 0, 0};
      int64_t c = 0;
      for (; c + 8 <= C; c += 8)
        for (int l = 0; l < 8; l++) lane[l] += src[c + l] * src[c + l];
      for (; c < C; c++) lane[c & 7] += src[c] * src[c];
      const float sum = ((lane[0] + lane[4]) + (lane[2] + lane[6])) + ((lane[1] + lane[5]) + (lane[3] + lane[7]));
      const float r = 1.0f / std::sqrt(sum / float(C) + eps);
      float* o = out.as<float>() + m * C;
      for (int64_t k = 0; k < C; k++) o[k] = (src[k] * r) * w[k];
    }
  });
}

}  // namespace dl::cpu
