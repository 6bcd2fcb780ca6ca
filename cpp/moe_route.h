// The router of the mixture-of-experts op (kernels.h MoeArgs) for one token, host and device alike: one definition so
// the CPU and CUDA backends route by the same rules (their expf may differ in the last bit).
#pragma once
#include <cmath>
#include <cstdint>

#include "kernels.h"

namespace dl {

// p [E]: the token's router logits in, its softmax probabilities out (f32: the max, then the sum of exp(l - max) over
// ascending id). ids [k], w [k] out: the top k by repeated first index of the max (ties: the lower id), w their
// probabilities, divided by their sum (added in rank order) when normTopK; then both sorted by ascending expert id,
// the order the combine adds them in.
DL_HD void moeRouteRow(float* p, int E, int k, bool normTopK, int32_t* ids, float* w) {
  float m = p[0];
  for (int e = 1; e < E; e++) m = fmaxf(m, p[e]);
  float s = 0.f;
  for (int e = 0; e < E; e++) {
    p[e] = expf(p[e] - m);
    s += p[e];
  }
  for (int e = 0; e < E; e++) p[e] = p[e] / s;
  for (int j = 0; j < k; j++) {
    int best = -1;
    float bv = -1.f;  // probabilities are >= 0 (or NaN); chosen ones are marked -2
    for (int e = 0; e < E; e++)
      if (p[e] > bv) bv = p[e], best = e;
    if (best < 0)  // NaN logits: the lowest id not yet chosen
      for (int e = 0; e < E && best < 0; e++)
        if (p[e] != -2.f) best = e, bv = p[e];
    ids[j] = best, w[j] = bv;
    p[best] = -2.f;
  }
  if (normTopK) {
    float sum = 0.f;
    for (int j = 0; j < k; j++) sum += w[j];
    for (int j = 0; j < k; j++) w[j] = w[j] / sum;
  }
  for (int j = 1; j < k; j++)  // insertion sort by id: k is small
    for (int i = j; i > 0 && ids[i - 1] > ids[i]; i--) {
      int32_t t = ids[i];
      ids[i] = ids[i - 1], ids[i - 1] = t;
      float u = w[i];
      w[i] = w[i - 1], w[i - 1] = u;
    }
}

}  // namespace dl
