#include "generate.h"

#include <algorithm>
#include <cstring>

#include "gemm.h"
#include "ops.h"

namespace tr {

namespace {

struct Slot {
  int index = -1;  // completion index p*samples+s, -1 = free
  int pos = 0;     // position of the token fed this step
  std::vector<int> tokens;  // prompt followed by generated ids
  int promptLen = 0;
  std::vector<real> k, v;  // [layers][maxPos][kvDim]
};

int pick(const real* logits, int vocab, double temperature, double topP, double u) {
  if (temperature <= 0) return (int)(std::max_element(logits, logits + vocab) - logits);
  const real mx = *std::max_element(logits, logits + vocab);
  std::vector<double> p(vocab);
  double sum = 0;
  for (int t = 0; t < vocab; t++) sum += p[t] = std::exp((logits[t] - mx) / temperature);
  if (topP < 1) {  // keep the most likely tokens (ties by index) until their mass reaches topP, drop the rest
    std::vector<int> order(vocab);
    for (int t = 0; t < vocab; t++) order[t] = t;
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return p[a] > p[b]; });
    double kept = 0;
    int n = 0;
    while (n < vocab && kept < topP * sum) kept += p[order[n++]];
    for (int i = n; i < vocab; i++) p[order[i]] = 0;
    sum = kept;
  }
  double acc = 0;
  for (int t = 0; t < vocab; t++)
    if ((acc += p[t] / sum) > u) return t;
  return vocab - 1;
}

}  // namespace

std::vector<std::vector<int>> generate(const Config& c, const Weights& w, const std::vector<std::vector<int>>& prompts,
                                       const GenerateOptions& o) {
  const int d = c.hidden, qd = c.qDim(), kvd = c.kvDim(), f = c.ffn, V = c.vocab, hd = c.headDim;
  const int group = c.heads / c.kvHeads, total = (int)prompts.size() * o.samples;
  const real scale = (real)(1.0 / std::sqrt((double)hd));
  const Rope rope(c.maxPos, hd, c.ropeTheta);
  std::vector<std::vector<int>> out(total);
  std::vector<Slot> slots(std::min(o.maxBatch, std::max(1, total)));
  for (auto& s : slots) s.k.resize((size_t)c.layers * c.maxPos * kvd), s.v.resize(s.k.size());
  int next = 0;
  std::vector<int> active, pos;
  std::vector<real> x, a, q, k, v, att, tmp, g, u, h, logits, rstd;
  while (true) {
    for (auto& s : slots)  // refill free slots
      if (s.index < 0 && next < total) {
        s.index = next, s.pos = 0, s.tokens = prompts[next / o.samples], s.promptLen = (int)s.tokens.size(), next++;
        if (s.promptLen == 0 || s.promptLen >= c.maxPos) throw Error("prompt length must be in 1..maxPos-1");
      }
    active.clear(), pos.clear();
    for (int i = 0; i < (int)slots.size(); i++)
      if (slots[i].index >= 0) active.push_back(i), pos.push_back(slots[i].pos);
    if (active.empty()) break;
    const int B = (int)active.size();
    x.resize((size_t)B * d), a.resize(x.size()), tmp.resize(x.size()), rstd.resize(B);
    q.resize((size_t)B * qd), att.resize(q.size()), k.resize((size_t)B * kvd), v.resize(k.size());
    g.resize((size_t)B * f), u.resize(g.size()), h.resize(g.size()), logits.resize((size_t)B * V);
    for (int r = 0; r < B; r++) {
      const Slot& s = slots[active[r]];
      std::memcpy(&x[(size_t)r * d], w.embed + (size_t)s.tokens[s.pos] * d, sizeof(real) * d);
    }
    for (int l = 0; l < c.layers; l++) {
      const LayerWeights& L = w.layers[l];
      rmsnormForward(B, d, x.data(), L.attnNorm, c.normEps, a.data(), rstd.data());
      linear(B, d, qd, a.data(), L.wq, q.data());
      linear(B, d, kvd, a.data(), L.wk, k.data());
      linear(B, d, kvd, a.data(), L.wv, v.data());
      ropeApply(rope, B, c.heads, pos.data(), q.data(), false);
      ropeApply(rope, B, c.kvHeads, pos.data(), k.data(), false);
#pragma omp parallel for schedule(dynamic, 1)
      for (int r = 0; r < B; r++) {
        Slot& s = slots[active[r]];
        real* kc = s.k.data() + (size_t)l * c.maxPos * kvd;
        real* vc = s.v.data() + (size_t)l * c.maxPos * kvd;
        std::memcpy(kc + (size_t)s.pos * kvd, &k[(size_t)r * kvd], sizeof(real) * kvd);
        std::memcpy(vc + (size_t)s.pos * kvd, &v[(size_t)r * kvd], sizeof(real) * kvd);
        std::vector<real> p(s.pos + 1);
        for (int hh = 0; hh < c.heads; hh++) {
          const int kvh = hh / group;
          const real* qr = &q[(size_t)r * qd + hh * hd];
          real mx = -1e30f, sum = 0;
          for (int j = 0; j <= s.pos; j++) {
            real dot = 0;
            for (int e = 0; e < hd; e++) dot += qr[e] * kc[(size_t)j * kvd + kvh * hd + e];
            mx = std::max(mx, p[j] = dot * scale);
          }
          for (int j = 0; j <= s.pos; j++) sum += p[j] = std::exp(p[j] - mx);
          real* o = &att[(size_t)r * qd + hh * hd];
          std::fill(o, o + hd, real(0));
          for (int j = 0; j <= s.pos; j++)
            for (int e = 0; e < hd; e++) o[e] += p[j] / sum * vc[(size_t)j * kvd + kvh * hd + e];
        }
      }
      linear(B, qd, d, att.data(), L.wo, tmp.data());
      for (size_t i = 0; i < x.size(); i++) x[i] += tmp[i];
      rmsnormForward(B, d, x.data(), L.mlpNorm, c.normEps, a.data(), rstd.data());
      linear(B, d, f, a.data(), L.wg, g.data());
      linear(B, d, f, a.data(), L.wu, u.data());
      swigluForward(g.size(), g.data(), u.data(), h.data());
      linear(B, f, d, h.data(), L.wd, tmp.data());
      for (size_t i = 0; i < x.size(); i++) x[i] += tmp[i];
    }
    rmsnormForward(B, d, x.data(), w.finalNorm, c.normEps, a.data(), rstd.data());
    linear(B, d, V, a.data(), w.lmHead, logits.data());
    for (int r = 0; r < B; r++) {
      Slot& s = slots[active[r]];
      s.pos++;
      if (s.pos < s.promptLen) continue;  // still reading the prompt
      const double uni = uniform01(hash3(o.seed, (uint64_t)s.index, (uint64_t)s.pos));
      const int t = pick(&logits[(size_t)r * V], V, o.temperature, o.topP, uni);
      s.tokens.push_back(t);
      const int generated = (int)s.tokens.size() - s.promptLen;
      if (t == o.eos || generated >= o.maxNew || (int)s.tokens.size() >= c.maxPos) {
        out[s.index].assign(s.tokens.begin() + s.promptLen, s.tokens.end());
        s.index = -1;
      }
    }
  }
  return out;
}

}  // namespace tr
