// The numbers a decoder-only Llama/Qwen2/Qwen3/Qwen3-MoE/Mistral model is built from, as the native model sees them.
// The host (ts/model/config.ts) reads config.json, folds rope_theta and llama3 scaling into invFreq, and passes these.
#pragma once
#include <cstdint>
#include <string>
#include <vector>
#include "common.h"

namespace dl {

struct ModelConfig {
  int numLayers = 0;
  int hidden = 0;        // C
  int numHeads = 0;      // Hq
  int numKvHeads = 0;    // Hk (GQA: Hq % Hk == 0)
  int headDim = 0;       // D
  int intermediate = 0;  // I
  int vocab = 0;         // V
  float rmsEps = 1e-6f;
  bool attentionBias = false;  // q/k/v projections carry a bias (Qwen2; Llama with attention_bias)
  bool oProjBias = false;      // o_proj carries a bias (Llama/Mistral with attention_bias)
  bool tieEmbeddings = false;  // lm_head shares embed_tokens
  bool qkNorm = false;         // Qwen3: RMSNorm over each q and k head (weights [D]) before RoPE
  // Multiplies the attention logits' 1/sqrt(D): YaRN scales RoPE's cos and sin by an attention factor a, so q.k by
  // a^2 (the host passes a^2; 1 without YaRN).
  float attnLogitScale = 1.0f;
  int slidingWindow = 0;       // keys a query attends to (Mistral's sliding_window); 0 = all (PagedKV)
  std::vector<float> invFreq;  // [D/2], rotary inverse frequencies with any scaling applied
  // Qwen3-MoE: the layers l with moeLayer[l] run a mixture of numExperts experts (each an MLP moeIntermediate wide,
  // expertsPerToken of them per token, weights renormalised when normTopK) instead of the dense MLP (kernels.h
  // MoeArgs). numExperts 0: a dense model.
  int numExperts = 0, expertsPerToken = 0, moeIntermediate = 0;
  bool normTopK = false;
  std::vector<uint8_t> moeLayer;  // [numLayers] when numExperts > 0
  // A process reward model's score head in place of the LM head (docs/architecture.md "Native contract", score
  // heads): its rows are 2 logits whose softmax's second value is the step score, sampled and read like any logits.
  //   value:    Skywork-o1-Open-PRM's v_head.summary [1, C] + bias as the 2-row head [0; w], bias [0, b]: the
  //             logits [0, v], so softmax(.)[1] = sigmoid(v)
  //   twoClass: Qwen2.5-Math-PRM's score.0 [C, C] + bias, ReLU, score.2 [2, C] + bias
  enum class ScoreHead { none, value, twoClass };
  ScoreHead scoreHead = ScoreHead::none;
  // Quantize at load (NativeModel option quantize: "int8"): the dense layers' q/k/v, o, gate/up and down weights are
  // stored as int8 per output row with an f32 scale per row (model_weights.h); embeddings, norms, the head and MoE
  // experts stay as stored.
  bool quantizeInt8 = false;
  // Quantize at load "int4" (model_weights.h): the same weights as 4-bit groups of this many along K, symmetric
  // (Q4_0-like: zero point 8, scale = the group's value of largest magnitude / -8). 0: off.
  int quantizeInt4Group = 0;
  // Quantize at load "fp8" (model_weights.h): the same weights as FP8 e4m3 codes with an f32 scale per row and group
  // of 128 inputs (the last group partial), scale = the group's largest magnitude / 448 (View::Groups::e4m3).
  bool quantizeFp8 = false;
  // The dense layers' linear weights arrive pre-quantized (NativeModel option quantize: "checkpoint",
  // setQuantizedWeight): they keep no place in the packed bf16 arena.
  bool prequantized = false;

  bool isMoe(int layer) const { return numExperts > 0 && moeLayer[size_t(layer)]; }
  // The head's width: the logits a row has (vocab for a language model, 2 for a score head).
  int headRows() const { return scoreHead == ScoreHead::none ? vocab : 2; }

  int qDim() const { return numHeads * headDim; }
  int kvDim() const { return numKvHeads * headDim; }
  int qkvDim() const { return qDim() + 2 * kvDim(); }

  // Throws dl::Error naming the first inconsistent field.
  void validate() const {
    auto need = [](bool ok, const std::string& m) {
      if (!ok) throw Error("NativeModel: " + m);
    };
    need(numLayers >= 1, "numLayers must be >= 1");
    need(hidden >= 1 && numHeads >= 1 && numKvHeads >= 1 && headDim >= 2 && intermediate >= 1 && vocab >= 1,
         "hidden, numHeads, numKvHeads, headDim, intermediate and vocab must be positive");
    need(numHeads % numKvHeads == 0, "numHeads (" + std::to_string(numHeads) + ") must be a multiple of numKvHeads (" +
                                         std::to_string(numKvHeads) + ")");
    need(headDim % 2 == 0, "headDim must be even for rotary embeddings, got " + std::to_string(headDim));
    need(int(invFreq.size()) == headDim / 2, "invFreq must hold headDim/2 = " + std::to_string(headDim / 2) +
                                                 " values, got " + std::to_string(invFreq.size()));
    need(rmsEps > 0, "rmsEps must be positive");
    need(attnLogitScale > 0, "attnLogitScale must be positive");
    if (numExperts > 0) {
      need(numExperts <= 1024, "numExperts must be at most 1024, got " + std::to_string(numExperts));
      need(expertsPerToken >= 1 && expertsPerToken <= numExperts,
           "expertsPerToken must be in [1, numExperts = " + std::to_string(numExperts) + "], got " + std::to_string(expertsPerToken));
      need(moeIntermediate >= 1, "moeIntermediate must be positive");
      need(int(moeLayer.size()) == numLayers, "moeLayers must name layers in [0, numLayers)");
    }
  }
};

// The paged KV pool: per layer kCache, vCache [numPages, pageSize, Hk, D].
struct KvPoolConfig {
  int numPages = 0;
  int pageSize = 16;
  DType dtype = DType::f32;
};

}  // namespace dl
