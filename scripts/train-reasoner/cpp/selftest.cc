// Self-tests run by test/train-reasoner/trainer.test.ts:
//  gradcheck (double build): every parameter's analytic gradient against central finite differences on a tiny
//    model, so a wrong backward pass in any op fails loudly;
//  kernelcheck (float build): the packed AVX2 GEMM against a double reference for all transposes and ragged shapes,
//    and the vectorised SwiGLU against double formulas.
#include "selftest.h"

#include <cstdio>
#include <vector>

#include "gemm.h"
#include "model.h"
#include "ops.h"

namespace tr {

int gradcheck() {
  Config c;
  c.vocab = 13, c.hidden = 8, c.layers = 2, c.heads = 4, c.kvHeads = 2, c.headDim = 4, c.ffn = 12, c.maxPos = 16;
  const size_t n = parameterCount(c);
  std::vector<real> params(n), grads(n, 0);
  initWeights(c, params.data(), 7);
  // Larger weights than the 0.02 init so every op is in a non-trivial regime; norms away from 1.
  Rng rng(11);
  for (auto& p : params) p = (real)(p * 5 + 0.1 * rng.normal());
  Weights w = bindWeights(c, params.data()), g = bindWeights(c, grads.data());
  Batch batch;
  const uint16_t s1[] = {1, 4, 7, 3, 9, 12, 2}, s2[] = {1, 5, 5, 8, 0, 11, 6, 10, 2}, s3[] = {1, 3, 2};
  batch.add(s1, 7, 3);
  // s2 also has soft targets (TRD3): one where the loss already was, one past it, so both gradients are checked.
  const uint16_t softPos[] = {4, 8}, softId[] = {7, 3}, softAlt[] = {9, 1}, softMass[] = {19661, 45875};
  batch.add(s2, 9, 2, {softPos, softId, 2, softAlt, softMass});
  batch.add(s3, 3, 1);
  // Ranked sequences (TRD4): group 0 = s1 right, s2 wrong, s3 right (two pairs, s2's score row has a soft target);
  // group 1 = s3 wrong, s1 right (its score row has no target); group 2 only right (no pair: no loss). Weighted.
  const uint16_t r1[] = {1, 4, 7, 3, 9, 12, 2}, r2[] = {1, 5, 5, 8, 0, 11, 6, 10, 2}, r3[] = {1, 3, 2};
  batch.addRanked(r1, 7, 3, {}, 5, 7, 3, 1, 0);
  batch.addRanked(r2, 9, 2, {softPos, softId, 2, softAlt, softMass}, 4, 7, 3, 0, 0);
  batch.addRanked(r3, 3, 1, {}, 1, 7, 3, 1, 0);
  batch.addRanked(r3, 3, 3, {}, 2, 9, 1, 0, 1);
  batch.addRanked(r1, 7, 3, {}, 6, 9, 1, 1, 1);
  batch.addRanked(r2, 9, 2, {}, 3, 7, 3, 1, 2);
  batch.targetWeight = 0.7, batch.pairWeight = 1.3;
  Model model(c);
  model.lossAndGrad(w, batch, &g);

  const double h = 1e-5;
  double worst = 0;
  std::string worstName;
  int failures = 0;
  for (const auto& t : tensorLayout(c)) {
    double tensorWorst = 0, gradNorm = 0;
    for (size_t i = 0; i < t.size; i++) {
      real& p = params[t.offset + i];
      const real saved = p;
      p = saved + h;
      const double up = model.lossAndGrad(w, batch, nullptr);
      p = saved - h;
      const double down = model.lossAndGrad(w, batch, nullptr);
      p = saved;
      const double numeric = (up - down) / (2 * h), analytic = grads[t.offset + i];
      const double err = std::fabs(numeric - analytic) / std::max(1e-6, std::fabs(numeric) + std::fabs(analytic));
      if (err > 1e-4) std::printf("  %s[%zu] numeric %.9e analytic %.9e\n", t.name.c_str(), i, numeric, analytic);
      tensorWorst = std::max(tensorWorst, err);
      gradNorm += analytic * analytic;
    }
    const bool ok = tensorWorst < 1e-4 && gradNorm > 0;
    if (!ok) failures++;
    std::printf("%-42s max rel err %.2e  |grad| %.3e  %s\n", t.name.c_str(), tensorWorst, std::sqrt(gradNorm),
                ok ? "ok" : "FAIL");
    if (tensorWorst > worst) worst = tensorWorst, worstName = t.name;
  }
  std::printf("gradcheck: %zu parameters, worst relative error %.2e (%s): %s\n", n, worst, worstName.c_str(),
              failures ? "FAIL" : "PASS");
  return failures ? 1 : 0;
}

int kernelcheck() {
  Rng rng(3);
  int failures = 0;
  const int shapes[][3] = {{1, 1, 1}, {7, 5, 3}, {6, 16, 8}, {13, 33, 70}, {50, 17, 129}, {3, 100, 1000}};
  for (const auto& s : shapes) {
    const int M = s[0], N = s[1], K = s[2];
    for (int variant = 0; variant < 8; variant++) {
      const bool tA = variant & 1, tB = variant & 2, acc = variant & 4;
      std::vector<real> A((size_t)M * K), B((size_t)K * N), C((size_t)M * N);
      for (auto& x : A) x = (real)rng.normal();
      for (auto& x : B) x = (real)rng.normal();
      for (auto& x : C) x = (real)rng.normal();
      std::vector<real> C0 = C;
      const int lda = tA ? M : K, ldb = tB ? K : N;
      gemm(M, N, K, A.data(), lda, tA, B.data(), ldb, tB, C.data(), N, acc);
      double worst = 0;
      for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
          double ref = acc ? C0[(size_t)i * N + j] : 0, mag = std::fabs(ref);
          for (int k = 0; k < K; k++) {
            const double a = tA ? A[(size_t)k * lda + i] : A[(size_t)i * lda + k];
            const double b = tB ? B[(size_t)j * ldb + k] : B[(size_t)k * ldb + j];
            ref += a * b, mag += std::fabs(a * b);
          }
          worst = std::max(worst, std::fabs(C[(size_t)i * N + j] - ref) / (1e-30 + mag));
        }
      if (worst > 1e-5) {
        failures++;
        std::printf("gemm M=%d N=%d K=%d transA=%d transB=%d acc=%d: rel err %.2e FAIL\n", M, N, K, tA, tB, acc, worst);
      }
    }
  }
  std::printf("gemmcheck: %s\n", failures ? "FAIL" : "PASS");
  // SwiGLU (vectorised exp in the float build) against double formulas, over a range that saturates the sigmoid.
  // Error relative to 1 + |ref|: dsilu has a cancellation near g = -1.28 that no float formula avoids.
  const size_t n = 1003;
  std::vector<real> g(n), u(n), dh(n), h(n), dg(n), du(n);
  for (size_t i = 0; i < n; i++) g[i] = (real)(-40.0 + 80.0 * i / (n - 1)), u[i] = (real)rng.normal(), dh[i] = (real)rng.normal();
  swigluForward(n, g.data(), u.data(), h.data());
  swigluBackward(n, dh.data(), g.data(), u.data(), dg.data(), du.data());
  double worst = 0;
  for (size_t i = 0; i < n; i++) {
    const double s = 1.0 / (1.0 + std::exp(-(double)g[i]));
    const double refs[3] = {g[i] * s * u[i], dh[i] * (double)g[i] * s, dh[i] * (double)u[i] * s * (1 + g[i] * (1 - s))};
    const double got[3] = {h[i], du[i], dg[i]};
    for (int k = 0; k < 3; k++) worst = std::max(worst, std::fabs(got[k] - refs[k]) / (1 + std::fabs(refs[k])));
  }
  const bool swigluOk = worst < 1e-5;
  std::printf("swiglucheck: worst relative error %.2e %s\n", worst, swigluOk ? "PASS" : "FAIL");
  return failures || !swigluOk ? 1 : 0;
}

}  // namespace tr
