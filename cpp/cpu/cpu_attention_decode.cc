// Decode attention on the CPU, FlashDecoding-style: q [B,Hq,D], one query per sequence at its last position,
// attends to all its tokens in the paged cache (the last slidingWindow of them under a window). GQA: query head h reads KV head h / (Hq / Hk).
// Sequence b's pages are cut into kvSplits contiguous partitions (partition s: pages [n*s/S, n*(s+1)/S), empty
// ones skipped), each reduced in the order of cpu_attention.h, then merged by log-sum-exp in partition order:
//   M = max_s m_s,  out = (sum_s exp(m_s - M) * acc_s) / (sum_s exp(m_s - M) * l_s)   (sums ascending in s).
// Work is split over (sequence, group of KV heads): a sequence's bits never depend on the batch or the threads.
#include <algorithm>

#include "cpu_attention.h"
#include "cpu_expf.h"
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
  // Items: (sequence, group of KV heads); each page's rows of a group are read together. The grouping only
  // serves parallelism (a head's bits do not depend on it), and it costs: a group reads part of every token's row
  // (Hk * D values), and cold partial rows stream badly. SmolLM-135M shape (3 KV heads x 64 f32: 256-byte parts of
  // 768-byte rows), 200 tokens, KV cold, a C++ harness over this kernel on Zen 4: whole rows 33 us a layer on one
  // thread against 67 us split three ways over two threads (4000 tokens: 650 against 820 us). So a row is split
  // only into parts of at least 1 KiB.
  const int64_t rowBytes = Hk * D * int64_t(dtypeSize(kv.kCache.dtype));
  const int64_t groups = std::max<int64_t>(1, std::min<int64_t>({Hk, rowBytes / 1024, (2 * numThreads() + B - 1) / B}));
  parallelFor(B * groups, 1, [&](int64_t lo, int64_t hi) {
    std::vector<std::vector<SoftmaxState>> parts(kvSplits);
    std::vector<float> scores;
    for (int64_t item = lo; item < hi; item++) {
      const int64_t b = item / groups, grp = item % groups;
      const int64_t hk0 = Hk * grp / groups, hk1 = Hk * (grp + 1) / groups;
      const int64_t numPages = indptr[b + 1] - indptr[b];
      const float* qRows = q.as<float>() + (b * Hq + hk0 * G) * D;
      // Keys [first, tokens[b]): all of them, or the last slidingWindow; partitions below `first` are empty.
      const int64_t first = attention_detail::firstKey(kv, tokens[b] - 1);
      int used = 0;
      for (int s = 0; s < kvSplits; s++) {
        const int64_t p0 = numPages * s / kvSplits, p1 = numPages * (s + 1) / kvSplits;
        if (p1 == p0 || std::min(p1 * kv.pageSize, tokens[b]) <= first) continue;
        std::vector<SoftmaxState>& st = parts[used++];
        st.resize(size_t(hk1 - hk0));
        for (auto& h : st) h.reset(int(G), D);
        attention_detail::attendTokens(kv, b, hk0, hk1, std::max(p0 * kv.pageSize, first), std::min(p1 * kv.pageSize, tokens[b]), qRows,
                                       scale, st.data(), scores);
      }
      for (int64_t hk = hk0; hk < hk1; hk++)
        for (int64_t g = 0; g < G; g++) {
          float* o = out.as<float>() + (b * Hq + hk * G + g) * D;
          float M = parts[0][hk - hk0].m[g];
          for (int s = 1; s < used; s++) M = std::max(M, parts[s][hk - hk0].m[g]);
          float L = 0.f;
          std::fill(o, o + D, 0.f);
          for (int s = 0; s < used; s++) {
            const SoftmaxState& st = parts[s][hk - hk0];
            const float w = exp1(st.m[g] - M);
            L += w * st.l[g];
            for (int64_t d = 0; d < D; d++) o[d] += w * st.acc[g * D + d];
          }
          const float inv = 1.f / L;
          for (int64_t d = 0; d < D; d++) o[d] *= inv;
        }
    }
  });
}

}  // namespace dl::cpu
