// What generate(model, ...) takes and returns (ts/engine/generate.ts runs it on the Engine: one generation path for
// every caller, with the model's generation_config defaults from Model.samplingDefaults()).

export interface GenerateParams {
  /** Most tokens to generate (default: generation_config.json max_new_tokens, else 256); capped by the context. */
  maxTokens?: number;
  /** 0 = greedy. Default: the model's generation_config.json (greedy when it says do_sample: false), else 1. */
  temperature?: number;
  /** 0 = off. */
  topK?: number;
  /** 1 = off. */
  topP?: number;
  /** Seed of the sampling noise (a safe integer; a bigint up to 2^53 - 1 is accepted); a random one when omitted.
   * Same seed, same prompt: same tokens. */
  seed?: number | bigint;
  /** Stop strings: generation ends when the text contains one; the text is cut before it. */
  stop?: string | readonly string[];
  /** Extra token ids that end generation (the model's eos ids always do unless ignoreEos). */
  stopTokenIds?: readonly number[];
  ignoreEos?: boolean;
  /** Aborting ends generation at the next step; the result has finishReason "aborted". */
  signal?: AbortSignal;
}

/** As the engine's: "low_confidence" only for a request with a confidence threshold, which generate never sets. */
export type FinishReason = "stop" | "length" | "aborted" | "low_confidence";

export interface GenerateResult {
  /** Generated token ids, including a final stop token id if one ended generation. */
  tokens: number[];
  /** Decoded text of the generated tokens (special tokens skipped, cut before a stop string). */
  text: string;
  finishReason: FinishReason;
  usage: { promptTokens: number; completionTokens: number; totalTokens: number };
}
