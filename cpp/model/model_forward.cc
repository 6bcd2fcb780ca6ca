// One engine step: the whole model over the whole batch (docs/architecture.md "Native contract").
//   pack: decode sequences (1 new token) first, then prefill chunks, then fixed-schedule sequences; T packed tokens
//   (rows [0, Tf) run on the step's fast schedule, rows [Tf, T) on the fixed one: model.h BatchInput)
//   embedding -> per layer [rmsnorm(+residual) -> qkv -> rope + kvWrite -> attention -> o_proj ->
//   rmsnorm(+residual) -> gate|up -> silu*mul -> down] -> final rows only: rmsnorm -> lm_head -> token masks of
//   constrained rows (maskLogits) -> sample.
// The residual add is fused into the next rmsnorm, so the stream is read and written once per sublayer.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <optional>
#include <string>
#include <thread>
#include "model.h"
#include "model_ops.h"
#include "knobs.h"

namespace dl {

struct Model::Plan {
  int64_t T = 0;
  int nd = 0;                         // decode sequences: packed rows [0, nd)
  int64_t Tf = 0;                     // fixed-schedule sequences: packed rows [Tf, T), after every fast one
  int maxPrefillQ = 0;                // most new tokens of one sequence in the prefill group (sizes its grid)
  std::vector<int> order;             // sequence indices in packed order
  std::vector<int64_t> firstRow;      // per sequence (input index)
  int64_t ids = 0, positions = 0, slots = 0;           // meta offsets of [T] arrays
  int64_t dIndptr = 0, dIndices = 0, dLast = 0, dNnz = 0;  // decode CSR
  int64_t pQIndptr = 0, pIndptr = 0, pIndices = 0, pLast = 0, pNnz = 0;  // prefill CSR
  // Final rows (norm + lm_head): E emitting rows first (the last row of each emitting sequence, or every row of
  // an emitAll one; fast sequences, then fixed ones, each in sequence order), then the last rows of sequences that
  // only capture the final hidden state.
  struct FinalRow {
    int seq;
    int32_t row;  // packed row
    int32_t j;    // index within the sequence's new tokens
  };
  std::vector<FinalRow> finals;
  int E = 0;
  int Ef = 0;                         // emitting rows of fast sequences: finals [0, Ef); fixed ones [Ef, E)
  int64_t finalRows = 0;              // meta offset of [F] packed rows
  int64_t temp = 0, topK = 0, topP = 0, seeds = 0, samplePos = 0;  // meta offsets of [E] (seeds [E,2])
  int numTop = 0;
  struct Capture {
    int layer;
    std::vector<int> seqs;
    int64_t rows;  // meta offset
  };
  std::vector<Capture> captures;      // layers < numLayers, ascending
  // Token masks (constrained decoding), when any emitting row has one: meta offsets of rowOf [E] (the mask row of
  // emitting row e, -1 = unmasked) and of the maskRows masked rows' words [maskRows, ceil(V / 32)].
  int64_t maskRowOf = 0, maskWords = 0;
  int maskRows = 0;
  // Masks that arrive while the step runs (BatchInput::lateMasks): their words are copied into the meta's mask rows
  // just before sampling (awaitLateMasks).
  struct LateRow {
    int32_t maskRow;  // row of the meta's masks
    int32_t k;        // row of lateMasks
    int32_t e;        // emitting row
  };
  std::vector<LateRow> late;
};

namespace {
bool captures(const SeqInput& s, int layer) {
  return std::binary_search(s.captureLayers.begin(), s.captureLayers.end(), layer);
}
int32_t floatBits(float f) {
  int32_t i;
  std::memcpy(&i, &f, 4);
  return i;
}
}  // namespace

// Room for nnz page ids in a step's metadata, rounded up (64, then four sizes per doubling) and padded with page 0
// (never read: indptr bounds every read): as a batch's sequences cross page boundaries the layout after the page
// table stays put, so on CUDA its step graph keeps replaying instead of being recaptured at every crossing.
static int64_t pageTableCapacity(int64_t nnz) {
  if (nnz <= 64) return nnz == 0 ? 0 : 64;
  const int64_t step = int64_t(1) << (62 - __builtin_clzll(uint64_t(nnz)) - 1);  // a quarter of nnz's top power of two
  return (nnz + step - 1) / step * step;
}

Model::Plan Model::plan(const BatchInput& b) {
  Plan p;
  std::vector<int32_t>& m = metaHost_;
  m.clear();
  auto push = [&](int32_t v) { m.push_back(v); };
  const int n = int(b.seqs.size());
  // Fixed-schedule sequences go last and through the prefill attention kernel even for one token: the decode
  // kernel's split-KV schedule is the fast path's knob, and one attention kernel for every fixed position keeps a
  // verify row's bits independent of how many candidates it carries.
  for (int i = 0; i < n; i++)
    if (b.seqs[i].tokens.size() == 1 && !b.seqs[i].fixedSchedule) p.order.push_back(i);
  p.nd = int(p.order.size());
  for (int i = 0; i < n; i++)
    if (b.seqs[i].tokens.size() != 1 && !b.seqs[i].fixedSchedule) p.order.push_back(i);
  const size_t numFast = p.order.size();
  for (int i = 0; i < n; i++)
    if (b.seqs[i].fixedSchedule) p.order.push_back(i);
  p.firstRow.assign(n, 0);
  for (size_t o = 0; o < p.order.size(); o++) {
    if (o == numFast) p.Tf = p.T;
    p.firstRow[p.order[o]] = p.T;
    p.T += int64_t(b.seqs[p.order[o]].tokens.size());
  }
  if (numFast == p.order.size()) p.Tf = p.T;
  for (size_t o = size_t(p.nd); o < p.order.size(); o++)
    p.maxPrefillQ = std::max(p.maxPrefillQ, int(b.seqs[p.order[o]].tokens.size()));
  // Page copies first (their ids live at the front of the metadata).
  for (int32_t s : b.copySrc) push(s);
  for (int32_t d : b.copyDst) push(d);

  p.ids = int64_t(m.size());
  for (int i : p.order) m.insert(m.end(), b.seqs[i].tokens.begin(), b.seqs[i].tokens.end());
  p.positions = int64_t(m.size());
  for (int i : p.order)
    for (size_t j = 0; j < b.seqs[i].tokens.size(); j++) push(b.seqs[i].startPos + int32_t(j));
  p.slots = int64_t(m.size());
  for (int i : p.order) {
    const SeqInput& s = b.seqs[i];
    for (size_t j = 0; j < s.tokens.size(); j++) {
      int32_t pos = s.startPos + int32_t(j);
      push(s.blockTable[pos / kv.pageSize] * kv.pageSize + pos % kv.pageSize);
    }
  }
  // CSR page tables: one for the decode group, one for the prefill group.
  auto csr = [&](int from, int to, int64_t& indptr, int64_t& indices, int64_t& last, int64_t& nnz) {
    indptr = int64_t(m.size());
    int32_t acc = 0;
    push(0);
    for (int o = from; o < to; o++) {
      const SeqInput& s = b.seqs[p.order[o]];
      acc += int32_t((s.startPos + int64_t(s.tokens.size()) + kv.pageSize - 1) / kv.pageSize);
      push(acc);
    }
    nnz = acc;
    indices = int64_t(m.size());
    for (int o = from; o < to; o++) {
      const SeqInput& s = b.seqs[p.order[o]];
      int64_t len = s.startPos + int64_t(s.tokens.size()), pages = (len + kv.pageSize - 1) / kv.pageSize;
      m.insert(m.end(), s.blockTable.begin(), s.blockTable.begin() + pages);
    }
    nnz = pageTableCapacity(acc);
    m.insert(m.end(), size_t(nnz - acc), 0);
    last = int64_t(m.size());
    for (int o = from; o < to; o++) {
      const SeqInput& s = b.seqs[p.order[o]];
      int64_t len = s.startPos + int64_t(s.tokens.size());
      push(int32_t(len - (len - 1) / kv.pageSize * kv.pageSize));
    }
  };
  csr(0, p.nd, p.dIndptr, p.dIndices, p.dLast, p.dNnz);
  csr(p.nd, n, p.pIndptr, p.pIndices, p.pLast, p.pNnz);
  p.pQIndptr = int64_t(m.size());
  push(0);
  for (int o = p.nd; o < n; o++) push(int32_t(p.firstRow[p.order[o]] - p.nd + int64_t(b.seqs[p.order[o]].tokens.size())));

  // Final rows: emitting rows (they get logits and a token), then those capturing the final hidden state.
  auto lastRow = [&](int i) { return int32_t(p.firstRow[i] + int64_t(b.seqs[i].tokens.size()) - 1); };
  for (bool fixed : {false, true}) {  // fast rows first: the lm_head runs them on the fast schedule
    for (int i = 0; i < n; i++) {
      const SeqInput& s = b.seqs[i];
      if (!s.emitToken || s.fixedSchedule != fixed) continue;
      const int32_t len = int32_t(s.tokens.size());
      for (int32_t j = s.emitAll ? 0 : len - 1; j < len; j++) p.finals.push_back({i, int32_t(p.firstRow[i]) + j, j});
    }
    if (!fixed) p.Ef = int(p.finals.size());
  }
  p.E = int(p.finals.size());
  for (int i = 0; i < n; i++)
    if (!b.seqs[i].emitToken && (captures(b.seqs[i], cfg.numLayers) || captures(b.seqs[i], cfg.numLayers + 1)))
      p.finals.push_back({i, lastRow(i), int32_t(b.seqs[i].tokens.size()) - 1});
  p.finalRows = int64_t(m.size());
  for (const auto& f : p.finals) push(f.row);
  p.temp = int64_t(m.size());
  for (int e = 0; e < p.E; e++) push(floatBits(b.seqs[p.finals[e].seq].temperature));
  p.topK = int64_t(m.size());
  for (int e = 0; e < p.E; e++) push(b.seqs[p.finals[e].seq].topK);
  p.topP = int64_t(m.size());
  for (int e = 0; e < p.E; e++) push(floatBits(b.seqs[p.finals[e].seq].topP));
  p.seeds = int64_t(m.size());
  for (int e = 0; e < p.E; e++) {
    uint64_t s = b.seqs[p.finals[e].seq].seed;
    push(int32_t(uint32_t(s))), push(int32_t(uint32_t(s >> 32)));
  }
  // The sampled token's own position: it follows the row's input token.
  p.samplePos = int64_t(m.size());
  for (int e = 0; e < p.E; e++) push(b.seqs[p.finals[e].seq].startPos + p.finals[e].j + 1);
  // The sampler returns the top numTop logprobs of every emitting row: enough for each row's own numTop and for its
  // DeepConf confidence (readOutputs keeps each row's share).
  for (int e = 0; e < p.E; e++) p.numTop = std::max({p.numTop, b.seqs[p.finals[e].seq].numTop, b.seqs[p.finals[e].seq].confidenceK});

  for (int layer = 0; layer < cfg.numLayers; layer++) {
    Plan::Capture c{layer, {}, 0};
    for (int i = 0; i < n; i++)
      if (captures(b.seqs[i], layer)) c.seqs.push_back(i);
    if (c.seqs.empty()) continue;
    c.rows = int64_t(m.size());
    for (int i : c.seqs) push(lastRow(i));
    p.captures.push_back(std::move(c));
  }
  // Token masks last, after every offset the step's launches bake in: a step without any has today's layout, and one
  // with them moves no other offset. Each masked emitting row's words are copied in emitting-row order (validate
  // checked each sequence's row count against emitAll).
  // A late mask's row is reserved here (zeros) and written before sampling.
  bool masked = false;
  auto hasMask = [&](const SeqInput& s) { return s.allowedTokens.has_value() || s.lateMask >= 0; };
  for (int e = 0; e < p.E; e++) masked |= hasMask(b.seqs[p.finals[e].seq]);
  if (masked) {
    const int64_t W = (int64_t(cfg.headRows()) + 31) / 32;
    p.maskRowOf = int64_t(m.size());
    for (int e = 0; e < p.E; e++) push(hasMask(b.seqs[p.finals[e].seq]) ? p.maskRows++ : -1);
    p.maskWords = int64_t(m.size());
    int32_t maskRow = 0;
    for (int e = 0; e < p.E; e++) {
      const SeqInput& s = b.seqs[p.finals[e].seq];
      if (!hasMask(s)) continue;
      if (s.lateMask >= 0) {
        p.late.push_back({maskRow++, s.lateMask, int32_t(e)});
        m.resize(m.size() + size_t(W), 0);
        continue;
      }
      const int64_t row = s.emitAll ? p.finals[e].j : 0;
      m.insert(m.end(), s.allowedTokens->begin() + row * W, s.allowedTokens->begin() + (row + 1) * W);
      maskRow++;
    }
  }
  return p;
}

void Model::ensureScratch(int64_t T, int64_t F, int numTop, size_t metaInts) {
  const int64_t C = cfg.hidden, I = cfg.intermediate;
  residual_.ensure(device, actDtype, T * C);
  h_.ensure(device, actDtype, T * C);
  o_.ensure(device, actDtype, T * C);
  qkv_.ensure(device, actDtype, T * cfg.qkvDim());
  attn_.ensure(device, actDtype, T * cfg.qDim());
  gateUp_.ensure(device, actDtype, T * 2 * I);
  act_.ensure(device, actDtype, T * I);
  if (cfg.numExperts > 0) {
    const int64_t E = cfg.numExperts, R = T * cfg.expertsPerToken, Im = cfg.moeIntermediate;
    moeLogits_.ensure(device, DType::f32, T * E);
    for (Buffer* b : {&moeIds_, &moeRowOfSlot_, &moeSlotOfRow_}) b->ensure(device, DType::i32, R);
    moeWeights_.ensure(device, DType::f32, R);
    moeTiles_.ensure(device, DType::i32, 3 * moeMaxTiles(R, E));
    if (device == Device::cpu) moeXs_.ensure(device, actDtype, R * C);
    moeGu_.ensure(device, actDtype, R * 2 * Im);
    moeAct_.ensure(device, actDtype, R * Im);
    moeYs_.ensure(device, DType::f32, R * C);
  }
  F = std::max<int64_t>(F, 1);
  resLast_.ensure(device, actDtype, F * C);
  oLast_.ensure(device, actDtype, F * C);
  hLast_.ensure(device, actDtype, F * C);
  capture_.ensure(device, actDtype, F * C);
  logits_.ensure(device, DType::f32, F * cfg.headRows());
  tokens_.ensure(device, DType::i32, F);
  logprobs_.ensure(device, DType::f32, F);
  topIds_.ensure(device, DType::i32, F * std::max(numTop, 1));
  topLogprobs_.ensure(device, DType::f32, F * std::max(numTop, 1));
  if (device == Device::cuda) metaDev_.ensure(device, DType::i32, int64_t(metaInts));
}

namespace {
// Reads n rows of C activations (f32 or bf16) from the device into f32 host vectors.
std::vector<std::vector<float>> readRows(Device d, const Buffer& buf, int64_t n, int64_t C) {
  std::vector<uint8_t> raw(size_t(n * C) * dtypeSize(buf.dtype()));
  copyToHost(d, raw.data(), buf.data(), raw.size());
  std::vector<std::vector<float>> out(n, std::vector<float>(C));
  for (int64_t r = 0; r < n; r++)
    for (int64_t c = 0; c < C; c++) {
      size_t i = size_t(r * C + c);
      if (buf.dtype() == DType::f32) std::memcpy(&out[r][c], raw.data() + 4 * i, 4);
      else {
        uint16_t h;
        std::memcpy(&h, raw.data() + 2 * i, 2);
        out[r][c] = buf.dtype() == DType::bf16 ? bf16ToF32(h) : f16ToF32(h);
      }
    }
  return out;
}
}  // namespace

// Decode steps padded to a batch-size bucket (1, 2, 4, then multiples of 8 up to 256), as vLLM's CUDA graph sizes:
// the padding rows decode token 0 at position 0 on the scratch page and their outputs are dropped. A row's bits do
// not depend on the batch around it (kernels.h; with fastSplitK its GEMMs' splitK depends on the fast-row count only
// through ceil(rows / tile rows), which a bucket, a multiple of 8 from 8 rows up, never changes: Step::sk), so
// padding changes no real row's result; what it buys is one
// graph per bucket instead of one per batch size while requests come and go. On CUDA with graphs on (DL_CUDA_GRAPHS
// not 0); DL_PAD_DECODE=1 pads on any device (tests), 0 never.
int64_t Model::decodeBucket(const BatchInput& b) const {
  const knob::Knobs& k = knob::knobs();
  const bool on = k.padDecode >= 0 ? k.padDecode == 1 : device == Device::cuda && k.cudaGraphs;
  const int64_t n = int64_t(b.seqs.size());
  if (!on || b.profile || b.returnLogits || n == 0 || n > 256) return 0;
  for (const SeqInput& s : b.seqs)
    if (s.tokens.size() != 1 || s.fixedSchedule || !s.captureLayers.empty() || s.emitAll || !s.emitToken) return 0;
  int64_t bucket = 1;
  if (n > 4) bucket = (n + 7) / 8 * 8;
  else
    while (bucket < n) bucket *= 2;
  return bucket > n ? bucket : 0;
}

std::vector<SeqOutput> Model::forward(BatchInput& b) {
  const int64_t bucket = decodeBucket(b);
  if (bucket == 0) return forwardStep(b);
  SeqInput pad;
  pad.tokens = {0};
  pad.startPos = 0;
  pad.blockTable = {kv.numPages};  // the scratch page
  const size_t n = b.seqs.size();
  // The pad rows go on the caller's batch and come off again, also on a throw (copying a 256-row batch's block
  // tables every step, ~2 MB at 2k pages each, would cost more host time than the rest of the step's parse).
  b.seqs.resize(size_t(bucket), pad);
  std::vector<SeqOutput> out;
  try {
    out = forwardStep(b);
  } catch (...) {
    b.seqs.resize(n);
    throw;
  }
  b.seqs.resize(n);
  out.resize(n);
  return out;
}

// Everything one forwardStep's stages share: the batch, its plan, the dimensions, the activation views, the
// split-K helpers and what hidden-state captures collected. Shapes: T packed rows (fixed-schedule rows last, from
// Tf), C hidden, Q = Hq * D, KV = Hk * D, I intermediate, V vocab; F final rows, E of them emitting a token.
struct Model::Step {
  const BatchInput& b;
  Plan p;
  Device d;
  StepProfile* prof;
  int64_t T = 0, F = 0, E = 0, Tf = 0, C = 0, Q = 0, KV = 0, I = 0, V = 0, Hq = 0, Hk = 0, D = 0, nd = 0, npre = 0, nPrefillSeqs = 0;
  float scale = 0.f;
  // resid/h/o [T,C], q [T,Hq,D], k/v [T,Hk,D], gu [T,2I], act [T,I]
  View resid{}, h{}, o{}, q{}, k{}, v{}, gu{}, act{}, positions{}, slots{};
  std::vector<std::vector<float>> captured{};  // per sequence, a captured hidden state (or empty)
  size_t nextCapture = 0;
  bool finalCapture = false;
  std::vector<int32_t> lateFailed{};  // emitting rows whose late mask failed (awaitLateMasks)

  void mark(const char* label) const {
    if (prof) prof->mark(label);
  }
  // The step's splitK for a GEMM of `rows` fast rows, K deep and N wide: with fastSplitK on CUDA, not split where the
  // grid alone fills the SMs (gpu::fastGemmSplitK). A function of (rows, N, K, the step's splitK), never of the fixed
  // rows beside them; rows enter only through ceil(rows / tile rows), tile rows multiples of 8, so a decode batch and
  // its padding bucket (decodeBucket) get the same answer.
  int sk(int64_t K, int64_t rows, int64_t N) const {
    const int s = int(std::min<int64_t>(b.gemmSplitK, K));
    return d == Device::cuda && b.fastSplitK ? gpu::fastGemmSplitK(rows, N, s) : s;
  }
  int skFixed(int64_t K) const { return int(std::min<int64_t>(b.fixedGemmSplitK, K)); }
  // The rows [0, rows) of an N-wide GEMM over K: the first `fastRows` on the step's splitK, the rest on the fixed one
  // (one call when the two agree; a row's bits depend on its own X, K and splitK only, so splitting changes no bits).
  template <class Range>
  void splitRows(int64_t K, int64_t N, int64_t rows, int64_t fastRows, Range range) const {
    const int fast = fastRows == 0 ? 0 : sk(K, fastRows, N), fixed = skFixed(K);
    if (fastRows == rows || fastRows == 0 || fast == fixed) return range(0, rows, fastRows == 0 ? fixed : fast);
    range(0, fastRows, fast);
    range(fastRows, rows - fastRows, fixed);
  }
  // y (rows, N) at yOffset = x (rows, K) . W^T + bias, rows split as above.
  void gemmSplit(const Buffer& x, int64_t K, const View& w, const View& bias, const Buffer& y, int64_t yOffset,
                 int64_t rows, int64_t fastRows) const {
    const int64_t N = w.shape[0];
    splitRows(K, N, rows, fastRows, [&](int64_t r0, int64_t n, int splitK) {
      ops::gemm(d, x.view({n, K}, r0 * K), w, bias, y.view({n, N}, yOffset + r0 * N), splitK);
    });
  }
  // The same over all T packed rows.
  void gemmRows(const Buffer& x, int64_t K, const View& w, const View& bias, const Buffer& y) const {
    gemmSplit(x, K, w, bias, y, 0, T, Tf);
  }
  // The final hidden states are captured at a sequence's last row only (emitAll rows before it are skipped).
  bool isCapture(const Plan::FinalRow& f, int numLayers) const {
    const SeqInput& s = b.seqs[f.seq];
    return f.j == int32_t(s.tokens.size()) - 1 && (captures(s, numLayers) || captures(s, numLayers + 1));
  }
  // Stores sequence i's capture of `layer` in its slot of the output [captureLayers.size(), C].
  void store(int i, int layer, std::vector<float>&& row) {
    const std::vector<int>& want = b.seqs[i].captureLayers;
    const size_t slot = size_t(std::lower_bound(want.begin(), want.end(), layer) - want.begin());
    std::vector<float>& out = captured[i];
    out.resize(want.size() * size_t(C));
    std::copy(row.begin(), row.end(), out.begin() + int64_t(slot) * C);
  }
};

std::vector<SeqOutput> Model::forwardStep(const BatchInput& b) {
  requireWeights();
  // Profiling (b.profile): marks between the ops; a step that throws leaves no half-marked intervals behind.
  StepProfile* prof = b.profile ? &profile_ : nullptr;
  struct ProfileGuard {
    StepProfile* p;
    ~ProfileGuard() {
      if (p) p->abandon();
    }
  } profileGuard{prof};
  if (prof) prof->begin(device), prof->mark("plan");
  Step s{b, plan(b), device, prof};  // the rest is filled below, once the scratch exists
  s.T = s.p.T, s.F = int64_t(s.p.finals.size()), s.E = s.p.E, s.Tf = s.p.Tf;
  ensureScratch(s.T, s.F, s.p.numTop, metaHost_.size());
  s.mark("meta.upload");
  if (device == Device::cuda) copyToDevice(device, metaDev_.data(), metaHost_.data(), metaHost_.size() * 4);
  s.C = cfg.hidden, s.Q = cfg.qDim(), s.KV = cfg.kvDim(), s.I = cfg.intermediate, s.V = cfg.headRows();
  s.Hq = cfg.numHeads, s.Hk = cfg.numKvHeads, s.D = cfg.headDim;
  s.scale = float(double(cfg.attnLogitScale) / std::sqrt(double(s.D)));
  const int64_t T = s.T, C = s.C;
  s.resid = residual_.view({T, C}), s.h = h_.view({T, C}), s.o = o_.view({T, C});
  s.q = qkv_.view({T, s.Hq, s.D}), s.k = qkv_.view({T, s.Hk, s.D}, T * s.Q), s.v = qkv_.view({T, s.Hk, s.D}, T * (s.Q + s.KV));
  s.gu = gateUp_.view({T, 2 * s.I}), s.act = act_.view({T, s.I});
  s.positions = meta(s.p.positions, T), s.slots = meta(s.p.slots, T);
  s.nd = s.p.nd, s.npre = T - s.nd, s.nPrefillSeqs = int64_t(b.seqs.size()) - s.nd;
  s.captured.resize(b.seqs.size());
  for (const auto& f : s.p.finals) s.finalCapture |= s.isCapture(f, cfg.numLayers);

  copyPagesOfStep(s);
  // Everything from the embedding to sampling only enqueues kernels (host reads happen only for hidden-state
  // captures), so on CUDA a step without hidden-state captures can run as one replayed graph (page copies above
  // stay eager: they are ordered before it on the same stream).
  auto enqueue = [&] {
    embed(s);
    for (int l = 0; l < cfg.numLayers; l++) attentionBlock(s, l), mlpBlock(s, l);
    finalRows(s);
  };
  // Graph key: every size and metadata offset the launches bake in, the schedule, and each buffer's address.
  const Plan& p = s.p;
  const bool graphable = device == Device::cuda && p.captures.empty() && !s.finalCapture && knob::knobs().cudaGraphs && !prof;
  auto graphKey = [&] {
    std::vector<int64_t> k = {T, p.nd, p.Tf, p.maxPrefillQ, s.E, p.Ef, s.F, p.numTop, p.dNnz, p.pNnz, int64_t(b.seqs.size()), b.gemmSplitK,
                              b.kvSplits, b.fixedGemmSplitK, int64_t(b.fastSplitK),
                              int64_t(metaHost_.size()), p.ids, p.positions, p.slots, p.dIndptr, p.dIndices, p.dLast,
                              p.pQIndptr, p.pIndptr, p.pIndices, p.pLast, p.finalRows, p.temp, p.topK, p.topP, p.seeds,
                              p.samplePos, p.maskRowOf, p.maskWords, p.maskRows};
    for (const Buffer* buf : {&metaDev_, &residual_, &h_, &o_, &qkv_, &attn_, &gateUp_, &act_, &resLast_, &oLast_,
                              &hLast_, &logits_, &tokens_, &logprobs_, &topIds_, &topLogprobs_, &moeLogits_, &moeIds_,
                              &moeWeights_, &moeRowOfSlot_, &moeSlotOfRow_, &moeTiles_, &moeGu_, &moeAct_, &moeYs_})
      k.push_back(int64_t(reinterpret_cast<uintptr_t>(buf->data())));
    return k;
  };
  // The attention launches' side stream (attentionBlock) exists before any capture: a capture may not create it.
  if (device == Device::cuda && !prof && knob::knobs().attnOverlap) gpu::SideStream::prepare();
  {
    // Programmatic dependent launch for this step's kernels when DL_PDL=1 (cuda/pdl.cuh); not while profiling (its
    // events between launches time each kernel alone).
    std::optional<gpu::PdlScope> pdl;
    if (device == Device::cuda && !prof) pdl.emplace();
    if (!graphable || !graphs_.run(graphKey(), enqueue)) enqueue();
  }
  std::vector<SeqOutput> out = readOutputs(s);
  if (device == Device::cuda) gpu::synchronize();
  if (prof) prof->end();
  return out;
}

// Copy-on-write page copies of the step, in every layer's caches, before anything reads them.
void Model::copyPagesOfStep(Step& s) {
  if (s.b.copySrc.empty()) return;
  s.mark("pageCopy");
  const int64_t n = int64_t(s.b.copySrc.size());
  for (int l = 0; l < cfg.numLayers; l++)
    ops::pageCopy(s.d, kCache_[l].view({kv.numPages, kv.pageSize, s.Hk, s.D}), vCache_[l].view({kv.numPages, kv.pageSize, s.Hk, s.D}),
                  meta(0, n), meta(n, n));
}

// resid [T,C] = the token embeddings.
void Model::embed(Step& s) {
  s.mark("embedding");
  ops::embedding(s.d, meta(s.p.ids, s.T), weights.embed.matrix(), s.resid);
}

// Layer l's attention half: h = rmsnorm(resid (+= layer l-1's MLP output)); q | k | v = h . Wqkv^T; rope and the KV
// write; paged attention (decode rows, then prefill / verify rows) into attn [T,Q]; o [T,C] = attn . Wo^T.
void Model::attentionBlock(Step& s, int l) {
  const LayerWeights& L = weights.layers[l];
  const Device d = s.d;
  const int64_t T = s.T, C = s.C, Q = s.Q, KV = s.KV, Hq = s.Hq, Hk = s.Hk, D = s.D, nd = s.nd, npre = s.npre;
  const Plan& p = s.p;
  s.mark("rmsnorm");
  if (l == 0) ops::rmsnorm(d, s.resid, View{}, L.inputNorm.vector(), s.h, cfg.rmsEps);
  else ops::rmsnorm(d, s.o, s.resid, L.inputNorm.vector(), s.h, cfg.rmsEps);  // resid += o (layer l-1's MLP)
  // resid now holds the stream after l layers: HF hidden_states[l].
  if (s.nextCapture < p.captures.size() && p.captures[s.nextCapture].layer == l) {
    s.mark("captureHidden");
    const Plan::Capture& c = p.captures[s.nextCapture++];
    int64_t n = int64_t(c.seqs.size());
    ops::embedding(d, meta(c.rows, n), s.resid, capture_.view({n, C}));
    auto rows = readRows(d, capture_, n, C);
    for (int64_t r = 0; r < n; r++) s.store(c.seqs[r], l, std::move(rows[r]));
  }

  s.mark("gemm.qkv");
  // q | k | v in one GEMM, stored as the three matrices (T, Q), (T, KV), (T, KV) the q, k, v views read.
  View bias = L.qkvBias.buf ? L.qkvBias.vector() : View{};
  s.splitRows(C, cfg.qkvDim(), T, s.Tf, [&](int64_t r0, int64_t n, int splitK) {
    ops::gemmBlocks(d, h_.view({n, C}, r0 * C), L.qkv.matrix(), bias, qkv_.view({T * cfg.qkvDim()}), splitK, Q, Q + KV, T, r0);
  });
  if (cfg.qkNorm) {
    // Qwen3: each query and key head RMS-normalized over its D values, in place, before RoPE: q (T, Q) and k (T, KV)
    // read as (T * Hq, D) and (T * Hk, D) rows, each reduced alone (batch-invariant like every rmsnorm row).
    s.mark("qkNorm");
    View q2 = qkv_.view({T * Hq, D}), k2 = qkv_.view({T * Hk, D}, T * Q);
    ops::rmsnorm(d, q2, View{}, L.qNorm.vector(), q2, cfg.rmsEps);
    ops::rmsnorm(d, k2, View{}, L.kNorm.vector(), k2, cfg.rmsEps);
  }
  const int64_t pages = kv.numPages + 1;  // the pool and the scratch page
  View kc = kCache_[l].view({pages, kv.pageSize, Hk, D}), vc = vCache_[l].view({pages, kv.pageSize, Hk, D});
  s.mark("ropeKvWrite");
  ops::ropeKvWrite(d, s.q, s.k, s.v, s.positions, invFreq_.view({D / 2}), kc, vc, s.slots);
  {
    // The two attention launches write disjoint rows of attn_ from the KV written above. On CUDA, with both present,
    // the prefill one runs on a side stream beside the decode one: its CTAs are few (a step's verify rows, exact
    // decodes, prompt chunks) and each walks its keys alone, so on one stream it is ~10 us a layer of a mostly idle
    // GPU (H100: 0.32 ms of a 256-row SmolLM step with 26 fixed rows). Not while profiling (its marks time
    // each op alone); DL_ATTN_OVERLAP=0 keeps one stream. The same bits either way.
    gpu::SideStream side(d == Device::cuda && nd > 0 && npre > 0 && !s.prof && knob::knobs().attnOverlap);
    if (npre > 0) {
      side.run([&] {
        s.mark("attention.prefill");
        PagedKV pk{kc, vc, meta(p.pIndptr, s.nPrefillSeqs + 1), meta(p.pIndices, p.pNnz), meta(p.pLast, s.nPrefillSeqs),
                   kv.pageSize, cfg.slidingWindow};
        ops::attentionPrefill(d, qkv_.view({npre, Hq, D}, nd * Q), meta(p.pQIndptr, s.nPrefillSeqs + 1), pk,
                              attn_.view({npre, Hq, D}, nd * Q), s.scale, p.maxPrefillQ);
      });
    }
    if (nd > 0) {
      s.mark("attention.decode");
      PagedKV pk{kc, vc, meta(p.dIndptr, nd + 1), meta(p.dIndices, p.dNnz), meta(p.dLast, nd), kv.pageSize, cfg.slidingWindow};
      ops::attentionDecode(d, qkv_.view({nd, Hq, D}), pk, attn_.view({nd, Hq, D}), s.scale, s.b.kvSplits);
    }
  }  // side's join: the o projection reads both
  s.mark("gemm.o");
  s.gemmRows(attn_, Q, L.o.matrix(), L.oBias.buf ? L.oBias.vector() : View{}, o_);
}

// Layer l's MLP half: h = rmsnorm(resid += o); gateUp [T,2I] = h . Wgu^T; act = silu(gate) * up; o = act . Wdown^T
// (added to resid by the next layer's norm, or by finalRows).
// A mixture-of-experts layer runs the moe op instead (router, experts, combine), over the fast rows and the fixed
// rows apart, each on its own splitK: a token's output depends on its own row only (kernels.h MoeArgs).
void Model::mlpBlock(Step& s, int l) {
  const LayerWeights& L = weights.layers[l];
  s.mark("rmsnorm");
  ops::rmsnorm(s.d, s.o, s.resid, L.postNorm.vector(), s.h, cfg.rmsEps);  // resid += attention output
  if (cfg.isMoe(l)) {
    s.mark("moe");
    const int64_t C = s.C, Im = cfg.moeIntermediate, k = cfg.expertsPerToken;
    s.splitRows(C, 2 * Im, s.T, s.Tf, [&](int64_t r0, int64_t n, int splitK) {
      MoeArgs a;
      a.x = h_.view({n, C}, r0 * C), a.out = o_.view({n, C}, r0 * C);
      a.router = L.router.matrix(), a.gateUp = L.expertsGateUp.matrix(), a.down = L.expertsDown.matrix();
      a.topK = int(k), a.normTopK = cfg.normTopK, a.splitK = splitK;
      const int64_t R = n * k, E = cfg.numExperts;
      a.logits = moeLogits_.view({n * E}), a.expertIds = moeIds_.view({R}), a.weights = moeWeights_.view({R});
      a.rowOfSlot = moeRowOfSlot_.view({R}), a.slotOfRow = moeSlotOfRow_.view({R});
      a.tiles = moeTiles_.view({3 * moeMaxTiles(R, E)});
      if (moeXs_) a.xs = moeXs_.view({R * C});
      a.gu = moeGu_.view({R * 2 * Im}), a.act = moeAct_.view({R * Im}), a.ys = moeYs_.view({R * C});
      ops::moe(s.d, a);
    });
    return;
  }
  s.mark("gemm.gateUp");
  s.gemmRows(h_, s.C, L.gateUp.matrix(), View{}, gateUp_);
  s.mark("siluMul");
  ops::siluMul(s.d, s.gu, s.act);
  s.mark("gemm.down");
  s.gemmRows(act_, s.I, L.down.matrix(), View{}, o_);
}

// The F final rows only (the last position of each emitting or final-capturing sequence): hLast [F,C] = the final
// norm of resid + o; logits [E,V] = hLast . Wlm^T for the E emitting rows; the masked rows' disallowed ids set to
// -inf (allowedTokens), or on the CPU, unless the logits are returned, read as such by the sampler; sampling into
// tokens / logprobs / top-k.
void Model::finalRows(Step& s) {
  const Plan& p = s.p;
  const Device d = s.d;
  const int64_t F = s.F, E = s.E, C = s.C, V = s.V;
  if (F > 0) {
    s.mark("finalNorm");
    View rows = meta(p.finalRows, F), hLast = hLast_.view({F, C});
    ops::embedding(d, rows, s.resid, resLast_.view({F, C}));
    ops::embedding(d, rows, s.o, oLast_.view({F, C}));
    ops::rmsnorm(d, oLast_.view({F, C}), resLast_.view({F, C}), weights.finalNorm.vector(), hLast, cfg.rmsEps);
  }
  if (E == 0) return;
  const Buffer* headIn = &hLast_;
  if (cfg.scoreHead == ModelConfig::ScoreHead::twoClass) {
    // Qwen2.5-Math-PRM's score.0 and its ReLU, into oLast (free once the final norm has read it): [E, C].
    s.mark("gemm.scoreHidden");
    s.gemmSplit(hLast_, C, weights.scoreHidden.matrix(), weights.scoreHiddenBias.vector(), oLast_, 0, E, p.Ef);
    s.mark("relu");
    ops::relu(d, oLast_.view({E, C}), oLast_.view({E, C}));
    headIn = &oLast_;
  }
  s.mark("gemm.lmHead");
  View logits = logits_.view({E, V});
  s.gemmSplit(*headIn, C, weights.head().matrix(), weights.headBias.buf ? weights.headBias.vector() : View{}, logits_, 0, E, p.Ef);
  SampleArgs a;
  a.logits = logits;
  a.temperature = meta(p.temp, E, DType::f32);
  a.topK = meta(p.topK, E);
  a.topP = meta(p.topP, E, DType::f32);
  a.seeds = meta(p.seeds, 2 * E);
  a.seeds.ndim = 2, a.seeds.shape[0] = E, a.seeds.shape[1] = 2;
  a.positions = meta(p.samplePos, E);
  a.tokens = tokens_.view({E});
  a.logprobs = logprobs_.view({E});
  a.numTop = p.numTop;
  if (p.numTop > 0) {
    a.topIds = topIds_.view({E, p.numTop});
    a.topLogprobs = topLogprobs_.view({E, p.numTop});
  }
  if (!p.late.empty()) {
    s.mark("maskWait");
    awaitLateMasks(s);
  }
  if (p.maskRows > 0) {
    // Constrained rows. The CPU sampler reads the masks itself, only the allowed ids of each masked row (kernels.h
    // SampleArgs::mask: the same outputs as masking first), so the logits are masked in place (disallowed ids to
    // -inf) only when the step returns them; on CUDA always, before the sampler (one kernel over the rows, cheap
    // there). The other rows are not written, so their outputs keep their bits.
    View mask = meta(p.maskWords, int64_t(p.maskRows) * ((V + 31) / 32));
    mask.ndim = 2, mask.shape[0] = p.maskRows, mask.shape[1] = (V + 31) / 32;
    const View rowOf = meta(p.maskRowOf, E);
    if (d == Device::cuda || s.b.returnLogits) {
      s.mark("maskLogits");
      ops::maskLogits(d, logits, mask, rowOf);
    } else {
      a.mask = mask, a.maskRowOf = rowOf;
    }
  }
  s.mark("sample");
  ops::sample(d, a);
}

// Host side: the sampled tokens, logprobs, top-k, logits and captured hidden states, per sequence.
std::vector<SeqOutput> Model::readOutputs(Step& s) {
  const Plan& p = s.p;
  const Device d = s.d;
  const int64_t F = s.F, E = s.E, C = s.C, V = s.V;
  s.mark("readback");
  if (s.finalCapture) {
    // hLast: after the final norm (capture numLayers); resLast: its input, the stream after every layer (the fused
    // residual add of the final norm wrote resid + o there; capture numLayers + 1).
    auto normed = readRows(d, hLast_, F, C), stream = readRows(d, resLast_, F, C);
    for (int64_t r = 0; r < F; r++) {
      if (!s.isCapture(p.finals[r], cfg.numLayers)) continue;
      const int i = p.finals[r].seq;
      if (captures(s.b.seqs[i], cfg.numLayers)) s.store(i, cfg.numLayers, std::move(normed[r]));
      if (captures(s.b.seqs[i], cfg.numLayers + 1)) s.store(i, cfg.numLayers + 1, std::move(stream[r]));
    }
  }
  std::vector<SeqOutput> out(s.b.seqs.size());
  if (E > 0) {
    std::vector<int32_t> tok(E), ids(size_t(E * p.numTop));
    std::vector<float> lp(E), tlp(size_t(E * p.numTop));
    copyToHost(d, tok.data(), tokens_.data(), size_t(E) * 4);
    copyToHost(d, lp.data(), logprobs_.data(), size_t(E) * 4);
    if (p.numTop > 0) {
      copyToHost(d, ids.data(), topIds_.data(), ids.size() * 4);
      copyToHost(d, tlp.data(), topLogprobs_.data(), tlp.size() * 4);
    }
    // Rows of one sequence are consecutive in finals, in position order: append, so the last row's values end up
    // in token/logprob and an emitAll sequence's per-row arrays fill in order.
    for (int64_t e = 0; e < E; e++) {
      const SeqInput& in = s.b.seqs[p.finals[e].seq];
      SeqOutput& r = out[p.finals[e].seq];
      int want = in.numTop;
      r.token = tok[e];
      r.logprob = lp[e];
      if (in.emitAll) r.tokens.push_back(tok[e]), r.logprobs.push_back(lp[e]);
      r.topIds.insert(r.topIds.end(), ids.begin() + e * p.numTop, ids.begin() + e * p.numTop + want);
      r.topLogprobs.insert(r.topLogprobs.end(), tlp.begin() + e * p.numTop, tlp.begin() + e * p.numTop + want);
      if (in.confidenceK > 0) {
        // One definition for every device: the device's top logprobs, averaged here in a fixed order (double).
        double sum = 0;
        for (int j = 0; j < in.confidenceK; j++) sum += tlp[size_t(e * p.numTop + j)];
        r.confidence = float(-sum / in.confidenceK);
        if (in.emitAll) r.confidences.push_back(r.confidence);
      }
      if (s.b.returnLogits) {
        size_t at = r.logits.size();
        r.logits.resize(at + size_t(V));
        copyToHost(d, r.logits.data() + at, logits_.at(e * V), size_t(V) * 4);
      }
    }
  }
  // A late mask that failed or did not come in time: the row was sampled unmasked, its token is not given.
  for (int32_t e : s.lateFailed) out[p.finals[e].seq].token = -1;
  for (size_t i = 0; i < out.size(); i++) out[i].hidden = std::move(s.captured[i]);
  return out;
}

// Waits for each late mask's flag (BatchInput::lateMasks) and copies its words into the step's mask rows (host
// memory on the CPU, read by the sampler next). Polls, then sleeps between polls, up to lateWaitUs for the whole
// step; a row that failed (flag 2), allows no id below V, or has no flag by then allows every id (so the sampler has
// a row to read) and is reported as failed: readOutputs gives it token -1.
void Model::awaitLateMasks(Step& s) {
  const Plan& p = s.p;
  const int64_t W = (s.V + 31) / 32;
  const int tail = int(s.V - 32 * (W - 1));
  const uint32_t lastValid = tail == 32 ? 0xffffffffu : (1u << tail) - 1;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::microseconds(s.b.lateWaitUs);
  for (const Plan::LateRow& l : p.late) {
    const int32_t* flag = s.b.lateMasks + l.k;
    int32_t f = __atomic_load_n(flag, __ATOMIC_ACQUIRE);
    for (int polls = 0; f == 0 && std::chrono::steady_clock::now() < deadline; polls++) {
      if (polls < 256) std::this_thread::yield();
      else std::this_thread::sleep_for(std::chrono::microseconds(20));
      f = __atomic_load_n(flag, __ATOMIC_ACQUIRE);
    }
    int32_t* dst = metaHost_.data() + p.maskWords + int64_t(l.maskRow) * W;
    bool ok = f == 1;
    if (ok) {
      std::memcpy(dst, s.b.lateMasks + s.b.lateRows + int64_t(l.k) * W, size_t(W) * 4);
      bool any = (uint32_t(dst[W - 1]) & lastValid) != 0;
      for (int64_t w = 0; w + 1 < W && !any; w++) any = dst[w] != 0;
      ok = any;
    }
    if (!ok) {
      std::fill(dst, dst + W, -1);
      s.lateFailed.push_back(l.e);
    }
  }
}

}  // namespace dl
