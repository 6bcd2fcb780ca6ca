// Batched autoregressive decoding with a per-sequence KV cache, for the reference evaluator.
// Greedy = first index of the max logit; temperature > 0 = inverse-CDF sampling with a uniform drawn from
// hash(seed, sequence index, position), so a sample never depends on which other sequences share its batch.
#pragma once
#include <vector>

#include "weights.h"

namespace tr {

struct GenerateOptions {
  int samples = 1;          // completions per prompt
  double temperature = 0;   // 0 = greedy
  double topP = 1;          // nucleus: sample among the most likely tokens whose probabilities reach topP
  uint64_t seed = 0;
  int maxNew = 160;         // generated tokens per completion at most (also capped by maxPos)
  int eos = 2;              // stops a completion (included in its output)
  int maxBatch = 128;       // sequences decoded together
};

// Returns prompts.size() * samples completions, prompt-major (completion p*samples+s), generated ids only.
std::vector<std::vector<int>> generate(const Config& c, const Weights& w, const std::vector<std::vector<int>>& prompts,
                                       const GenerateOptions& o);

}  // namespace tr
