// One sample's output as it grows: tokens, incremental text, logprobs and the stops that need text or confidence
// (stop strings, DeepConf's low confidence); stop ids, eos and maxTokens are the model step's to decide (ModelSlot),
// and add() is told when one ended the sample. Text that could still turn out to be the start of a stop string is held
// back from the stream (at most longest-stop-string - 1 characters) so a stop string is never streamed.
import { ConfidenceTracker } from "./confidence.js";
import type { Detokenizer, SampledToken } from "./modelTypes.js";
import type {
  FinishReason,
  SequenceEnd,
  ProbeCapture,
  SampleOutput,
  StreamDelta,
  TokenLogprob,
  TopLogprob,
} from "./outputs.js";
import type { ResolvedParams } from "./request.js";

export class SampleTracker {
  readonly tokens: number[] = [];
  // The text so far is streamed.join("") + tail: what was streamed, and what is not yet (at least the hold-back).
  // Stop strings can only end in the tail, so no step touches the whole text (a long reasoning trace made
  // text.slice / indexOf on one growing string cost O(length) per token).
  private readonly streamed: string[] = [];
  private tail = "";
  private readonly logprobs: TokenLogprob[] | undefined;
  private hidden: Float32Array | undefined;
  private readonly probes: ProbeCapture[] | undefined;
  private readonly confidence: ConfidenceTracker | undefined;
  private readonly holdBackChars: number;
  finishReason: FinishReason | null = null;
  private stoppedBy: string | number | undefined;

  constructor(
    readonly index: number,
    private readonly params: ResolvedParams,
    private readonly detokenizer: Detokenizer | null,
  ) {
    this.logprobs = params.logprobs === null && params.tokenLogprobs === null ? undefined : [];
    this.holdBackChars = Math.max(0, ...params.stop.map((s) => s.length - 1));
    this.probes = params.probe === null ? undefined : [];
    this.confidence = params.confidence === null ? undefined : new ConfidenceTracker(params.confidence);
  }

  get finished(): boolean {
    return this.finishReason !== null;
  }

  /**
   * Adds one sampled token, `end` saying whether the step ended the sample with it (a stop id or eos: "stop", the
   * token no text; its maxTokens-th token: "length"; the last token of a format's value that was also its maxTokens-th:
   * "complete", its text kept, finish reason "stop"); returns the delta to stream (with finishReason set if this token ended the sample).
   */
  add(s: SampledToken, end: SequenceEnd | null): StreamDelta {
    const tailBefore = this.tail.length;
    // A capture is at the row that produced this token: its input was the tokens.length-th generated token.
    const probe = s.hidden && this.probes ? { tokens: this.tokens.length, hidden: s.hidden } : undefined;
    if (probe) this.probes!.push(probe);
    else if (s.hidden) this.hidden = s.hidden;
    this.tokens.push(s.token);
    let logprob: TokenLogprob | undefined;
    if (this.logprobs) {
      const top = [];
      // A structured output's masked row ranks disallowed ids at -inf after the allowed ones: those are not listed.
      for (let i = 0; i < (s.topIds?.length ?? 0); i++)
        if (s.topLogprobs![i] !== Number.NEGATIVE_INFINITY)
          top.push({ token: s.topIds![i], logprob: s.topLogprobs![i] });
      logprob = { token: s.token, logprob: s.logprob, top };
      if (this.params.tokenLogprobs !== null && s.logits)
        logprob.requested = logprobsOf(s.logits, this.params.tokenLogprobs);
      this.logprobs.push(logprob);
    }
    if (end === "stop") {
      this.finishReason = "stop";
      this.stoppedBy = s.token;
      if (this.detokenizer) this.tail += this.detokenizer.flush();
    } else if (this.detokenizer) {
      this.tail += this.detokenizer.push(s.token);
      this.checkStopStrings(tailBefore);
      if (!this.finished && (end === "length" || end === "complete")) {
        this.tail += this.detokenizer.flush();
        this.checkStopStrings(tailBefore);
      }
    }
    if (!this.finished && end === "length") this.finishReason = "length";
    // The format's value is whole with this token (its text is output, no stop token ended it): "stop".
    if (!this.finished && end === "complete") this.finishReason = "stop";
    // DeepConf's early stop: this token completed a window whose mean confidence is below the threshold.
    // A masked row allowing fewer ids than DeepConf's top k has no confidence (+inf): such tokens are not counted.
    const conf = s.confidence !== undefined && Number.isFinite(s.confidence) ? s.confidence : undefined;
    if (this.confidence && conf !== undefined && this.confidence.add(conf) && !this.finished) {
      if (this.detokenizer) this.tail += this.detokenizer.flush();
      this.finishReason = "low_confidence";
    }
    const delta: StreamDelta = { sample: this.index, tokens: [s.token], text: this.takeStreamableText() };
    if (logprob) delta.logprobs = [logprob];
    if (probe) delta.probe = probe;
    else if (s.hidden) delta.hidden = s.hidden;
    if (this.finishReason !== null) delta.finishReason = this.finishReason;
    if (this.stoppedBy !== undefined) delta.stoppedBy = this.stoppedBy;
    return delta;
  }

  /** Ends the sample from outside (abort); returns the closing delta. */
  finish(reason: FinishReason): StreamDelta {
    if (this.finishReason === null) this.finishReason = reason;
    return { sample: this.index, tokens: [], text: this.takeStreamableText(), finishReason: this.finishReason };
  }

  output(): SampleOutput {
    const out: SampleOutput = {
      index: this.index,
      tokens: this.tokens.slice(),
      text: this.streamed.join("") + this.tail,
      finishReason: this.finishReason ?? "aborted",
    };
    if (this.stoppedBy !== undefined) out.stoppedBy = this.stoppedBy;
    if (this.logprobs) out.logprobs = this.logprobs.slice();
    if (this.hidden) out.hidden = this.hidden;
    if (this.probes) out.probes = this.probes.slice();
    const confidence = this.confidence?.report();
    if (confidence) out.confidence = confidence;
    return out;
  }

  /**
   * A stop string can only end inside text added since tail offset `from`, so search from holdBack chars before it
   * (still inside the tail: every add leaves at least holdBack characters unstreamed).
   */
  private checkStopStrings(from: number): void {
    const searchFrom = Math.max(0, from - this.holdBackChars);
    let cut = -1;
    for (const stop of this.params.stop) {
      const at = this.tail.indexOf(stop, searchFrom);
      if (at >= 0 && (cut < 0 || at < cut)) {
        cut = at;
        this.stoppedBy = stop;
      }
    }
    if (cut >= 0) {
      this.tail = this.tail.slice(0, cut);
      this.finishReason = "stop";
    }
  }

  private takeStreamableText(): string {
    const end = this.finished ? this.tail.length : streamableEnd(this.tail, this.holdBackChars);
    const out = this.tail.slice(0, end);
    if (out) this.streamed.push(out);
    this.tail = this.tail.slice(end);
    return out;
  }
}

/** Log-softmax of `logits` at `ids` (the same raw-logit logprobs the native sampler reports). */
function logprobsOf(logits: Float32Array, ids: readonly number[]): TopLogprob[] {
  let max = -Infinity;
  for (let i = 0; i < logits.length; i++) if (logits[i] > max) max = logits[i];
  let sum = 0;
  for (let i = 0; i < logits.length; i++) sum += Math.exp(logits[i] - max);
  const logZ = max + Math.log(sum);
  return ids.map((token) => ({ token, logprob: logits[token] - logZ }));
}

/**
 * How much of `text` may be streamed while its last `holdBack` characters could still grow into a stop string: the
 * rest, cut so that a surrogate pair (an emoji, say) is never split between two deltas.
 */
export function streamableEnd(text: string, holdBack: number): number {
  let end = Math.max(0, text.length - holdBack);
  if (end > 0 && end < text.length && isHighSurrogate(text.charCodeAt(end - 1))) end--;
  return end;
}

function isHighSurrogate(c: number): boolean {
  return c >= 0xd800 && c <= 0xdbff;
}
