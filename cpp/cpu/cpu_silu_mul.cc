// SwiGLU activation on the CPU: out[M,I] = silu(gateUp[M, 0:I]) * gateUp[M, I:2I], silu(g) = g / (1 + exp(-g)).
// f32 in and out (one pass: the gate and up halves are read once); exp of cpu_expf.h, 8 lanes at a time (the tail
// computes the same bits one at a time).
#include "cpu_expf.h"

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
      int64_t i = 0;
      const __m256 one = _mm256_set1_ps(1.f), neg = _mm256_set1_ps(-0.f);
      for (; i + 8 <= I; i += 8) {
        const __m256 gv = _mm256_loadu_ps(g + i);
        const __m256 e = exp8(_mm256_xor_ps(gv, neg));
        _mm256_storeu_ps(o + i, _mm256_mul_ps(_mm256_div_ps(gv, _mm256_add_ps(one, e)), _mm256_loadu_ps(u + i)));
      }
      for (; i < I; i++) o[i] = g[i] / (1.0f + exp1(-g[i])) * u[i];
    }
  });
}

}  // namespace dl::cpu
