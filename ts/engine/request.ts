// What a caller asks the engine for (its schema is ts/options/schemas.ts), and its resolution against the model's
// limits. Inside the engine only ResolvedParams travel.
import { ContextLengthError, InvalidOptionError } from "../errors/index.js";
import { show } from "../options/validate.js";
import type { StructuredFormat, StructuredOutput } from "../grammar/types.js";
import type { SchedMetadata } from "./sequence.js";

export interface SamplingParams {
  /** 0 (default) = greedy. */
  temperature?: number;
  /** Keep only the k most likely tokens; 0 (default) = off. */
  topK?: number;
  /** Nucleus sampling mass in (0, 1]; 1 (default) = off. */
  topP?: number;
  /** Per-request seed (a non-negative safe integer); random when omitted (reported in the output). */
  seed?: number;
  /** Most tokens to generate; default: up to the model's context length. */
  maxTokens?: number;
  /** Generation stops when the text contains one of these (the stop string itself is not returned). */
  stop?: string | readonly string[];
  /** Generation stops at these token ids (in addition to the model's eos unless ignoreEos). */
  stopTokenIds?: readonly number[];
  ignoreEos?: boolean;
  /** Return per-token logprobs with this many top alternatives (0 = only the chosen token's). */
  logprobs?: number;
  /**
   * Also return, at every step, the logprobs of these token ids whatever their rank (e.g. a process reward
   * model's "good" / "bad" tokens). Costs a full logits transfer per step for this request.
   */
  tokenLogprobs?: readonly number[];
  /** Return the hidden state of this HF hidden_states layer (0 = embeddings .. numLayers) at every step. */
  captureHidden?: { layer: number };
  /**
   * Activation probes (DUCHESS): the residual stream after block `layer` (-1 = the last block's, i.e. the final
   * norm's input; an array for several blocks at once) at the last token, every `every` generated tokens, copied out
   * of the step that computes it (no extra forward). Streamed as `delta.probe` and collected in `output.probes`:
   * capture k is at the k-th generated token (0 = the prompt's last token). Not combinable with captureHidden. A fork
   * inherits its parent's; null turns it off.
   */
  probe?: { layer: number | readonly number[]; every: number } | null;
  /**
   * DeepConf (Fu et al.): each generated token's confidence (-mean of its `topK` = 20 largest logprobs, computed by
   * the native sampler) is tracked over a sliding `window`; output.confidence reports the trace's mean, lowest-group,
   * bottom-10% and tail (`tail` tokens, default window) confidences. With `threshold`, the sample stops with
   * finishReason "low_confidence" at the first full window whose mean falls below it (the vLLM patch's rule).
   */
  confidence?: { window: number; topK?: number; threshold?: number; tail?: number } | null;
  /**
   * Same prompt, seed and parameters give the same tokens whatever else the engine runs (decode-verify-rollback:
   * fast decoding, verified every verifyWindow tokens on a fixed schedule; only verified tokens are streamed).
   * Default false; output.determinism reports its cost. With probe or captureHidden, each capture comes from a
   * fixed-schedule row of verified tokens (the row that reads a captured position runs fixed, as an exact decode).
   */
  deterministic?: boolean;
  /**
   * When the request's consumers see a step's deltas. Default false: once the engine has dispatched the next step's
   * forward, so what they do with them (writing a stream, counting) overlaps the native step. true: before the next
   * step is scheduled, so a consumer that steers requests from deltas (a probe's verdict forks or aborts, as the
   * reasoning programs do) acts in the very next step. Not inherited by forks.
   */
  eagerDeltas?: boolean;
  /**
   * Constrained decoding (XGrammar): the answer is a JSON Schema's instance, any JSON object, a regex match, one of
   * a list of strings, an EBNF grammar's sentence or a structural tag's. Each step masks the sequence's logits to
   * the tokens the format allows; a thought stays free (StructuredOutput.thought) and the format starts after it.
   * The sequence ends ("stop") once the format is complete. A fork inherits its parent's; null turns it off.
   */
  structured?: StructuredOutput | null;
  /** Scheduling metadata an inter-program policy reads (ts/sched). */
  metadata?: SchedMetadata;
  /** Aborting stops the request at the next step, frees its pages and resolves it with finishReason "aborted". */
  signal?: AbortSignal;
}

export interface GenerateRequest extends SamplingParams {
  /** Text (tokenized with the model's tokenizer) or token ids. */
  prompt: string | readonly number[];
  /** Which loaded model; default: the first. */
  model?: string;
  /** Parallel samples sharing the prompt's KV; sample i uses seed + i. Default 1. */
  n?: number;
  /** Tokenizer special tokens (e.g. bos) for a text prompt; default true. */
  addSpecialTokens?: boolean;
}

/** Options of engine.fork(handle): the child continues the parent's tokens, then these override its sampling. */
export interface ForkOptions extends SamplingParams {
  /** Keep only the first `length` tokens (prompt + generated) of the parent; default: all. */
  length?: number;
  /** Text or ids appended to the child before it generates (e.g. a probe suffix). */
  append?: string | readonly number[];
  /** Which sample of a parent with n > 1 to fork; default 0. */
  sample?: number;
}

export interface ResolvedParams {
  temperature: number;
  topK: number;
  topP: number;
  seed: number;
  maxTokens: number;
  stop: string[];
  /** User stop ids; the model's eos ids stop too unless ignoreEos. */
  stopTokenIds: Set<number>;
  ignoreEos: boolean;
  logprobs: number | null;
  tokenLogprobs: number[] | null;
  captureHiddenLayer: number | null;
  probe: ResolvedProbe | null;
  confidence: ResolvedConfidence | null;
  deterministic: boolean;
  structured: ResolvedStructured | null;
}

/** The structured option resolved: its format, where it starts, the tokens kept for the answer. */
export interface ResolvedStructured {
  format: StructuredFormat;
  thought: "free" | "none";
  answerTokens: number;
}

export interface ResolvedConfidence {
  topK: number;
  window: number;
  /** Stop below this group confidence (null: report only). */
  threshold: number | null;
  tail: number;
}

export interface ResolvedProbe {
  /** Blocks as asked (-1 resolved to numLayers - 1), in the order of the captured vectors. */
  layers: number[];
  /** The native capture index of each (ascending like `layers`): block L's output is hidden_states[L + 1], the last
   *  block's the final norm's input (numLayers + 1). */
  native: number[];
  every: number;
}

/** Native capture index of block `layer`'s output (-1 = the last block). */
export function probeCaptureIndex(layer: number, numLayers: number): number {
  const l = layer === -1 ? numLayers - 1 : layer;
  return l + 1 < numLayers ? l + 1 : numLayers + 1;
}

/** The model facts validation needs. */
export interface ParamLimits {
  vocabSize: number;
  numLayers: number;
  /** Tokens left in the context after the prompt. */
  maxNewTokens: number;
}

/**
 * Resolves `p` (falling back to `base` for fields it omits, as a fork inherits its parent's params) and checks what
 * needs the model: token ids within the vocabulary, maxTokens within the context left, the capture layer. Types and
 * ranges that hold for any model were checked by the request's schema (ts/options/schemas.ts) at the boundary.
 */
export function resolveParams(p: SamplingParams, limits: ParamLimits, base?: ResolvedParams): ResolvedParams {
  const fail = (field: string, value: unknown, fix: string): never => {
    throw new InvalidOptionError(`request.${field} is ${show(value)}; ${fix}`, { field: `request.${field}` });
  };
  const int = (field: string, value: number, lo: number, hi: number): number => {
    if (!Number.isInteger(value) || value < lo || value > hi)
      fail(field, value, `expected an integer in [${lo}, ${hi}]`);
    return value;
  };
  const temperature = p.temperature ?? base?.temperature ?? 0;
  const topK = int("topK", p.topK ?? base?.topK ?? 0, 0, limits.vocabSize);
  const topP = p.topP ?? base?.topP ?? 1;
  const seed = p.seed ?? base?.seed ?? Math.floor(Math.random() * 2 ** 32);
  if (limits.maxNewTokens < 1) {
    throw new ContextLengthError(
      `request: the prompt leaves no room in the model's context; shorten it by at least ${1 - limits.maxNewTokens} tokens`,
      { field: "request.prompt" },
    );
  }
  const maxTokens = p.maxTokens ?? Math.min(base?.maxTokens ?? Infinity, limits.maxNewTokens);
  if (maxTokens > limits.maxNewTokens) {
    fail(
      "maxTokens",
      maxTokens,
      `expected an integer in [1, ${limits.maxNewTokens}] (the context left after the prompt)`,
    );
  }
  const stopList = p.stop === undefined ? (base?.stop ?? []) : typeof p.stop === "string" ? [p.stop] : [...p.stop];
  const stopTokenIds = new Set<number>(p.stopTokenIds ?? (base ? [...base.stopTokenIds] : []));
  for (const id of stopTokenIds) int("stopTokenIds[]", id, 0, limits.vocabSize - 1);
  const ignoreEos = p.ignoreEos ?? base?.ignoreEos ?? false;
  const logprobs = p.logprobs === undefined ? (base?.logprobs ?? null) : p.logprobs;
  const wanted = p.tokenLogprobs === undefined ? (base?.tokenLogprobs ?? null) : [...p.tokenLogprobs];
  for (const id of wanted ?? []) int("tokenLogprobs[]", id, 0, limits.vocabSize - 1);
  const tokenLogprobs = wanted !== null && wanted.length > 0 ? wanted : null;
  const layer = p.captureHidden?.layer;
  const captureHiddenLayer =
    layer === undefined ? (base?.captureHiddenLayer ?? null) : int("captureHidden.layer", layer, 0, limits.numLayers);
  const probe =
    p.probe === undefined
      ? (base?.probe ?? null)
      : p.probe === null
        ? null
        : resolveProbe(p.probe, limits.numLayers, fail);
  if (probe !== null && captureHiddenLayer !== null) fail("probe", p.probe, "give probe or captureHidden, not both");
  const confidence =
    p.confidence === undefined
      ? (base?.confidence ?? null)
      : p.confidence === null
        ? null
        : resolveConfidence(p.confidence, limits.vocabSize, fail);
  // With deterministic, every capture is read from a fixed-schedule row of committed tokens (verifier/rows.ts
  // probePoint): a captured position's row runs as an exact decode.
  const deterministic = p.deterministic ?? base?.deterministic ?? false;
  const structured =
    p.structured === undefined
      ? (base?.structured ?? null)
      : p.structured === null
        ? null
        : resolveStructured(p.structured, maxTokens, fail);
  return {
    temperature,
    topK,
    topP,
    seed,
    maxTokens,
    stop: stopList,
    stopTokenIds,
    ignoreEos,
    logprobs,
    tokenLogprobs,
    captureHiddenLayer,
    probe,
    confidence,
    deterministic,
    structured,
  };
}

function resolveStructured(
  s: StructuredOutput,
  maxTokens: number,
  fail: (field: string, value: unknown, fix: string) => never,
): ResolvedStructured {
  const { thought, answerTokens, ...format } = s;
  const answer = answerTokens ?? Math.max(1, Math.min(256, Math.floor(maxTokens / 2)));
  if (!Number.isInteger(answer) || answer < 1 || answer > maxTokens)
    fail("structured.answerTokens", answerTokens, `expected an integer in [1, ${maxTokens}] (maxTokens)`);
  return { format: format as StructuredFormat, thought: thought ?? "free", answerTokens: answer };
}

function resolveConfidence(
  c: NonNullable<SamplingParams["confidence"]>,
  vocabSize: number,
  fail: (field: string, value: unknown, fix: string) => never,
): ResolvedConfidence {
  const topK = c.topK ?? 20;
  const most = Math.min(64, vocabSize);
  if (!Number.isInteger(topK) || topK < 1 || topK > most)
    fail("confidence.topK", c.topK, `expected an integer in [1, ${most}] (the paper uses 20)`);
  if (!Number.isInteger(c.window) || c.window < 1)
    fail("confidence.window", c.window, "expected an integer >= 1 (tokens per group)");
  const tail = c.tail ?? c.window;
  if (!Number.isInteger(tail) || tail < 1) fail("confidence.tail", c.tail, "expected an integer >= 1");
  if (c.threshold !== undefined && !Number.isFinite(c.threshold))
    fail(
      "confidence.threshold",
      c.threshold,
      "expected a finite number (stop when the group confidence falls below it)",
    );
  return { topK, window: c.window, threshold: c.threshold ?? null, tail };
}

function resolveProbe(
  p: NonNullable<SamplingParams["probe"]>,
  numLayers: number,
  fail: (field: string, value: unknown, fix: string) => never,
): ResolvedProbe {
  const asked = typeof p.layer === "number" ? [p.layer] : [...p.layer];
  const layers: number[] = [];
  for (const l of asked) {
    if (!Number.isInteger(l) || l < -1 || l >= numLayers)
      fail(
        "probe.layer",
        p.layer,
        `expected block indices in [-1, ${numLayers - 1}] (the model has ${numLayers} layers; -1 = the last)`,
      );
    const b = l === -1 ? numLayers - 1 : l;
    if (layers.includes(b)) fail("probe.layer", p.layer, `block ${b} is asked twice (-1 is block ${numLayers - 1})`);
    layers.push(b);
  }
  const order = layers.map((l, i) => [l, i]).sort((a, b) => a[0] - b[0]);
  if (order.some(([, i], j) => i !== j)) fail("probe.layer", p.layer, "expected the blocks in ascending order");
  if (!Number.isInteger(p.every) || p.every < 1) fail("probe.every", p.every, "expected an integer >= 1");
  return { layers, native: layers.map((l) => probeCaptureIndex(l, numLayers)), every: p.every };
}

/** Validates prompt token ids against the vocabulary. */
export function checkTokenIds(field: string, ids: readonly number[], vocabSize: number): number[] {
  for (let i = 0; i < ids.length; i++) {
    const id = ids[i];
    if (!Number.isInteger(id) || id < 0 || id >= vocabSize) {
      throw new InvalidOptionError(
        `request.${field}[${i}] is ${show(id)}; token ids must be integers in [0, ${vocabSize - 1}]`,
        { field: `request.${field}[${i}]` },
      );
    }
  }
  return [...ids];
}
