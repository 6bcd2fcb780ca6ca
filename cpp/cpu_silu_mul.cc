// SwiGLU activation on the CPU: out[M,I] = silu(gateUp[M, 0:I]) * gateUp[M, I:2I], silu(g) = g / (1 + exp(-g)).
// f32 in and out (one pass: the gate and up halves are read once).
#include <cmath>

#include "cpu_dtype.h"
#include "kernels.h"
#include "threadpool.h"

namespace dl::cpu {

void siluMul(const View& gateUp, const View& out) {
  requireF32("siluMul", "gateUp", gateUp), requireF32("siluMul", "out", out);
  const int64_t M = out.shape[0], I = out.shape[1];
  parallelFor(M, 4, [&](int64_t lo, int64_t hi) {
    for (int64_t m = lo; m < hi; m++) {
      const float* g = gateUp.as<float>() + m * 2 * I;
      const float* u = g + I;
      float* o = out.as<float>() + m * I;
      for (int64_t i = 0; i < I; i++) o[i] = g[i] / (1.0f + std::exp(-g[i])) * u[i];
    }
  });
}

}  // namespace dl::cpu
