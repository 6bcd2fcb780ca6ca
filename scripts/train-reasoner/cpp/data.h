// Tokenised training data written by scripts/train-reasoner/prepare.ts.
// File layout (little-endian): "TRD1", u32 count, then per sequence: u16 length, u16 lossFrom, u16 ids[length].
// Loss is taken on predicting ids[j] for j >= lossFrom (the assistant's turn).
// "TRD2" (a process reward model's step labels) adds, after each sequence's ids: u16 count, then count pairs
// (u16 pos, u16 target): the prediction made at position pos (input ids[pos]) is trained towards `target`, which
// need not be ids[pos + 1] (a step tag's label is trained where the next input is the next step).
// "TRD3" (soft step labels) is TRD2 with 4 u16 per entry: (pos, target, alt, altMass): the prediction at pos is
// trained by cross-entropy against the distribution {target: 1 - altMass / 65535, alt: altMass / 65535}.
// "TRD4" (solutions grouped by question, for a within-question ranking loss) is TRD2 with, after each sequence's
// entries: u32 group, u16 scorePos, u16 good, u16 bad, u16 outcome. The sequence's score is the log-odds
// logit(good) - logit(bad) of the prediction at scorePos; a group's sequences are consecutive, and every pair of a
// group with outcomes 1 and 0 is a Bradley-Terry comparison (the trainer's pairWeight).
#pragma once
#include <string>
#include <vector>

#include "common.h"

namespace tr {

// Explicit targets of one sequence (TRD2): pos[k] is trained towards id[k]; with alt (TRD3) towards the mix of
// id[k] and alt[k], altMass[k] / 65535 of the mass on alt[k].
struct Overrides {
  const uint16_t* pos = nullptr;
  const uint16_t* id = nullptr;
  int count = 0;
  const uint16_t* alt = nullptr;
  const uint16_t* altMass = nullptr;
};

struct Dataset {
  std::vector<uint16_t> ids;
  std::vector<size_t> offset;
  std::vector<int> length, lossFrom;
  // TRD2 target overrides: sequence i's are pairs [tgtOffset[i], tgtOffset[i] + tgtCount[i]) of tgtPos / tgtId.
  std::vector<size_t> tgtOffset;
  std::vector<int> tgtCount;
  std::vector<uint16_t> tgtPos, tgtId;
  std::vector<uint16_t> tgtAlt, tgtAltMass;  // TRD3 only
  // TRD4 only: per sequence its score position, good / bad token ids and outcome; groupStart[g] is group g's first
  // sequence (groupStart.back() == size()).
  std::vector<int> scorePos, scoreGood, scoreBad, outcome;
  std::vector<size_t> groupStart;
  bool grouped() const { return !groupStart.empty(); }
  size_t groups() const { return grouped() ? groupStart.size() - 1 : 0; }
  size_t size() const { return length.size(); }
  const uint16_t* seq(size_t i) const { return ids.data() + offset[i]; }
  Overrides overrides(size_t i) const {
    if (tgtCount.empty()) return {};
    if (tgtAlt.empty()) return {tgtPos.data() + tgtOffset[i], tgtId.data() + tgtOffset[i], tgtCount[i]};
    return {tgtPos.data() + tgtOffset[i], tgtId.data() + tgtOffset[i], tgtCount[i], tgtAlt.data() + tgtOffset[i],
            tgtAltMass.data() + tgtOffset[i]};
  }
};

Dataset readDataset(const std::string& path);

}  // namespace tr
