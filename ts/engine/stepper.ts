// Stepper: the engine step and its output processor (vLLM v1's EngineCore step plus OutputProcessor). A step runs
// every model's ModelSlot.step() concurrently (schedule, one forward, tokens appended, stop ids / eos / max tokens
// checked: sequences only), then turns what each made final into its request's deltas: detokenized text, stop
// strings, logprobs, DeepConf's stop, the fan-out of n samples, and the request's end. It owns the map from sequence
// ids to the requests they serve (a Sequence has no pointer back) and calls ModelSlot.finish() when a sample ends.
import type { WakeGate } from "./handle.js";
import type { ThroughputMeter } from "./metrics.js";
import type { ModelSlot, SequenceOutput, SlotStep } from "./modelSlot.js";
import type { SequenceSampling } from "./modelRunner.js";
import type { SampledToken } from "./modelTypes.js";
import type { SequenceEnd, StreamDelta } from "./outputs.js";
import type { RequestBuilder } from "./requestBuilder.js";
import type { ResolvedParams } from "./request.js";
import type { RequestState } from "./requestState.js";
import type { Sequence } from "./sequence.js";

/** The request sample a sequence serves, and the model it runs on. */
interface SampleRef {
  state: RequestState;
  sample: number;
  slot: ModelSlot;
}

export class Stepper {
  /** Requests submitted and not yet settled. */
  readonly live = new Set<RequestState>();
  /** Steps run so far. */
  steps = 0;
  /** Every unfinished sequence's request sample. */
  private readonly samples = new Map<number, SampleRef>();

  constructor(
    private readonly slots: readonly ModelSlot[],
    private readonly builder: RequestBuilder,
    private readonly meter: ThroughputMeter,
    private readonly gate: WakeGate | null = null,
  ) {}

  get hasWork(): boolean {
    return this.slots.some((s) => s.hasWork);
  }

  /**
   * A request's new sequences (from submit, fork, or its samples forked off sample 0): mapped to it here, and handed
   * to the model's verifier when the request is deterministic. Throws (and forgets them) if the verifier cannot
   * take them.
   */
  admit(slot: ModelSlot, state: RequestState, seqs: readonly Sequence[]): void {
    for (const seq of seqs) this.samples.set(seq.id, { state, sample: state.seqs.indexOf(seq), slot });
    if (state.determinism === null) return;
    try {
      slot.trackDeterministic(seqs, state.determinism, probeEveryOf(state.params));
    } catch (e) {
      for (const seq of seqs) this.samples.delete(seq.id);
      throw e;
    }
  }

  /** One engine step: every model with work steps at once, then their outputs reach the requests. False if idle. */
  async step(): Promise<boolean> {
    const now = Date.now();
    const step = this.steps;
    const stepping = this.slots.filter((s) => s.hasWork);
    const running = stepping.map((slot) => slot.step(now, step, this.samplingOf));
    // The forwards are dispatched: consumers of the previous step's deltas run now, while the native step computes.
    this.gate?.flush();
    const results = await Promise.allSettled(running);
    this.steps++;
    let progressed = false;
    results.forEach((r, i) => {
      if (r.status === "fulfilled") progressed = this.process(stepping[i], r.value) || progressed;
      else this.failSlot(stepping[i], r.reason); // a step that threw outside its forward: its requests cannot go on
    });
    return progressed;
  }

  /** One model's step outcome: failed requests first, then each sequence's final tokens, then n-sample fan-outs. */
  private process(slot: ModelSlot, out: SlotStep): boolean {
    for (const { seq, error } of out.failed) this.failRequest(this.samples.get(seq.id)?.state, error);
    let generated = 0;
    const { seqs, tokens, ends } = out.decoded;
    for (let i = 0; i < seqs.length; i++) generated += this.deliverOne(seqs[i], tokens[i], ends[i]);
    for (const o of out.committed) generated += this.deliver(o);
    // Sequences that cannot go on past these tokens, and that they did not end (jump-forward's, ModelSlot.jumpForward).
    for (const { seq, error } of out.failedAfter) {
      const state = this.samples.get(seq.id)?.state;
      if (seq.status === "running" && state !== undefined && !state.aborted) this.failRequest(state, error);
    }
    this.meter.record(Date.now(), generated, out.promptTokens);
    for (const primary of out.prefilled) {
      const ref = this.samples.get(primary.id);
      if (ref !== undefined && !ref.state.done)
        this.admit(slot, ref.state, this.builder.expandSamples(ref.state, primary, slot));
    }
    return out.progressed;
  }

  /** Streams one final token to its sample; 1 if it was taken. */
  private deliverOne(seq: Sequence, token: SampledToken, end: SequenceEnd | null): number {
    const ref = this.samples.get(seq.id);
    if (ref === undefined || ref.state.aborted || seq.status !== "running") return 0;
    const tracker = ref.state.samples[ref.sample];
    ref.state.channel.push(tracker.add(token, end));
    if (tracker.finished) this.finishSequence(seq);
    return 1;
  }

  /** Streams a sequence's final tokens to its sample (one delta); a sample that ends drops what came after. */
  private deliver({ seq, tokens, end, forced }: SequenceOutput): number {
    const ref = this.samples.get(seq.id);
    if (ref === undefined || ref.state.aborted || seq.status !== "running") {
      // The step's sampled token ended the sample (a stop string in its text) before the forced tokens appended after
      // it: they are not part of it, and a fork of the sample starts from what it output (as with jump-forward off).
      if (forced === true && seq.status === "finished") seq.truncateTokens(seq.numTokens - tokens.length);
      return 0;
    }
    const tracker = ref.state.samples[ref.sample];
    const deltas: StreamDelta[] = [];
    let used = 0;
    while (used < tokens.length && !tracker.finished) {
      const t = tokens[used++];
      deltas.push(tracker.add(t, used === tokens.length ? end : null));
    }
    if (deltas.length === 0) return 0;
    ref.state.channel.push(deltas.length === 1 ? deltas[0] : mergeDeltas(deltas));
    if (tracker.finished) {
      seq.truncateTokens(seq.numTokens - (tokens.length - used)); // a stop string ended it early: the rest is not output
      this.finishSequence(seq);
    }
    return used;
  }

  private readonly samplingOf = (seq: Sequence): SequenceSampling => {
    const { state, sample } = this.samples.get(seq.id)!;
    const p = state.params;
    return {
      sampling: {
        temperature: p.temperature,
        topK: p.topK,
        topP: p.topP,
        seed: (p.seed + sample) % Number.MAX_SAFE_INTEGER,
      },
      numTopLogprobs: p.logprobs ?? 0,
      captureHiddenLayers: captureLayersOf(p, seq),
      confidenceTopK: p.confidence?.topK ?? 0,
      needsLogits: p.tokenLogprobs !== null,
      jumpForward:
        (p.logprobs ?? 0) === 0 &&
        p.tokenLogprobs === null &&
        p.confidence === null &&
        p.probe === null &&
        p.captureHiddenLayer === null &&
        !p.deterministic,
    };
  };

  private finishSequence(seq: Sequence): void {
    const ref = this.samples.get(seq.id);
    if (ref === undefined) return;
    this.samples.delete(seq.id);
    ref.slot.finish(seq);
    ref.state.preemptions += seq.numPreemptions;
    ref.state.resolveIfFinished();
    if (ref.state.done) this.live.delete(ref.state);
  }

  /** Aborts the requests whose signal fired since the last step. */
  sweepAborted(): void {
    for (const state of this.live) if (state.aborted) this.abortRequest(state);
  }

  abortRequest(state: RequestState): void {
    for (const tracker of state.samples) {
      if (!tracker.finished) state.channel.push(tracker.finish("aborted"));
    }
    for (const seq of state.seqs) if (seq) this.finishSequence(seq);
    state.resolveIfFinished();
    this.live.delete(state);
  }

  private failRequest(state: RequestState | undefined, error: unknown): void {
    if (state === undefined) return;
    for (const seq of state.seqs) if (seq) this.finishSequence(seq);
    state.fail(error);
    this.live.delete(state);
  }

  /** Fails every request with a sequence on `slot`. */
  private failSlot(slot: ModelSlot, error: unknown): void {
    const states = new Set([...this.samples.values()].filter((r) => r.slot === slot).map((r) => r.state));
    for (const state of states) this.failRequest(state, error);
  }
}

/** What the step's emitting row of `seq` captures: probe layers when its input is the k-th generated token with k a
 *  multiple of probe.every (k = 0: the prompt's last token), else the captureHidden layer at every step. */
function captureLayersOf(p: ResolvedParams, seq: Sequence): readonly number[] | null {
  if (p.probe !== null) return seq.numCompletionTokens % p.probe.every === 0 ? p.probe.native : null;
  return p.captureHiddenLayer === null ? null : [p.captureHiddenLayer];
}

/** How often a deterministic request's rows capture hidden states (verifier DeterministicLimits.probeEvery). */
function probeEveryOf(p: ResolvedParams): number | null {
  return p.probe?.every ?? (p.captureHiddenLayer === null ? null : 1);
}

/** One delta for several tokens of one sample (a verify pass commits up to a window at once). */
function mergeDeltas(deltas: readonly StreamDelta[]): StreamDelta {
  const merged: StreamDelta = { sample: deltas[0].sample, tokens: [], text: "" };
  for (const d of deltas) {
    merged.tokens.push(...d.tokens);
    merged.text += d.text;
    if (d.logprobs) (merged.logprobs ??= []).push(...d.logprobs);
    if (d.finishReason !== undefined) merged.finishReason = d.finishReason;
    if (d.stoppedBy !== undefined) merged.stoppedBy = d.stoppedBy;
  }
  return merged;
}
