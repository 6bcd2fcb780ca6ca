#include "train.h"

#include <chrono>
#include <ctime>
#include <cstdio>
#include <numeric>
#include <vector>

#include "data.h"
#include "model.h"
#include "safetensors.h"

namespace tr {

namespace {

double learningRate(const TrainOptions& o, int step) {
  if (step < o.warmup) return o.lr * (step + 1) / o.warmup;
  const double t = (double)(step - o.warmup) / std::max(1, o.steps - o.warmup);
  return o.lr * (o.minLrFrac + (1 - o.minLrFrac) * 0.5 * (1 + std::cos(3.141592653589793 * t)));
}

// Token-weighted mean loss over the first `count` validation sequences.
double validationLoss(Model& model, const Weights& w, const Dataset& val, int count, int batchSeqs) {
  double sum = 0;
  long tokens = 0;
  for (int i = 0; i < count;) {
    Batch b;
    for (int k = 0; k < batchSeqs && i < count; k++, i++) b.add(val.seq(i), val.length[i], val.lossFrom[i], val.overrides(i));
    sum += model.lossAndGrad(w, b, nullptr) * b.lossTokens;
    tokens += b.lossTokens;
  }
  return sum / std::max(1L, tokens);
}

// Grouped data: appends group g's sequences as ranked sequences of batch-local group `local`.
void addGroup(Batch& b, const Dataset& d, size_t g, int local) {
  for (size_t i = d.groupStart[g]; i < d.groupStart[g + 1]; i++)
    b.addRanked(d.seq(i), d.length[i], d.lossFrom[i], d.overrides(i), d.scorePos[i], d.scoreGood[i], d.scoreBad[i],
                d.outcome[i], local);
}

// Grouped validation: whole groups in file order until `count` sequences; the weighted loss (cross-entropy token-
// weighted, pairwise group-weighted) and the share of right / wrong pairs ordered right.
double groupedValidation(Model& model, const Weights& w, const Dataset& val, int count, const TrainOptions& o,
                         double* pairAccuracy) {
  double ce = 0, pair = 0;
  long tokens = 0, groups = 0, pairs = 0, ordered = 0;
  for (size_t g = 0; g < val.groups() && (int)val.groupStart[g] < count;) {
    Batch b;
    b.targetWeight = o.targetWeight, b.pairWeight = o.pairWeight;
    for (int local = 0; g < val.groups() && (int)val.groupStart[g] < count && b.seqs.size() < (size_t)o.batchSeqs;)
      addGroup(b, val, g++, local++);
    model.lossAndGrad(w, b, nullptr);
    const LossParts& p = model.lastParts;
    ce += p.crossEntropy * p.lossTokens, tokens += p.lossTokens;
    pair += p.pairwise * p.groups, groups += p.groups, pairs += p.pairs, ordered += p.pairsOrdered;
  }
  *pairAccuracy = (double)ordered / std::max(1L, pairs);
  return o.targetWeight * ce / std::max(1L, tokens) + o.pairWeight * pair / std::max(1L, groups);
}

}  // namespace

double train(const Config& c, const TrainOptions& o) {
  const Dataset data = readDataset(o.dataPath), val = readDataset(o.valPath);
  if (data.size() == 0 || val.size() == 0) throw Error("empty training or validation set");
  const auto layout = tensorLayout(c);
  const size_t n = parameterCount(c);
  std::vector<real> params(n), grads(n), m(n, 0), v(n, 0);
  std::vector<char> decay(n, 0);
  for (const auto& t : layout)
    if (t.decay) std::fill(decay.begin() + t.offset, decay.begin() + t.offset + t.size, 1);
  if (o.initPath.empty()) initWeights(c, params.data(), o.seed);
  else readSafetensors(o.initPath, layout, params.data());  // fine-tuning (e.g. a process reward model)
  Weights w = bindWeights(c, params.data()), g = bindWeights(c, grads.data());
  Model model(c);
  std::printf("model: %zu parameters; data: %zu train / %zu validation sequences\n", n, data.size(), val.size());

  FILE* log = o.logPath.empty() ? nullptr : std::fopen(o.logPath.c_str(), "w");
  const bool grouped = data.grouped();
  if (grouped != val.grouped()) throw Error("training and validation sets must both be grouped (TRD4) or neither");
  if (log)
    std::fprintf(log, grouped ? "step,train_loss,val_loss,lr,tokens,elapsed_s,cpu_s,train_pairwise,val_pair_acc\n"
                              : "step,train_loss,val_loss,lr,tokens,elapsed_s,cpu_s\n");
  // Shuffled units: sequences, or whole groups of grouped data.
  std::vector<size_t> order(grouped ? data.groups() : data.size());
  std::iota(order.begin(), order.end(), 0);
  Rng shuffle(o.seed ^ 0x5eedull);
  size_t cursor = order.size();
  const int valSeqs = std::min<int>(o.valSeqs, (int)val.size());
  const auto t0 = std::chrono::steady_clock::now();
  long tokensSeen = 0;
  double lossAvg = 0, valLoss = 0, pairAvg = 0, valPairAcc = 0;
  for (int step = 0; step < o.steps; step++) {
    Batch b;
    b.targetWeight = o.targetWeight, b.pairWeight = o.pairWeight;
    // Whole groups until the batch has batchSeqs sequences (grouped), else batchSeqs sequences.
    for (int k = 0; grouped ? (int)b.seqs.size() < o.batchSeqs : k < o.batchSeqs; k++) {
      if (cursor == order.size()) {  // new epoch: Fisher-Yates with the seeded RNG
        for (size_t i = order.size() - 1; i > 0; i--) std::swap(order[i], order[shuffle.below(i + 1)]);
        cursor = 0;
      }
      const size_t s = order[cursor++];
      if (grouped) addGroup(b, data, s, k);
      else b.add(data.seq(s), data.length[s], data.lossFrom[s], data.overrides(s));
    }
    std::fill(grads.begin(), grads.end(), real(0));
    const double loss = model.lossAndGrad(w, b, &g);
    tokensSeen += b.rows();
    lossAvg = step == 0 ? loss : 0.95 * lossAvg + 0.05 * loss;
    pairAvg = step == 0 ? model.lastParts.pairwise : 0.95 * pairAvg + 0.05 * model.lastParts.pairwise;
    double norm2 = 0;
    for (size_t i = 0; i < n; i++) norm2 += (double)grads[i] * grads[i];
    const double clipScale = std::min(1.0, o.clip / (std::sqrt(norm2) + 1e-12));
    const double lr = learningRate(o, step);
    const double bc1 = 1 - std::pow(o.beta1, step + 1), bc2 = 1 - std::pow(o.beta2, step + 1);
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) {
      const double gi = grads[i] * clipScale;
      m[i] = (real)(o.beta1 * m[i] + (1 - o.beta1) * gi);
      v[i] = (real)(o.beta2 * v[i] + (1 - o.beta2) * gi * gi);
      double p = params[i];
      if (decay[i]) p -= lr * o.weightDecay * p;
      p -= lr * (m[i] / bc1) / (std::sqrt(v[i] / bc2) + o.adamEps);
      params[i] = (real)p;
    }
    const bool last = step + 1 == o.steps;
    const bool evalNow = last || (o.evalEvery > 0 && (step + 1) % o.evalEvery == 0);
    if (evalNow)
      valLoss = grouped ? groupedValidation(model, w, val, valSeqs, o, &valPairAcc)
                        : validationLoss(model, w, val, valSeqs, o.batchSeqs);
    if (last || evalNow || (step + 1) % o.logEvery == 0) {
      const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      // CPU seconds of all threads: on a shared machine, what the run would take alone is about cpu / threads.
      const double cpu = (double)std::clock() / CLOCKS_PER_SEC;
      std::printf("step %5d  loss %.4f  %s  lr %.2e  |g| %.2f  %.0f tok/s  %.0fs  cpu %.0fs\n", step + 1, lossAvg,
                  evalNow ? ("val " + std::to_string(valLoss).substr(0, 6)).c_str() : "          ", lr,
                  std::sqrt(norm2), tokensSeen / secs, secs, cpu);
      if (grouped) std::printf("           pairwise %.4f%s\n", pairAvg, evalNow ? ("  val pairs ordered " + std::to_string(valPairAcc).substr(0, 5)).c_str() : "");
      std::fflush(stdout);
      if (log) {
        std::fprintf(log, "%d,%.5f,%s,%.3e,%ld,%.1f,%.1f", step + 1, lossAvg,
                     evalNow ? std::to_string(valLoss).c_str() : "", lr, tokensSeen, secs, cpu);
        if (grouped) std::fprintf(log, ",%.5f,%s", pairAvg, evalNow ? std::to_string(valPairAcc).c_str() : "");
        std::fprintf(log, "\n");
        std::fflush(log);
      }
    }
    if (o.saveEvery > 0 && (step + 1) % o.saveEvery == 0 && !last) writeSafetensors(o.outPath, layout, params.data());
  }
  if (log) std::fclose(log);
  writeSafetensors(o.outPath, layout, params.data());
  return valLoss;
}

}  // namespace tr
