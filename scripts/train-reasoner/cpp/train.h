// The training loop: shuffled whole sequences, AdamW, linear warmup then cosine decay, global-norm clipping.
#pragma once
#include <string>

#include "common.h"

namespace tr {

struct TrainOptions {
  // initPath: start from these weights (same shapes) instead of a seeded initialisation.
  std::string dataPath, valPath, outPath, logPath, initPath;
  int steps = 1000, batchSeqs = 32, warmup = 100, logEvery = 25, evalEvery = 250, valSeqs = 512, saveEvery = 0;
  double lr = 3e-3, minLrFrac = 0.1, weightDecay = 0.1, beta1 = 0.9, beta2 = 0.95, adamEps = 1e-8, clip = 1.0;
  uint64_t seed = 1;
  // Grouped data (TRD4): weights of the cross-entropy on the targets and of the within-group pairwise loss.
  double targetWeight = 1, pairWeight = 1;
};

// Trains from scratch (or from initPath) and writes the weights (F32 safetensors) to outPath. Returns the final validation loss.
double train(const Config& c, const TrainOptions& o);

}  // namespace tr
