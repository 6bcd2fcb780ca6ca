// Decode attention on the CPU, FlashDecoding-style: q [B,Hq,D], one query per sequence at its last position,
// attends to all its tokens in the paged cache. GQA: query head h reads KV head h / (Hq / Hk).
// Sequence b's pages are cut into kvSplits contiguous partitions (partition s: pages [n*s/S, n*(s+1)/S), empty
// ones skipped), each reduced in the order of cpu_attention.h, then merged by log-sum-exp in partition order:
//   M = max_s m_s,  out = (sum_s exp(m_s - M) * acc_s) / (sum_s exp(m_s - M) * l_s)   (sums ascending in s).
// Work is split over (sequence, KV head): a sequence's bits never depend on the batch or the thread count.
#include <algorithm>

#include "cpu_attention.h"
#include "cpu_dtype.h"
#include "threadpool.h"

namespace dl::cpu {

using attention_detail::SoftmaxState;

void attentionDecode(const View& q, const PagedKV& kv, const View& out, float scale, int kvSplits) {
  requireF32("attentionDecode", "q", q), requireF32("attentionDecode", "out", out);
  if (kvSplits < 1) throw Error("attentionDecode: kvSplits must be >= 1, got " + std::to_string(kvSplits));
  const std::vector<int64_t> tokens = attention_detail::checkPages("attentionDecode", kv);
  const int64_t B = q.shape[0], Hq = q.shape[1], D = q.shape[2], Hk = kv.kCache.shape[2], G = Hq / Hk;
  const int32_t* indptr = kv.indptr.as<int32_t>();
  parallelFor(B * Hk, 1, [&](int64_t lo, int64_t hi) {
    std::vector<SoftmaxState> parts(kvSplits);
    std::vector<float> scores;
    for (int64_t item = lo; item < hi; item++) {
      const int64_t b = item / Hk, hk = item % Hk;
      const int64_t numPages = indptr[b + 1] - indptr[b];
      const float* qRows = q.as<float>() + (b * Hq + hk * G) * D;
      int used = 0;
      for (int s = 0; s < kvSplits; s++) {
        const int64_t p0 = numPages * s / kvSplits, p1 = numPages * (s + 1) / kvSplits;
        if (p1 == p0) continue;
        SoftmaxState& st = parts[used++];
        st.reset(int(G), D);
        attention_detail::attendTokens(kv, b, hk, p0 * kv.pageSize, std::min(p1 * kv.pageSize, tokens[b]), qRows, D,
                                       scale, st, scores);
      }
      float* o = out.as<float>() + (b * Hq + hk * G) * D;
      for (int64_t g = 0; g < G; g++) {
        float M = parts[0].m[g];
        for (int s = 1; s < used; s++) M = std::max(M, parts[s].m[g]);
        float L = 0.f;
        std::fill(o + g * D, o + (g + 1) * D, 0.f);
        for (int s = 0; s < used; s++) {
          const float w = std::exp(parts[s].m[g] - M);
          L += w * parts[s].l[g];
          const float* acc = parts[s].acc.data() + g * D;
          for (int64_t d = 0; d < D; d++) o[g * D + d] += w * acc[d];
        }
        const float inv = 1.f / L;
        for (int64_t d = 0; d < D; d++) o[g * D + d] *= inv;
      }
    }
  });
}

}  // namespace dl::cpu
