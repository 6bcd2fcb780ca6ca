#include "model_weights.h"

#include <algorithm>
#include <cstring>
#include <cmath>
#include <cstdlib>

#include "cpu_gemm.h"

namespace dl {
namespace {

float loadAsF32(DType t, const uint8_t* p, size_t i) {
  switch (t) {
    case DType::f32: {
      float f;
      std::memcpy(&f, p + 4 * i, 4);
      return f;
    }
    case DType::bf16: {
      uint16_t h;
      std::memcpy(&h, p + 2 * i, 2);
      return bf16ToF32(h);
    }
    case DType::f16: {
      uint16_t h;
      std::memcpy(&h, p + 2 * i, 2);
      return f16ToF32(h);
    }
    default:
      return 0;
  }
}

// n elements from src (dtype s) to dst (dtype d); the same dtype is a plain copy.
void convert(DType s, const uint8_t* src, DType d, uint8_t* dst, size_t n) {
  if (s == d) {
    std::memcpy(dst, src, n * dtypeSize(s));
    return;
  }
  for (size_t i = 0; i < n; i++) {
    float f = loadAsF32(s, src, i);
    if (d == DType::f32) std::memcpy(dst + 4 * i, &f, 4);
    else {
      uint16_t h = d == DType::bf16 ? f32ToBf16(f) : f32ToF16(f);
      std::memcpy(dst + 2 * i, &h, 2);
    }
  }
}

std::string shapeOf(const std::vector<int64_t>& s) {
  std::string r = "[";
  for (size_t i = 0; i < s.size(); i++) r += (i ? "," : "") + std::to_string(s[i]);
  return r + "]";
}

}  // namespace

ModelWeights::ModelWeights(const ModelConfig& cfg, Device device) : cfg_(cfg), device_(device) {
  const int64_t C = cfg.hidden, V = cfg.vocab, I = cfg.intermediate, Q = cfg.qDim(), KV = cfg.kvDim(), D = cfg.headDim;
  define(embed, V, C, {{"model.embed_tokens.weight", V}}, false);
  define(finalNorm, C, 1, {{"model.norm.weight", C}}, true);
  if (cfg.scoreHead == ModelConfig::ScoreHead::value) {
    // Row 0 and bias 0 stay zero (an unnamed part; buffers start zeroed): the logits [0, v] (model_config.h).
    define(lmHead, 2, C, {{"", 1}, {"v_head.summary.weight", 1}}, false);
    define(headBias, 2, 1, {{"", 1}, {"v_head.summary.bias", 1}}, true);
  } else if (cfg.scoreHead == ModelConfig::ScoreHead::twoClass) {
    define(scoreHidden, C, C, {{"score.0.weight", C}}, false);
    define(scoreHiddenBias, C, 1, {{"score.0.bias", C}}, true);
    define(lmHead, 2, C, {{"score.2.weight", 2}}, false);
    define(headBias, 2, 1, {{"score.2.bias", 2}}, true);
  } else if (!cfg.tieEmbeddings) {
    define(lmHead, V, C, {{"lm_head.weight", V}}, false);
  }
  layers.resize(cfg.numLayers);
  for (int l = 0; l < cfg.numLayers; l++) {
    std::string p = "model.layers." + std::to_string(l) + ".";
    LayerWeights& L = layers[l];
    define(L.inputNorm, C, 1, {{p + "input_layernorm.weight", C}}, true);
    define(L.postNorm, C, 1, {{p + "post_attention_layernorm.weight", C}}, true);
    define(L.qkv, Q + 2 * KV, C,
           {{p + "self_attn.q_proj.weight", Q}, {p + "self_attn.k_proj.weight", KV}, {p + "self_attn.v_proj.weight", KV}},
           false);
    if (cfg.attentionBias)
      define(L.qkvBias, Q + 2 * KV, 1,
             {{p + "self_attn.q_proj.bias", Q}, {p + "self_attn.k_proj.bias", KV}, {p + "self_attn.v_proj.bias", KV}},
             true);
    if (cfg.qkNorm) {
      define(L.qNorm, D, 1, {{p + "self_attn.q_norm.weight", D}}, true);
      define(L.kNorm, D, 1, {{p + "self_attn.k_norm.weight", D}}, true);
    }
    define(L.o, C, Q, {{p + "self_attn.o_proj.weight", C}}, false);
    if (cfg.oProjBias) define(L.oBias, C, 1, {{p + "self_attn.o_proj.bias", C}}, true);
    if (cfg.isMoe(l)) {
      const int64_t E = cfg.numExperts, Im = cfg.moeIntermediate;
      define(L.router, E, C, {{p + "mlp.gate.weight", E}}, false);
      std::vector<std::pair<std::string, int64_t>> gu, dn;
      for (int64_t e = 0; e < E; e++) {
        const std::string x = p + "mlp.experts." + std::to_string(e) + ".";
        gu.push_back({x + "gate_proj.weight", Im}), gu.push_back({x + "up_proj.weight", Im});
        dn.push_back({x + "down_proj.weight", C});
      }
      define(L.expertsGateUp, E * 2 * Im, C, std::move(gu), false);
      define(L.expertsDown, E * C, Im, std::move(dn), false);
    } else {
      define(L.gateUp, 2 * I, C, {{p + "mlp.gate_proj.weight", I}, {p + "mlp.up_proj.weight", I}}, false);
      define(L.down, C, I, {{p + "mlp.down_proj.weight", C}}, false);
    }
  }
  if (cfg.quantizeInt8)
    for (LayerWeights& L : layers)
      for (WeightSlot* s : {&L.qkv, &L.o, &L.gateUp, &L.down}) s->quantize = s->rows > 0;
  for (auto& [slot, isVector] : all_)
    for (size_t i = 0; i < slot->parts.size(); i++) byName_[slot->parts[i].name] = {slot, isVector, i};
  // The packed arena's places (placePacked), in the order a forward step reads the weights, so each GEMM's prefetch
  // runs on into the next one's first lines; a qkv whose q | k | v cuts fall inside a panel stays row-major.
  const int64_t P = cpu::gemm_detail::kPackRows;
  int64_t at = 0;
  auto plan = [&](WeightSlot& s) {
    if (s.quantize) return;
    packPlan_.push_back({&s, at});
    at += cpu::gemm_detail::packedElems(s.rows, s.cols);
  };
  // Experts stay row-major: a step reads a few experts' rows, each expert's block a whole number of rows.
  for (int l = 0; l < cfg.numLayers; l++) {
    LayerWeights& L = layers[size_t(l)];
    if (Q % P == 0 && KV % P == 0) plan(L.qkv);
    plan(L.o);
    if (cfg.isMoe(l)) continue;
    plan(L.gateUp);
    plan(L.down);
  }
  // a tied table serves the embedding gather packed too; a score head stays row-major (its zero row is not written)
  if (cfg.scoreHead == ModelConfig::ScoreHead::none) plan(cfg.tieEmbeddings ? embed : lmHead);
}

void ModelWeights::define(WeightSlot& s, int64_t rows, int64_t cols, std::vector<std::pair<std::string, int64_t>> parts,
                          bool vector) {
  s.rows = rows;
  s.cols = cols;
  int64_t r = 0;
  for (auto& [name, n] : parts) {
    if (name.empty()) {  // rows no checkpoint tensor fills: they keep the buffer's zeros
      r += n;
      continue;
    }
    WeightSlot::Part p;
    p.name = name;
    p.rowOffset = r;
    p.rows = n;
    r += n;
    s.parts.push_back(p);
  }
  all_.push_back({&s, vector});
}

void ModelWeights::set(const std::string& name, DType dtype, const std::vector<int64_t>& shape, const uint8_t* bytes,
                       size_t length, size_t byteOffset) {
  // tied checkpoints sometimes ship a copy; a PRM's checkpoint may keep its base model's (Skywork's does)
  if (name == "lm_head.weight" && (cfg_.tieEmbeddings || cfg_.scoreHead != ModelConfig::ScoreHead::none)) return;
  if (dtype == DType::i32) throw Error("setWeight: '" + name + "' has dtype i32; weights must be f32, bf16 or f16");
  if (auto found = byName_.find(name); found != byName_.end()) {
    WeightSlot* slot = found->second.slot;
    const bool isVector = found->second.isVector;
    {
      WeightSlot::Part& part = slot->parts[found->second.part];
      std::vector<int64_t> want = isVector ? std::vector<int64_t>{part.rows} : std::vector<int64_t>{part.rows, slot->cols};
      if (shape != want)
        throw Error("setWeight: '" + name + "' has shape " + shapeOf(shape) + " but the config implies " + shapeOf(want));
      size_t srcSize = dtypeSize(dtype), count = size_t(part.rows * slot->cols);
      if (byteOffset % srcSize || length % srcSize || byteOffset + length > count * srcSize)
        throw Error("setWeight: '" + name + "': " + std::to_string(length) + " bytes at offset " +
                    std::to_string(byteOffset) + " do not fit a " + dtypeName(dtype) + " tensor of " +
                    std::to_string(count) + " elements");
      if (slot->quantize) {
        setQuantized(*slot, part, dtype, bytes, length, byteOffset, name);
        return;
      }
      if (!slot->buf && (isVector || dtype != DType::bf16 || !placePacked(*slot))) {
        // Vectors become f32 on the CPU (tiny; keeps norms and biases exact); matrices keep the checkpoint dtype
        // (bf16 GEMM weights packed where placePacked says so).
        DType keep = isVector && device_ == Device::cpu ? DType::f32 : dtype;
        slot->buf.reset(device_, keep, slot->rows * slot->cols);
      }
      DType dst = slot->buf.dtype();
      size_t n = length / srcSize;
      const int64_t first = part.rowOffset * slot->cols + int64_t(byteOffset / srcSize);  // of the slot, row-major
      // Writes m values (dst's dtype) from `from` at the slot's row-major element e: packed slots scatter them.
      auto write = [&](const uint8_t* from, int64_t e, size_t m) {
        if (slot->packRows)
          cpu::gemm_detail::packValuesBf16(from, slot->cols, e, int64_t(m), reinterpret_cast<uint16_t*>(slot->buf.at(slot->bufOffset)));
        else
          copyToDevice(device_, slot->buf.at(e), from, m * dtypeSize(dst));
      };
      if (dst == dtype) {
        write(bytes, first, n);
      } else {
        // Convert in bounded chunks so a large tensor never needs a second full-size host copy.
        const size_t chunk = 1 << 20;
        std::vector<uint8_t> tmp(std::min(n, chunk) * dtypeSize(dst));
        for (size_t i = 0; i < n; i += chunk) {
          size_t m = std::min(chunk, n - i);
          convert(dtype, bytes + i * srcSize, dst, tmp.data(), m);
          write(tmp.data(), first + int64_t(i), m);
        }
      }
      part.bytesNeeded = count * srcSize;
      part.bytesSet += length;
      return;
    }
  }
  throw Error("setWeight: unknown weight '" + name + "' for this architecture (" + std::to_string(cfg_.numLayers) +
              " layers, attentionBias " + (cfg_.attentionBias ? "true" : "false") + ", oProjBias " +
              (cfg_.oProjBias ? "true" : "false") + ", qkNorm " + (cfg_.qkNorm ? "true" : "false") + ", tieEmbeddings " +
              (cfg_.tieEmbeddings ? "true" : "false") + (cfg_.numExperts > 0 ? ", " + std::to_string(cfg_.numExperts) + " experts" : "") + ")");
}

void ModelWeights::setQuantized(WeightSlot& slot, WeightSlot::Part& part, DType dtype, const uint8_t* bytes,
                                size_t length, size_t byteOffset, const std::string& name) {
  const size_t srcSize = dtypeSize(dtype), rowBytes = size_t(slot.cols) * srcSize;
  if (byteOffset % rowBytes || length % rowBytes)
    throw Error("setWeight: '" + name + "' is quantized per row at load: set it in whole rows (" + std::to_string(rowBytes) +
                " bytes each), got " + std::to_string(length) + " bytes at offset " + std::to_string(byteOffset));
  if (!slot.buf) {
    slot.buf.reset(device_, DType::i8, slot.rows * slot.cols);
    slot.scale.reset(device_, DType::f32, slot.rows);
  }
  const int64_t K = slot.cols, n = int64_t(length / rowBytes), r0 = part.rowOffset + int64_t(byteOffset / rowBytes);
  std::vector<float> row(static_cast<size_t>(K)), scales(static_cast<size_t>(n));
  std::vector<int8_t> q(static_cast<size_t>(n * K));
  for (int64_t r = 0; r < n; r++) {
    const uint8_t* src = bytes + size_t(r) * rowBytes;
    float amax = 0;
    for (int64_t k = 0; k < K; k++) {
      row[size_t(k)] = loadAsF32(dtype, src, size_t(k));
      if (!std::isfinite(row[size_t(k)]))
        throw Error("setWeight: '" + name + "' row " + std::to_string(r0 - part.rowOffset + r) + " holds a non-finite value; it cannot be quantized");
      amax = std::max(amax, std::fabs(row[size_t(k)]));
    }
    const float s = amax / 127.0f;
    scales[size_t(r)] = s;
    for (int64_t k = 0; k < K; k++)
      q[size_t(r * K + k)] = s == 0 ? int8_t(0) : int8_t(std::max(-127.0f, std::min(127.0f, std::nearbyint(row[size_t(k)] / s))));
  }
  copyToDevice(device_, slot.buf.at(r0 * K), q.data(), q.size());
  copyToDevice(device_, slot.scale.at(r0), scales.data(), scales.size() * 4);
  part.bytesNeeded = size_t(part.rows) * rowBytes;
  part.bytesSet += length;
}

bool ModelWeights::placePacked(WeightSlot& slot) {
  auto place = std::find_if(packPlan_.begin(), packPlan_.end(), [&](const auto& p) { return p.first == &slot; });
  if (place == packPlan_.end()) return false;
  if (!packArena_) {
    if (packDecided_) return false;
    packDecided_ = true;
    // read here, on the JS thread (setWeight), not in a forward's worker: getenv races with process.env writes
    const char* env = getenv("DELIBERATE_PACK_WEIGHTS");
    if (device_ != Device::cpu || !cpu::gemm_detail::packedWSupported() || (env && std::string(env) == "0")) return false;
    int64_t total = 0;
    for (auto& [s, at] : packPlan_) total = std::max(total, at + cpu::gemm_detail::packedElems(s->rows, s->cols));
    try {
      packArena_.reset(device_, DType::bf16, total, false);  // not zeroed: the values and the padding are written
    } catch (const Error&) {
      return false;  // no room for the arena: the weights stay row-major (packing changes speed, never results)
    }
  }
  slot.buf = packArena_;
  slot.bufOffset = place->second;
  slot.packRows = int(cpu::gemm_detail::kPackRows);
  cpu::gemm_detail::zeroPackedPadding(reinterpret_cast<uint16_t*>(slot.buf.at(slot.bufOffset)), slot.rows, slot.cols);
  return true;
}

std::vector<std::string> ModelWeights::missing() const {
  std::vector<std::string> out;
  for (auto& [slot, isVector] : all_)
    for (auto& p : slot->parts)
      if (p.bytesNeeded == 0 || p.bytesSet < p.bytesNeeded) out.push_back(p.name);
  return out;
}

}  // namespace dl
