// What a request yields: streamed deltas while it runs, and the finished output.

/** "stop": eos, a stop token id or a stop string; "length": maxTokens or the context; "aborted": signal/dispose;
 * "low_confidence": the group confidence fell below request.confidence.threshold (DeepConf's early stop). */
export type FinishReason = "stop" | "length" | "aborted" | "low_confidence";

/** How a model step ends a sequence (ModelSlot): a stop id or eos ("stop": that token is no text), its maxTokens-th
 * token ("length"), or a token that completes its format as the last its budget allowed ("complete": the value's last
 * token, its text kept; the sample's finish reason is "stop"). */
export type SequenceEnd = Extract<FinishReason, "stop" | "length"> | "complete";

/** A trace's DeepConf confidence (request.confidence): token confidence C_i = -mean of the top-k logprobs at token i;
 *  group confidence = the mean of C over a sliding window of `window` tokens (the whole trace while it is shorter). */
export interface ConfidenceReport {
  /** Mean token confidence over the trace. */
  mean: number;
  /** The lowest group confidence (DeepConf's "lowest group"). */
  lowestGroup: number;
  /** The mean of the lowest 10% of group confidences ("bottom 10%"). */
  bottom10Group: number;
  /** The mean token confidence of the last `tail` tokens ("tail"). */
  tail: number;
  /** Tokens with a confidence (every generated token). */
  tokens: number;
}

export interface TopLogprob {
  token: number;
  logprob: number;
}

export interface TokenLogprob {
  token: number;
  /** Log-softmax of the raw logits (before temperature / top-k / top-p). */
  logprob: number;
  /** The `logprobs` most likely tokens, most likely first. */
  top: TopLogprob[];
  /** The request's `tokenLogprobs` ids, in the order asked. */
  requested?: TopLogprob[];
}

/** One activation-probe capture (request.probe): the residual stream after each asked block at one position. */
export interface ProbeCapture {
  /** Generated tokens up to and including the captured position (0 = the prompt's last token). */
  tokens: number;
  /** [layers, hidden]: one vector per asked block, in the order asked. */
  hidden: Float32Array;
}

/** New tokens of one sample since the previous delta (one engine step). */
export interface StreamDelta {
  /** Which of the request's n samples. */
  sample: number;
  tokens: number[];
  /** Text that became final with these tokens (held back while it could still be part of a stop string). */
  text: string;
  logprobs?: TokenLogprob[];
  /** Hidden state [hidden] of the requested layer at the position that produced these tokens. */
  hidden?: Float32Array;
  /** The probe capture made by the step that produced these tokens (request.probe). */
  probe?: ProbeCapture;
  /** Set on the sample's last delta. */
  finishReason?: FinishReason;
  /** On the last delta of a sample that a stop string or stop token id (eos included) ended: which. */
  stoppedBy?: string | number;
}

export interface SampleOutput {
  index: number;
  /** Generated tokens (a stop token id that ended generation included). */
  tokens: number[];
  /** Generated text, up to (not including) a matched stop string. */
  text: string;
  finishReason: FinishReason;
  /** The stop string or token id that ended generation, when finishReason is "stop". */
  stoppedBy?: string | number;
  logprobs?: TokenLogprob[];
  /** The last captured hidden state, when captureHidden was asked. */
  hidden?: Float32Array;
  /** Every probe capture, in order, when request.probe was asked. */
  probes?: ProbeCapture[];
  /** The trace's confidence figures, when request.confidence was asked. */
  confidence?: ConfidenceReport;
}

export interface Usage {
  promptTokens: number;
  /** Over all samples. */
  generatedTokens: number;
  /** Prompt tokens whose KV came from the prefix cache or a fork instead of being computed. */
  cachedTokens: number;
}

/** What determinism cost a `deterministic: true` request (summed over its samples). */
export interface DeterminismStats {
  /** Verify passes its sequences took part in. */
  verifyPasses: number;
  /** Passes that rejected a candidate (the rest of the window was dropped and decoded again). */
  rollbacks: number;
  /** Fast-path tokens dropped by rollbacks (decode work done twice). */
  recomputedTokens: number;
  /** Tokens committed without a verify row: decoded in a step whose GEMMs ran the fixed splitK anyway, as a fixed
   *  row (docs/determinism.md "exact decodes"). */
  exactTokens: number;
}

/** The finished request; its top-level fields are sample 0's. */
export interface GenerationOutput extends SampleOutput {
  requestId: number;
  model: string;
  /** Prompt token ids (for a fork: the parent's kept tokens plus the appended ones). */
  promptTokens: number[];
  /** The seed used (sample i used seed + i), so a random-seeded run can be replayed. */
  seed: number;
  samples: SampleOutput[];
  usage: Usage;
  /** Times a sample was preempted and recomputed. */
  preemptions: number;
  /** Milliseconds from submit to the scheduler's first admission of the request (its time in the waiting queue). */
  queueMs: number;
  /** Present for deterministic requests. */
  determinism?: DeterminismStats;
}
