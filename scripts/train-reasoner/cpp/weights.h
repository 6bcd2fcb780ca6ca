// The Llama parameter set as one flat buffer, with HF tensor names and shapes (nn.Linear weights are [out, in]).
// The same layout indexes parameters, gradients and AdamW moments.
#pragma once
#include <string>
#include <vector>

#include "common.h"

namespace tr {

struct TensorInfo {
  std::string name;
  std::vector<int> shape;
  size_t offset = 0, size = 0;
  bool decay = false;  // AdamW weight decay: matrices yes; norms and embeddings no
};

struct LayerWeights {
  real *attnNorm, *wq, *wk, *wv, *wo, *mlpNorm, *wg, *wu, *wd;
};

struct Weights {
  real* embed;  // [vocab, hidden]
  std::vector<LayerWeights> layers;
  real* finalNorm;  // [hidden]
  real* lmHead;     // [vocab, hidden]
};

// All tensors in file order (their offsets into the flat buffer).
std::vector<TensorInfo> tensorLayout(const Config& c);
size_t parameterCount(const Config& c);
// Pointers into `base` (a buffer of parameterCount(c) reals).
Weights bindWeights(const Config& c, real* base);
// Normal(0, 0.02) matrices (output projections scaled by 1/sqrt(2*layers), GPT-2 style), norms = 1.
void initWeights(const Config& c, real* base, uint64_t seed);

}  // namespace tr
