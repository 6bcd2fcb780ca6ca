// Model construction, boundary validation, page copies. The forward pass itself is in model_forward.cc.
#include "model.h"

#include <cstring>

#include <cmath>
#include "model_ops.h"

namespace dl {

Model::Model(const ModelConfig& c, Device d, DType act, const KvPoolConfig& k)
    : cfg(c), device(d), actDtype(act), kv(k), weights(cfg, d) {
  cfg.validate();
  if (d == Device::cpu && act != DType::f32)
    throw Error(std::string("NativeModel: activation dtype must be f32 on the CPU (its GEMM reads f32 inputs), got ") +
                dtypeName(act));
  if (act != DType::f32 && act != DType::bf16) throw Error("NativeModel: activation dtype must be f32 or bf16");
  if (k.dtype == DType::i32) throw Error("NativeModel: kvDtype must be f32, bf16 or f16");
  if (k.numPages < 1 || k.pageSize < 1)
    throw Error("NativeModel: numPages and pageSize must be positive, got " + std::to_string(k.numPages) + " and " +
                std::to_string(k.pageSize));
  // Checked in double before any int64 product: numPages, pageSize, numKvHeads and headDim each pass their own
  // bounds, yet their product can wrap int64 and leave a tiny pool that forward would index far past.
  const double poolBytes = (double(k.numPages) + 1) * k.pageSize * double(cfg.kvDim()) * double(dtypeSize(k.dtype)) * 2 *
                           cfg.numLayers;
  if (poolBytes > double(int64_t(1) << 50))
    throw Error("NativeModel: a KV pool of (numPages " + std::to_string(k.numPages) + " + 1) x pageSize " +
                std::to_string(k.pageSize) + " x numKvHeads " + std::to_string(cfg.numKvHeads) + " x headDim " +
                std::to_string(cfg.headDim) + " x 2 x numLayers " + std::to_string(cfg.numLayers) +
                " is larger than 2^50 bytes; lower numPages or pageSize");
  int64_t perLayer = (int64_t(k.numPages) + 1) * k.pageSize * cfg.kvDim();  // + the scratch page (model.h)
  kCache_.resize(cfg.numLayers);
  vCache_.resize(cfg.numLayers);
  for (int l = 0; l < cfg.numLayers; l++) {
    kCache_[l].reset(d, k.dtype, perLayer);
    vCache_[l].reset(d, k.dtype, perLayer);
  }
  invFreq_.reset(d, DType::f32, int64_t(cfg.invFreq.size()));
  copyToDevice(d, invFreq_.data(), cfg.invFreq.data(), cfg.invFreq.size() * sizeof(float));
}

size_t Model::kvBytes() const {  // the pool's pages (the scratch page is not the caller's)
  return size_t(kv.numPages) * size_t(kv.pageSize) * size_t(cfg.kvDim()) * dtypeSize(kv.dtype) * 2 * size_t(cfg.numLayers);
}

void Model::requireWeights() const {
  auto miss = weights.missing();
  if (miss.empty()) return;
  std::string list;
  for (size_t i = 0; i < miss.size() && i < 5; i++) list += (i ? ", " : "") + miss[i];
  if (miss.size() > 5) list += ", ... (" + std::to_string(miss.size()) + " in all)";
  throw Error("NativeModel: weights not set yet: " + list + "; call setWeight for each before forward");
}

// allowedTokens of sequence i (model.h SeqInput): rows * ceil(vocab / 32) words, on an emitting sequence, each row
// allowing some id < vocab (a row allowing none would sample from an all -inf row: the engine ends such a sequence).
static void validateAllowedTokens(const SeqInput& s, size_t i, int vocab) {
  const std::string who = "forward: sequence " + std::to_string(i) + ": ";
  if (!s.emitToken)
    throw Error(who + "allowedTokens is given but emitToken is false; only a sequence that samples has a row to mask");
  const int64_t W = (int64_t(vocab) + 31) / 32, rows = s.emitAll ? int64_t(s.tokens.size()) : 1;
  const std::vector<int32_t>& mask = *s.allowedTokens;
  if (int64_t(mask.size()) != rows * W)
    throw Error(who + "allowedTokens holds " + std::to_string(mask.size()) + " int32 words, expected " +
                std::to_string(rows * W) + " = " + std::to_string(rows) + (s.emitAll ? " rows (tokens.length, emitAll)" : " row") +
                " x ceil(vocab " + std::to_string(vocab) + " / 32) = " + std::to_string(W) + " words");
  // The last word's bits for ids < vocab: 1 .. 32 of them.
  const int tail = int(int64_t(vocab) - 32 * (W - 1));
  const uint32_t lastValid = tail == 32 ? 0xffffffffu : (1u << tail) - 1;
  for (int64_t j = 0; j < rows; j++) {
    const int32_t* row = mask.data() + j * W;
    bool any = (uint32_t(row[W - 1]) & lastValid) != 0;
    for (int64_t w = 0; w + 1 < W && !any; w++) any = row[w] != 0;
    if (!any)
      throw Error("forward: allowedTokens row " + std::to_string(j) + " of sequence " + std::to_string(i) +
                  " allows no token; the engine must end such a sequence instead (no bit is set for an id below vocab " +
                  std::to_string(vocab) + ")");
  }
}

void Model::validate(const BatchInput& b) const {
  auto fail = [](const std::string& m) { throw Error("forward: " + m); };
  if (b.seqs.empty()) fail("the batch has no sequences");
  if (b.gemmSplitK < 1 || b.gemmSplitK > 4096) fail("gemmSplitK must be in [1, 4096], got " + std::to_string(b.gemmSplitK));
  if (b.kvSplits < 1 || b.kvSplits > 1024) fail("kvSplits must be in [1, 1024], got " + std::to_string(b.kvSplits));
  if (b.fixedGemmSplitK < 1 || b.fixedGemmSplitK > 4096)
    fail("fixedGemmSplitK must be in [1, 4096], got " + std::to_string(b.fixedGemmSplitK));
  for (size_t i = 0; i < b.seqs.size(); i++) {
    const SeqInput& s = b.seqs[i];
    std::string who = "sequence " + std::to_string(i) + ": ";
    if (s.tokens.empty()) fail(who + "tokens is empty; give at least one new token");
    for (size_t j = 0; j < s.tokens.size(); j++)
      if (s.tokens[j] < 0 || s.tokens[j] >= cfg.vocab)
        fail(who + "token id " + std::to_string(s.tokens[j]) + " at index " + std::to_string(j) +
             " is out of range [0, " + std::to_string(cfg.vocab) + ")");
    if (s.startPos < 0) fail(who + "startPos must be >= 0, got " + std::to_string(s.startPos));
    int64_t end = int64_t(s.startPos) + int64_t(s.tokens.size());
    if (end > INT32_MAX / 2) fail(who + "startPos + tokens = " + std::to_string(end) + " is too large");
    int64_t pagesNeeded = (end + kv.pageSize - 1) / kv.pageSize;
    if (int64_t(s.blockTable.size()) < pagesNeeded)
      fail(who + "blockTable holds " + std::to_string(s.blockTable.size()) + " pages (" +
           std::to_string(s.blockTable.size() * size_t(kv.pageSize)) + " tokens) but startPos " +
           std::to_string(s.startPos) + " + " + std::to_string(s.tokens.size()) + " new tokens needs " +
           std::to_string(pagesNeeded) + " pages of " + std::to_string(kv.pageSize));
    for (size_t j = 0; j < s.blockTable.size(); j++)
      if (s.blockTable[j] < 0 || s.blockTable[j] >= kv.numPages)
        fail(who + "blockTable[" + std::to_string(j) + "] = " + std::to_string(s.blockTable[j]) +
             " is not a page id in [0, " + std::to_string(kv.numPages) + ")");
    if (!(s.temperature >= 0) || !std::isfinite(s.temperature))
      fail(who + "temperature must be a finite number >= 0, got " + std::to_string(s.temperature));
    if (s.topK < 0) fail(who + "topK must be >= 0 (0 = off), got " + std::to_string(s.topK));
    if (!(s.topP > 0 && s.topP <= 1)) fail(who + "topP must be in (0, 1], got " + std::to_string(s.topP));
    // A score head's rows have 2 logits (model_config.h headRows), a language model's vocab.
    const int width = cfg.headRows();
    if (s.numTop < 0 || s.numTop > 64 || s.numTop > width)
      fail(who + "numTopLogprobs must be in [0, min(64, " + std::to_string(width) + ")], got " + std::to_string(s.numTop));
    if (s.confidenceK < 0 || s.confidenceK > 64 || s.confidenceK > width)
      fail(who + "confidenceTopK must be in [0, min(64, " + std::to_string(width) + ")], got " + std::to_string(s.confidenceK));
    if (s.emitAll && !s.emitToken) fail(who + "emitAll needs emitToken (a row that samples nothing cannot sample everywhere)");
    if (s.allowedTokens) validateAllowedTokens(s, i, width);
    if (s.lateMask >= 0) {
      if (device != Device::cpu) fail(who + "lateMask is read on the CPU only; give allowedTokens");
      if (s.allowedTokens) fail(who + "give allowedTokens or lateMask, not both");
      if (!s.emitToken || s.emitAll) fail(who + "lateMask masks one sampled row: it needs emitToken and not emitAll");
      if (s.lateMask >= b.lateRows)
        fail(who + "lateMask " + std::to_string(s.lateMask) + " is not a row of lateMasks (" +
             std::to_string(b.lateRows) + " rows)");
      for (size_t k = 0; k < i; k++)
        if (b.seqs[k].lateMask == s.lateMask)
          fail(who + "lateMask " + std::to_string(s.lateMask) + " is also sequence " + std::to_string(k) + "'s");
    }
    for (size_t j = 0; j < s.captureLayers.size(); j++) {
      const int l = s.captureLayers[j];
      if (l < 0 || l > cfg.numLayers + 1)
        fail(who + "captureHiddenLayers[" + std::to_string(j) + "] must be in [0, " + std::to_string(cfg.numLayers + 1) +
             "] (numLayers + 1 = the final norm's input), got " + std::to_string(l));
      if (j > 0 && l <= s.captureLayers[j - 1])
        fail(who + "captureHiddenLayers must be ascending without repeats, got " + std::to_string(s.captureLayers[j - 1]) +
             " then " + std::to_string(l));
    }
  }
  if (b.copySrc.size() != b.copyDst.size()) fail("pageCopies src and dst must have the same length");
  for (size_t i = 0; i < b.copySrc.size(); i++)
    if (b.copySrc[i] < 0 || b.copySrc[i] >= kv.numPages || b.copyDst[i] < 0 || b.copyDst[i] >= kv.numPages)
      fail("pageCopies[" + std::to_string(i) + "] (" + std::to_string(b.copySrc[i]) + " -> " +
           std::to_string(b.copyDst[i]) + ") is not a pair of page ids in [0, " + std::to_string(kv.numPages) + ")");
}

void Model::copyPages(const std::vector<int32_t>& src, const std::vector<int32_t>& dst) {
  if (src.empty()) return;
  size_t n = src.size();
  metaHost_.assign(src.begin(), src.end());
  metaHost_.insert(metaHost_.end(), dst.begin(), dst.end());
  if (device == Device::cuda) {
    metaDev_.ensure(device, DType::i32, int64_t(metaHost_.size()));
    copyToDevice(device, metaDev_.data(), metaHost_.data(), metaHost_.size() * 4);
  }
  View s = meta(0, int64_t(n)), d = meta(int64_t(n), int64_t(n));
  for (int l = 0; l < cfg.numLayers; l++) {
    View kc = kCache_[l].view({kv.numPages, kv.pageSize, cfg.numKvHeads, cfg.headDim});
    View vc = vCache_[l].view({kv.numPages, kv.pageSize, cfg.numKvHeads, cfg.headDim});
    ops::pageCopy(device, kc, vc, s, d);
  }
}

Model::Pinned::~Pinned() { gpu::freeHost(data); }

uint8_t* Model::staging(size_t bytes) {
  if (pinned_.bytes < bytes) {
    gpu::freeHost(pinned_.data);
    pinned_.data = nullptr;
    pinned_.bytes = 0;
    pinned_.data = gpu::mallocHost(bytes);
    pinned_.bytes = bytes;
  }
  return static_cast<uint8_t*>(pinned_.data);
}

size_t Model::pageHostBytes() const {
  return size_t(2) * cfg.numLayers * kv.pageSize * cfg.numKvHeads * cfg.headDim * dtypeSize(kv.dtype);
}

void Model::readPages(const std::vector<int32_t>& pages, uint8_t* host) {
  const size_t pb = pageHostBytes() / (2 * size_t(cfg.numLayers));
  const size_t total = pages.size() * pageHostBytes();
  uint8_t* out = device == Device::cuda ? staging(total) : host;
  for (int32_t p : pages)
    for (int l = 0; l < cfg.numLayers; l++)
      for (const Buffer* c : {&kCache_[l], &vCache_[l]}) {
        const uint8_t* src = c->data() + size_t(p) * pb;
        if (device == Device::cuda) gpu::copyDeviceToHostAsync(out, src, pb);
        else std::memcpy(out, src, pb);
        out += pb;
      }
  if (device == Device::cuda) {
    gpu::synchronize();
    std::memcpy(host, pinned_.data, total);
  }
}

void Model::writePages(const std::vector<int32_t>& pages, const uint8_t* host) {
  const size_t pb = pageHostBytes() / (2 * size_t(cfg.numLayers));
  const size_t total = pages.size() * pageHostBytes();
  const uint8_t* in = host;
  if (device == Device::cuda) {
    std::memcpy(staging(total), host, total);
    in = static_cast<const uint8_t*>(pinned_.data);
  }
  for (int32_t p : pages)
    for (int l = 0; l < cfg.numLayers; l++)
      for (Buffer* c : {&kCache_[l], &vCache_[l]}) {
        uint8_t* dst = c->data() + size_t(p) * pb;
        if (device == Device::cuda) gpu::copyHostToDeviceAsync(dst, in, pb);
        else std::memcpy(dst, in, pb);
        in += pb;
      }
  if (device == Device::cuda) gpu::synchronize();
}

View Model::meta(int64_t offset, int64_t n, DType t) const {
  const void* base = device == Device::cuda ? static_cast<const void*>(metaDev_.at(offset))
                                            : static_cast<const void*>(metaHost_.data() + offset);
  return makeView(const_cast<void*>(base), t, device, {n});
}

}  // namespace dl
