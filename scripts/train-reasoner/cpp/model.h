// Llama forward and backward over a packed batch of whole sequences (teacher forcing), loss on marked tokens.
#pragma once
#include <vector>

#include "attention.h"
#include "data.h"
#include "ops.h"
#include "weights.h"

namespace tr {

struct Batch {
  std::vector<int> tokens;   // [rows] input ids
  std::vector<int> targets;  // [rows] next-token id, or -1 where no loss is taken (prompt, last token)
  std::vector<int> pos;      // [rows] position within its sequence
  // Soft targets (TRD3 overrides), empty when the batch has none: [rows] a second target id (-1: none) and the mass
  // on it (the row's target gets 1 - altMass).
  std::vector<int> alt;
  std::vector<real> altMass;
  std::vector<SeqSpan> seqs;
  int lossTokens = 0;  // count of targets >= 0
  // Ranked sequences (TRD4), empty when none: per sequence, the row whose log-odds logit(good) - logit(bad) is its
  // score, the tokens, its outcome (1 right) and its group (a batch-local index: groups' sequences consecutive).
  std::vector<int> scoreRow, scoreGood, scoreBad, scoreOutcome, scoreGroup;
  // The loss is targetWeight x (mean cross-entropy over the loss tokens) + pairWeight x (mean over groups with a
  // right / wrong pair of the mean over their pairs of -log sigmoid(score_right - score_wrong)).
  double targetWeight = 1, pairWeight = 1;
  int rows() const { return (int)tokens.size(); }
  // Appends one sequence; loss on predicting tokens[j] for j >= lossFrom, and at each override's position
  // towards its target.
  void add(const uint16_t* ids, int len, int lossFrom, Overrides o = {});
  // Appends a ranked sequence: add(), then its score at scorePos, in group `group` (equal to the previous ranked
  // sequence's group, or a new one).
  void addRanked(const uint16_t* ids, int len, int lossFrom, Overrides o, int scorePos, int good, int bad, int outcome,
                 int group);
};

// The parts of the last lossAndGrad: mean cross-entropy (0 without loss tokens), mean pairwise loss (0 without
// pairs), and the pairs counted: all, and those ordered right (score_right > score_wrong).
struct LossParts {
  double crossEntropy = 0, pairwise = 0;
  int lossTokens = 0, groups = 0, pairs = 0, pairsOrdered = 0;
};

// Activations saved by the forward pass for the backward pass, per layer.
struct LayerActivations {
  std::vector<real> xIn, a, rstd1, q, k, v, probs, o, xMid, b, rstd2, g, u, h;
};

class Model {
 public:
  Model(const Config& c);
  const Config& config() const { return c_; }
  // Mean cross-entropy over the batch's loss tokens. With grads != nullptr, adds d(mean loss)/d(params) into it.
  // With ranked sequences, the batch's weighted sum of both losses (Batch::targetWeight, pairWeight).
  double lossAndGrad(const Weights& w, const Batch& batch, Weights* grads);
  LossParts lastParts;

 private:
  Config c_;
  Rope rope_;
  std::vector<LayerActivations> acts_;
  std::vector<size_t> probOff_;
  std::vector<real> xFinal_, xNorm_, rstdF_, logits_;
  std::vector<real> dx_, dTmp_, dq_, dk_, dv_, dAttn_, dg_, du_, dh_;
  void forward(const Weights& w, const Batch& batch);
  void backward(const Weights& w, const Batch& batch, Weights& g);
};

}  // namespace tr
