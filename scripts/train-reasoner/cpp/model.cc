#include "model.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "gemm.h"

namespace tr {

void Batch::add(const uint16_t* ids, int len, int lossFrom, Overrides o) {
  const int start = rows();
  seqs.push_back({start, len});
  for (int j = 0; j < len; j++) {
    tokens.push_back(ids[j]);
    pos.push_back(j);
    const bool hasTarget = j + 1 < len && j + 1 >= lossFrom;
    targets.push_back(hasTarget ? ids[j + 1] : -1);
    lossTokens += hasTarget ? 1 : 0;
  }
  if (o.alt || !alt.empty()) {  // rows before the first soft target get none
    alt.resize(rows(), -1);
    altMass.resize(rows(), real(0));
  }
  for (int k = 0; k < o.count; k++) {
    int& t = targets[start + o.pos[k]];
    if (t < 0) lossTokens++;
    t = o.id[k];
    if (o.alt) alt[start + o.pos[k]] = o.alt[k], altMass[start + o.pos[k]] = (real)(o.altMass[k] / 65535.0);
  }
}

void Batch::addRanked(const uint16_t* ids, int len, int lossFrom, Overrides o, int scorePos, int good, int bad,
                      int outcome, int group) {
  const int start = rows();
  add(ids, len, lossFrom, o);
  scoreRow.push_back(start + scorePos);
  scoreGood.push_back(good), scoreBad.push_back(bad), scoreOutcome.push_back(outcome), scoreGroup.push_back(group);
}

// Bradley-Terry within groups: for each group (a run of equal `group`), the mean over its (right i, wrong j) pairs
// of softplus(-(s_i - s_j)); the loss is the mean over groups that have a pair (0: none). Writes d(loss)/d(s_i)
// into ds and counts the pairs in `parts`.
static double pairwiseLoss(const std::vector<double>& s, const std::vector<int>& outcome, const std::vector<int>& group,
                           std::vector<double>& ds, LossParts& parts) {
  const int n = (int)s.size();
  ds.assign(n, 0.0);
  std::vector<std::pair<int, int>> runs;  // [first, end) of each group with a right / wrong pair, its pair count
  std::vector<int> pairCount;
  for (int a = 0; a < n;) {
    int e = a, right = 0;
    for (; e < n && group[e] == group[a]; e++) right += outcome[e];
    if (right > 0 && right < e - a) runs.push_back({a, e}), pairCount.push_back(right * (e - a - right));
    a = e;
  }
  parts.groups = (int)runs.size();
  if (runs.empty()) return 0;
  double total = 0;
  for (size_t r = 0; r < runs.size(); r++) {
    const auto [a, e] = runs[r];
    const double per = 1.0 / pairCount[r] / runs.size();  // a group's pairs share its 1 / groups of the mean
    for (int i = a; i < e; i++) {
      if (!outcome[i]) continue;
      for (int j = a; j < e; j++) {
        if (outcome[j]) continue;
        const double m = s[i] - s[j];
        // softplus(-m), stable both ways; its derivative in m is -sigmoid(-m).
        total += per * (m > 0 ? std::log1p(std::exp(-m)) : -m + std::log1p(std::exp(m)));
        const double g = -1.0 / (1.0 + std::exp(m));
        ds[i] += g * per, ds[j] -= g * per;
        parts.pairs++;
        parts.pairsOrdered += m > 0 ? 1 : 0;
      }
    }
  }
  return total;
}

Model::Model(const Config& c) : c_(c), rope_(c.maxPos, c.headDim, c.ropeTheta), acts_(c.layers) {
  if (c.heads % c.kvHeads != 0) throw Error("heads must be a multiple of kvHeads");
  if (c.headDim % 2 != 0) throw Error("headDim must be even (RoPE rotates halves)");
}

static void resize(std::vector<real>& v, size_t n) {
  if (v.size() != n) v.resize(n);
}

void Model::forward(const Weights& w, const Batch& batch) {
  const int N = batch.rows(), d = c_.hidden, qd = c_.qDim(), kvd = c_.kvDim(), f = c_.ffn;
  for (const auto& s : batch.seqs)
    if (s.len > c_.maxPos) throw Error("sequence of " + std::to_string(s.len) + " tokens exceeds maxPos");
  size_t probTotal = 0;
  probOff_ = attentionProbOffsets(c_, batch.seqs, &probTotal);
  resize(xFinal_, (size_t)N * d);
  real* x = xFinal_.data();  // the residual stream, updated layer by layer
  for (int i = 0; i < N; i++) std::memcpy(x + (size_t)i * d, w.embed + (size_t)batch.tokens[i] * d, sizeof(real) * d);
  std::vector<real> tmp((size_t)N * d);
  for (int l = 0; l < c_.layers; l++) {
    const LayerWeights& L = w.layers[l];
    LayerActivations& A = acts_[l];
    A.xIn.assign(x, x + (size_t)N * d);
    resize(A.a, (size_t)N * d), resize(A.rstd1, N), resize(A.q, (size_t)N * qd), resize(A.k, (size_t)N * kvd);
    resize(A.v, (size_t)N * kvd), resize(A.probs, probTotal), resize(A.o, (size_t)N * qd);
    rmsnormForward(N, d, x, L.attnNorm, c_.normEps, A.a.data(), A.rstd1.data());
    linear(N, d, qd, A.a.data(), L.wq, A.q.data());
    linear(N, d, kvd, A.a.data(), L.wk, A.k.data());
    linear(N, d, kvd, A.a.data(), L.wv, A.v.data());
    ropeApply(rope_, N, c_.heads, batch.pos.data(), A.q.data(), false);
    ropeApply(rope_, N, c_.kvHeads, batch.pos.data(), A.k.data(), false);
    attentionForward(c_, batch.seqs, probOff_.data(), A.q.data(), A.k.data(), A.v.data(), A.probs.data(), A.o.data());
    linear(N, qd, d, A.o.data(), L.wo, tmp.data());
    for (size_t i = 0; i < (size_t)N * d; i++) x[i] += tmp[i];
    A.xMid.assign(x, x + (size_t)N * d);
    resize(A.b, (size_t)N * d), resize(A.rstd2, N);
    resize(A.g, (size_t)N * f), resize(A.u, (size_t)N * f), resize(A.h, (size_t)N * f);
    rmsnormForward(N, d, x, L.mlpNorm, c_.normEps, A.b.data(), A.rstd2.data());
    linear(N, d, f, A.b.data(), L.wg, A.g.data());
    linear(N, d, f, A.b.data(), L.wu, A.u.data());
    swigluForward((size_t)N * f, A.g.data(), A.u.data(), A.h.data());
    linear(N, f, d, A.h.data(), L.wd, tmp.data());
    for (size_t i = 0; i < (size_t)N * d; i++) x[i] += tmp[i];
  }
  resize(xNorm_, (size_t)N * d), resize(rstdF_, N), resize(logits_, (size_t)N * c_.vocab);
  rmsnormForward(N, d, x, w.finalNorm, c_.normEps, xNorm_.data(), rstdF_.data());
  linear(N, d, c_.vocab, xNorm_.data(), w.lmHead, logits_.data());
}

double Model::lossAndGrad(const Weights& w, const Batch& batch, Weights* grads) {
  if (batch.lossTokens == 0 && batch.scoreRow.empty()) throw Error("batch has no loss tokens");
  forward(w, batch);
  lastParts = LossParts{};
  lastParts.lossTokens = batch.lossTokens;
  const bool ranked = !batch.scoreRow.empty();
  // The scores (log-odds good vs bad) are read before crossEntropy turns the logits into its gradient.
  const size_t ns = batch.scoreRow.size();
  std::vector<double> scores(ns), dScores;
  for (size_t i = 0; i < ns; i++) {
    const real* z = logits_.data() + (size_t)batch.scoreRow[i] * c_.vocab;
    scores[i] = (double)z[batch.scoreGood[i]] - (double)z[batch.scoreBad[i]];
  }
  const double tw = ranked ? batch.targetWeight : 1.0;
  const double scale = batch.lossTokens > 0 ? 1.0 / batch.lossTokens : 0.0;
  const double sum = crossEntropy(batch.rows(), c_.vocab, batch.targets.data(), logits_.data(), scale * tw,
                                  batch.alt.empty() ? nullptr : batch.alt.data(), batch.altMass.data());
  lastParts.crossEntropy = sum * scale;
  double loss = tw * lastParts.crossEntropy;
  if (ranked) {
    lastParts.pairwise = pairwiseLoss(scores, batch.scoreOutcome, batch.scoreGroup, dScores, lastParts);
    loss += batch.pairWeight * lastParts.pairwise;
    for (size_t i = 0; i < ns; i++) {
      real* dz = logits_.data() + (size_t)batch.scoreRow[i] * c_.vocab;
      dz[batch.scoreGood[i]] += (real)(batch.pairWeight * dScores[i]);
      dz[batch.scoreBad[i]] -= (real)(batch.pairWeight * dScores[i]);
    }
  }
  if (grads) backward(w, batch, *grads);
  return loss;
}

// Expects logits_ to hold d(loss)/d(logits) (crossEntropy leaves it there).
void Model::backward(const Weights& w, const Batch& batch, Weights& g) {
  const int N = batch.rows(), d = c_.hidden, qd = c_.qDim(), kvd = c_.kvDim(), f = c_.ffn, V = c_.vocab;
  dx_.assign((size_t)N * d, real(0));
  resize(dTmp_, (size_t)N * d), resize(dq_, (size_t)N * qd), resize(dk_, (size_t)N * kvd);
  resize(dv_, (size_t)N * kvd), resize(dAttn_, (size_t)N * qd);
  resize(dg_, (size_t)N * f), resize(du_, (size_t)N * f), resize(dh_, (size_t)N * f);

  linearBackwardWeight(N, d, V, logits_.data(), xNorm_.data(), g.lmHead);
  linearBackwardInput(N, d, V, logits_.data(), w.lmHead, dTmp_.data(), false);
  rmsnormBackward(N, d, dTmp_.data(), xFinal_.data(), w.finalNorm, rstdF_.data(), dx_.data(), g.finalNorm);

  for (int l = c_.layers - 1; l >= 0; l--) {
    const LayerWeights& L = w.layers[l];
    LayerWeights& G = g.layers[l];
    const LayerActivations& A = acts_[l];
    // x_out = xMid + swiglu(b Wg^T, b Wu^T) Wd^T
    linearBackwardWeight(N, f, d, dx_.data(), A.h.data(), G.wd);
    linearBackwardInput(N, f, d, dx_.data(), L.wd, dh_.data(), false);
    swigluBackward((size_t)N * f, dh_.data(), A.g.data(), A.u.data(), dg_.data(), du_.data());
    linearBackwardWeight(N, d, f, dg_.data(), A.b.data(), G.wg);
    linearBackwardWeight(N, d, f, du_.data(), A.b.data(), G.wu);
    linearBackwardInput(N, d, f, dg_.data(), L.wg, dTmp_.data(), false);
    linearBackwardInput(N, d, f, du_.data(), L.wu, dTmp_.data(), true);
    rmsnormBackward(N, d, dTmp_.data(), A.xMid.data(), L.mlpNorm, A.rstd2.data(), dx_.data(), G.mlpNorm);
    // xMid = xIn + attention(rope(a Wq^T), rope(a Wk^T), a Wv^T) Wo^T
    linearBackwardWeight(N, qd, d, dx_.data(), A.o.data(), G.wo);
    linearBackwardInput(N, qd, d, dx_.data(), L.wo, dAttn_.data(), false);
    attentionBackward(c_, batch.seqs, probOff_.data(), A.q.data(), A.k.data(), A.v.data(), A.probs.data(),
                      dAttn_.data(), dq_.data(), dk_.data(), dv_.data());
    ropeApply(rope_, N, c_.heads, batch.pos.data(), dq_.data(), true);
    ropeApply(rope_, N, c_.kvHeads, batch.pos.data(), dk_.data(), true);
    linearBackwardWeight(N, d, qd, dq_.data(), A.a.data(), G.wq);
    linearBackwardWeight(N, d, kvd, dk_.data(), A.a.data(), G.wk);
    linearBackwardWeight(N, d, kvd, dv_.data(), A.a.data(), G.wv);
    linearBackwardInput(N, d, qd, dq_.data(), L.wq, dTmp_.data(), false);
    linearBackwardInput(N, d, kvd, dk_.data(), L.wk, dTmp_.data(), true);
    linearBackwardInput(N, d, kvd, dv_.data(), L.wv, dTmp_.data(), true);
    rmsnormBackward(N, d, dTmp_.data(), A.xIn.data(), L.attnNorm, A.rstd1.data(), dx_.data(), G.attnNorm);
  }
  // Embedding rows shared by several tokens: summed in token order, single-threaded, so deterministic.
  for (int i = 0; i < N; i++) {
    real* ge = g.embed + (size_t)batch.tokens[i] * d;
    const real* di = dx_.data() + (size_t)i * d;
    for (int c = 0; c < d; c++) ge[c] += di[c];
  }
}

}  // namespace tr
