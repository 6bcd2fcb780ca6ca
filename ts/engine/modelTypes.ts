import type { GrammarVocab } from "../grammar/types.js";

// The contract between the engine and a loaded model: one forward call per step for the whole batch
// (docs/architecture.md "Native contract"), plus the facts the engine plans with. ts/model's Model satisfies it.

export interface SamplingSpec {
  /** 0 = greedy (first index of the max). */
  temperature: number;
  /** 0 = off. */
  topK: number;
  /** 1 = off. */
  topP: number;
  /** Gumbel noise is keyed by (seed, position, token id): isolated from other requests and batch slots. */
  seed: number;
}

/** One sequence's share of a step: positions startPos .. startPos + tokens.length - 1. */
export interface ForwardSequence {
  tokens: Int32Array;
  startPos: number;
  /** Pages covering positions [0, startPos + tokens.length). */
  blockTable: Int32Array;
  sampling: SamplingSpec;
  numTopLogprobs: number;
  /** DeepConf token confidence over the top k logprobs (0 / omitted = off). */
  confidenceTopK?: number;
  /** Hidden states to return at the last position, ascending (NativeForwardSequence.captureHiddenLayers), or omitted. */
  captureHiddenLayers?: Int32Array;
  /** False for a non-final prefill chunk: no logits, no sample. */
  emitToken: boolean;
  /** Sample after every position (a verify row): the result carries tokens/logprobs [tokens.length]. */
  emitAll?: boolean;
  /** Run on the batch's fixed schedule whatever the step's (fast) one: a verify row or deterministic prefill. */
  fixedSchedule?: boolean;
  /**
   * Constrained decoding: XGrammar's token bitmask of the ids this sequence may sample, ceil(vocabSize / 32) int32
   * words per emitted row (1 row, or tokens.length rows for emitAll: row j masks the sample after position j); id t
   * is allowed iff bit (t & 31) of word t >> 5 is set. Disallowed logits are -inf before sampling, so the logprobs,
   * top logprobs, confidence and logits returned are those of the constrained distribution. A row that allows no
   * token is rejected: end such a sequence instead. Omitted = unmasked (NativeForwardSequence.allowedTokens).
   */
  allowedTokens?: Int32Array;
  /** Or its row of the batch's lateMasks, written while the step runs (NativeForwardSequence.lateMask; CPU). */
  lateMask?: number;
}

export interface ForwardBatch {
  sequences: ForwardSequence[];
  gemmSplitK: number;
  kvSplits: number;
  /** gemmSplitK as an upper bound per GEMM (fast mode; NativeForwardBatch.fastSplitK). */
  fastSplitK?: boolean;
  /** GEMM K partitions of fixedSchedule sequences (default 1: FIXED_SCHEDULE). */
  fixedGemmSplitK?: number;
  /** Whole-page copies (copy-on-write) done before anything else in the step. */
  pageCopies?: { src: Int32Array; dst: Int32Array };
  /** Return every emitting sequence's raw logits [vocab]. */
  returnLogits?: boolean;
  /** Masks written while the step runs (NativeForwardBatch.lateMasks), and how long it waits for them. */
  lateMasks?: Int32Array;
  lateMaskWaitMs?: number;
}

export interface ForwardResult {
  /** Sampled token at position startPos + tokens.length, -1 when !emitToken. */
  token: number;
  logprob: number;
  /** emitAll: the token sampled after each input position, and its logprob. */
  tokens?: Int32Array;
  logprobs?: Float32Array;
  /** Top logprobs ([numTopLogprobs], or [tokens.length, numTopLogprobs] for emitAll). */
  topIds?: Int32Array;
  topLogprobs?: Float32Array;
  /** DeepConf token confidence (-mean of the top confidenceTopK logprobs), when asked; per row for emitAll. */
  confidence?: number;
  confidences?: Float32Array;
  /** [layers, hidden] at the last position, when captureHiddenLayers was given. */
  hidden?: Float32Array;
  /** Raw logits [vocab], when the batch asked for them. */
  logits?: Float32Array;
}

/** One token a sequence produced, with what its request asked to see of it (from a ForwardResult or a verify row). */
export interface SampledToken {
  token: number;
  logprob: number;
  topIds?: Int32Array;
  topLogprobs?: Float32Array;
  hidden?: Float32Array;
  logits?: Float32Array;
  /** DeepConf token confidence, when the request asked for it. */
  confidence?: number;
}

/** A model as the engine drives it: its KV pool geometry and the batched forward. */
export interface EngineModel {
  readonly numPages: number;
  readonly pageSize: number;
  readonly numLayers: number;
  readonly vocabSize: number;
  /** Longest sequence (prompt + generated) the model supports. */
  readonly maxContextTokens: number;
  /** Ids that end generation unless a request sets ignoreEos. */
  readonly eosTokenIds: readonly number[];
  /** Where the forward runs: picks fast mode's schedule (GPU GEMMs want split K at larger batches). Default cpu. */
  readonly device?: "cpu" | "cuda";
  forward(batch: ForwardBatch): Promise<ForwardResult[]>;
  /** KV offloading (preemption "swap"): whole pages to host memory and back, bitwise. Models without them preempt by
   * recompute. */
  readKvPages?(pages: Int32Array): Promise<Uint8Array>;
  writeKvPages?(pages: Int32Array, data: Uint8Array): Promise<void>;
}

/** Streaming detokenizer: push ids, get text that never splits a character. */
export interface Detokenizer {
  push(id: number): string;
  flush(): string;
}

/** Text <-> ids, as the engine needs it (ts/model's ModelTokenizer satisfies it). */
export interface TextCodec {
  encode(text: string, options?: { addSpecialTokens?: boolean }): number[];
  createDetokenizer(): Detokenizer;
  /** The vocabulary as XGrammar takes it (ModelTokenizer's): needed for structured outputs. */
  grammarVocab?(): GrammarVocab;
}
