// The native model: config, weights, the paged KV pool and reusable scratch; forward() runs the whole model for a
// whole batch in one call (docs/architecture.md "Native contract"). Shapes: C hidden, Hq/Hk heads, D head dim, I intermediate,
// V vocab, T packed tokens of the step, B sequences.
#pragma once
#include <cstdint>
#include <mutex>
#include <optional>
#include <vector>
#include "model_buffer.h"
#include "model_config.h"
#include "model_weights.h"
#include "step_profile.h"

namespace dl {

// One sequence's share of a step.
struct SeqInput {
  std::vector<int32_t> tokens;      // new token ids; positions startPos .. startPos + len - 1
  int32_t startPos = 0;             // tokens already in the KV cache
  std::vector<int32_t> blockTable;  // page ids covering positions 0 .. startPos + len - 1 (extra entries ignored)
  float temperature = 0;            // 0 = greedy
  int32_t topK = 0;                 // 0 = off
  float topP = 1;                   // 1 = off
  uint64_t seed = 0;
  int numTop = 0;                   // top-k logprobs to return (0..64)
  int confidenceK = 0;              // DeepConf token confidence over the top confidenceK logprobs (0 = off, ..64)
  // Hidden states to return at the last position, ascending, each once: l in [0, numLayers) = the residual stream
  // after l layers (HF hidden_states[l]), numLayers = after the final norm (HF's last), numLayers + 1 = the final
  // norm's input (the stream after every layer). SeqOutput::hidden holds them one after another.
  std::vector<int> captureLayers;
  bool emitToken = true;            // false: a non-final prefill chunk; lm_head and sampling skipped
  bool emitAll = false;             // sample at every position (a verify row), not only the last; needs emitToken
  bool fixedSchedule = false;       // run on the batch's fixed schedule whatever the step's fast one (see below)
  // Constrained decoding: XGrammar's token bitmask, [rows, ceil(vocab / 32)] int32 words, rows = 1 or tokens.size()
  // for emitAll (row j masks the sample after position j); id t is allowed iff bit (t & 31) of word t >> 5 is set.
  // The disallowed logits are -inf before sampling (maskLogits), so every output read from the row (token, logprob,
  // top logprobs, confidence, logits) is the constrained distribution's. Absent = unmasked.
  std::optional<std::vector<int32_t>> allowedTokens;
  // Or a mask that arrives while the step runs (CPU only, one row, not emitAll): row lateMask of BatchInput::lateMasks.
  int32_t lateMask = -1;
};

struct BatchInput {
  std::vector<SeqInput> seqs;
  // The step's (fast) schedule, for every sequence without fixedSchedule.
  int gemmSplitK = 1;  // clamped to each GEMM's K
  int kvSplits = 1;    // decode attention partitions
  // gemmSplitK as an upper bound (the engine's fast mode): on CUDA a GEMM whose grid at splitK 1 already fills the SMs
  // runs unsplit (gpu::fastGemmSplitK), so a fast row's bits then depend on how many fast rows share its GEMMs.
  // Without it every fast GEMM splits exactly gemmSplitK ways (bits depend on K and gemmSplitK only).
  bool fastSplitK = false;
  // The fixed schedule, for sequences with fixedSchedule (a verify row or a deterministic prefill chunk fused into
  // a fast step): GEMM rows with fixedGemmSplitK, and every position through the prefill attention kernel (one
  // query or many), so a fixed row's bits depend on its own sequence only, never on the fast rows beside it.
  int fixedGemmSplitK = 1;
  bool returnLogits = false;
  bool profile = false;  // time the step op by op into the model's StepProfile (the step runs eagerly)
  std::vector<int32_t> copySrc, copyDst;  // whole-page copies done before anything else (copy-on-write)
  // Token masks computed while the step runs (the engine's grammar matchers on the JS thread, which the forward does
  // not need; only the sampler does): [lateRows flags][lateRows, ceil(V / 32) words], memory of the caller kept alive
  // for the call (napi ForwardWorker). Before sampling, the forward waits for flag k of each row k a sequence names
  // (SeqInput::lateMask): 1 = its words are written (the caller stores the flag after the words), 2 = it failed; a
  // row failed, allowing no id, or without a flag after lateWaitUs is not sampled (token -1: the engine fails that
  // request) and never holds the step longer than that. CPU only (on CUDA the masks travel with the step's meta).
  const int32_t* lateMasks = nullptr;
  int64_t lateRows = 0;
  int64_t lateWaitUs = 0;
};

struct SeqOutput {
  int32_t token = -1;  // -1 when !emitToken; the last position's token for emitAll
  float logprob = 0;
  std::vector<int32_t> tokens;    // emitAll: [len] the token sampled after each position
  std::vector<float> logprobs;    // emitAll: [len]
  std::vector<int32_t> topIds;    // [numTop], or [len, numTop] for emitAll
  std::vector<float> topLogprobs;
  std::vector<float> hidden;  // [captureLayers.size(), C] when captured
  // DeepConf token confidence, -mean of the confidenceK largest logprobs of the row (the log-softmax of its logits,
  // after allowedTokens' mask), when confidenceK > 0: the last row's in `confidence`, every row's in `confidences` for emitAll.
  float confidence = 0;
  std::vector<float> confidences;
  std::vector<float> logits;  // [V] (or [len, V] for emitAll) when returnLogits and emitToken; -inf where masked
};

class Model {
 public:
  Model(const ModelConfig& cfg, Device device, DType actDtype, const KvPoolConfig& kv);

  const ModelConfig cfg;
  const Device device;
  const DType actDtype;  // activations: f32 on the CPU (its GEMM reads f32 X); bf16 or f32 on CUDA
  const KvPoolConfig kv;
  ModelWeights weights;
  std::mutex mu;  // one forward / copyPages at a time (scratch is shared)

  // Boundary checks, on the JS thread before any work: throws dl::Error naming the sequence and the field.
  void validate(const BatchInput& b) const;
  // Runs on a worker thread; the caller holds mu. A decode-only step may be padded to its batch-size bucket with
  // rows on the scratch page (decodeBucket) so that its CUDA graph serves every batch size of the bucket.
  std::vector<SeqOutput> forward(BatchInput& b);  // may add decode pad rows for the step; b is as given on return
  void copyPages(const std::vector<int32_t>& src, const std::vector<int32_t>& dst);
  // KV offloading: whole pages to / from host memory, per page every layer's K page then its V page (pageHostBytes()
  // bytes a page). On CUDA through a page-locked staging buffer, one synchronize per call. The caller holds mu.
  size_t pageHostBytes() const;
  void readPages(const std::vector<int32_t>& pages, uint8_t* host);
  void writePages(const std::vector<int32_t>& pages, const uint8_t* host);
  // Throws unless every weight has been set.
  void requireWeights() const;
  size_t kvBytes() const;
  // Totals of the profiled steps so far (BatchInput::profile), then cleared.
  std::vector<ProfileEntry> takeProfile() { return profile_.take(); }

 private:
  struct Plan;
  struct Step;  // one forwardStep's plan, views and helpers (model_forward.cc)
  // One step, in named stages (model_forward.cc): copy pages, then embed -> per layer attentionBlock + mlpBlock ->
  // finalRows (norm, LM head, sampling), all enqueued (on CUDA as one replayable graph), then readOutputs.
  std::vector<SeqOutput> forwardStep(const BatchInput& b);
  void copyPagesOfStep(Step& s);
  void embed(Step& s);
  void attentionBlock(Step& s, int l);
  void mlpBlock(Step& s, int l);
  void finalRows(Step& s);
  void awaitLateMasks(Step& s);
  std::vector<SeqOutput> readOutputs(Step& s);
  int64_t decodeBucket(const BatchInput& b) const;  // rows to pad a decode step to, or 0
  void ensureScratch(int64_t T, int64_t F, int numTop, size_t metaInts);
  Plan plan(const BatchInput& b);  // packs the step and fills metaHost_
  View meta(int64_t offset, int64_t n, DType t = DType::i32) const;

  // Per layer [numPages + 1, pageSize, Hk, D]: page numPages is the scratch page of padding rows, never handed out.
  std::vector<Buffer> kCache_, vCache_;
  // Page-locked staging of readPages / writePages on CUDA, grown to the largest call.
  struct Pinned {
    void* data = nullptr;
    size_t bytes = 0;
    ~Pinned();
  } pinned_;
  uint8_t* staging(size_t bytes);
  Buffer invFreq_;                       // [D/2] f32
  // Scratch, grown to the largest step: residual/h/o [T,C], qkv [T, Q + 2KV], attn [T,Q], gateUp [T,2I],
  // act [T,I]; the final rows (F <= B): resLast/oLast/hLast [F,C], logits f32 [F,V], capture [F,C].
  Buffer residual_, h_, qkv_, attn_, o_, gateUp_, act_, resLast_, oLast_, hLast_, logits_, capture_;
  Buffer tokens_, logprobs_, topIds_, topLogprobs_;
  // Mixture-of-experts scratch (kernels.h MoeArgs), R = T * expertsPerToken: logits [T,E] f32, ids / weights /
  // rowOfSlot / slotOfRow [R], tiles [moeMaxTiles(R, E), 3] i32, xs [R,C], gu [R,2I], act [R,I], ys [R,C] f32.
  Buffer moeLogits_, moeIds_, moeWeights_, moeRowOfSlot_, moeSlotOfRow_, moeTiles_, moeXs_, moeGu_, moeAct_, moeYs_;
  Buffer metaDev_;                 // int32 step metadata on the device (CUDA only)
  gpu::StepGraphs graphs_;         // CUDA graphs of repeated step layouts (decode steps; see forward())
  std::vector<int32_t> metaHost_;  // the same on the host
  StepProfile profile_;
};

}  // namespace dl
