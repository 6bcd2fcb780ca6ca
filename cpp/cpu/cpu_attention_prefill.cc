// Prefill / verify attention on the CPU: q [Ttot,Hq,D]; sequence b's queries q[qIndptr[b] .. qIndptr[b+1]) are
// its last T_b positions (their KV already written), causal: query i of a sequence holding L tokens sits at
// position p = L - T_b + i and attends to tokens [0, p], or [p - W + 1, p] under a sliding window W. Keys are reduced in ascending position (order of
// cpu_attention.h) whatever B and Ttot are. Work is split over (tile of a sequence's queries, group of KV heads),
// each query computed alone within its tile, so a query's bits depend only on its own sequence.
#include <algorithm>
#include <utility>

#include "cpu_attention.h"
#include "cpu_dtype.h"
#include "threadpool.h"

namespace dl::cpu {

using attention_detail::SoftmaxState;

void attentionPrefill(const View& q, const View& qIndptr, const PagedKV& kv, const View& out, float scale,
                      int maxQueryLen) {
  requireF32("attentionPrefill", "q", q), requireF32("attentionPrefill", "out", out);
  const std::vector<int64_t> tokens = attention_detail::checkPages("attentionPrefill", kv);
  const int64_t Ttot = q.shape[0], Hq = q.shape[1], D = q.shape[2], Hk = kv.kCache.shape[2], G = Hq / Hk;
  const int64_t B = int64_t(tokens.size());
  const int32_t* qi = qIndptr.as<int32_t>();
  if (qi[0] != 0 || qi[B] != Ttot)
    throw Error("attentionPrefill: qIndptr must run from 0 to the " + std::to_string(Ttot) + " query rows, got " +
                std::to_string(qi[0]) + " .. " + std::to_string(qi[B]));
  for (int64_t b = 0; b < B; b++) {
    const int64_t T = int64_t(qi[b + 1]) - qi[b];
    if (T < 0 || T > tokens[b])
      throw Error("attentionPrefill: sequence " + std::to_string(b) + " has " + std::to_string(T) +
                  " queries but only " + std::to_string(tokens[b]) + " tokens in the cache (write its KV first)");
    if (maxQueryLen > 0 && T > maxQueryLen)
      throw Error("attentionPrefill: sequence " + std::to_string(b) + " has " + std::to_string(T) +
                  " queries, more than maxQueryLen " + std::to_string(maxQueryLen) + "; pass the longest query count or 0");
  }
  // Items: (tile of up to kTile consecutive queries of one sequence, group of KV heads). A tile reads each page once
  // for all its queries (attendTile); a query's bits depend only on its own sequence, not on its tile or group.
  constexpr int64_t kTile = 16;
  std::vector<std::pair<int64_t, int64_t>> tiles;  // (sequence, first query row)
  for (int64_t b = 0; b < B; b++)
    for (int64_t t = qi[b]; t < qi[b + 1]; t += kTile) tiles.emplace_back(b, t);
  const int64_t nTiles = int64_t(tiles.size());
  if (nTiles == 0) return;
  const int64_t groups = std::min<int64_t>(Hk, (2 * numThreads() + nTiles - 1) / nTiles);
  parallelFor(nTiles * groups, 1, [&](int64_t lo, int64_t hi) {
    std::vector<SoftmaxState> st;
    std::vector<float> scores;
    int64_t begins[kTile], ends[kTile];
    for (int64_t item = lo; item < hi; item++) {
      const auto [b, t0] = tiles[size_t(item / groups)];
      const int64_t grp = item % groups;
      const int64_t hk0 = Hk * grp / groups, hk1 = Hk * (grp + 1) / groups, nh = hk1 - hk0;
      const int64_t nq = std::min<int64_t>(kTile, qi[b + 1] - t0);
      for (int64_t j = 0; j < nq; j++) {
        ends[j] = tokens[b] - (qi[b + 1] - qi[b]) + (t0 + j - qi[b]) + 1;
        begins[j] = attention_detail::firstKey(kv, ends[j] - 1);
      }
      st.resize(size_t(nq * nh));
      for (auto& h : st) h.reset(int(G), D);
      attention_detail::attendTile(kv, b, hk0, hk1, nq, begins, ends, q.as<float>() + (t0 * Hq + hk0 * G) * D, Hq * D, scale,
                                   st.data(), scores);
      for (int64_t j = 0; j < nq; j++)
        for (int64_t hk = hk0; hk < hk1; hk++)
          for (int64_t g = 0; g < G; g++) {
            const SoftmaxState& h = st[size_t(j * nh + hk - hk0)];
            float* o = out.as<float>() + ((t0 + j) * Hq + hk * G + g) * D;
            const float inv = 1.f / h.l[g];
            for (int64_t d = 0; d < D; d++) o[d] = h.acc[g * D + d] * inv;
          }
    }
  });
}

}  // namespace dl::cpu
