// Tokenised training data written by scripts/train-reasoner/prepare.ts.
// File layout (little-endian): "TRD1", u32 count, then per sequence: u16 length, u16 lossFrom, u16 ids[length].
// Loss is taken on predicting ids[j] for j >= lossFrom (the assistant's turn).
#pragma once
#include <string>
#include <vector>

#include "common.h"

namespace tr {

struct Dataset {
  std::vector<uint16_t> ids;
  std::vector<size_t> offset;
  std::vector<int> length, lossFrom;
  size_t size() const { return length.size(); }
  const uint16_t* seq(size_t i) const { return ids.data() + offset[i]; }
};

Dataset readDataset(const std::string& path);

}  // namespace tr
