// Sampling on the CPU, one row of logits [B,V] per sequence, all arithmetic in double:
//   logprobs: log-softmax of the raw logits (lse = max + log(sum exp(l - max)), sum ascending in token id; the
//   exp of that sum is expNonPositive below, 4 ids at a time, within 1 ulp of the correctly rounded value).
//   temperature 0: greedy, the first index of the max.
//   else: candidates = the topK highest logits (0 = all; ties by lower id); then, by descending logit, the
//   shortest prefix whose softmax(l / T) mass (over the candidates) reaches topP (the token that crosses it is
//   kept); the token is argmax over kept ids of l / T + g, g = -log(-log(u)), u = sampleUniform(seed, position,
//   id) (ties by lower id). The noise depends on (seed, position, id) only: never on the batch slot.
//   top logprobs: the numTop highest raw logprobs, descending, ties by lower id.
// A masked row (SampleArgs::mask) is sampled as if its disallowed ids held -inf, reading only its allowed ids: an
// id at -inf adds an exact 0 to the ascending sum and never wins, so the outputs are those of maskLogits then
// sample (the same bits), at the cost of the allowed ids alone (a constrained step at a JSON structure token allows
// a few dozen of 150k ids: greedy sampling of such a row was ~160 us on the whole row, and maskLogits' -inf pass over
// it as much again). Only a row whose allowed logits are all -inf or NaN differs: it samples its first allowed id.
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

// ---- masked rows ----
// A row's mask: id t allowed iff bit (t & 31) of words[t >> 5] is set (bits of ids >= V are never read).
struct RowMask {
  const uint32_t* words;
  int64_t V;
  bool allows(int64_t t) const { return (words[t >> 5] >> (t & 31)) & 1u; }
  // Words whose 32 ids are all < V; ids from 32 * full on are read one by one.
  int64_t full() const { return V / 32; }
};

// The 8 bits of b8 as lane masks of 8 floats (all ones where the bit is set), and the 4 bits of b4 as 4 doubles'.
inline __m256 laneMask8(uint32_t b8) {
  const __m256i sel = _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128);
  return _mm256_castsi256_ps(_mm256_cmpeq_epi32(_mm256_and_si256(_mm256_set1_epi32(int(b8)), sel), sel));
}
inline __m256d laneMask4(uint32_t b4) {
  const __m256i sel = _mm256_setr_epi64x(1, 2, 4, 8);
  return _mm256_castsi256_pd(_mm256_cmpeq_epi64(_mm256_and_si256(_mm256_set1_epi64x(int64_t(b4)), sel), sel));
}

// The chunks of 8 ids below 32 * full() that hold an allowed id, in ascending order: f(i0, b8) for ids [i0, i0 + 8)
// with b8 their mask bits; f returns true to stop the walk (walkAllowedOctets then returns true).
template <class F>
inline bool walkAllowedOctets(const RowMask& m, F&& f) {
  for (int64_t w = 0, full = m.full(); w < full; w++) {
    const uint32_t bits = m.words[w];
    if (bits == 0) continue;
    for (int c = 0; c < 4; c++) {
      const uint32_t b8 = (bits >> (8 * c)) & 255u;
      if (b8 != 0 && f(32 * w + 8 * c, b8)) return true;
    }
  }
  return false;
}

// rowMax over the allowed ids (NaN as -inf; -inf when none): 8 at a time, chunks with no allowed id skipped.
double rowMaxMasked(const float* l, const RowMask& m) {
  __m256 mx = _mm256_set1_ps(-std::numeric_limits<float>::infinity());
  walkAllowedOctets(m, [&](int64_t i0, uint32_t b8) {
    const __m256 v = _mm256_loadu_ps(l + i0);
    const __m256 keep = _mm256_and_ps(laneMask8(b8), _mm256_cmp_ps(v, v, _CMP_ORD_Q));  // allowed, not NaN
    mx = _mm256_max_ps(mx, _mm256_blendv_ps(mx, v, keep));
    return false;
  });
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, mx);
  double best = -std::numeric_limits<double>::infinity();
  for (float f : lanes) best = std::max(best, double(f));
  for (int64_t t = 32 * m.full(); t < m.V; t++)
    if (m.allows(t)) best = std::max(best, logitAt(l, t));
  return best;
}

// sumExp over the allowed ids, for a finite lmax: the same terms (expNonPositive of each, lane by lane) added in
// ascending id; the disallowed ids' terms, exact zeros, are left out (adding +0 to a sum >= +0 changes no bit).
double sumExpMasked(const float* l, const RowMask& m, double lmax) {
  const __m256d mx = _mm256_set1_pd(lmax), ninf = _mm256_set1_pd(-std::numeric_limits<double>::infinity());
  double sum = 0;
  alignas(32) double e[32];
  for (int64_t w = 0, full = m.full(); w < full; w++) {
    const uint32_t bits = m.words[w];
    if (bits == 0) continue;
#pragma GCC unroll 8
    for (int u = 0; u < 8; u++) {
      const __m256d v = _mm256_cvtps_pd(_mm_loadu_ps(l + 32 * w + 4 * u));
      const __m256d keep = _mm256_and_pd(laneMask4((bits >> (4 * u)) & 15u), _mm256_cmp_pd(v, v, _CMP_ORD_Q));
      _mm256_store_pd(e + 4 * u, expNonPositive(_mm256_sub_pd(_mm256_blendv_pd(ninf, v, keep), mx)));
    }
    if (bits == 0xffffffffu)
      for (int u = 0; u < 32; u++) sum += e[u];
    else
      for (uint32_t b = bits; b != 0; b &= b - 1) sum += e[__builtin_ctz(b)];
  }
  for (int64_t t = 32 * m.full(); t < m.V; t++) {
    if (!m.allows(t)) continue;
    alignas(32) double one[4] = {logitAt(l, t) - lmax, -INFINITY, -INFINITY, -INFINITY};
    _mm256_store_pd(e, expNonPositive(_mm256_load_pd(one)));
    sum += e[0];
  }
  return sum;
}

// The first allowed id (0 when there is none).
int32_t firstAllowed(const RowMask& m) {
  for (int64_t w = 0, W = (m.V + 31) / 32; w < W; w++)
    if (m.words[w] != 0) {
      const int64_t t = 32 * w + __builtin_ctz(m.words[w]);
      return t < m.V ? int32_t(t) : 0;
    }
  return 0;
}

// Greedy over the allowed ids: the first one whose logit is lmax (their max); the first allowed id when every
// allowed logit is NaN or -inf.
int32_t firstMaxMasked(const float* l, const RowMask& m, double lmax) {
  if (lmax > -std::numeric_limits<double>::infinity()) {
    const __m256 mv = _mm256_set1_ps(float(lmax));
    int32_t found = -1;
    if (walkAllowedOctets(m, [&](int64_t i0, uint32_t b8) {
          const uint32_t eq = uint32_t(_mm256_movemask_ps(_mm256_cmp_ps(_mm256_loadu_ps(l + i0), mv, _CMP_EQ_OQ))) & b8;
          if (eq) found = int32_t(i0 + __builtin_ctz(eq));
          return eq != 0;
        }))
      return found;
    for (int64_t t = 32 * m.full(); t < m.V; t++)
      if (m.allows(t) && logitAt(l, t) == lmax) return int32_t(t);
  }
  return firstAllowed(m);
}

// The allowed ids, ascending (sampleRow's candidates before top-k / top-p).
void allowedIds(const RowMask& m, std::vector<int32_t>& ids) {
  ids.clear();
  for (int64_t w = 0, full = m.full(); w < full; w++) {
    const uint32_t bits = m.words[w];
    if (bits == 0xffffffffu)
      for (int i = 0; i < 32; i++) ids.push_back(int32_t(32 * w + i));
    else
      for (uint32_t b = bits; b != 0; b &= b - 1) ids.push_back(int32_t(32 * w + __builtin_ctz(b)));
  }
  for (int64_t t = 32 * m.full(); t < m.V; t++)
    if (m.allows(t)) ids.push_back(int32_t(t));
}

// topLogits of the masked row: the allowed ids above -inf by the same one-pass buffer (chunks with no allowed id
// beating the buffer's last skipped), then, when fewer than n, the ids at -inf -- disallowed, or allowed with a NaN
// or -inf logit -- in ascending id, as the (logit desc, id asc) order ranks them.
void topLogitsMasked(const float* l, const RowMask& m, int64_t n, int32_t* ids) {
  const double ninf = -std::numeric_limits<double>::infinity();
  int64_t count = 0;
  auto insert = [&](int64_t i) {
    const double v = logitAt(l, i);
    if (!(v > ninf)) return;
    if (count == n) {
      if (!(v > logitAt(l, ids[n - 1]))) return;
      count--;
    }
    int64_t pos = count++;
    for (; pos > 0 && logitAt(l, ids[pos - 1]) < v; pos--) ids[pos] = ids[pos - 1];
    ids[pos] = int32_t(i);
  };
  __m256 worst = _mm256_set1_ps(-std::numeric_limits<float>::infinity());
  walkAllowedOctets(m, [&](int64_t i0, uint32_t b8) {
    // Until the buffer is full every allowed id enters (insert skips -inf); then only those beating its last.
    const uint32_t in = count < n ? b8 : uint32_t(_mm256_movemask_ps(_mm256_cmp_ps(_mm256_loadu_ps(l + i0), worst, _CMP_GT_OQ))) & b8;
    if (in == 0) return false;
    for (uint32_t b = in; b != 0; b &= b - 1) insert(i0 + __builtin_ctz(b));
    if (count == n) worst = _mm256_set1_ps(float(logitAt(l, ids[n - 1])));
    return false;
  });
  for (int64_t t = 32 * m.full(); t < m.V; t++)
    if (m.allows(t)) insert(t);
  for (int64_t t = 0; t < m.V && count < n; t++)
    if (!m.allows(t) || !(logitAt(l, t) > ninf)) ids[count++] = int32_t(t);
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

// mask: the row's (null: unmasked), whose candidates are its allowed ids only.
int32_t sampleRow(const SampleArgs& a, int64_t b, const float* l, int64_t V, double lmax, std::vector<int32_t>& ids,
                  const RowMask* mask) {
  const double T = a.temperature.as<float>()[b];
  const int64_t topK = a.topK.as<int32_t>()[b];
  const double topP = a.topP.as<float>()[b];
  if (T == 0.0 && mask) return firstMaxMasked(l, *mask, lmax);
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
  if (mask) {
    allowedIds(*mask, ids);
  } else {
    ids.resize(V);
    std::iota(ids.begin(), ids.end(), 0);
  }
  // A masked row's disallowed ids (-inf) would only ever join the candidates behind every allowed one, where they
  // neither win nor add mass: leaving them out changes no choice.
  int64_t kept = int64_t(ids.size());
  if (topK > 0 && topK < kept) {
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
  const int32_t* rowOf = nullptr;
  if (a.mask || a.maskRowOf) {
    checkMaskLogits(a.logits, a.mask, a.maskRowOf, "sample", "maskRowOf");
    rowOf = a.maskRowOf.as<int32_t>();
    const int64_t R = a.mask.shape[0];
    for (int64_t b = 0; b < B; b++)
      if (rowOf[b] < -1 || rowOf[b] >= R)
        throw Error("sample: maskRowOf[" + std::to_string(b) + "] = " + std::to_string(rowOf[b]) +
                    " is not a mask row in [0, " + std::to_string(R) + ") or -1 (unmasked)");
  }
  const int64_t W = (V + 31) / 32;
  parallelFor(B, 1, [&](int64_t lo, int64_t hi) {
    std::vector<int32_t> ids;
    for (int64_t b = lo; b < hi; b++) {
      const float* l = a.logits.as<float>() + b * V;
      const bool masked = rowOf && rowOf[b] >= 0;
      const RowMask m{masked ? reinterpret_cast<const uint32_t*>(a.mask.as<int32_t>()) + rowOf[b] * W : nullptr, V};
      const double lmax = masked ? rowMaxMasked(l, m) : rowMax(l, V);
      double sum = 0;
      if (std::isfinite(lmax)) sum = masked ? sumExpMasked(l, m, lmax) : sumExp(l, V, lmax);
      else if (masked)  // the plain loop below over the masked row sums a NaN (inf - inf: -inf - -inf, or an
        sum = std::exp(lmax - lmax);  // allowed +inf - +inf) into its zeros: that same NaN
      else  // every logit NaN or -inf (or one +inf): the plain loop, whose NaN / inf results the callers see
        for (int64_t i = 0; i < V; i++) sum += std::exp(logitAt(l, i) - lmax);
      const double lse = lmax + std::log(sum);
      const int32_t token = sampleRow(a, b, l, V, lmax, ids, masked ? &m : nullptr);
      a.tokens.as<int32_t>()[b] = token;
      a.logprobs.as<float>()[b] = float(logitAt(l, token) - lse);
      if (a.numTop > 0) {
        const int64_t n = a.numTop;
        int32_t* top = a.topIds.as<int32_t>() + b * n;
        if (masked) topLogitsMasked(l, m, n, top);
        else topLogits(l, V, n, top);
        for (int64_t j = 0; j < n; j++) {
          // a disallowed id (past the allowed ones) at -inf, as maskLogits would have left it
          const double lj = masked && !m.allows(top[j]) ? -std::numeric_limits<double>::infinity() : logitAt(l, top[j]);
          a.topLogprobs.as<float>()[b * n + j] = float(lj - lse);
        }
      }
    }
  });
}

}  // namespace dl::cpu
