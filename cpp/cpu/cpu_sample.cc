// Sampling on the CPU, one row of logits [B,V] per sequence, all arithmetic in double:
//   logprobs: log-softmax of the raw logits (lse = max + log(sum exp(l - max)), sum ascending in token id; the
//   exp of that sum is expNonPositive below, 4 ids at a time, within 1 ulp of the correctly rounded value).
//   temperature 0: greedy, the first index of the max.
//   else: candidates = the topK highest logits (0 = all; ties by lower id); then, by descending logit, the
//   shortest prefix whose softmax(l / T) mass (over the candidates) reaches topP (the token that crosses it is
//   kept); the token is argmax over kept ids of l / T + g, g = -log(-log(u)), u = sampleUniform(seed, position,
//   id) (ties by lower id). The noise depends on (seed, position, id) only: never on the batch slot.
//   top logprobs: the numTop highest raw logprobs, descending, ties by lower id.
#include <immintrin.h>

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

// exp(x) of 4 doubles x <= 0 (the build's baseline is x86-64-v3: AVX2 and FMA): x = n ln2 + r, |r| <= ln2 / 2
// (Cody-Waite, ln2 in two parts), e^r by its degree-13 Taylor polynomial (remainder < 5e-18), times 2^n built in
// the exponent bits. x < -708 gives 0: such a term (< 2.3e-308) cannot change the sum, which reaches 1 at the max.
inline __m256d expNonPositive(__m256d x) {
  const __m256d n = _mm256_round_pd(_mm256_mul_pd(x, _mm256_set1_pd(1.4426950408889634)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256d r = _mm256_fnmadd_pd(n, _mm256_set1_pd(6.93147180369123816490e-01), x);
  r = _mm256_fnmadd_pd(n, _mm256_set1_pd(1.90821492927058770002e-10), r);
  static constexpr double kInvFact[14] = {1.0, 1.0, 1.0 / 2, 1.0 / 6, 1.0 / 24, 1.0 / 120, 1.0 / 720, 1.0 / 5040, 1.0 / 40320,
                                          1.0 / 362880, 1.0 / 3628800, 1.0 / 39916800, 1.0 / 479001600, 1.0 / 6227020800};
  __m256d p = _mm256_set1_pd(kInvFact[13]);
  for (int i = 12; i >= 0; i--) p = _mm256_fmadd_pd(p, r, _mm256_set1_pd(kInvFact[i]));
  const __m256d live = _mm256_cmp_pd(x, _mm256_set1_pd(-708.0), _CMP_GE_OQ);  // false for -inf too
  const __m256d nc = _mm256_max_pd(n, _mm256_set1_pd(-1021.0));
  const __m128i ni = _mm256_cvtpd_epi32(nc);
  const __m256i bits = _mm256_slli_epi64(_mm256_add_epi64(_mm256_cvtepi32_epi64(ni), _mm256_set1_epi64x(1023)), 52);
  return _mm256_and_pd(_mm256_mul_pd(p, _mm256_castsi256_pd(bits)), live);
}

// Max over a row (NaN counts as -inf), exact: the float maximum widened.
double rowMax(const float* l, int64_t V) {
  __m256 m = _mm256_set1_ps(-std::numeric_limits<float>::infinity());
  int64_t i = 0;
  for (; i + 8 <= V; i += 8) {
    const __m256 v = _mm256_loadu_ps(l + i);
    m = _mm256_max_ps(m, _mm256_blendv_ps(v, m, _mm256_cmp_ps(v, v, _CMP_UNORD_Q)));  // NaN lanes keep m
  }
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, m);
  double best = -std::numeric_limits<double>::infinity();
  for (float f : lanes) best = std::max(best, double(f));
  for (; i < V; i++) best = std::max(best, logitAt(l, i));
  return best;
}

// The n highest logits of a row (NaN as -inf), descending, ties by lower id -- the order of partial_sort with
// (logit desc, id asc) -- in one pass in ascending id over a sorted buffer ids[0, n): a logit enters only when it
// beats the buffer's last (an equal logit has a higher id than every buffered one, so it never displaces), and 8
// logits at a time are skipped when none beats it. DeepConf asks for this on every generated token (its confidence
// is the mean of the top 20 logprobs), so a partial_sort over the whole vocabulary per token showed in the step.
void topLogits(const float* l, int64_t V, int64_t n, int32_t* ids) {
  int64_t count = 0;
  auto insert = [&](int64_t i) {
    const double v = logitAt(l, i);
    if (count == n) {
      if (!(v > logitAt(l, ids[n - 1]))) return;
      count--;
    }
    int64_t pos = count++;
    for (; pos > 0 && logitAt(l, ids[pos - 1]) < v; pos--) ids[pos] = ids[pos - 1];
    ids[pos] = int32_t(i);
  };
  int64_t i = 0;
  for (; i < V && count < n; i++) insert(i);
  // The buffer's last logit (-inf for a NaN: an ordered > is false for NaN lanes too), updated after each insert.
  __m256 worst = _mm256_set1_ps(float(logitAt(l, ids[n - 1])));
  for (; i + 8 <= V; i += 8) {
    const int mask = _mm256_movemask_ps(_mm256_cmp_ps(_mm256_loadu_ps(l + i), worst, _CMP_GT_OQ));
    if (mask == 0) continue;
    for (int m = mask; m != 0; m &= m - 1) insert(i + __builtin_ctz(m));
    worst = _mm256_set1_ps(float(logitAt(l, ids[n - 1])));
  }
  for (; i < V; i++) insert(i);
}

// sum over i ascending of exp(logit_i - lmax), for a finite lmax.
double sumExp(const float* l, int64_t V, double lmax) {
  const __m256d mx = _mm256_set1_pd(lmax), ninf = _mm256_set1_pd(-std::numeric_limits<double>::infinity());
  double sum = 0;
  int64_t i = 0;
  alignas(32) double e[4];
  // 16 at a time: four independent polynomials in flight (the exp's FMA chain is latency-bound one vector at a
  // time); the sum still takes the terms one by one in ascending id.
  alignas(32) double e16[16];
  for (; i + 16 <= V; i += 16) {
#pragma GCC unroll 4
    for (int u = 0; u < 4; u++) {
      const __m256d v = _mm256_cvtps_pd(_mm_loadu_ps(l + i + 4 * u));
      const __m256d x = _mm256_sub_pd(_mm256_blendv_pd(v, ninf, _mm256_cmp_pd(v, v, _CMP_UNORD_Q)), mx);
      _mm256_store_pd(e16 + 4 * u, expNonPositive(x));
    }
    for (int u = 0; u < 16; u++) sum += e16[u];
  }
  for (; i + 4 <= V; i += 4) {
    const __m256d v = _mm256_cvtps_pd(_mm_loadu_ps(l + i));
    const __m256d x = _mm256_sub_pd(_mm256_blendv_pd(v, ninf, _mm256_cmp_pd(v, v, _CMP_UNORD_Q)), mx);
    _mm256_store_pd(e, expNonPositive(x));
    sum += e[0], sum += e[1], sum += e[2], sum += e[3];
  }
  for (; i < V; i++) {
    alignas(32) double one[4] = {logitAt(l, i) - lmax, -INFINITY, -INFINITY, -INFINITY};
    _mm256_store_pd(e, expNonPositive(_mm256_load_pd(one)));
    sum += e[0];
  }
  return sum;
}

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
  if (T == 0.0) {  // the first index of the max (0 when every logit is NaN or -inf)
    int64_t i = 0;
    if (lmax > -std::numeric_limits<double>::infinity()) {  // lmax is a float widened: compare as floats, 8 at a time
      const __m256 m = _mm256_set1_ps(float(lmax));
      for (; i + 8 <= V; i += 8)
        if (const int eq = _mm256_movemask_ps(_mm256_cmp_ps(_mm256_loadu_ps(l + i), m, _CMP_EQ_OQ))) return int32_t(i + __builtin_ctz(eq));
    }
    for (; i < V; i++)
      if (logitAt(l, i) == lmax) return int32_t(i);
    return 0;
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
      const double lmax = rowMax(l, V);
      double sum = 0;
      if (std::isfinite(lmax)) sum = sumExp(l, V, lmax);
      else  // every logit NaN or -inf (or one +inf): the plain loop, whose NaN / inf results the callers see
        for (int64_t i = 0; i < V; i++) sum += std::exp(logitAt(l, i) - lmax);
      const double lse = lmax + std::log(sum);
      const int32_t token = sampleRow(a, b, l, V, lmax, ids);
      a.tokens.as<int32_t>()[b] = token;
      a.logprobs.as<float>()[b] = float(logitAt(l, token) - lse);
      if (a.numTop > 0) {
        const int64_t n = a.numTop;
        int32_t* top = a.topIds.as<int32_t>() + b * n;
        topLogits(l, V, n, top);
        for (int64_t j = 0; j < n; j++) a.topLogprobs.as<float>()[b * n + j] = float(logitAt(l, top[j]) - lse);
      }
    }
  });
}

}  // namespace dl::cpu
