// The JS NativeModel (typed in ts/native/addonTypes.ts): construction from config numbers, setWeight tensor by
// tensor, forward(batch) as ONE AsyncWorker per engine step, copyPages, idempotent dispose. Everything a caller
// can get wrong is checked here, on the JS thread, and rejected with an Error naming the field.
#include <cstring>
#include <napi.h>

#include <limits>
#include <memory>
#include <new>
#include "model.h"
#include "napi_model.h"
#include "napi_tensor.h"
#include "napi_value.h"

namespace dl {
namespace {

[[noreturn]] void fail(const std::string& m) { throw Error(m); }

Napi::Value field(const Napi::Object& o, const char* name, const std::string& where, bool required = true) {
  Napi::Value v = o.Get(name);
  if (required && (v.IsUndefined() || v.IsNull())) fail(where + ": missing '" + name + "'");
  return v;
}

double num(const Napi::Object& o, const char* name, const std::string& where, double def, bool required = false) {
  Napi::Value v = field(o, name, where, required);
  if (v.IsUndefined() || v.IsNull()) return def;
  if (!v.IsNumber()) fail(where + ": '" + name + "' must be a number, got " + describeValue(v));
  return v.As<Napi::Number>().DoubleValue();
}

// The one range rule of every integer field, for the object batch and the packed one alike.
int64_t inRange(double d, const char* name, const std::string& where, int64_t lo, int64_t hi) {
  if (!isIntegerIn(d, double(lo), double(hi)))
    fail(where + ": '" + name + "' must be an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "], got " +
         std::to_string(d));
  return int64_t(d);
}

int64_t integer(const Napi::Object& o, const char* name, const std::string& where, int64_t def, int64_t lo, int64_t hi,
                bool required = false) {
  return inRange(num(o, name, where, double(def), required), name, where, lo, hi);
}

bool boolean(const Napi::Object& o, const char* name, const std::string& where, bool def) {
  Napi::Value v = field(o, name, where, false);
  if (v.IsUndefined() || v.IsNull()) return def;
  if (!v.IsBoolean()) fail(where + ": '" + name + "' must be a boolean");
  return v.As<Napi::Boolean>().Value();
}

std::vector<int32_t> int32s(Napi::Value v, const std::string& what) {
  if (!v.IsTypedArray() || v.As<Napi::TypedArray>().TypedArrayType() != napi_int32_array)
    fail(what + " must be an Int32Array");
  auto a = v.As<Napi::Int32Array>();
  return std::vector<int32_t>(a.Data(), a.Data() + a.ElementLength());
}

uint64_t seedOf(Napi::Value v, const std::string& where) {
  if (v.IsUndefined() || v.IsNull()) return 0;
  if (v.IsBigInt()) {
    bool lossless = true;
    uint64_t s = v.As<Napi::BigInt>().Uint64Value(&lossless);
    if (!lossless) fail(where + ": 'seed' must fit in an unsigned 64-bit integer");
    return s;
  }
  if (v.IsNumber()) {
    double d = v.As<Napi::Number>().DoubleValue();
    if (!isIntegerIn(d, 0, 9007199254740991.0))
      fail(where + ": 'seed' must be a non-negative safe integer or a bigint, got " + std::to_string(d));
    return uint64_t(d);
  }
  fail(where + ": 'seed' must be a number or a bigint");
}

ModelConfig parseConfig(const Napi::Object& o) {
  const std::string w = "NativeModel";
  ModelConfig c;
  c.numLayers = int(integer(o, "numLayers", w, 0, 1, 1 << 12, true));
  c.hidden = int(integer(o, "hidden", w, 0, 1, 1 << 20, true));
  c.numHeads = int(integer(o, "numHeads", w, 0, 1, 1 << 12, true));
  c.numKvHeads = int(integer(o, "numKvHeads", w, 0, 1, 1 << 12, true));
  c.headDim = int(integer(o, "headDim", w, 0, 2, 1 << 12, true));
  c.intermediate = int(integer(o, "intermediate", w, 0, 1, 1 << 22, true));
  c.vocab = int(integer(o, "vocab", w, 0, 1, 1 << 30, true));
  c.rmsEps = float(num(o, "rmsEps", w, 1e-6));
  c.attentionBias = boolean(o, "attentionBias", w, false);
  c.oProjBias = boolean(o, "oProjBias", w, false);
  c.qkNorm = boolean(o, "qkNorm", w, false);
  c.attnLogitScale = float(num(o, "attnLogitScale", w, 1.0));
  c.tieEmbeddings = boolean(o, "tieEmbeddings", w, false);
  c.slidingWindow = int(integer(o, "slidingWindow", w, 0, 0, 1 << 30, false));
  Napi::Value inv = field(o, "invFreq", w);
  if (!inv.IsTypedArray() || inv.As<Napi::TypedArray>().TypedArrayType() != napi_float32_array)
    fail("NativeModel: 'invFreq' must be a Float32Array of headDim/2 values");
  auto a = inv.As<Napi::Float32Array>();
  c.invFreq.assign(a.Data(), a.Data() + a.ElementLength());
  Napi::Value moe = field(o, "moe", w, false);
  if (!moe.IsUndefined() && !moe.IsNull()) {
    if (!moe.IsObject()) fail("NativeModel: 'moe' must be an object {numExperts, expertsPerToken, intermediate, normTopK, layers}");
    const Napi::Object m = moe.As<Napi::Object>();
    const std::string wm = "NativeModel.moe";
    c.numExperts = int(integer(m, "numExperts", wm, 0, 1, 1024, true));
    c.expertsPerToken = int(integer(m, "expertsPerToken", wm, 0, 1, c.numExperts, true));
    c.moeIntermediate = int(integer(m, "intermediate", wm, 0, 1, 1 << 22, true));
    c.normTopK = boolean(m, "normTopK", wm, false);
    c.moeLayer.assign(size_t(c.numLayers), 0);
    for (int32_t l : int32s(field(m, "layers", wm), wm + ".layers")) {
      if (l < 0 || l >= c.numLayers) fail(wm + ".layers: layer " + std::to_string(l) + " is not in [0, numLayers = " + std::to_string(c.numLayers) + ")");
      c.moeLayer[size_t(l)] = 1;
    }
  }
  Napi::Value head = field(o, "scoreHead", w, false);
  if (!head.IsUndefined() && !head.IsNull()) {
    const std::string h = head.IsString() ? head.As<Napi::String>().Utf8Value() : "";
    if (h == "value") c.scoreHead = ModelConfig::ScoreHead::value;
    else if (h == "twoClass") c.scoreHead = ModelConfig::ScoreHead::twoClass;
    else fail("NativeModel: 'scoreHead' must be \"value\" or \"twoClass\" (or absent for a language model)");
  }
  Napi::Value quantize = field(o, "quantize", w, false);
  const int64_t group = integer(o, "quantizeGroupSize", w, 0, 0, 1 << 20);
  if (!quantize.IsUndefined() && !quantize.IsNull()) {
    const std::string q = quantize.IsString() ? quantize.As<Napi::String>().Utf8Value() : "";
    if (q == "int8") c.quantizeInt8 = true;
    else if (q == "int4") c.quantizeInt4Group = int(group ? group : 32);
    else if (q == "fp8") c.quantizeFp8 = true;
    else if (q == "checkpoint") c.prequantized = true;
    else fail("NativeModel: 'quantize' must be \"int8\", \"int4\", \"fp8\" or \"checkpoint\" (or absent for the checkpoint's dtype)");
  }
  if (group && !c.quantizeInt4Group) fail("NativeModel: 'quantizeGroupSize' is for quantize \"int4\" only");
  if (c.quantizeInt4Group && (c.quantizeInt4Group < 32 || c.quantizeInt4Group % 32))
    fail("NativeModel: 'quantizeGroupSize' must be a multiple of 32, got " + std::to_string(c.quantizeInt4Group));
  c.validate();
  return c;
}

BatchInput parseBatch(const Napi::Value& v) {
  if (!v.IsObject()) fail("forward: expected a batch object {sequences, gemmSplitK, kvSplits}");
  Napi::Object o = v.As<Napi::Object>();
  BatchInput b;
  b.gemmSplitK = int(integer(o, "gemmSplitK", "forward", 1, 1, 4096));
  b.kvSplits = int(integer(o, "kvSplits", "forward", 1, 1, 1024));
  b.fixedGemmSplitK = int(integer(o, "fixedGemmSplitK", "forward", 1, 1, 4096));
  b.returnLogits = boolean(o, "returnLogits", "forward", false);
  b.fastSplitK = boolean(o, "fastSplitK", "forward", false);
  b.profile = boolean(o, "profile", "forward", false);
  Napi::Value pc = o.Get("pageCopies");
  if (!pc.IsUndefined() && !pc.IsNull()) {
    if (!pc.IsObject()) fail("forward: 'pageCopies' must be {src: Int32Array, dst: Int32Array}");
    b.copySrc = int32s(pc.As<Napi::Object>().Get("src"), "forward: pageCopies.src");
    b.copyDst = int32s(pc.As<Napi::Object>().Get("dst"), "forward: pageCopies.dst");
  }
  Napi::Value seqs = o.Get("sequences");
  if (!seqs.IsArray()) fail("forward: 'sequences' must be an array");
  Napi::Array arr = seqs.As<Napi::Array>();
  for (uint32_t i = 0; i < arr.Length(); i++) {
    std::string w = "forward: sequence " + std::to_string(i);
    Napi::Value sv = arr[i];
    if (!sv.IsObject()) fail(w + " must be an object");
    Napi::Object so = sv.As<Napi::Object>();
    SeqInput s;
    s.tokens = int32s(field(so, "tokens", w), w + ": 'tokens'");
    s.startPos = int32_t(integer(so, "startPos", w, 0, 0, INT32_MAX / 2, true));
    s.blockTable = int32s(field(so, "blockTable", w), w + ": 'blockTable'");
    s.numTop = int(integer(so, "numTopLogprobs", w, 0, 0, 64));
    s.confidenceK = int(integer(so, "confidenceTopK", w, 0, 0, 64));
    const int one = int(integer(so, "captureHiddenLayer", w, -1, -1, 1 << 12));
    Napi::Value many = so.Get("captureHiddenLayers");
    if (!many.IsUndefined() && !many.IsNull()) {
      if (one >= 0) fail(w + ": give captureHiddenLayer or captureHiddenLayers, not both");
      s.captureLayers = int32s(many, w + ": 'captureHiddenLayers'");
    } else if (one >= 0) {
      s.captureLayers = {one};
    }
    s.emitToken = boolean(so, "emitToken", w, true);
    s.emitAll = boolean(so, "emitAll", w, false);
    s.fixedSchedule = boolean(so, "fixedSchedule", w, false);
    Napi::Value allowed = so.Get("allowedTokens");
    if (!allowed.IsUndefined() && !allowed.IsNull()) s.allowedTokens = int32s(allowed, w + ": 'allowedTokens'");
    s.lateMask = int32_t(integer(so, "lateMask", w, -1, -1, INT32_MAX));
    Napi::Value sp = so.Get("sampling");
    if (!sp.IsUndefined() && !sp.IsNull()) {
      if (!sp.IsObject()) fail(w + ": 'sampling' must be an object");
      Napi::Object spo = sp.As<Napi::Object>();
      s.temperature = float(num(spo, "temperature", w, 0));
      s.topK = int32_t(integer(spo, "topK", w, 0, 0, INT32_MAX));
      s.topP = float(num(spo, "topP", w, 1));
      s.seed = seedOf(spo.Get("seed"), w);
    }
    b.seqs.push_back(std::move(s));
  }
  return b;
}

// Ints before the page copies, and before each sequence's tokens (layout: NativeModel.forwardPacked in
// ts/native/addonTypes.ts).
constexpr size_t kPackedHeader = 6, kPackedSeqHeader = 10;

// The packed batch of NativeModel.forwardPacked (layout in ts/native/addonTypes.ts, written by
// ts/model/packForward.ts): the object batch's fields as int32 and float32 values, so a step of n sequences costs
// two N-API calls instead of ~20 per sequence (that had cost ~4 us a sequence on the JS thread, serial before
// every forward). The JS side packs only what the arrays hold exactly (anything else takes the object path); the
// ranges are checked here by the same rule and words as the object path's.
BatchInput parsePacked(const Napi::Value& intsV, const Napi::Value& floatsV) {
  auto typed = [](const Napi::Value& v, napi_typedarray_type t, const char* what) {
    if (!v.IsTypedArray() || v.As<Napi::TypedArray>().TypedArrayType() != t) fail(std::string("forwardPacked: ") + what);
  };
  typed(intsV, napi_int32_array, "ints must be an Int32Array");
  typed(floatsV, napi_float32_array, "floats must be a Float32Array");
  auto ia = intsV.As<Napi::Int32Array>();
  auto fa = floatsV.As<Napi::Float32Array>();
  const int32_t* ints = ia.Data();
  const float* floats = fa.Data();
  const size_t ni = ia.ElementLength(), nf = fa.ElementLength();
  size_t at = 0;
  auto take = [&](size_t n) {
    if (n > ni - at) fail("forwardPacked: the packed batch is truncated (" + std::to_string(ni) + " ints)");
    const int32_t* p = ints + at;
    at += n;
    return p;
  };
  const std::string fw = "forward";
  BatchInput b;
  const int32_t* h = take(kPackedHeader);
  const int64_t n = h[0];
  b.gemmSplitK = int(inRange(h[1], "gemmSplitK", fw, 1, 4096));
  b.kvSplits = int(inRange(h[2], "kvSplits", fw, 1, 1024));
  b.fixedGemmSplitK = int(inRange(h[3], "fixedGemmSplitK", fw, 1, 4096));
  b.returnLogits = h[4] & 1, b.fastSplitK = h[4] & 2, b.profile = h[4] & 4;
  if (n < 0 || h[5] < 0) fail("forwardPacked: negative counts in the header");
  const size_t copies = size_t(h[5]);
  const int32_t* src = take(copies);
  b.copySrc.assign(src, src + copies);
  const int32_t* dst = take(copies);
  b.copyDst.assign(dst, dst + copies);
  // every sequence needs its header in ints: a count the arrays cannot hold allocates nothing
  if (size_t(n) > (ni - at) / kPackedSeqHeader)
    fail("forwardPacked: " + std::to_string(n) + " sequences do not fit in " + std::to_string(ni) + " ints");
  if (size_t(n) * 2 > nf) fail("forwardPacked: floats holds " + std::to_string(nf) + " values, not 2 per sequence");
  b.seqs.resize(size_t(n));
  for (int64_t i = 0; i < n; i++) {
    // inRange's message names the sequence; the name is built only for a value out of range (a step of n
    // sequences would otherwise format n strings it never shows)
    auto ranged = [&](int32_t v, const char* name, int64_t lo, int64_t hi) {
      return v >= lo && v <= hi ? int64_t(v) : inRange(v, name, "forward: sequence " + std::to_string(i), lo, hi);
    };
    SeqInput& s = b.seqs[size_t(i)];
    const int32_t* sh = take(kPackedSeqHeader);
    if (sh[0] < 0 || sh[2] < 0 || sh[7] < 0) fail("forwardPacked: negative lengths in sequence " + std::to_string(i));
    s.startPos = int32_t(ranged(sh[1], "startPos", 0, INT32_MAX / 2));
    s.numTop = int(ranged(sh[3], "numTopLogprobs", 0, 64));
    s.confidenceK = int(ranged(sh[4], "confidenceTopK", 0, 64));
    s.emitToken = sh[5] & 1, s.emitAll = sh[5] & 2, s.fixedSchedule = sh[5] & 4;
    s.topK = int32_t(ranged(sh[6], "topK", 0, INT32_MAX));
    s.seed = uint64_t(uint32_t(sh[8])) | uint64_t(uint32_t(sh[9])) << 32;
    const int32_t* t = take(size_t(sh[0]));
    s.tokens.assign(t, t + sh[0]);
    const int32_t* bt = take(size_t(sh[2]));
    s.blockTable.assign(bt, bt + sh[2]);
    const int32_t* c = take(size_t(sh[7]));
    s.captureLayers.assign(c, c + sh[7]);
    if (sh[5] & 8) {  // allowedTokens: its word count, then the words (Model::validate checks the count)
      const int32_t words = *take(1);
      if (words < 0) fail("forwardPacked: negative allowedTokens length in sequence " + std::to_string(i));
      const int32_t* a = take(size_t(words));
      s.allowedTokens.emplace(a, a + words);
    }
    if (sh[5] & 16) {  // lateMask: its row of the call's lateMasks (Model::validate checks it)
      const int32_t k = *take(1);
      if (k < 0) fail("forwardPacked: negative lateMask in sequence " + std::to_string(i));
      s.lateMask = k;
    }
    s.temperature = floats[2 * i], s.topP = floats[2 * i + 1];
  }
  if (at != ni) fail("forwardPacked: " + std::to_string(ni - at) + " ints past the last sequence");
  return b;
}

class ForwardWorker : public Napi::AsyncWorker {
 public:
  ForwardWorker(Napi::Env env, std::shared_ptr<Model> m, BatchInput&& b)
      : Napi::AsyncWorker(env, "forward"), deferred_(Napi::Promise::Deferred::New(env)), model_(std::move(m)),
        batch_(std::move(b)) {}
  Napi::Promise promise() { return deferred_.Promise(); }

  // Keeps the caller's lateMasks array (BatchInput::lateMasks) alive and in place until the step is done.
  void keep(const Napi::Object& lateMasks) { late_ = Napi::Persistent(lateMasks); }

  void Execute() override {
    try {
      std::lock_guard<std::mutex> lk(model_->mu);
      out_ = model_->forward(batch_);
    } catch (const std::exception& e) {
      std::string m = e.what();
      SetError(m.rfind("forward", 0) == 0 ? m : "forward: " + m);
    }
  }
  // The step's results packed (NativeForwardPacked in ts/native/addonTypes.ts): every sequence's token, logprob and
  // (when any sequence asked) confidence in three typed arrays, and an object of extras only for the rows that have
  // any. ts/model/model.ts builds the per-sequence results in JS, all of one shape: an N-API property set per field
  // per sequence cost more host time than the engine's own bookkeeping, and a field present for some sequences only
  // made the engine's hot loops polymorphic (bench:host --confidence).
  void OnOK() override {
    Napi::Env env = Env();
    const size_t n = out_.size();
    auto tokens = Napi::Int32Array::New(env, n);
    auto logprobs = Napi::Float32Array::New(env, n);
    bool anyConfidence = false;
    for (size_t i = 0; i < n; i++) anyConfidence |= batch_.seqs[i].confidenceK > 0 && batch_.seqs[i].emitToken;
    Napi::Float32Array confidences;
    if (anyConfidence) confidences = Napi::Float32Array::New(env, n);
    Napi::Array extras = Napi::Array::New(env, n);
    for (size_t i = 0; i < n; i++) {
      const SeqOutput& r = out_[i];
      const SeqInput& in = batch_.seqs[i];
      tokens[i] = r.token;
      logprobs[i] = r.logprob;
      const bool confidence = in.confidenceK > 0 && in.emitToken;
      if (anyConfidence) confidences[i] = confidence ? r.confidence : std::numeric_limits<float>::quiet_NaN();
      Napi::Object o;
      auto extra = [&]() -> Napi::Object& {
        if (o.IsEmpty()) o = Napi::Object::New(env);
        return o;
      };
      if (in.emitAll) {
        auto toks = Napi::Int32Array::New(env, r.tokens.size());
        auto lps = Napi::Float32Array::New(env, r.logprobs.size());
        std::copy(r.tokens.begin(), r.tokens.end(), toks.Data());
        std::copy(r.logprobs.begin(), r.logprobs.end(), lps.Data());
        extra().Set("tokens", toks);
        extra().Set("logprobs", lps);
      }
      if (!r.topIds.empty()) {
        auto ids = Napi::Int32Array::New(env, r.topIds.size());
        auto lps = Napi::Float32Array::New(env, r.topLogprobs.size());
        std::copy(r.topIds.begin(), r.topIds.end(), ids.Data());
        std::copy(r.topLogprobs.begin(), r.topLogprobs.end(), lps.Data());
        extra().Set("topIds", ids);
        extra().Set("topLogprobs", lps);
      }
      if (confidence && in.emitAll) {
        auto c = Napi::Float32Array::New(env, r.confidences.size());
        std::copy(r.confidences.begin(), r.confidences.end(), c.Data());
        extra().Set("confidences", c);
      }
      if (!r.hidden.empty()) {
        auto h = Napi::Float32Array::New(env, r.hidden.size());
        std::copy(r.hidden.begin(), r.hidden.end(), h.Data());
        extra().Set("hidden", h);
      }
      if (!r.logits.empty()) {
        auto l = Napi::Float32Array::New(env, r.logits.size());
        std::copy(r.logits.begin(), r.logits.end(), l.Data());
        extra().Set("logits", l);
      }
      if (!o.IsEmpty()) extras[uint32_t(i)] = o;
    }
    Napi::Object packed = Napi::Object::New(env);
    packed.Set("tokens", tokens);
    packed.Set("logprobs", logprobs);
    if (anyConfidence) packed.Set("confidences", confidences);
    packed.Set("extras", extras);
    model_.reset();
    deferred_.Resolve(packed);
  }
  void OnError(const Napi::Error& e) override {
    model_.reset();
    deferred_.Reject(e.Value());
  }

 private:
  Napi::Promise::Deferred deferred_;
  std::shared_ptr<Model> model_;  // keeps the model alive through a dispose() in flight
  BatchInput batch_;
  std::vector<SeqOutput> out_;
  Napi::ObjectReference late_;
};

// The step's late masks (BatchInput::lateMasks): an Int32Array of rows * (1 + ceil(V / 32)) ints (the flags, then
// the words), or undefined; the wait bound in milliseconds. Read only where some sequence names a row.
void parseLateMasks(const Napi::Value& v, const Napi::Value& waitMs, int width, BatchInput& b) {
  if (v.IsUndefined() || v.IsNull()) return;
  if (!v.IsTypedArray() || v.As<Napi::TypedArray>().TypedArrayType() != napi_int32_array)
    fail("forward: 'lateMasks' must be an Int32Array");
  auto a = v.As<Napi::Int32Array>();
  // Over a SharedArrayBuffer only: there JS's Atomics.store of a flag is a sequentially consistent store that the
  // memory model orders after the words written before it (the acquire load in awaitLateMasks pairs with it), and the
  // memory can be neither detached nor transferred while the worker reads it. Over a plain ArrayBuffer V8 promises
  // neither (Atomics on unshared memory are ordinary accesses as far as the language goes).
  if (a.ArrayBuffer().IsArrayBuffer())
    fail("forward: 'lateMasks' must be an Int32Array over a SharedArrayBuffer (the step reads it from another thread "
         "while the caller writes it), got one over an ArrayBuffer");
  const int64_t W = (int64_t(width) + 31) / 32, n = int64_t(a.ElementLength());
  if (n % (1 + W) != 0)
    fail("forward: 'lateMasks' holds " + std::to_string(n) + " ints, not a multiple of 1 + ceil(vocab " +
         std::to_string(width) + " / 32) = " + std::to_string(1 + W) + " (a flag and a mask's words a row)");
  b.lateMasks = a.Data();
  b.lateRows = n / (1 + W);
  if (!waitMs.IsNumber()) fail("forward: 'lateMaskWaitMs' must be a number of milliseconds in [0, 600000]");
  const double ms = waitMs.As<Napi::Number>().DoubleValue();
  if (!(ms >= 0 && ms <= 600000)) fail("forward: 'lateMaskWaitMs' must be in [0, 600000], got " + std::to_string(ms));
  b.lateWaitUs = int64_t(ms * 1000);
}

class CopyPagesWorker : public Napi::AsyncWorker {
 public:
  CopyPagesWorker(Napi::Env env, std::shared_ptr<Model> m, std::vector<int32_t> src, std::vector<int32_t> dst)
      : Napi::AsyncWorker(env, "copyPages"), deferred_(Napi::Promise::Deferred::New(env)), model_(std::move(m)),
        src_(std::move(src)), dst_(std::move(dst)) {}
  Napi::Promise promise() { return deferred_.Promise(); }
  void Execute() override {
    try {
      std::lock_guard<std::mutex> lk(model_->mu);
      model_->copyPages(src_, dst_);
      if (model_->device == Device::cuda) gpu::synchronize();
    } catch (const std::exception& e) {
      SetError(std::string("copyPages: ") + e.what());
    }
  }
  void OnOK() override {
    model_.reset();
    deferred_.Resolve(Env().Undefined());
  }
  void OnError(const Napi::Error& e) override {
    model_.reset();
    deferred_.Reject(e.Value());
  }

 private:
  Napi::Promise::Deferred deferred_;
  std::shared_ptr<Model> model_;
  std::vector<int32_t> src_, dst_;
};

Napi::Value rejected(Napi::Env env, const std::string& m) {
  auto d = Napi::Promise::Deferred::New(env);
  d.Reject(Napi::Error::New(env, m).Value());
  return d.Promise();
}

// KV offloading: whole pages to host memory (resolves a Buffer) or back (from one).
class PagesIoWorker : public Napi::AsyncWorker {
 public:
  PagesIoWorker(Napi::Env env, std::shared_ptr<Model> m, std::vector<int32_t> pages, std::vector<uint8_t> data, bool write)
      : Napi::AsyncWorker(env, write ? "writePages" : "readPages"), deferred_(Napi::Promise::Deferred::New(env)),
        model_(std::move(m)), pages_(std::move(pages)), data_(std::move(data)), write_(write) {}
  Napi::Promise promise() { return deferred_.Promise(); }
  void Execute() override {
    try {
      std::lock_guard<std::mutex> lk(model_->mu);
      if (write_) {
        model_->writePages(pages_, data_.data());
      } else {
        data_.resize(pages_.size() * model_->pageHostBytes());
        model_->readPages(pages_, data_.data());
      }
    } catch (const std::exception& e) {
      SetError(std::string(write_ ? "writePages: " : "readPages: ") + e.what());
    }
  }
  void OnOK() override {
    model_.reset();
    if (write_) deferred_.Resolve(Env().Undefined());
    else deferred_.Resolve(Napi::Buffer<uint8_t>::Copy(Env(), data_.data(), data_.size()));
  }
  void OnError(const Napi::Error& e) override {
    model_.reset();
    deferred_.Reject(e.Value());
  }

 private:
  Napi::Promise::Deferred deferred_;
  std::shared_ptr<Model> model_;
  std::vector<int32_t> pages_;
  std::vector<uint8_t> data_;
  bool write_;
};

}  // namespace

Napi::FunctionReference* NativeModel::constructor = nullptr;

Napi::Function NativeModel::Init(Napi::Env env) {
  Napi::Function f = DefineClass(env, "NativeModel",
                                 {
                                     InstanceMethod<&NativeModel::SetWeight>("setWeight"),
                                     InstanceMethod<&NativeModel::SetQuantizedWeight>("setQuantizedWeight"),
                                     InstanceMethod<&NativeModel::MissingWeights>("missingWeights"),
                                     InstanceMethod<&NativeModel::Forward>("forward"),
                                     InstanceMethod<&NativeModel::ForwardPacked>("forwardPacked"),
                                     InstanceMethod<&NativeModel::CopyPages>("copyPages"),
                                     InstanceMethod<&NativeModel::ReadPages>("readPages"),
                                     InstanceMethod<&NativeModel::WritePages>("writePages"),
                                     InstanceMethod<&NativeModel::TakeProfile>("takeProfile"),
                                     InstanceMethod<&NativeModel::Dispose>("dispose"),
                                     InstanceAccessor<&NativeModel::Disposed>("disposed"),
                                     InstanceAccessor<&NativeModel::Info>("info"),
                                 });
  constructor = new Napi::FunctionReference(Napi::Persistent(f));
  return f;
}

NativeModel::NativeModel(const Napi::CallbackInfo& info) : Napi::ObjectWrap<NativeModel>(info) {
  Napi::Env env = info.Env();
  try {
    if (info.Length() < 1 || !info[0].IsObject()) fail("NativeModel: expected one options object");
    Napi::Object o = info[0].As<Napi::Object>();
    ModelConfig cfg = parseConfig(o);
    // device, activationDtype, kvDtype: absent = the default; anything but a known name is refused by name.
    auto name = [&](const char* field) -> std::string {
      Napi::Value v = o.Get(field);
      if (v.IsUndefined() || v.IsNull()) return "";
      if (!v.IsString()) fail(std::string("NativeModel: '") + field + "' must be a string, got " + describeValue(v));
      return v.As<Napi::String>().Utf8Value();
    };
    auto parsed = [&](const char* field, auto parse) {
      try {
        return parse(name(field));
      } catch (const Napi::Error& e) {
        fail(std::string("NativeModel: '") + field + "': " + e.Message());
      }
    };
    const std::string dev = name("device"), act = name("activationDtype"), kvd = name("kvDtype");
    Device device = dev.empty() ? Device::cpu : parsed("device", [&](const std::string& s) { return parseDevice(env, s); });
    // quantize "fp8" on CUDA would run its FP8 kernel (cuda/gemm_int4.cu), which has not run on a GPU yet: FP8
    // checkpoints load there dequantized to f32 for that reason (ts/model/quantized/upload.ts takesFp8), so the
    // weights quantized at load are refused rather than sent through it unverified.
    if (cfg.quantizeFp8 && device == Device::cuda)
      fail("NativeModel: quantize \"fp8\" is not supported on CUDA yet (its FP8 kernel has not been verified on a GPU); "
           "use device \"cpu\", or quantize \"int8\" / \"int4\" on CUDA");
    DType actDtype = !act.empty() ? parsed("activationDtype", [&](const std::string& s) { return parseDType(env, s); })
                                  : (device == Device::cuda ? DType::bf16 : DType::f32);
    KvPoolConfig kv;
    kv.numPages = int(integer(o, "numPages", "NativeModel", 0, 1, INT32_MAX / 4, true));
    kv.pageSize = int(integer(o, "pageSize", "NativeModel", 16, 1, 4096));
    kv.dtype = kvd.empty() ? actDtype : parsed("kvDtype", [&](const std::string& s) { return parseDType(env, s); });
    model_ = std::make_shared<Model>(cfg, device, actDtype, kv);
  } catch (const Error& e) {
    throw Napi::Error::New(env, e.what());
  }
}

std::shared_ptr<Model> NativeModel::model(const char* what) const {
  if (!model_) throw Error(std::string(what) + ": NativeModel is disposed");
  return model_;
}

// setWeight(name, dtype, shape, bytes, byteOffset = 0): synchronous copy (and conversion) into device memory.
Napi::Value NativeModel::SetWeight(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  try {
    auto m = model("setWeight");
    if (info.Length() < 4 || !info[0].IsString() || !info[1].IsString() || !info[2].IsArray() || !info[3].IsTypedArray())
      fail("setWeight(name, dtype, shape, bytes, byteOffset?): expected (string, string, number[], TypedArray)");
    std::string name = info[0].As<Napi::String>();
    DType dtype;
    try {
      dtype = parseDType(env, info[1].As<Napi::String>());
    } catch (const Napi::Error& e) {
      fail("setWeight: '" + name + "': " + e.Message());
    }
    Napi::Array s = info[2].As<Napi::Array>();
    std::vector<int64_t> shape;
    for (uint32_t i = 0; i < s.Length(); i++) {
      Napi::Value d = s.Get(i);
      if (!d.IsNumber() || !isIntegerIn(d.As<Napi::Number>().DoubleValue(), 0, 1e15))
        fail("setWeight: '" + name + "' shape[" + std::to_string(i) + "] must be a non-negative integer, got " +
             describeValue(d));
      shape.push_back(int64_t(d.As<Napi::Number>().DoubleValue()));
    }
    auto t = info[3].As<Napi::TypedArray>();
    const uint8_t* bytes = static_cast<const uint8_t*>(t.ArrayBuffer().Data()) + t.ByteOffset();
    double off = info.Length() > 4 && info[4].IsNumber() ? info[4].As<Napi::Number>().DoubleValue() : 0;
    if (!isIntegerIn(off, 0, 9007199254740991.0)) fail("setWeight: byteOffset must be a non-negative integer");
    std::lock_guard<std::mutex> lk(m->mu);
    m->weights.set(name, dtype, shape, bytes, t.ByteLength(), size_t(off));
  } catch (const Error& e) {
    throw Napi::Error::New(env, e.what());
  }
  return env.Undefined();
}

// setQuantizedWeight(name, {bits, groupSize, shape, q, scales, zeros, perm?}): a grouped-quantized linear weight
// (ModelWeights::setGrouped; the format of ts/model/quantFormat.ts), copied synchronously. With format "e4m3": q holds
// FP8 e4m3fn codes [N, K], scales [N, ceil(K / groupSize)], no zeros or perm (ts/model/quantized/fp8.ts).
Napi::Value NativeModel::SetQuantizedWeight(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  try {
    auto m = model("setQuantizedWeight");
    if (info.Length() < 2 || !info[0].IsString() || !info[1].IsObject())
      fail("setQuantizedWeight(name, {bits, groupSize, shape, q, scales, zeros, perm?}): expected (string, object)");
    const std::string name = info[0].As<Napi::String>();
    const std::string where = "setQuantizedWeight: '" + name + "'";
    const Napi::Object o = info[1].As<Napi::Object>();
    const int bits = int(integer(o, "bits", where, 0, 0, 64, true));
    const int groupSize = int(integer(o, "groupSize", where, 0, 0, 1 << 24, true));
    const Napi::Value sv = field(o, "shape", where);
    if (!sv.IsArray() || sv.As<Napi::Array>().Length() != 2) fail(where + ": 'shape' must be [N, K]");
    std::vector<int64_t> shape;
    for (uint32_t i = 0; i < 2; i++) {
      const Napi::Value d = sv.As<Napi::Array>().Get(i);
      if (!d.IsNumber() || !isIntegerIn(d.As<Napi::Number>().DoubleValue(), 0, 1e15))
        fail(where + ": shape[" + std::to_string(i) + "] must be a non-negative integer, got " + describeValue(d));
      shape.push_back(int64_t(d.As<Napi::Number>().DoubleValue()));
    }
    auto typed = [&](const char* f, napi_typedarray_type t, const char* type, bool required) -> Napi::TypedArray {
      const Napi::Value v = field(o, f, where, required);
      if (v.IsUndefined() || v.IsNull()) return Napi::TypedArray();
      if (!v.IsTypedArray() || v.As<Napi::TypedArray>().TypedArrayType() != t) fail(where + ": '" + f + "' must be a " + type);
      return v.As<Napi::TypedArray>();
    };
    const Napi::TypedArray q = typed("q", napi_uint8_array, "Uint8Array", true);
    const Napi::TypedArray scales = typed("scales", napi_float32_array, "Float32Array", true);
    const Napi::Value fv = field(o, "format", where, false);
    const std::string format = fv.IsString() ? fv.As<Napi::String>().Utf8Value() : "int";
    if (!fv.IsUndefined() && !(fv.IsString() && (format == "int" || format == "e4m3")))
      fail(where + ": 'format' must be \"int\" or \"e4m3\", got " + describeValue(fv));
    const bool e4m3 = format == "e4m3";
    const Napi::TypedArray zeros = typed("zeros", napi_uint8_array, "Uint8Array", !e4m3);
    const Napi::TypedArray perm = typed("perm", napi_int32_array, "Int32Array", false);
    auto data = [](const Napi::TypedArray& a) -> const uint8_t* {
      return a.IsEmpty() ? nullptr : static_cast<const uint8_t*>(a.ArrayBuffer().Data()) + a.ByteOffset();
    };
    // typed arrays at any byte offset: scales and perm are copied when misaligned
    std::vector<float> sc(scales.ElementLength());
    std::memcpy(sc.data(), data(scales), sc.size() * 4);
    std::vector<int32_t> pm(perm.IsEmpty() ? 0 : perm.ElementLength());
    if (!pm.empty()) std::memcpy(pm.data(), data(perm), pm.size() * 4);
    std::lock_guard<std::mutex> lk(m->mu);
    m->weights.setGrouped(name, bits, groupSize, shape, data(q), q.ByteLength(), sc.data(), sc.size(), data(zeros),
                          zeros.IsEmpty() ? 0 : zeros.ByteLength(), perm.IsEmpty() ? nullptr : pm.data(), pm.size(), e4m3);
  } catch (const Error& e) {
    throw Napi::Error::New(env, e.what());
  }
  return env.Undefined();
}

Napi::Value NativeModel::MissingWeights(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  try {
    auto m = model("missingWeights");
    auto miss = m->weights.missing();
    Napi::Array a = Napi::Array::New(env, miss.size());
    for (size_t i = 0; i < miss.size(); i++) a[uint32_t(i)] = Napi::String::New(env, miss[i]);
    return a;
  } catch (const Error& e) {
    throw Napi::Error::New(env, e.what());
  }
}

Napi::Value NativeModel::TakeProfile(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  try {
    auto entries = model("takeProfile")->takeProfile();
    Napi::Array a = Napi::Array::New(env, entries.size());
    for (size_t i = 0; i < entries.size(); i++) {
      Napi::Object e = Napi::Object::New(env);
      e.Set("label", entries[i].label);
      e.Set("calls", double(entries[i].calls));
      e.Set("ms", entries[i].ms);
      a[uint32_t(i)] = e;
    }
    return a;
  } catch (const Error& e) {
    throw Napi::Error::New(env, e.what());
  }
}

Napi::Value NativeModel::Forward(const Napi::CallbackInfo& info) { return forward(info, false); }
Napi::Value NativeModel::ForwardPacked(const Napi::CallbackInfo& info) { return forward(info, true); }

Napi::Value NativeModel::forward(const Napi::CallbackInfo& info, bool packed) {
  Napi::Env env = info.Env();
  try {
    auto m = model("forward");
    auto arg = [&](size_t i) { return info.Length() > i ? info[i] : env.Undefined(); };
    BatchInput b = packed ? parsePacked(arg(0), arg(1)) : parseBatch(arg(0));
    // forwardPacked(ints, floats, lateMasks?, lateMaskWaitMs?); forward(batch) carries them as fields.
    Napi::Value late = packed ? arg(2) : (arg(0).IsObject() ? arg(0).As<Napi::Object>().Get("lateMasks") : env.Undefined());
    Napi::Value lateWait = packed ? arg(3) : (arg(0).IsObject() ? arg(0).As<Napi::Object>().Get("lateMaskWaitMs") : env.Undefined());
    parseLateMasks(late, lateWait, m->cfg.headRows(), b);
    m->validate(b);
    m->requireWeights();
    auto* w = new ForwardWorker(env, m, std::move(b));
    if (!late.IsUndefined() && !late.IsNull()) w->keep(late.As<Napi::Object>());
    Napi::Promise p = w->promise();
    w->Queue();
    return p;
  } catch (const Error& e) {
    std::string msg = e.what();
    return rejected(env, msg.rfind("forward", 0) == 0 ? msg : "forward: " + msg);
  } catch (const std::bad_alloc&) {
    return rejected(env, "forward: out of host memory reading the batch; send fewer or shorter sequences");
  }
}

Napi::Value NativeModel::CopyPages(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  try {
    auto m = model("copyPages");
    if (info.Length() < 2) fail("copyPages(src: Int32Array, dst: Int32Array)");
    auto src = int32s(info[0], "copyPages: src"), dst = int32s(info[1], "copyPages: dst");
    if (src.size() != dst.size()) fail("copyPages: src and dst must have the same length");
    for (size_t i = 0; i < src.size(); i++)
      if (src[i] < 0 || src[i] >= m->kv.numPages || dst[i] < 0 || dst[i] >= m->kv.numPages)
        fail("copyPages: pair " + std::to_string(i) + " (" + std::to_string(src[i]) + " -> " + std::to_string(dst[i]) +
             ") is not a pair of page ids in [0, " + std::to_string(m->kv.numPages) + ")");
    auto* w = new CopyPagesWorker(env, m, std::move(src), std::move(dst));
    Napi::Promise p = w->promise();
    w->Queue();
    return p;
  } catch (const Error& e) {
    return rejected(env, e.what());
  }
}

namespace {
std::vector<int32_t> pageIds(const Model& m, Napi::Value v, const std::string& what) {
  auto pages = int32s(v, what + ": pages");
  for (size_t i = 0; i < pages.size(); i++)
    if (pages[i] < 0 || pages[i] >= m.kv.numPages)
      fail(what + ": pages[" + std::to_string(i) + "] = " + std::to_string(pages[i]) + " is not a page id in [0, " +
           std::to_string(m.kv.numPages) + ")");
  return pages;
}
}  // namespace

Napi::Value NativeModel::ReadPages(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  try {
    auto m = model("readPages");
    if (info.Length() < 1) fail("readPages(pages: Int32Array)");
    auto* w = new PagesIoWorker(env, m, pageIds(*m, info[0], "readPages"), {}, false);
    Napi::Promise p = w->promise();
    w->Queue();
    return p;
  } catch (const Error& e) {
    return rejected(env, e.what());
  }
}

Napi::Value NativeModel::WritePages(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  try {
    auto m = model("writePages");
    if (info.Length() < 2) fail("writePages(pages: Int32Array, data: Uint8Array)");
    auto pages = pageIds(*m, info[0], "writePages");
    if (!info[1].IsTypedArray() || info[1].As<Napi::TypedArray>().TypedArrayType() != napi_uint8_array)
      fail("writePages: data must be a Uint8Array (what readPages returned)");
    auto a = info[1].As<Napi::Uint8Array>();
    const size_t want = pages.size() * m->pageHostBytes();
    if (a.ByteLength() != want)
      fail("writePages: data holds " + std::to_string(a.ByteLength()) + " bytes; " + std::to_string(pages.size()) +
           " pages of this model's KV are " + std::to_string(want));
    std::vector<uint8_t> data(a.Data(), a.Data() + a.ByteLength());
    auto* w = new PagesIoWorker(env, m, std::move(pages), std::move(data), true);
    Napi::Promise p = w->promise();
    w->Queue();
    return p;
  } catch (const Error& e) {
    return rejected(env, e.what());
  }
}

Napi::Value NativeModel::Dispose(const Napi::CallbackInfo& info) {
  model_.reset();  // device memory goes once no forward in flight still holds the model
  return info.Env().Undefined();
}

Napi::Value NativeModel::Disposed(const Napi::CallbackInfo& info) { return Napi::Boolean::New(info.Env(), !model_); }

Napi::Value NativeModel::Info(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  try {
    auto m = model("info");
    Napi::Object o = Napi::Object::New(env);
    o.Set("device", deviceName(m->device));
    o.Set("activationDtype", dtypeName(m->actDtype));
    o.Set("kvDtype", dtypeName(m->kv.dtype));
    o.Set("numPages", m->kv.numPages);
    o.Set("pageSize", m->kv.pageSize);
    o.Set("kvBytes", double(m->kvBytes()));
    o.Set("kvBytesPerPage", double(m->kvBytes() / size_t(m->kv.numPages)));
    o.Set("weightBytes", double(m->weights.residentBytes()));
    o.Set("linearFormat", m->weights.linearFormat());
    const auto layouts = m->weights.linearLayouts();
    Napi::Object l = Napi::Object::New(env);
    l.Set("packed", layouts.packed);
    l.Set("byPanel", layouts.byPanel);
    l.Set("asStored", layouts.asStored);
    o.Set("linearLayouts", l);
    return o;
  } catch (const Error& e) {
    throw Napi::Error::New(env, e.what());
  }
}

void registerModel(Napi::Env env, Napi::Object exports) { exports.Set("NativeModel", NativeModel::Init(env)); }

}  // namespace dl
