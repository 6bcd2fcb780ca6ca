// The whole native surface, typed in one place (mirrors cpp/napi/addon.cc, napi_tensor.cc, napi_ops.cc).
// Every op takes one options object and returns a Promise that settles when the work is done (AsyncWorker: the
// event loop keeps running meanwhile); bad input rejects with an Error naming the op, the field and the problem.

/** i8: a quantized GEMM weight only (its per-row f32 scales passed beside it as wScale). u8: the packed q of a
 *  grouped quantized GEMM weight (wBits, wGroupSize, wScales, wZeros, wPerm beside it). */
export type DType = "f32" | "bf16" | "f16" | "i32" | "i8" | "u8";
export type DeviceKind = "cpu" | "cuda";

export interface NativeTensor {
  readonly shape: number[];
  readonly dtype: DType;
  readonly device: DeviceKind;
  readonly byteLength: number;
  readonly disposed: boolean;
  /** Raw copy of host bytes into the tensor at byteOffset (synchronous). */
  write(bytes: ArrayBufferView | ArrayBuffer, byteOffset?: number): void;
  /** The tensor's bytes (synchronous). */
  read(): ArrayBuffer;
  /** Whole tensor from f32 values, converted to the tensor's dtype (round to nearest even). */
  writeF32(values: Float32Array): void;
  /** Whole tensor converted to f32. */
  readF32(): Float32Array;
  /** Copies another tensor of the same dtype and byte length, across devices if need be. */
  copyFrom(other: NativeTensor): void;
  /** Idempotent; memory is released once no op in flight still uses it. */
  dispose(): void;
}

/** Paged KV cache of one layer, flashinfer CSR form: caches [numPages, pageSize, Hk, D]; indptr [B+1]; indices; lastPageLen [B]. */
export interface PagedKVArgs {
  kCache: NativeTensor;
  vCache: NativeTensor;
  indptr: NativeTensor;
  indices: NativeTensor;
  lastPageLen: NativeTensor;
  /** Keys a query attends to, counting back from its own position (0 or omitted = all; CPU only for now). */
  slidingWindow?: number;
}

export interface NativeOps {
  /** y[M,N] = x[M,K] · w[N,K]^T (+ bias[N]); K cut into splitK partitions summed in a fixed order. */
  gemm(
    a: {
      x: NativeTensor;
      w: NativeTensor;
      bias?: NativeTensor;
      y: NativeTensor;
      splitK?: number;
      /** 1: run on a packed copy of bf16 or i8 `w` (the layout a loaded model's bf16 weights take on an AVX512-BF16 CPU,
       * its int8-quantized ones on an AVX-512 CPU); tests. */
      packW?: 0 | 1;
      /** 8: run a 4-bit or e4m3 `w` with its wScales / wZeros copied by panel of 8 rows (how a loaded model holds them
       * on the CPU); tests. */
      wPanel?: 0 | 8;
      /** An i8 `w`'s per-row scales, f32 [N] (w = q * wScale per row; required with i8 w, refused otherwise): each
       * output's sum over the schedule times its row's scale, then the bias. */
      wScale?: NativeTensor;
    } & NativeGroupedGemmWeight,
  ): Promise<void>;
  /** gemm with y's columns stored as blocks [0, cut1), [cut1, cut2), [cut2, N), each a (rows, width) matrix; x's row m
   * is row row0 + m of each (the fused q | k | v projection). y: rows * N elements. Same bits as gemm. */
  gemmBlocks(
    a: {
      x: NativeTensor;
      w: NativeTensor;
      bias?: NativeTensor;
      y: NativeTensor;
      splitK?: number;
      cut1: number;
      cut2: number;
      rows: number;
      row0?: number;
      /** As gemm's: an i8 w's per-row scales. */
      wScale?: NativeTensor;
    } & NativeGroupedGemmWeight,
  ): Promise<void>;
  /** residual += x (when given), out = rmsnorm(residual or x) * weight. */
  rmsnorm(a: {
    x: NativeTensor;
    residual?: NativeTensor;
    weight: NativeTensor;
    out: NativeTensor;
    eps?: number;
  }): Promise<void>;
  /** In-place rotary embedding, HF rotate-half; q [T,Hq,D], k [T,Hk,D], positions i32 [T], invFreq f32 [D/2]. */
  rope(a: { q: NativeTensor; k: NativeTensor; positions: NativeTensor; invFreq: NativeTensor }): Promise<void>;
  /** out[M,I] = silu(gateUp[:, :I]) * gateUp[:, I:]. */
  siluMul(a: { gateUp: NativeTensor; out: NativeTensor }): Promise<void>;
  /** out[T,C] = table[ids[T]]. */
  embedding(a: { ids: NativeTensor; table: NativeTensor; out: NativeTensor }): Promise<void>;
  add(a: { a: NativeTensor; b: NativeTensor; out: NativeTensor }): Promise<void>;
  /** out = max(x, 0) elementwise (NaN stays NaN), same shape and dtype; x may be out. */
  relu(a: { x: NativeTensor; out: NativeTensor }): Promise<void>;
  /** kCache/vCache[slots[t]] = k/v[t]; slot = page * pageSize + offset. */
  kvWrite(a: {
    k: NativeTensor;
    v: NativeTensor;
    kCache: NativeTensor;
    vCache: NativeTensor;
    slots: NativeTensor;
  }): Promise<void>;
  /** rope then kvWrite of the rotated k and v (one launch on the GPU; the same bits as the two ops). */
  ropeKvWrite(a: {
    q: NativeTensor;
    k: NativeTensor;
    v: NativeTensor;
    positions: NativeTensor;
    invFreq: NativeTensor;
    kCache: NativeTensor;
    vCache: NativeTensor;
    slots: NativeTensor;
  }): Promise<void>;
  /** Whole pages src[i] -> dst[i] in both caches. */
  pageCopy(a: { kCache: NativeTensor; vCache: NativeTensor; src: NativeTensor; dst: NativeTensor }): Promise<void>;
  /** One query per sequence, split-KV with kvSplits partitions merged by log-sum-exp. */
  attentionDecode(
    a: PagedKVArgs & { q: NativeTensor; out: NativeTensor; scale?: number; kvSplits?: number },
  ): Promise<void>;
  /** T queries per sequence (qIndptr [B+1]), causal over cached prefix + new tokens. */
  attentionPrefill(
    a: PagedKVArgs & {
      q: NativeTensor;
      qIndptr: NativeTensor;
      out: NativeTensor;
      scale?: number;
      maxQueryLen?: number;
    },
  ): Promise<void>;
  /**
   * Constrained decoding, in place: for each row b of logits [B, V] f32 with rowOf[b] >= 0, every id t whose bit
   * (t & 31) of word t >> 5 of mask row rowOf[b] is clear becomes -inf. mask: [R, ceil(V / 32)] i32 (XGrammar's token
   * bitmask); rowOf: [B] i32, -1 = row left as is. Nothing else is written.
   */
  maskLogits(a: { logits: NativeTensor; mask: NativeTensor; rowOf: NativeTensor }): Promise<void>;
  /**
   * The mixture-of-experts MLP (Qwen3-MoE) of x [T, C]: router [E, C], gateUp [E * 2I, C] (expert e's gate then up
   * rows at e * 2I), down [E * C, I]; out [T, C]. Softmax in f32, top-k ties to the lower id, renormalised with
   * normTopK (1); each token's experts summed in ascending id. expertIds / weights [T, topK], if given, receive each
   * token's experts (ascending id) and their weights.
   */
  moe(a: {
    x: NativeTensor;
    router: NativeTensor;
    gateUp: NativeTensor;
    down: NativeTensor;
    out: NativeTensor;
    topK: number;
    normTopK?: 0 | 1;
    splitK?: number;
    expertIds?: NativeTensor;
    weights?: NativeTensor;
  }): Promise<void>;
  /** Greedy (temperature 0) or Gumbel-max sampling keyed by (seed, position, token id); raw log-softmax logprobs. */
  sample(a: {
    logits: NativeTensor;
    temperature: NativeTensor;
    topK: NativeTensor;
    topP: NativeTensor;
    seeds: NativeTensor;
    positions: NativeTensor;
    tokens: NativeTensor;
    logprobs: NativeTensor;
    topIds?: NativeTensor;
    topLogprobs?: NativeTensor;
    /** Token masks, both or neither (maskLogits' layout: mask [R, ceil(V / 32)] i32, maskRowOf [B] i32, -1 =
     *  unmasked): a masked row is sampled as if maskLogits had run first; the logits are not written. */
    mask?: NativeTensor;
    maskRowOf?: NativeTensor;
  }): Promise<void>;
}

/** Architecture numbers and memory layout of a NativeModel (ts/model/config.ts derives them from config.json). */
export interface NativeModelOptions {
  numLayers: number;
  hidden: number;
  numHeads: number;
  numKvHeads: number;
  headDim: number;
  intermediate: number;
  vocab: number;
  rmsEps: number;
  /** q/k/v projections carry a bias (Qwen2). */
  attentionBias: boolean;
  /** o_proj carries a bias (Llama/Mistral with attention_bias). */
  oProjBias?: boolean;
  /** Qwen3: RMSNorm over each query and key head before RoPE (weights self_attn.q_norm / k_norm, [headDim]). */
  qkNorm?: boolean;
  /**
   * Qwen3-MoE: the listed layers run a mixture of numExperts SwiGLU experts `intermediate` wide (weights mlp.gate,
   * mlp.experts.{e}.{gate,up,down}_proj), expertsPerToken per token, renormalised when normTopK.
   */
  moe?: { numExperts: number; expertsPerToken: number; intermediate: number; normTopK: boolean; layers: Int32Array };
  /**
   * A process reward model's score head instead of the LM head: every emitting row gets 2 logits whose softmax's
   * second value is the step score. "value": Skywork's v_head.summary [1, hidden] + bias, as logits [0, v] (so the
   * score is sigmoid(v)); "twoClass": Qwen2.5-Math-PRM's score.0 [hidden, hidden] + bias, ReLU, score.2 [2, hidden]
   * + bias. No lm_head.weight is read.
   */
  scoreHead?: "value" | "twoClass";
  /** Multiplies the attention logits' 1/sqrt(headDim) (YaRN: the square of its attention factor). Default 1. */
  attnLogitScale?: number;
  tieEmbeddings: boolean;
  /** Sliding-window attention: a query attends to the last slidingWindow keys (Mistral); 0 or omitted = all. */
  slidingWindow?: number;
  /** [headDim/2] rotary inverse frequencies, rope_theta and llama3 scaling folded in. */
  invFreq: Float32Array;
  device?: DeviceKind;
  /** Activations: f32 on the CPU (required), bf16 (default) or f32 on CUDA. */
  activationDtype?: "f32" | "bf16";
  /** KV cache dtype; default = activation dtype. */
  kvDtype?: "f32" | "bf16" | "f16";
  /**
   * The dense layers' linear weights: "int8" quantizes them at load per output row, "int4" in symmetric groups of
   * quantizeGroupSize (default 32) along K, "fp8" to e4m3 codes with a scale per row and 128 inputs (model_weights.h); "checkpoint": they arrive pre-quantized through
   * setQuantizedWeight (no bf16 packing place is kept for them).
   */
  quantize?: "int8" | "int4" | "fp8" | "checkpoint";
  /** quantize "int4": the group size, a multiple of 32 dividing every K (default 32). */
  quantizeGroupSize?: number;
  /** KV pool: per layer kCache/vCache [numPages, pageSize, numKvHeads, headDim]. */
  numPages: number;
  pageSize?: number;
}

/** Sampling of one sequence's next token: Gumbel-max keyed by (seed, position, token id), see docs/architecture.md "Native contract". */
export interface NativeSampling {
  /** 0 = greedy (first index of the max). */
  temperature?: number;
  /** 0 = off. */
  topK?: number;
  /** 1 = off. */
  topP?: number;
  /** u64; a number must be a non-negative safe integer. */
  seed?: number | bigint;
}

/** One sequence's share of a forward step. */
export interface NativeForwardSequence {
  /** New token ids, at positions startPos .. startPos + tokens.length - 1. One token = decode path. */
  tokens: Int32Array;
  /** Tokens of this sequence already in the KV cache (their pages are in blockTable). */
  startPos: number;
  /** Page ids covering positions 0 .. startPos + tokens.length - 1 (extra trailing entries are ignored). */
  blockTable: Int32Array;
  sampling?: NativeSampling;
  /** Top logprobs to return (0..64). */
  numTopLogprobs?: number;
  /** DeepConf token confidence: -mean of the row's top `confidenceTopK` logprobs (0 = off, ≤ 64; the paper's k is
   *  20), returned as `confidence` (and `confidences` per row for emitAll). */
  confidenceTopK?: number;
  /** HF hidden_states index in [0, numLayers]: 0 = embeddings, l = after l layers, numLayers = after the final norm. */
  captureHiddenLayer?: number;
  /**
   * Several hidden states at once, ascending without repeats (not with captureHiddenLayer): indices as above, plus
   * numLayers + 1 = the final norm's input (the residual stream after the last layer). The result's `hidden` holds
   * them one after another, [captureHiddenLayers.length, hidden].
   */
  captureHiddenLayers?: Int32Array;
  /** False for a prefill chunk that is not the prompt's last: lm_head and sampling are skipped (token = -1). */
  emitToken?: boolean;
  /**
   * Sample after EVERY position, not only the last (a verify row replaying candidates): the result then carries
   * `tokens`/`logprobs` [tokens.length] and topIds/topLogprobs [tokens.length, numTopLogprobs]. Needs emitToken.
   */
  emitAll?: boolean;
  /**
   * Run this sequence on the batch's fixed schedule (`fixedGemmSplitK`, and the prefill attention kernel for every
   * position, one query or many) whatever the step's fast schedule: a verify row or a deterministic prefill chunk
   * riding in a fast step. Its bits then depend on its own tokens and KV only, never on the fast rows beside it.
   */
  fixedSchedule?: boolean;
  /**
   * Constrained decoding: the tokens this sequence may sample, as XGrammar's token bitmask. W = ceil(vocab / 32)
   * int32 words per emitted row (vocab: the LM head's width); id t is allowed iff bit (t & 31) of word t >> 5 is set
   * (a word of -1 allows all 32 ids; bits for ids >= vocab are ignored). Rows: 1, or tokens.length for emitAll (row j
   * masks the logits after input position j), so exactly rows * W words. Every disallowed id's logit is set to -inf
   * before anything reads the row: the sampled token, its logprob, top logprobs, confidence and returned logits are
   * all those of the constrained distribution (logprobs: log-softmax over the allowed ids). Rejected: another length,
   * a sequence that does not emit, a row allowing no id < vocab. Omitted: unmasked (bitwise today's results).
   */
  allowedTokens?: Int32Array;
  /**
   * Or the mask arrives while the step runs (CPU only; one sampled row, not emitAll; not with allowedTokens): row
   * `lateMask` of the batch's `lateMasks`. The forward waits for that row's flag before sampling; a row whose flag
   * says it failed, whose mask allows no id, or without a flag within lateMaskWaitMs comes back with token -1.
   */
  lateMask?: number;
}

export interface NativeForwardBatch {
  sequences: NativeForwardSequence[];
  /** GEMM K partitions (clamped to each GEMM's K). Fixed mode: a constant; fast mode: chosen from the batch. */
  gemmSplitK: number;
  /**
   * gemmSplitK as an upper bound (the engine's fast mode): on CUDA a GEMM whose grid at splitK 1 already fills the SMs
   * runs unsplit, so a non-fixed row's bits then depend on how many such rows share the step. Default false: every
   * non-fixed GEMM splits exactly gemmSplitK ways.
   */
  fastSplitK?: boolean;
  /** Decode-attention KV partitions. */
  kvSplits: number;
  /** GEMM K partitions of the fixedSchedule sequences (default 1). */
  fixedGemmSplitK?: number;
  /** Return each emitting sequence's raw logits [vocab] (tests, verification). */
  returnLogits?: boolean;
  /**
   * Time this step op by op into the model's profile (NativeModel.takeProfile). On CUDA the step then runs
   * eagerly (no graph replay) with an event between ops, so it is a little slower than an unprofiled step.
   */
  profile?: boolean;
  /** Whole-page copies (copy-on-write) done before this step writes any KV. */
  pageCopies?: { src: Int32Array; dst: Int32Array };
  /**
   * Token masks the caller writes while the step runs (the sequences' lateMask rows): rows * (1 + ceil(vocab / 32))
   * ints, first a flag per row, then each row's words. The caller writes row k's words, then stores its flag with
   * Atomics.store: 1 = ready, 2 = failed. Over a SharedArrayBuffer (refused otherwise: only there is Atomics.store
   * ordered after the words for another thread, and the memory cannot be detached while the step reads it). CPU only.
   */
  lateMasks?: Int32Array;
  /** How long the step waits for its late masks in all, in ms (required with lateMasks; at most 600000). */
  lateMaskWaitMs?: number;
}

export interface NativeForwardResult {
  /** Sampled token id; -1 when emitToken was false. */
  token: number;
  /** log-softmax of the raw logits at token. */
  logprob: number;
  /** emitAll: tokens[j] is sampled after input position startPos + j (so the last equals `token`). */
  tokens?: Int32Array;
  /** emitAll: logprob of tokens[j]. */
  logprobs?: Float32Array;
  /** numTopLogprobs highest (per row for emitAll): ids descending by logprob (ties by lower id), and their logprobs. */
  topIds?: Int32Array;
  topLogprobs?: Float32Array;
  /** DeepConf token confidence of the last row (of every row: `confidences`, emitAll), when confidenceTopK > 0. */
  confidence?: number;
  confidences?: Float32Array;
  /** Hidden state [hidden] at the last position, when captureHiddenLayer was given ([layers, hidden] for
   *  captureHiddenLayers). */
  hidden?: Float32Array;
  /** [vocab], or [tokens.length, vocab] for emitAll. */
  logits?: Float32Array;
}

/** A step's results as the addon returns them: the fields every sequence has in typed arrays ([sequences]), the
 *  rest per sequence only where present. */
export interface NativeForwardPacked {
  tokens: Int32Array;
  logprobs: Float32Array;
  /** Present when any sequence asked for confidence; NaN for those that did not (or did not emit). */
  confidences?: Float32Array;
  /** emitAll tokens / logprobs / confidences, top logprobs, hidden states and logits, for the rows that have any. */
  extras: Array<
    | Pick<NativeForwardResult, "tokens" | "logprobs" | "topIds" | "topLogprobs" | "confidences" | "hidden" | "logits">
    | undefined
  >;
}

export interface NativeModelInfo {
  device: DeviceKind;
  activationDtype: DType;
  kvDtype: DType;
  numPages: number;
  pageSize: number;
  kvBytes: number;
  kvBytesPerPage: number;
  /** Bytes the weights hold on the device (values, scales, zero points, perms; the CPU layouts' padding not counted). */
  weightBytes: number;
  /** How the dense layers' linear weights are stored: "bf16", "int8", "int4 g32", "int4 g128 asym act-order", .... */
  linearFormat: string;
  /**
   * How many linear weights (the dense layers' qkv, o, gate|up, down and the head) are packed for the CPU kernels,
   * grouped with their scales by panel (CPU int4 / e4m3), or as stored (row-major, scales by group: CUDA's layouts,
   * and the CPU's with DELIBERATE_PACK_WEIGHTS=0 or without the SIMD the packed kernels need). Not counted: a MoE
   * layer's router and experts, a two-class score head's hidden layer (always as stored).
   */
  linearLayouts: { packed: number; byPanel: number; asStored: number };
}

/**
 * One op's share of profiled steps: `calls` intervals summing to `ms` (CPU: host clock; CUDA: events on the stream).
 * Labels: plan, meta.upload, pageCopy, embedding, rmsnorm, captureHidden, gemm.qkv, qkNorm (Qwen3), ropeKvWrite,
 * attention.decode, attention.prefill, gemm.o, gemm.gateUp, siluMul, gemm.down, moe (a mixture-of-experts MLP), finalNorm,
 * gemm.scoreHidden and relu (a two-class PRM head), gemm.lmHead (the LM or score head), maskLogits
 * (steps with allowedTokens), sample, readback; and step.wall, each profiled step's whole forward as its caller waited for it.
 */
export interface ProfileEntry {
  label: string;
  calls: number;
  ms: number;
}

/**
 * A gemm's grouped quantized w (a u8 tensor [N, K * wBits / 8] holding q): w[n][k] = wScales[n][k / wGroupSize] *
 * (q[n][k] - wZeros[n][k / wGroupSize]) multiplies x[wPerm[k]] (the format of ts/model/quantFormat.ts; the CPU's
 * schedule in cpp/cpu/cpu_gemm_quant.h).
 */
export interface NativeGroupedGemmWeight {
  /**
   * "e4m3": w holds FP8 e4m3fn codes [N, K] (wBits 8 or absent), wGroupSize 32, 64 or 128 (default 128; K need not
   * be a multiple), wScales f32 N * ceil(K / wGroupSize) values: w[n][k] = e4m3(q[n][k]) * wScales[n][k / wGroupSize];
   * no wZeros, no wPerm. Default "int" (the integer grouped format above).
   */
  wFormat?: "int" | "e4m3";
  wBits?: 4 | 8;
  /** A multiple of 32 dividing K. */
  wGroupSize?: number;
  /** f32, N * K / wGroupSize values. */
  wScales?: NativeTensor;
  /** u8, N * K / wGroupSize values; absent: every zero point is the middle (8 or 128). */
  wZeros?: NativeTensor;
  /** i32 [K]; absent: identity. */
  wPerm?: NativeTensor;
  /** 1: wScales and wZeros are stored by group, [K / wGroupSize, N] (the layout a loaded model holds). */
  wByGroup?: 0 | 1;
}

/** A grouped quantized linear weight (ts/model/quantFormat.ts's GroupedQuantWeight: the format, its reference). */
export interface NativeGroupedWeight {
  bits: 4 | 8;
  groupSize: number;
  /** [N, K] */
  shape: [number, number];
  /** bits 4: [N, K / 2], column 2j in byte j's low nibble; bits 8: [N, K]. */
  q: Uint8Array;
  /** f32 [N, K / groupSize] */
  scales: Float32Array;
  /** u8 [N, K / groupSize]: w = scale * (q - zero). */
  zeros: Uint8Array;
  /** [K]: column k multiplies x[perm[k]] (act-order); absent = identity. */
  perm?: Int32Array;
}

/** An FP8 linear weight (ts/model/quantized/fp8.ts's Fp8QuantWeight): w[n][k] = e4m3(q[n][k]) * scales[n][k / groupSize]. */
export interface NativeFp8Weight {
  format: "e4m3";
  bits: 8;
  /** 32, 64 or 128; K need not be a multiple (the last group is partial). */
  groupSize: number;
  /** [N, K] */
  shape: [number, number];
  /** e4m3fn codes [N, K]; no NaN code (0x7f, 0xff). */
  q: Uint8Array;
  /** f32 [N, ceil(K / groupSize)] */
  scales: Float32Array;
}

/** A model in native memory: weights, a paged KV pool and scratch. */
export interface NativeModel {
  /** Copies (converting on the CPU where useful) one checkpoint tensor, or a chunk of it at byteOffset. */
  setWeight(
    name: string,
    dtype: "f32" | "bf16" | "f16",
    shape: number[],
    bytes: ArrayBufferView,
    byteOffset?: number,
  ): void;
  /**
   * A dense layer's q/k/v, o, gate/up or down projection in the grouped quantized format (ts/model/quantFormat.ts;
   * bits 4 or 8, groupSize a multiple of 32 dividing K), whole. The parts of a stacked weight (q/k/v, gate/up)
   * share bits, group size and perm. Embeddings, norms, the LM head and MoE experts are refused (setWeight them).
   */
  setQuantizedWeight(name: string, w: NativeGroupedWeight | NativeFp8Weight): void;
  /** Checkpoint tensors not set yet. */
  missingWeights(): string[];
  /** ONE native call for the whole model and batch (off the JS thread); results packed, in input order
   *  (ts/model/model.ts's Model.forward unpacks them into NativeForwardResult objects of one shape). */
  forward(batch: NativeForwardBatch): Promise<NativeForwardPacked>;
  /**
   * forward() of a batch packed into two typed arrays (ts/model/packForward.ts; layout below): two N-API calls per
   * step instead of ~20 per sequence. The same checks and errors as forward() for what the arrays can hold.
   *   ints: header [sequences, gemmSplitK, kvSplits, fixedGemmSplitK, flags (1 returnLogits, 2 fastSplitK,
   *         4 profile), page copies c], c sources, c destinations; then per sequence [tokens t, startPos, block
   *         table entries p, numTopLogprobs, confidenceTopK, flags (1 emitToken, 2 emitAll, 4 fixedSchedule,
   *         8 allowedTokens given, 16 lateMask given), topK, captures h, seed low 32 bits, seed high 32 bits], t
   *         tokens, p page ids, h capture indices, with flag 8: [words a], a allowedTokens words, with flag 16:
   *         [lateMask].
   *   floats: per sequence [temperature, topP].
   *   lateMasks, lateMaskWaitMs: NativeForwardBatch's.
   */
  forwardPacked(
    ints: Int32Array,
    floats: Float32Array,
    lateMasks?: Int32Array,
    lateMaskWaitMs?: number,
  ): Promise<NativeForwardPacked>;
  /** Copies whole pages src[i] -> dst[i] in every layer's K and V cache. */
  copyPages(src: Int32Array, dst: Int32Array): Promise<void>;
  /** KV offloading: the pages' K and V of every layer, copied to host memory (CUDA: through page-locked staging). */
  readPages(pages: Int32Array): Promise<Buffer>;
  /** Writes what readPages returned (for as many pages) into `pages`. */
  writePages(pages: Int32Array, data: Uint8Array): Promise<void>;
  /** Totals of the profiled steps since the last call (forward({profile: true})), in first-seen order; then cleared. */
  takeProfile(): ProfileEntry[];
  readonly info: NativeModelInfo;
  readonly disposed: boolean;
  /** Idempotent; native memory is released once no call in flight still uses it. */
  dispose(): void;
}

export interface CudaDeviceInfo {
  index: number;
  name: string;
  computeCapability: string;
  totalMemoryBytes: number;
  freeMemoryBytes: number;
  multiprocessors: number;
}

export interface DeviceReport {
  /** cgroupCpuLimit: this process's cgroup CPU limit (a container's --cpus), whole CPUs rounded up; null when none.
   *  threads defaults to the CPUs of the affinity mask, at most that limit. */
  cpu: {
    threads: number;
    hardwareThreads: number;
    cgroupCpuLimit: number | null;
    simd: "avx2" | "avx512" | "avx512-bf16";
  };
  cuda: {
    compiled: boolean;
    available: boolean;
    reason?: string;
    runtimeVersion: string;
    devices: CudaDeviceInfo[];
    /** The sm_90a wgmma GEMM can run on the current device (it then takes GEMMs of more than 64 rows, and unsplit wide ones of 33-64, unless DL_GEMM_WGMMA=0; see cuda/gemm.cu). */
    wgmmaGemm: boolean;
    /** Model steps use programmatic dependent launch: DL_PDL=1 on an sm_90+ device (cuda/pdl.cuh). */
    programmaticLaunch: boolean;
  };
  /** The native DL_* switches in effect (cpp/knobs.h; read once when the addon loads): name -> value. */
  knobs: Record<string, string>;
  /** Switches set to a value that was not understood ("NAME=value: expected ..."); their defaults apply. */
  invalidKnobs: string[];
}

export interface Addon {
  tensor(device: DeviceKind, dtype: DType, shape: number[]): NativeTensor;
  listDevices(): DeviceReport;
  /** Sets the CPU thread pool size (<= 0: the default, the CPUs of the affinity mask at most the cgroup CPU limit);
   *  returns the new size. Results never depend on it. */
  setThreads(n: number): number;
  /**
   * Test / benchmark hook: forces the CUDA GEMM kernel config of later calls (0-5 mma.sync tiles, 6-8 the sm_90a
   * wgmma kernels; -1 chooses by shape); returns the previous setting. Every config computes the same function; on
   * CPU-only builds a no-op returning -1. Not for use while a model steps (CUDA graphs do not see it).
   */
  setGemmTile(tile: number): number;
  liveBytes(device: DeviceKind): number;
  /** Test hook: the cgroup CPU limit (listDevices().cpu.cgroupCpuLimit) read from /proc/self/cgroup and
   *  /proc/self/mountinfo texts and the cgroup files under `fsRoot` ("" = the real ones). */
  cgroupCpuLimitFor(procSelfCgroup: string, mountinfo: string, fsRoot: string): number | null;
  /**
   * Test hook: runs `regions` small CPU parallel regions, each chunk busy `chunkMicros` and the caller busy
   * `gapMicros` between regions (both default 0); resolves to how many went wrong (`bad`, 0 = sound) and the pool's
   * counters over the run: chunks run by worker threads, worker sleeps waiting for a region, caller sleeps waiting
   * for a region's other chunks.
   */
  stressThreadPool(
    regions: number,
    chunkMicros?: number,
    gapMicros?: number,
  ): Promise<{ bad: number; workerChunks: number; workerSleeps: number; callerSleeps: number }>;
  readonly cudaCompiled: boolean;
  readonly ops: NativeOps;
  readonly NativeModel: new (options: NativeModelOptions) => NativeModel;
}
