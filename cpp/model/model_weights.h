// The model's weights in device memory, set tensor by tensor from JS under their Hugging Face names.
// Layout choices (numerically neutral: a GEMM output element depends only on its row, its weight row and splitK):
//   qkv    [Hq*D + 2*Hk*D, C]  q_proj, k_proj, v_proj stacked by rows (and their biases, Qwen2)
//   gateUp [2I, C]             gate_proj then up_proj, the [M, 2I] layout siluMul reads
// Matrices keep the checkpoint dtype (f32/bf16/f16) on both backends (bandwidth); on the CPU the small vectors
// (norm weights, biases) are converted to f32.
#pragma once
#include <string>
#include <vector>
#include "model_buffer.h"
#include "model_config.h"

namespace dl {

// One device tensor assembled from one or more checkpoint tensors (parts stacked by rows).
struct WeightSlot {
  Buffer buf;
  int64_t rows = 0, cols = 0;  // cols = 1 for a vector
  struct Part {
    std::string name;
    int64_t rowOffset = 0, rows = 0;
    size_t bytesSet = 0;  // of rows * cols elements in the checkpoint dtype
    size_t bytesNeeded = 0;
  };
  std::vector<Part> parts;
  bool complete() const {
    for (auto& p : parts)
      if (p.bytesNeeded == 0 || p.bytesSet < p.bytesNeeded) return false;
    return true;
  }
  View matrix() const { return buf.view({rows, cols}); }
  View vector() const { return buf.view({rows * cols}); }
  // Rows [r0, r0 + n) as a matrix view (a part of a stacked weight), or of a stacked bias.
};

struct LayerWeights {
  WeightSlot inputNorm, postNorm, qkv, qkvBias, o, oBias, gateUp, down;
};

class ModelWeights {
 public:
  ModelWeights(const ModelConfig& cfg, Device device);
  ModelWeights(const ModelWeights&) = delete;  // all_ points into this object
  ModelWeights& operator=(const ModelWeights&) = delete;

  // Copies (and converts if need be) checkpoint bytes of tensor `name` starting at `byteOffset` within it.
  // Throws dl::Error for an unknown name, a shape that disagrees with the config, or an unsupported dtype.
  void set(const std::string& name, DType dtype, const std::vector<int64_t>& shape, const uint8_t* bytes,
           size_t length, size_t byteOffset);
  // Names of checkpoint tensors not (fully) set yet.
  std::vector<std::string> missing() const;

  WeightSlot embed, finalNorm, lmHead;  // lmHead unused when embeddings are tied
  std::vector<LayerWeights> layers;
  const WeightSlot& head() const { return cfg_.tieEmbeddings ? embed : lmHead; }

 private:
  void define(WeightSlot& s, int64_t rows, int64_t cols, std::vector<std::pair<std::string, int64_t>> parts,
              bool vector);
  ModelConfig cfg_;
  Device device_;
  std::vector<std::pair<WeightSlot*, bool>> all_;  // slot, isVector
};

}  // namespace dl
