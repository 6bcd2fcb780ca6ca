// The mixture-of-experts MLP on the CPU (kernels.h MoeArgs): router GEMM, per-token routing, slots grouped by expert,
// one gate|up and one down GEMM per active expert over its rows (the dense GEMM of cpu_gemm.cc, so its schedule),
// silu(gate) * up, then each token's weighted sum in ascending expert id.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "kernels.h"
#include "moe_route.h"
#include "threadpool.h"

namespace dl::cpu {
namespace {

// Rows [r0, r0 + n) of a row-major [N, K] matrix (or of a [rows, K] scratch) as an (n, K) view.
View rowsOf(const View& m, int64_t r0, int64_t n, int64_t K) {
  View v = m;
  v.data = static_cast<char*>(m.data) + size_t(r0 * K) * dtypeSize(m.dtype);
  v.ndim = 2, v.shape[0] = n, v.shape[1] = K;
  return v;
}

}  // namespace

void moe(const MoeArgs& a) {
  checkMoe(a);
  if (a.x.dtype != DType::f32) throw Error(std::string("moe: the CPU backend takes x as f32, got ") + dtypeName(a.x.dtype));
  const int64_t T = a.x.shape[0], C = a.x.shape[1], E = a.router.shape[0], I = a.gateUp.shape[0] / (2 * E);
  const int k = a.topK;
  const int64_t R = T * k;
  if (T == 0) return;

  // logits [T,E] = x . router^T, then per token its experts (ascending id) and weights.
  View logits = rowsOf(a.logits, 0, T, E);
  gemm(a.x, a.router, View{}, logits, int(std::min<int64_t>(a.splitK, C)));
  int32_t* ids = a.expertIds.as<int32_t>();
  float* w = a.weights.as<float>();
  parallelFor(T, 16, [&](int64_t lo, int64_t hi) {
    for (int64_t t = lo; t < hi; t++) moeRouteRow(logits.as<float>() + t * E, int(E), k, a.normTopK, ids + t * k, w + t * k);
  });

  // Group the R slots by expert: expert e's rows are [first[e], first[e + 1]), its slots in ascending order.
  std::vector<int64_t> first(size_t(E) + 1, 0);
  for (int64_t s = 0; s < R; s++) first[size_t(ids[s]) + 1]++;
  for (int64_t e = 0; e < E; e++) first[size_t(e) + 1] += first[size_t(e)];
  std::vector<int64_t> fill(first.begin(), first.end() - 1);
  int32_t* rowOfSlot = a.rowOfSlot.as<int32_t>();
  int32_t* slotOfRow = a.slotOfRow.as<int32_t>();
  for (int64_t s = 0; s < R; s++) {
    const int64_t r = fill[size_t(ids[s])]++;
    rowOfSlot[s] = int32_t(r), slotOfRow[r] = int32_t(s);
  }
  float* xs = a.xs.as<float>();
  parallelFor(R, 64, [&](int64_t lo, int64_t hi) {
    for (int64_t r = lo; r < hi; r++) std::memcpy(xs + r * C, a.x.as<float>() + (slotOfRow[r] / k) * C, size_t(C) * 4);
  });

  // Per active expert: gu = xs . Wgu_e^T; after all of them act = silu(gate) * up; ys = act . Wdown_e^T. Each row's
  // bits are its own (the GEMM contract), so how the slots group changes nothing.
  const int skC = int(std::min<int64_t>(a.splitK, C)), skI = int(std::min<int64_t>(a.splitK, I));
  for (int64_t e = 0; e < E; e++) {
    const int64_t r0 = first[size_t(e)], n = first[size_t(e) + 1] - r0;
    if (n > 0) gemm(rowsOf(a.xs, r0, n, C), rowsOf(a.gateUp, e * 2 * I, 2 * I, C), View{}, rowsOf(a.gu, r0, n, 2 * I), skC);
  }
  siluMul(rowsOf(a.gu, 0, R, 2 * I), rowsOf(a.act, 0, R, I));
  for (int64_t e = 0; e < E; e++) {
    const int64_t r0 = first[size_t(e)], n = first[size_t(e) + 1] - r0;
    if (n > 0) gemm(rowsOf(a.act, r0, n, I), rowsOf(a.down, e * C, C, I), View{}, rowsOf(a.ys, r0, n, C), skI);
  }

  // out[t] = sum over j (ascending expert id) of w[t, j] * ys[row of (t, j)]: one fma chain from 0.
  const float* ys = a.ys.as<float>();
  float* out = a.out.as<float>();
  parallelFor(T, 4, [&](int64_t lo, int64_t hi) {
    for (int64_t t = lo; t < hi; t++) {
      float* o = out + t * C;
      std::fill(o, o + C, 0.f);
      for (int j = 0; j < k; j++) {
        const float wj = w[t * k + j], *y = ys + int64_t(rowOfSlot[t * k + j]) * C;
        for (int64_t c = 0; c < C; c++) o[c] = std::fma(wj, y[c], o[c]);
      }
    }
  });
}

}  // namespace dl::cpu
