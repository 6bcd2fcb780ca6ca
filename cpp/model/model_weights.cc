#include "model_weights.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <cmath>
#include <cstdlib>

#include "cpu_gemm.h"

namespace dl {
namespace {

// The rows of a panel of grouped scales on the CPU (WeightSlot::gPanel): the 4-bit and e4m3 decode tiles' 8 rows.
constexpr int64_t kScalePanel = 8;

// DELIBERATE_PACK_WEIGHTS=0: the CPU weights keep CUDA's layouts (row-major, scales by group). Read as weights are
// set, on the JS thread, not in a forward's worker: getenv races with process.env writes.
bool packingOff() {
  const char* env = getenv("DELIBERATE_PACK_WEIGHTS");
  return env && std::string(env) == "0";
}

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
  if (cfg.quantizeInt8 || cfg.quantizeInt4Group || cfg.quantizeFp8)
    for (LayerWeights& L : layers)
      for (WeightSlot* s : {&L.qkv, &L.o, &L.gateUp, &L.down}) s->quantize = s->rows > 0;
  for (auto& [slot, isVector] : all_)
    for (size_t i = 0; i < slot->parts.size(); i++) byName_[slot->parts[i].name] = {slot, isVector, i};
  // The packed arenas' places (placePacked: bf16; placePackedI8: int8 at load), in the order a forward step reads the
  // weights, so each GEMM's prefetch runs on into the next one's first lines; a qkv whose q | k | v cuts fall inside
  // a panel stays row-major (and, for scales by panel, by group: panelOk).
  const int64_t P = cpu::gemm_detail::kPackRows;
  int64_t at = 0;
  int64_t atI8 = 0;
  auto plan = [&](WeightSlot& s) {
    if (s.quantize && cfg.quantizeInt8) {  // int8 at load: the i8 arena's place (placePackedI8)
      i8Arena_.plan.push_back({&s, atI8});
      atI8 += cpu::gemm_detail::packedElems(s.rows, s.cols);
      return;
    }
    if (s.quantize || (cfg.prequantized && (&s != &embed && &s != &lmHead))) return;
    bf16Arena_.plan.push_back({&s, at});
    at += cpu::gemm_detail::packedElems(s.rows, s.cols);
  };
  // Experts stay row-major: a step reads a few experts' rows, each expert's block a whole number of rows.
  for (int l = 0; l < cfg.numLayers; l++) {
    LayerWeights& L = layers[size_t(l)];
    L.qkv.panelOk = Q % kScalePanel == 0 && KV % kScalePanel == 0;
    L.o.panelOk = L.gateUp.panelOk = L.down.panelOk = true;
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
      if (slot->qBits && !slot->quantize)
        throw Error("setWeight: '" + name + "' shares its stacked weight with grouped-quantized parts; set it with setQuantizedWeight too");
      if (slot->quantize) {
        if (cfg_.quantizeInt4Group) setQuantizedInt4(*slot, part, dtype, bytes, length, byteOffset, name);
        else if (cfg_.quantizeFp8) setQuantizedFp8(*slot, part, dtype, bytes, length, byteOffset, name);
        else setQuantized(*slot, part, dtype, bytes, length, byteOffset, name);
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
    if (!placePackedI8(slot)) slot.buf.reset(device_, DType::i8, slot.rows * slot.cols);
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
  if (slot.packRows)
    cpu::gemm_detail::packValuesI8(q.data(), K, r0 * K, n * K, reinterpret_cast<int8_t*>(slot.buf.at(slot.bufOffset)));
  else
    copyToDevice(device_, slot.buf.at(r0 * K), q.data(), q.size());
  copyToDevice(device_, slot.scale.at(r0), scales.data(), scales.size() * 4);
  part.bytesNeeded = size_t(part.rows) * rowBytes;
  part.bytesSet += length;
}

void ModelWeights::setQuantizedInt4(WeightSlot& slot, WeightSlot::Part& part, DType dtype, const uint8_t* bytes,
                                    size_t length, size_t byteOffset, const std::string& name) {
  const size_t srcSize = dtypeSize(dtype), rowBytes = size_t(slot.cols) * srcSize;
  const int64_t K = slot.cols, G = cfg_.quantizeInt4Group;
  if (K % G)
    throw Error("setWeight: '" + name + "' has " + std::to_string(K) + " columns, not a multiple of the int4 group size " +
                std::to_string(G) + "; load it with another quantizeGroupSize or as stored");
  if (byteOffset % rowBytes || length % rowBytes)
    throw Error("setWeight: '" + name + "' is quantized per row at load: set it in whole rows (" + std::to_string(rowBytes) +
                " bytes each), got " + std::to_string(length) + " bytes at offset " + std::to_string(byteOffset));
  const int64_t n = int64_t(length / rowBytes), r0 = part.rowOffset + int64_t(byteOffset / rowBytes), ng = K / G;
  std::vector<float> row(static_cast<size_t>(K)), scales(static_cast<size_t>(n * ng));
  std::vector<uint8_t> q(static_cast<size_t>(n * K / 2));
  for (int64_t r = 0; r < n; r++) {
    const uint8_t* src = bytes + size_t(r) * rowBytes;
    for (int64_t k = 0; k < K; k++) {
      row[size_t(k)] = loadAsF32(dtype, src, size_t(k));
      if (!std::isfinite(row[size_t(k)]))
        throw Error("setWeight: '" + name + "' row " + std::to_string(r0 - part.rowOffset + r) + " holds a non-finite value; it cannot be quantized");
    }
    for (int64_t g = 0; g < ng; g++) {
      // Q4_0's symmetric scheme: the value of largest magnitude (the first such) maps to -8, so the 16 levels
      // -8..7 cover [-|m|, |m| * 7 / 8] on its side with no level wasted; q = clamp(round(w / d) + 8, 0, 15).
      const float* wg = row.data() + g * G;
      float m = 0;
      for (int64_t k = 0; k < G; k++)
        if (std::fabs(wg[k]) > std::fabs(m)) m = wg[k];
      const float d = m / -8.0f;
      scales[size_t(r * ng + g)] = d;
      for (int64_t k = 0; k < G; k++) {
        const float v = d == 0 ? 8.0f : std::max(0.0f, std::min(15.0f, std::nearbyint(wg[k] / d) + 8.0f));
        uint8_t& byte = q[size_t((r * K + g * G + k) / 2)];
        byte = uint8_t((g * G + k) % 2 ? (byte & 0x0f) | (int(v) << 4) : (byte & 0xf0) | int(v));
      }
    }
  }
  storeGrouped(slot, name, 4, int(G), r0, n, q.data(), scales.data(), nullptr, nullptr);
  part.bytesNeeded = size_t(part.rows) * rowBytes;
  part.bytesSet += length;
}

namespace {
// The nearest e4m3fn code of v, ties to the even code (as PyTorch's and ml_dtypes' float -> float8_e4m3fn), beyond
// +-448 the largest finite code (v is a weight over its group's largest magnitude / 448, so |v| <= 448 but for
// rounding). The positive codes 0x00..0x7e ascend in value, so a binary search finds the pair around |v|.
uint8_t e4m3Code(float v) {
  static const std::array<float, 127> values = [] {
    std::array<float, 127> t{};
    for (int c = 0; c < 127; c++) {
      const int e = c >> 3, m = c & 7;
      t[size_t(c)] = e == 0 ? std::ldexp(float(m), -9) : std::ldexp(float(8 + m), e - 10);
    }
    return t;
  }();
  const float a = std::fabs(v);
  int code = int(std::upper_bound(values.begin(), values.end(), a) - values.begin()) - 1;
  if (code < 126) {
    const float below = a - values[size_t(code)], above = values[size_t(code) + 1] - a;
    if (above < below || (above == below && (code & 1))) code++;
  }
  return uint8_t(code | (std::signbit(v) ? 0x80 : 0));
}
}  // namespace

void ModelWeights::setQuantizedFp8(WeightSlot& slot, WeightSlot::Part& part, DType dtype, const uint8_t* bytes,
                                   size_t length, size_t byteOffset, const std::string& name) {
  const size_t srcSize = dtypeSize(dtype), rowBytes = size_t(slot.cols) * srcSize;
  const int64_t K = slot.cols, G = 128, ng = (K + G - 1) / G;
  if (byteOffset % rowBytes || length % rowBytes)
    throw Error("setWeight: '" + name + "' is quantized per row at load: set it in whole rows (" + std::to_string(rowBytes) +
                " bytes each), got " + std::to_string(length) + " bytes at offset " + std::to_string(byteOffset));
  const int64_t n = int64_t(length / rowBytes), r0 = part.rowOffset + int64_t(byteOffset / rowBytes);
  std::vector<float> row(static_cast<size_t>(K)), scales(static_cast<size_t>(n * ng));
  std::vector<uint8_t> q(static_cast<size_t>(n * K));
  for (int64_t r = 0; r < n; r++) {
    const uint8_t* src = bytes + size_t(r) * rowBytes;
    for (int64_t k = 0; k < K; k++) {
      row[size_t(k)] = loadAsF32(dtype, src, size_t(k));
      if (!std::isfinite(row[size_t(k)]))
        throw Error("setWeight: '" + name + "' row " + std::to_string(r0 - part.rowOffset + r) + " holds a non-finite value; it cannot be quantized");
    }
    for (int64_t g = 0; g < ng; g++) {
      // vLLM's dynamic FP8 scale (amax / 448: the largest magnitude maps to e4m3's largest finite value), per row and
      // 128 inputs: the group the e4m3 kernels scale by (a 128 x 128 block's scale would cover 128 rows of it)
      const int64_t k0 = g * G, k1 = std::min(K, k0 + G);
      float amax = 0;
      for (int64_t k = k0; k < k1; k++) amax = std::max(amax, std::fabs(row[size_t(k)]));
      const float s = amax > 0 ? amax / 448.0f : 1.0f;
      scales[size_t(r * ng + g)] = s;
      for (int64_t k = k0; k < k1; k++) q[size_t(r * K + k)] = e4m3Code(row[size_t(k)] / s);
    }
  }
  storeGrouped(slot, name, 8, int(G), r0, n, q.data(), scales.data(), nullptr, nullptr, true);
  part.bytesNeeded = size_t(part.rows) * rowBytes;
  part.bytesSet += length;
}

void ModelWeights::storeGrouped(WeightSlot& slot, const std::string& name, int bits, int groupSize, int64_t r0,
                                int64_t n, const uint8_t* q, const float* scales, const uint8_t* zeros, const int32_t* perm,
                                bool e4m3) {
  // e4m3: the last group of a row may be partial (ceil); the integer formats' groups divide K
  const int64_t K = slot.cols, ng = (K + groupSize - 1) / groupSize, qRow = K * bits / 8;
  const uint8_t mid = uint8_t(bits == 4 ? 8 : 128);
  if (!slot.qBits) {
    if (slot.buf)
      throw Error("setQuantizedWeight: '" + name + "' shares its stacked weight with parts set by setWeight; set every part quantized");
    slot.qBits = bits, slot.qGroup = groupSize, slot.qE4m3 = e4m3;
    // scales by panel where the CPU kernels read them so
    slot.gPanel = device_ == Device::cpu && slot.panelOk && (bits == 4 || e4m3) && !packingOff() ? int(kScalePanel) : 0;
    const int64_t scaleRows = slot.gPanel ? (slot.rows + kScalePanel - 1) / kScalePanel * kScalePanel : slot.rows;
    slot.buf.reset(device_, DType::u8, slot.rows * qRow);
    slot.gScales.reset(device_, DType::f32, scaleRows * ng);
    if (!e4m3) {
      slot.gZeros.reset(device_, DType::u8, scaleRows * ng);
      std::vector<uint8_t> mids(size_t(scaleRows * ng), mid);  // rows not set yet read as symmetric
      copyToDevice(device_, slot.gZeros.data(), mids.data(), mids.size());
    }
    if (perm) {
      slot.gPerm.reset(device_, DType::i32, K);
      copyToDevice(device_, slot.gPerm.data(), perm, size_t(K) * 4);
    }
    // its place in the bf16 arena (if the arena is not allocated yet) is not needed
    if (!bf16Arena_.buf)
      bf16Arena_.plan.erase(std::remove_if(bf16Arena_.plan.begin(), bf16Arena_.plan.end(), [&](const auto& p) { return p.first == &slot; }), bf16Arena_.plan.end());
  } else {
    if (slot.qBits != bits || slot.qGroup != groupSize || slot.qE4m3 != e4m3) {
      auto what = [](bool fp8, int b, int g) {
        return (fp8 ? std::string("e4m3") : std::to_string(b) + " bits") + " in groups of " + std::to_string(g);
      };
      throw Error("setQuantizedWeight: '" + name + "' has " + what(e4m3, bits, groupSize) + " but the weight it is stacked with has " +
                  what(slot.qE4m3, slot.qBits, slot.qGroup));
    }
    std::vector<int32_t> have;
    if (slot.gPerm) {
      have.resize(size_t(K));
      copyToHost(device_, have.data(), slot.gPerm.data(), size_t(K) * 4);
    }
    const bool same = perm ? !have.empty() && std::equal(have.begin(), have.end(), perm) : have.empty();
    if (!same)
      throw Error("setQuantizedWeight: '" + name + "' has another act-order perm than the weight it is stacked with (q/k/v and "
                  "gate/up share one input, so one perm); not supported");
  }
  copyToDevice(device_, slot.buf.at(r0 * qRow), q, size_t(n * qRow));
  if (slot.gPanel) {  // by panel (View::Groups::panel; on the CPU, so written in place)
    const int64_t P = slot.gPanel;
    float* sc = reinterpret_cast<float*>(slot.gScales.data());
    uint8_t* zr = zeros ? slot.gZeros.data() : nullptr;
    for (int64_t r = 0; r < n; r++) {
      const int64_t R = r0 + r, at = R / P * ng * P + R % P;
      for (int64_t g = 0; g < ng; g++) {
        sc[at + g * P] = scales[r * ng + g];
        if (zr) zr[at + g * P] = zeros[r * ng + g];
      }
    }
    if (zeros) slot.gAsym = slot.gAsym || std::any_of(zeros, zeros + n * ng, [&](uint8_t z) { return z != mid; });
    return;
  }
  // scales and zeros by group ([ng, rows]: View::Groups::byGroup), rows [r0, r0 + n) of each group's row
  std::vector<float> sc(static_cast<size_t>(n));
  std::vector<uint8_t> zc(static_cast<size_t>(n));
  for (int64_t g = 0; g < ng; g++) {
    for (int64_t r = 0; r < n; r++) sc[size_t(r)] = scales[r * ng + g];
    copyToDevice(device_, slot.gScales.at(g * slot.rows + r0), sc.data(), size_t(n) * 4);
    if (zeros) {
      for (int64_t r = 0; r < n; r++) zc[size_t(r)] = zeros[r * ng + g];
      copyToDevice(device_, slot.gZeros.at(g * slot.rows + r0), zc.data(), size_t(n));
    }
  }
  if (zeros) {
    slot.gAsym = slot.gAsym || std::any_of(zeros, zeros + n * ng, [&](uint8_t z) { return z != mid; });
  }
}

void ModelWeights::setGrouped(const std::string& name, int bits, int groupSize, const std::vector<int64_t>& shape,
                              const uint8_t* q, size_t qBytes, const float* scales, size_t nScales,
                              const uint8_t* zeros, size_t nZeros, const int32_t* perm, size_t nPerm, bool e4m3) {
  const std::string at = "setQuantizedWeight: '" + name + "'";
  auto found = byName_.find(name);
  if (found == byName_.end()) throw Error(at + " is not a weight of this architecture");
  WeightSlot* slot = found->second.slot;
  bool linear = false;
  for (LayerWeights& L : layers)
    for (WeightSlot* s : {&L.qkv, &L.o, &L.gateUp, &L.down}) linear = linear || s == slot;
  if (!linear)
    throw Error(at + " is not a dense layer's q/k/v, o, gate/up or down projection; embeddings, norms, the LM head and "
                "MoE experts are set with setWeight as stored");
  if (cfg_.quantizeInt8 || cfg_.quantizeInt4Group || cfg_.quantizeFp8)
    throw Error(at + ": the model quantizes at load (quantize \"int8\" / \"int4\" / \"fp8\"); a pre-quantized weight takes quantize \"checkpoint\" or none");
  WeightSlot::Part& part = slot->parts[found->second.part];
  const int64_t K = slot->cols;
  if (shape != std::vector<int64_t>{part.rows, K})
    throw Error(at + " has shape " + shapeOf(shape) + " but the config implies " + shapeOf({part.rows, K}));
  if (e4m3) {
    if (bits != 8) throw Error(at + ": an e4m3 weight has bits 8 (one code a weight), got " + std::to_string(bits));
    setE4m3(*slot, part, at, groupSize, q, qBytes, scales, nScales, zeros != nullptr && nZeros > 0, perm != nullptr, name);
    return;
  }
  if (bits != 4 && bits != 8) throw Error(at + ": bits must be 4 or 8, got " + std::to_string(bits));
  if (groupSize < 32 || groupSize % 32 || K % groupSize)
    throw Error(at + ": groupSize must be a multiple of 32 dividing K = " + std::to_string(K) + ", got " + std::to_string(groupSize));
  const int64_t ng = K / groupSize, n = part.rows;
  if (qBytes != size_t(n * K * bits / 8))
    throw Error(at + ": q must hold " + std::to_string(n * K * bits / 8) + " bytes ([" + std::to_string(n) + ", " +
                std::to_string(K * bits / 8) + "]), got " + std::to_string(qBytes));
  if (nScales != size_t(n * ng))
    throw Error(at + ": scales must hold " + std::to_string(n * ng) + " values ([" + std::to_string(n) + ", " + std::to_string(ng) + "]), got " + std::to_string(nScales));
  if (nZeros != size_t(n * ng))
    throw Error(at + ": zeros must hold " + std::to_string(n * ng) + " values ([" + std::to_string(n) + ", " + std::to_string(ng) + "]), got " + std::to_string(nZeros));
  for (size_t i = 0; i < nScales; i++)
    if (!std::isfinite(scales[i])) throw Error(at + ": scales[" + std::to_string(i) + "] is not finite");
  if (bits == 4)
    for (size_t i = 0; i < nZeros; i++)
      // [0, 16]: 16 is a GPTQ v1 checkpoint's zero point of 0 (stored minus one, wrapped to 15, read back plus one);
      // the formats hold no more (the kernels would: the CPU's start from -(128 + zero), CUDA subtracts integers).
      if (zeros[i] > 16) throw Error(at + ": zeros[" + std::to_string(i) + "] = " + std::to_string(zeros[i]) + " exceeds 16 (4 bits; 16: GPTQ v1's wrapped 0)");
  if (perm) {
    if (nPerm != size_t(K)) throw Error(at + ": perm must hold K = " + std::to_string(K) + " values, got " + std::to_string(nPerm));
    std::vector<uint8_t> seen(size_t(K), 0);
    for (int64_t k = 0; k < K; k++) {
      if (perm[k] < 0 || perm[k] >= K || seen[size_t(perm[k])]++)
        throw Error(at + ": perm is not a permutation of [0, " + std::to_string(K) + "): perm[" + std::to_string(k) + "] = " + std::to_string(perm[k]));
    }
  }
  storeGrouped(*slot, name, bits, groupSize, part.rowOffset, n, q, scales, zeros, perm);
  part.bytesNeeded = qBytes;
  part.bytesSet = qBytes;
}

void ModelWeights::setE4m3(WeightSlot& slot, WeightSlot::Part& part, const std::string& at, int groupSize,
                           const uint8_t* q, size_t qBytes, const float* scales, size_t nScales, bool zeros, bool perm,
                           const std::string& name) {
  const int64_t K = slot.cols, n = part.rows;
  if (groupSize != 32 && groupSize != 64 && groupSize != 128)
    throw Error(at + ": an e4m3 weight's groupSize must be 32, 64 or 128, got " + std::to_string(groupSize));
  if (zeros || perm) throw Error(at + ": an e4m3 weight has no zeros and no perm");
  const int64_t ng = (K + groupSize - 1) / groupSize;
  if (qBytes != size_t(n * K))
    throw Error(at + ": q must hold " + std::to_string(n * K) + " e4m3 codes ([" + std::to_string(n) + ", " + std::to_string(K) +
                "]), got " + std::to_string(qBytes));
  if (nScales != size_t(n * ng))
    throw Error(at + ": scales must hold " + std::to_string(n * ng) + " values ([" + std::to_string(n) + ", " + std::to_string(ng) + "]), got " + std::to_string(nScales));
  for (size_t i = 0; i < nScales; i++)
    if (!std::isfinite(scales[i])) throw Error(at + ": scales[" + std::to_string(i) + "] is not finite");
  for (size_t i = 0; i < qBytes; i++)
    if ((q[i] & 0x7f) == 0x7f)
      throw Error(at + ": q[" + std::to_string(int64_t(i) / K) + ", " + std::to_string(int64_t(i) % K) + "] is an e4m3 NaN code (0x" +
                  (q[i] == 0x7f ? "7f" : "ff") + ")");
  storeGrouped(slot, name, 8, groupSize, part.rowOffset, n, q, scales, nullptr, nullptr, true);
  part.bytesNeeded = qBytes;
  part.bytesSet = qBytes;
}

size_t ModelWeights::residentBytes() const {
  // each slot's own bytes: a packed slot's share of its arena without the padding (nor the arenas' places left
  // unused), so the total is the weights report's whatever the CPU layout (at most a few percent less than allocated)
  size_t total = 0;
  for (auto& [slot, isVector] : all_)
    if (slot->buf) total += slot->residentBytes();
  return total;
}

std::string ModelWeights::linearFormat() const {
  for (const LayerWeights& L : layers)
    for (const WeightSlot* s : {&L.qkv, &L.o, &L.gateUp, &L.down}) {
      if (!s->buf) continue;
      if (s->qE4m3) return "e4m3 g" + std::to_string(s->qGroup);
      if (s->qBits) return "int" + std::to_string(s->qBits) + " g" + std::to_string(s->qGroup) + (s->gAsym ? " asym" : "") + (s->gPerm ? " act-order" : "");
      return s->scale ? "int8" : dtypeName(s->buf.dtype());
    }
  return "none";
}

ModelWeights::LinearLayouts ModelWeights::linearLayouts() const {
  LinearLayouts n;
  auto count = [&](const WeightSlot& s) {
    if (!s.buf) return;
    if (s.packRows) n.packed++;
    else if (s.gPanel) n.byPanel++;
    else n.asStored++;
  };
  for (const LayerWeights& L : layers)
    for (const WeightSlot* s : {&L.qkv, &L.o, &L.gateUp, &L.down}) count(*s);
  count(head());
  return n;
}

bool ModelWeights::place(PackArena& a, WeightSlot& slot, DType dtype, bool supported) {
  auto place = std::find_if(a.plan.begin(), a.plan.end(), [&](const auto& p) { return p.first == &slot; });
  if (place == a.plan.end()) return false;
  if (!a.buf) {
    if (a.decided) return false;
    a.decided = true;
    if (device_ != Device::cpu || !supported || packingOff()) return false;
    int64_t total = 0;
    for (auto& [s, at] : a.plan) total = std::max(total, at + cpu::gemm_detail::packedElems(s->rows, s->cols));
    try {
      a.buf.reset(device_, dtype, total, false);  // not zeroed: the values and the padding are written
    } catch (const Error&) {
      return false;  // no room for the arena: the weights stay row-major (packing changes speed, never results)
    }
  }
  slot.buf = a.buf;
  slot.bufOffset = place->second;
  slot.packRows = int(cpu::gemm_detail::kPackRows);
  return true;
}

bool ModelWeights::placePacked(WeightSlot& slot) {
  if (!place(bf16Arena_, slot, DType::bf16, cpu::gemm_detail::packedWSupported())) return false;
  cpu::gemm_detail::zeroPackedPadding(reinterpret_cast<uint16_t*>(slot.buf.at(slot.bufOffset)), slot.rows, slot.cols);
  return true;
}

bool ModelWeights::placePackedI8(WeightSlot& slot) {
  if (!place(i8Arena_, slot, DType::i8, cpu::gemm_detail::packedI8Supported())) return false;
  cpu::gemm_detail::zeroPackedPaddingI8(reinterpret_cast<int8_t*>(slot.buf.at(slot.bufOffset)), slot.rows, slot.cols);
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
