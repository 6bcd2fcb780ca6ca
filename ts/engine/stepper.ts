// Stepper: one engine step, nano-vllm's three calls per model: schedule() -> run() -> postprocess(). It runs one
// forward per model that has work (concurrently), appends and streams the sampled tokens, forks the n samples of a
// request once its prompt is computed, and finishes, aborts and fails requests. A model's step goes through its
// verifier only while that model has deterministic sequences (ModelSlot.verifier); otherwise the runner alone.
import { NativeError } from "../errors/index.js";
import type { WakeGate } from "./handle.js";
import type { ThroughputMeter } from "./metrics.js";
import type { ModelSlot } from "./modelSlot.js";
import type { ForwardResult } from "./modelTypes.js";
import type { SequenceSampling } from "./modelRunner.js";
import type { StreamDelta } from "./outputs.js";
import type { RequestBuilder } from "./requestBuilder.js";
import type { ResolvedParams } from "./request.js";
import type { RequestState } from "./requestState.js";
import type { ScheduledBatch } from "./scheduler.js";
import type { Sequence } from "./sequence.js";
import type { ChunkKind, Commit } from "./verifier/verifier.js";

export class Stepper {
  /** Requests submitted and not yet settled. */
  readonly live = new Set<RequestState>();
  /** Steps run so far. */
  steps = 0;

  constructor(
    private readonly slots: readonly ModelSlot[],
    private readonly builder: RequestBuilder,
    private readonly meter: ThroughputMeter,
    private readonly gate: WakeGate | null = null,
  ) {}

  get hasWork(): boolean {
    return this.slots.some((s) => s.scheduler.hasWork);
  }

  /** One engine step: schedule, run (one forward per model, concurrently), postprocess. False if idle. */
  async step(): Promise<boolean> {
    const now = Date.now();
    const work: Array<{ slot: ModelSlot; batch: ScheduledBatch }> = [];
    let progressed = false;
    for (const slot of this.slots) {
      const batch = slot.scheduler.schedule(now);
      if (batch.swapOut.length > 0 || batch.swapIn.length > 0) await this.swap(slot, batch);
      for (const seq of batch.preempted) slot.verifier?.preempted(seq);
      for (const { seq, error } of batch.failed) this.failRequest(seq.owner?.state, error);
      // A fused verifier runs its due rows in the step's forward, even a step with nothing else scheduled.
      if (batch.seqs.length > 0 || slot.verifier?.hasDueFusedRows) work.push({ slot, batch });
      // A request admitted with its shared prompt already cached forks its samples now, to run next step.
      const expanded = this.expandSamples(slot);
      progressed ||= expanded || batch.seqs.length > 0 || batch.failed.length > 0 || batch.preempted.length > 0;
    }
    const running = work.map(({ slot, batch }) => this.runStep(slot, batch));
    // The forwards are dispatched: consumers of the previous step's deltas run now, while the native step computes.
    this.gate?.flush();
    const results = await Promise.allSettled(running);
    this.steps++;
    results.forEach((r, i) => {
      const { slot, batch } = work[i];
      if (r.status === "fulfilled") {
        this.postprocess(slot, batch, r.value.results, r.value.kinds);
        this.commitVerified(r.value.commits);
        progressed ||= r.value.commits.length > 0;
      } else {
        for (const { seq } of batch.seqs) this.failRequest(seq.owner?.state, r.reason);
        if (slot.verifier?.fused) this.failHeld(slot, r.reason);
      }
    });
    // Not fused: deterministic sequences holding enough candidates are verified now in passes of their own.
    const verifying = this.slots.filter((s) => s.verifier !== null && !s.verifier.fused && s.verifier.hasPendingVerification);
    const verified = await Promise.allSettled(verifying.map((s) => s.verifier!.verify(this.steps, this.samplingOf)));
    verified.forEach((r, i) => {
      if (r.status === "fulfilled") {
        this.commitVerified(r.value);
        progressed ||= r.value.length > 0;
      } else {
        this.failHeld(verifying[i], r.reason);
      }
    });
    return progressed;
  }

  /** The step's one forward: the plain runner, or, while the model has deterministic sequences, its verifier. */
  private async runStep(slot: ModelSlot, batch: ScheduledBatch): Promise<{ results: ForwardResult[]; kinds: ChunkKind[] | null; commits: readonly Commit[] }> {
    if (slot.verifier !== null) return slot.verifier.run(batch, this.samplingOf, this.steps);
    return { results: await slot.runner.run(batch, this.samplingOf), kinds: null, commits: [] };
  }

  /** Fails the requests of sequences held for a verify pass that failed. */
  private failHeld(slot: ModelSlot, error: unknown): void {
    for (const seq of slot.scheduler.running.filter((s) => s.heldForVerify)) this.failRequest(seq.owner?.state, error);
  }

  /** kinds: how each chunk ran, when the verifier ran the step (null: every chunk plain). */
  private postprocess(slot: ModelSlot, batch: ScheduledBatch, results: ForwardResult[], kinds: ChunkKind[] | null): void {
    let generated = 0;
    let prompt = 0;
    batch.seqs.forEach(({ seq, numNewTokens, emitToken }, i) => {
      const owner = seq.owner;
      if (owner === null || seq.status !== "running") return; // finished or failed while in flight
      const kind = kinds === null ? "plain" : kinds[i];
      // A deterministic candidate's KV (fast schedule) stays out of the prefix cache: the verifier rewrites it.
      slot.blockManager.commitComputed(seq, seq.numComputedTokens + numNewTokens, kind !== "candidate");
      prompt += emitToken ? numNewTokens - 1 : numNewTokens;
      if (!emitToken || owner.state.aborted) return;
      const r = results[i];
      if (kind === "plain") seq.appendToken(r.token);
      else if (!slot.verifier!.accept(seq, kind, r.token, this.steps)) return; // a candidate: streamed once verified
      generated++;
      const tracker = owner.state.samples[owner.sample];
      owner.state.channel.push(tracker.add(r));
      if (tracker.finished) this.finishSequence(seq);
    });
    this.meter.record(Date.now(), generated, prompt);
    this.expandSamples(slot);
  }

  /**
   * Swap preemption's copies, before the step's forward: preempted sequences' KV to host memory (their pages are
   * free but not yet rewritten), readmitted ones' back into their new pages. A read that fails leaves the sequence
   * to recompute; a write that fails fails its request (its KV would be garbage).
   */
  private async swap(slot: ModelSlot, batch: ScheduledBatch): Promise<void> {
    const model = slot.model;
    for (const { seq, pages } of batch.swapOut) {
      try {
        if (model.readKvPages === undefined) throw new Error("the model cannot copy KV to host memory");
        seq.swapped = { tokens: seq.swapped!.tokens, data: await model.readKvPages(Int32Array.from(pages)) };
      } catch {
        seq.swapped = null; // readmitted by recompute instead
      }
    }
    for (const { seq, pages, data } of batch.swapIn) {
      try {
        await model.writeKvPages!(Int32Array.from(pages), data);
      } catch (e) {
        batch.seqs = batch.seqs.filter((s) => s.seq !== seq);
        batch.failed.push({ seq, error: new NativeError(`KV swap-in failed for sequence ${seq.id}: ${(e as Error).message}; the request cannot continue`, { cause: e }) });
      }
    }
  }

  /** Streams what verify passes committed (one delta per sequence); a sample that finishes drops the rest. */
  private commitVerified(commits: readonly Commit[]): void {
    let generated = 0;
    for (const { seq, tokens } of commits) {
      const owner = seq.owner;
      if (owner === null || seq.status !== "running" || owner.state.aborted) continue;
      const tracker = owner.state.samples[owner.sample];
      const deltas: StreamDelta[] = [];
      let used = 0;
      while (used < tokens.length && !tracker.finished) deltas.push(tracker.add(tokens[used++]));
      generated += used;
      owner.state.channel.push(mergeDeltas(deltas));
      if (tracker.finished) {
        seq.truncateTokens(seq.numTokens - (tokens.length - used)); // committed past the stop: not part of the output
        this.finishSequence(seq);
      }
    }
    this.meter.record(Date.now(), generated, 0);
  }

  /** Forks samples 1..n-1 off sample 0 once its prompt KV (all but the last token) is computed. */
  private expandSamples(slot: ModelSlot): boolean {
    let expanded = false;
    for (const seq of slot.scheduler.running.slice()) {
      if (seq.computeLimit === null || seq.numComputedTokens < seq.computeLimit) continue;
      seq.computeLimit = null;
      expanded = true;
      const state = seq.owner!.state;
      this.trackDeterministic(slot, state, this.builder.expandSamples(state, seq, slot));
    }
    return expanded;
  }

  /** Hands a deterministic request's new sequences to its model's verifier; on failure (no scratch pages) undoes them. */
  trackDeterministic(slot: ModelSlot, state: RequestState, seqs: readonly Sequence[]): void {
    const p = state.params;
    if (!p.deterministic || state.determinism === null) return;
    const verifier = slot.verifierForNewSequence();
    if (verifier === null) return; // batch-invariant mode: every step is on the fixed schedule already
    const stopIds = new Set(p.stopTokenIds);
    if (!p.ignoreEos) for (const id of slot.eosTokenIds) stopIds.add(id);
    try {
      for (const seq of seqs) verifier.track(seq, { maxTokens: p.maxTokens, stopIds, stats: state.determinism });
    } catch (e) {
      for (const seq of seqs) {
        slot.forgetSequence(seq);
        slot.scheduler.finish(seq);
      }
      throw e;
    }
  }

  private readonly samplingOf = (seq: Sequence): SequenceSampling => {
    const { state, sample } = seq.owner!;
    const p = state.params;
    return {
      sampling: { temperature: p.temperature, topK: p.topK, topP: p.topP, seed: (p.seed + sample) % Number.MAX_SAFE_INTEGER },
      numTopLogprobs: p.logprobs ?? 0,
      captureHiddenLayers: captureLayersOf(p, seq),
      confidenceTopK: p.confidence?.topK ?? 0,
      needsLogits: p.tokenLogprobs !== null,
    };
  };

  private finishSequence(seq: Sequence): void {
    const owner = seq.owner;
    if (owner === null || seq.status === "finished") return;
    owner.slot.forgetSequence(seq);
    owner.slot.scheduler.finish(seq);
    owner.state.preemptions += seq.numPreemptions;
    owner.state.resolveIfFinished();
    if (owner.state.done) this.live.delete(owner.state);
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
}

/** What the step's emitting row of `seq` captures: probe layers when its input is the k-th generated token with k a
 *  multiple of probe.every (k = 0: the prompt's last token), else the captureHidden layer at every step. */
function captureLayersOf(p: ResolvedParams, seq: Sequence): readonly number[] | null {
  if (p.probe !== null) return seq.numCompletionTokens % p.probe.every === 0 ? p.probe.native : null;
  return p.captureHiddenLayer === null ? null : [p.captureHiddenLayer];
}

/** One delta for several tokens of one sample (a verify pass commits up to a window at once). */
function mergeDeltas(deltas: readonly StreamDelta[]): StreamDelta {
  const merged: StreamDelta = { sample: deltas[0].sample, tokens: [], text: "" };
  for (const d of deltas) {
    merged.tokens.push(...d.tokens);
    merged.text += d.text;
    if (d.logprobs) (merged.logprobs ??= []).push(...d.logprobs);
    if (d.finishReason !== undefined) merged.finishReason = d.finishReason;
  }
  return merged;
}
