// Internal to the CPU attention kernels (cpu_attention_decode.cc, cpu_attention_prefill.cc): the paged KV table
// checks and the one online-softmax step they share.
//
// Reduction order, per query head over a run of tokens [begin, end) of one sequence: page by page (a page is
// pageSize tokens of the sequence's CSR page list), scores s_t = scale * (q . k_t) (the dot product: 8 lanes
// over d % 8 ascending, then a fixed tree), then m' = max(m, max_t s_t), c = exp(m - m'), l = l * c, acc = acc * c,
// and for each token in ascending order p = exp(s_t - m'), l += p, acc += p * v_t (exp: cpu_expf.h). Nothing
// depends on other sequences, so a sequence's bits never depend on the batch.
#pragma once
#include <cmath>
#include <limits>
#include <vector>

#include "common.h"
#include "kernels.h"

namespace dl::cpu::attention_detail {

// Checks the CSR page table of B sequences against the cache; returns each sequence's token count.
std::vector<int64_t> checkPages(const char* op, const PagedKV& kv);

// The running softmax of G query heads that share one KV head.
struct SoftmaxState {
  int G = 0;
  int64_t D = 0;
  std::vector<float> m, l, acc;  // [G], [G], [G, D]
  void reset(int g, int64_t d) {
    G = g, D = d;
    m.assign(g, -std::numeric_limits<float>::infinity());
    l.assign(g, 0.f);
    acc.assign(size_t(g * d), 0.f);
  }
};

// Adds tokens [begin, end) of sequence b to the states of KV heads [hk0, hk1) (order above; one state per KV
// head, each for its G query heads). q: the query rows of heads hk0 * G .. hk1 * G, D f32 each, contiguous.
// A head's bits do not depend on which other heads share the call. scores: scratch.
void attendTokens(const PagedKV& kv, int64_t b, int64_t hk0, int64_t hk1, int64_t begin, int64_t end, const float* q,
                  float scale, SoftmaxState* states, std::vector<float>& scores);

// attendTokens(begin = begins[j], end = ends[j]) for nq queries of sequence b at once, with the same bits per query
// (pages outer, queries inner: a page is read once per tile). Query j's rows start at q + j * qStride; its states
// are states[j * (hk1 - hk0) .. (j + 1) * (hk1 - hk0)).
void attendTile(const PagedKV& kv, int64_t b, int64_t hk0, int64_t hk1, int64_t nq, const int64_t* begins,
                const int64_t* ends, const float* q, int64_t qStride, float scale, SoftmaxState* states,
                std::vector<float>& scores);

// First key a query at position `pos` attends to: 0, or pos - slidingWindow + 1 under a window.
inline int64_t firstKey(const PagedKV& kv, int64_t pos) {
  return kv.slidingWindow > 0 && pos + 1 > kv.slidingWindow ? pos + 1 - kv.slidingWindow : 0;
}

}  // namespace dl::cpu::attention_detail
