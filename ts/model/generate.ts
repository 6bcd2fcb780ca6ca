// Single-sequence generation over Model.forward: chunked prefill, then one decode step per token, with greedy or
// seeded sampling, max tokens, stop token ids, stop strings, UTF-8-safe text deltas and AbortSignal.
import type { NativeForwardBatch, NativeForwardResult, NativeSampling } from "../native/addonTypes.js";
import type { ModelTokenizer } from "./tokenizer.js";
import type { PagePool } from "./pagePool.js";
import { StopMatcher } from "./stopMatcher.js";

export interface GenerateParams {
  /** Most tokens to generate (default: generation_config.json max_new_tokens, else 256); capped by the context. */
  maxTokens?: number;
  /** 0 = greedy. Default: the model's generation_config.json (greedy when it says do_sample: false), else 1. */
  temperature?: number;
  /** 0 = off. */
  topK?: number;
  /** 1 = off. */
  topP?: number;
  /** Seed of the sampling noise (u64); a random one when omitted. Same seed, same prompt: same tokens. */
  seed?: number | bigint;
  /** Stop strings: generation ends when the text contains one; the text is cut before it. */
  stop?: string | readonly string[];
  /** Extra token ids that end generation (the model's eos ids always do unless ignoreEos). */
  stopTokenIds?: readonly number[];
  ignoreEos?: boolean;
  /** Aborting ends generation at the next step; the result has finishReason "aborted". */
  signal?: AbortSignal;
}

export type FinishReason = "stop" | "length" | "aborted";

export interface GenerateResult {
  /** Generated token ids, including a final stop token id if one ended generation. */
  tokens: number[];
  /** Decoded text of the generated tokens (special tokens skipped, cut before a stop string). */
  text: string;
  finishReason: FinishReason;
  usage: { promptTokens: number; completionTokens: number; totalTokens: number };
}

/** What the generation loop needs from a model. */
export interface GenerationHost {
  forward(batch: NativeForwardBatch): Promise<NativeForwardResult[]>;
  readonly tokenizer: ModelTokenizer;
  readonly pool: PagePool;
  readonly pageSize: number;
  readonly contextLength: number;
  readonly prefillChunkTokens: number;
  readonly defaults: { temperature: number; topK: number; topP: number; maxTokens: number };
}

// Single-sequence steps use one fixed schedule, so a generation's numbers never depend on anything but its input.
const SCHEDULE = { gemmSplitK: 1, kvSplits: 1 } as const;

function checkParams(p: GenerateParams): void {
  const bad = (field: string, v: unknown, want: string): never => {
    throw new Error(`generate: '${field}' is ${String(v)}; expected ${want}`);
  };
  if (p.maxTokens !== undefined && !(Number.isInteger(p.maxTokens) && p.maxTokens >= 1)) bad("maxTokens", p.maxTokens, "an integer >= 1");
  if (p.temperature !== undefined && !(p.temperature >= 0 && Number.isFinite(p.temperature)))
    bad("temperature", p.temperature, "a finite number >= 0");
  if (p.topK !== undefined && !(Number.isInteger(p.topK) && p.topK >= 0)) bad("topK", p.topK, "an integer >= 0");
  if (p.topP !== undefined && !(p.topP > 0 && p.topP <= 1)) bad("topP", p.topP, "a number in (0, 1]");
}

/**
 * Runs one generation; yields each text delta as it becomes safe to emit and returns the result.
 * The sequence's KV pages are taken from `host.pool` and always given back.
 */
export async function* generateSequence(
  host: GenerationHost,
  prompt: readonly number[],
  params: GenerateParams = {},
): AsyncGenerator<string, GenerateResult> {
  checkParams(params);
  if (prompt.length === 0) throw new Error("generate: the prompt has no tokens");
  if (prompt.length >= host.contextLength) {
    throw new Error(
      `generate: the prompt is ${prompt.length} tokens but the context holds ${host.contextLength} ` +
        `(prompt + generated tokens); shorten the prompt`,
    );
  }
  const maxTokens = Math.min(params.maxTokens ?? host.defaults.maxTokens, host.contextLength - prompt.length);
  const temperature = params.temperature ?? host.defaults.temperature;
  const sampling: NativeSampling = {
    temperature,
    topK: params.topK ?? host.defaults.topK,
    topP: params.topP ?? host.defaults.topP,
    seed: params.seed ?? Math.floor(Math.random() * Number.MAX_SAFE_INTEGER),
  };
  const stopIds = new Set<number>(params.stopTokenIds ?? []);
  if (!params.ignoreEos) for (const id of host.tokenizer.eosTokenIds) stopIds.add(id);
  const stops = typeof params.stop === "string" ? [params.stop] : [...(params.stop ?? [])];
  const matcher = new StopMatcher(stops);
  const detok = host.tokenizer.createDetokenizer({ skipSpecialTokens: true });

  const pages: number[] = [];
  const tokens: number[] = [];
  let text = "";
  let finishReason: FinishReason = "length";
  const step = async (input: readonly number[], startPos: number, emitToken: boolean): Promise<number> => {
    host.pool.grow(pages, Math.ceil((startPos + input.length) / host.pageSize));
    const [r] = await host.forward({
      ...SCHEDULE,
      sequences: [{ tokens: Int32Array.from(input), startPos, blockTable: Int32Array.from(pages), sampling, emitToken }],
    });
    return r.token;
  };
  try {
    let pos = 0;
    let next = -1;
    while (pos < prompt.length) {
      if (params.signal?.aborted) return finish("aborted");
      const chunk = prompt.slice(pos, pos + host.prefillChunkTokens);
      next = await step(chunk, pos, pos + chunk.length === prompt.length);
      pos += chunk.length;
    }
    for (;;) {
      tokens.push(next);
      if (stopIds.has(next)) {
        finishReason = "stop";
        break;
      }
      const delta = matcher.push(detok.push(next));
      if (delta) {
        text += delta;
        yield delta;
      }
      if (matcher.done) {
        finishReason = "stop";
        break;
      }
      if (tokens.length >= maxTokens) break;
      if (params.signal?.aborted) {
        finishReason = "aborted";
        break;
      }
      next = await step([next], pos, true);
      pos += 1;
    }
    if (!matcher.done) {
      const tail = matcher.push(detok.flush()) + matcher.flush();
      if (tail) {
        text += tail;
        yield tail;
      }
    }
    return finish(finishReason);
  } finally {
    host.pool.release(pages);
  }

  function finish(reason: FinishReason): GenerateResult {
    return {
      tokens,
      text,
      finishReason: reason,
      usage: { promptTokens: prompt.length, completionTokens: tokens.length, totalTokens: prompt.length + tokens.length },
    };
  }
}
