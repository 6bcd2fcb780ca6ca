// Causal grouped-query attention over a packed batch (sequences concatenated, each attends only to itself).
// q [rows, heads*hd] and k [rows, kvHeads*hd] are already rotated (RoPE); v [rows, kvHeads*hd];
// out [rows, heads*hd]. Query head h reads kv head h / (heads / kvHeads), as in HF repeat_kv.
#pragma once
#include <vector>

#include "common.h"

namespace tr {

struct SeqSpan {
  int start = 0, len = 0;  // rows [start, start+len) of the packed batch, positions 0..len-1
};

// Softmax probabilities are kept for backward: per sequence s, heads x len x len floats at probOffset[s].
std::vector<size_t> attentionProbOffsets(const Config& c, const std::vector<SeqSpan>& seqs, size_t* total);

void attentionForward(const Config& c, const std::vector<SeqSpan>& seqs, const size_t* probOffset, const real* q,
                      const real* k, const real* v, real* probs, real* out);

// dq [rows, heads*hd], dk, dv [rows, kvHeads*hd] are overwritten.
void attentionBackward(const Config& c, const std::vector<SeqSpan>& seqs, const size_t* probOffset, const real* q,
                       const real* k, const real* v, const real* probs, const real* dout, real* dq, real* dk,
                       real* dv);

}  // namespace tr
