// Sampling on the CPU, one row of logits [B,V] per sequence, all arithmetic in double:
//   logprobs: log-softmax of the raw logits (lse = max + log(sum exp(l - max)), sum ascending in token id).
//   temperature 0: greedy, the first index of the max.
//   else: candidates = the topK highest logits (0 = all; ties by lower id); then, by descending logit, the
//   shortest prefix whose softmax(l / T) mass (over the candidates) reaches topP (the token that crosses it is
//   kept); the token is argmax over kept ids of l / T + g, g = -log(-log(u)), u = sampleUniform(seed, position,
//   id) (ties by lower id). The noise depends on (seed, position, id) only: never on the batch slot.
//   top logprobs: the numTop highest raw logprobs, descending, ties by lower id.
#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <vector>

#include "kernels.h"
#include "threadpool.h"

namespace dl::cpu {
namespace {

// NaN logits rank below everything (a NaN is never sampled unless the whole row is NaN).
inline double logitAt(const float* l, int64_t i) { return std::isnan(l[i]) ? -std::numeric_limits<double>::infinity() : double(l[i]); }

void checkParams(const SampleArgs& a, int64_t B) {
  for (int64_t b = 0; b < B; b++) {
    const float t = a.temperature.as<float>()[b], p = a.topP.as<float>()[b];
    const int32_t k = a.topK.as<int32_t>()[b];
    auto fail = [&](const std::string& m) { throw Error("sample: row " + std::to_string(b) + ": " + m); };
    if (!(t >= 0.f) || std::isinf(t)) fail("temperature " + std::to_string(t) + " must be finite and >= 0 (0 = greedy)");
    if (!(p > 0.f && p <= 1.f)) fail("topP " + std::to_string(p) + " must be in (0, 1] (1 = off)");
    if (k < 0) fail("topK " + std::to_string(k) + " must be >= 0 (0 = off)");
  }
}

int32_t sampleRow(const SampleArgs& a, int64_t b, const float* l, int64_t V, double lmax, std::vector<int32_t>& ids) {
  const double T = a.temperature.as<float>()[b];
  const int64_t topK = a.topK.as<int32_t>()[b];
  const double topP = a.topP.as<float>()[b];
  if (T == 0.0) {
    int64_t best = 0;
    for (int64_t i = 1; i < V; i++)
      if (logitAt(l, i) > logitAt(l, best)) best = i;
    return int32_t(best);
  }
  auto higher = [&](int32_t x, int32_t y) {
    const double lx = logitAt(l, x), ly = logitAt(l, y);
    return lx > ly || (lx == ly && x < y);
  };
  ids.resize(V);
  std::iota(ids.begin(), ids.end(), 0);
  int64_t kept = V;
  if (topK > 0 && topK < V) {
    std::nth_element(ids.begin(), ids.begin() + topK, ids.end(), higher);
    kept = topK;
  }
  if (topP < 1.0) {
    std::sort(ids.begin(), ids.begin() + kept, higher);
    double total = 0;
    for (int64_t i = 0; i < kept; i++) total += std::exp((logitAt(l, ids[i]) - lmax) / T);
    double mass = 0;
    int64_t n = 0;
    while (n < kept) {
      mass += std::exp((logitAt(l, ids[n]) - lmax) / T) / total;
      n++;
      if (mass >= topP) break;
    }
    kept = n;
  }
  const uint64_t seed = uint64_t(uint32_t(a.seeds.as<int32_t>()[2 * b])) | (uint64_t(uint32_t(a.seeds.as<int32_t>()[2 * b + 1])) << 32);
  const int32_t position = a.positions.as<int32_t>()[b];
  int32_t best = -1;
  double bestScore = -std::numeric_limits<double>::infinity();
  for (int64_t i = 0; i < kept; i++) {
    const int32_t id = ids[i];
    const double score = logitAt(l, id) / T - std::log(-std::log(sampleUniform(seed, position, id)));
    if (best < 0 || score > bestScore || (score == bestScore && id < best)) best = id, bestScore = score;
  }
  return best;
}

}  // namespace

void sample(const SampleArgs& a) {
  const int64_t B = a.logits.shape[0], V = a.logits.shape[1];
  checkParams(a, B);
  parallelFor(B, 1, [&](int64_t lo, int64_t hi) {
    std::vector<int32_t> ids;
    for (int64_t b = lo; b < hi; b++) {
      const float* l = a.logits.as<float>() + b * V;
      double lmax = -std::numeric_limits<double>::infinity();
      for (int64_t i = 0; i < V; i++) lmax = std::max(lmax, logitAt(l, i));
      double sum = 0;
      for (int64_t i = 0; i < V; i++) sum += std::exp(logitAt(l, i) - lmax);
      const double lse = lmax + std::log(sum);
      const int32_t token = sampleRow(a, b, l, V, lmax, ids);
      a.tokens.as<int32_t>()[b] = token;
      a.logprobs.as<float>()[b] = float(logitAt(l, token) - lse);
      if (a.numTop > 0) {
        const int64_t n = a.numTop;
        ids.resize(V);
        std::iota(ids.begin(), ids.end(), 0);
        std::partial_sort(ids.begin(), ids.begin() + n, ids.end(), [&](int32_t x, int32_t y) {
          const double lx = logitAt(l, x), ly = logitAt(l, y);
          return lx > ly || (lx == ly && x < y);
        });
        for (int64_t j = 0; j < n; j++) {
          a.topIds.as<int32_t>()[b * n + j] = ids[j];
          a.topLogprobs.as<float>()[b * n + j] = float(logitAt(l, ids[j]) - lse);
        }
      }
    }
  });
}

}  // namespace dl::cpu
