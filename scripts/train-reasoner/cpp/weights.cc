#include "weights.h"

namespace tr {

std::vector<TensorInfo> tensorLayout(const Config& c) {
  std::vector<TensorInfo> t;
  size_t off = 0;
  auto add = [&](const std::string& name, std::vector<int> shape, bool decay) {
    size_t n = 1;
    for (int s : shape) n *= (size_t)s;
    t.push_back({name, shape, off, n, decay});
    off += n;
  };
  add("model.embed_tokens.weight", {c.vocab, c.hidden}, false);
  for (int l = 0; l < c.layers; l++) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    add(p + "input_layernorm.weight", {c.hidden}, false);
    add(p + "self_attn.q_proj.weight", {c.qDim(), c.hidden}, true);
    add(p + "self_attn.k_proj.weight", {c.kvDim(), c.hidden}, true);
    add(p + "self_attn.v_proj.weight", {c.kvDim(), c.hidden}, true);
    add(p + "self_attn.o_proj.weight", {c.hidden, c.qDim()}, true);
    add(p + "post_attention_layernorm.weight", {c.hidden}, false);
    add(p + "mlp.gate_proj.weight", {c.ffn, c.hidden}, true);
    add(p + "mlp.up_proj.weight", {c.ffn, c.hidden}, true);
    add(p + "mlp.down_proj.weight", {c.hidden, c.ffn}, true);
  }
  add("model.norm.weight", {c.hidden}, false);
  add("lm_head.weight", {c.vocab, c.hidden}, true);
  return t;
}

size_t parameterCount(const Config& c) {
  const auto t = tensorLayout(c);
  return t.back().offset + t.back().size;
}

Weights bindWeights(const Config& c, real* base) {
  const auto t = tensorLayout(c);
  size_t i = 0;
  auto next = [&]() { return base + t[i++].offset; };
  Weights w;
  w.embed = next();
  for (int l = 0; l < c.layers; l++) {
    LayerWeights L;
    L.attnNorm = next();
    L.wq = next();
    L.wk = next();
    L.wv = next();
    L.wo = next();
    L.mlpNorm = next();
    L.wg = next();
    L.wu = next();
    L.wd = next();
    w.layers.push_back(L);
  }
  w.finalNorm = next();
  w.lmHead = next();
  return w;
}

void initWeights(const Config& c, real* base, uint64_t seed) {
  Rng rng(seed);
  const double outScale = 1.0 / std::sqrt(2.0 * c.layers);
  for (const auto& t : tensorLayout(c)) {
    real* p = base + t.offset;
    if (t.shape.size() == 1) {
      for (size_t i = 0; i < t.size; i++) p[i] = 1;
      continue;
    }
    const bool isOut = t.name.find("o_proj") != std::string::npos || t.name.find("down_proj") != std::string::npos;
    const double std = 0.02 * (isOut ? outScale : 1.0);
    for (size_t i = 0; i < t.size; i++) p[i] = (real)(std * rng.normal());
  }
}

}  // namespace tr
