// Engine: continuous batching over paged KV for one or more models. The step loop is three calls per model,
// schedule() -> run() -> postprocess(), one forward per model per step; it awaits the native forward and yields
// to the event loop between steps, so it never blocks it. Requests enter through submit() / fork() and leave
// through their RequestHandle (stream of deltas, promise of the output).
import { setImmediate as yieldToEventLoop } from "node:timers/promises";
import { DEFAULT_AGING_TOKENS_PER_SECOND, parseSchedulingPolicy, type SchedulingPolicy } from "../sched/policy.js";
import type { OrderFn } from "../sched/types.js";
import { RequestHandle } from "./handle.js";
import { parseKernelMode, type KernelMode } from "./kernelSchedule.js";
import { combineMetrics, ThroughputMeter, type EngineMetrics } from "./metrics.js";
import type { Model } from "../model/model.js";
import { codecOf, engineModelOf, isModel, loadModels, type EngineModelSource } from "./loadedModel.js";
import type { EngineModel, ForwardResult, TextCodec } from "./modelTypes.js";
import { ModelSlot } from "./modelSlot.js";
import type { StreamDelta } from "./outputs.js";
import type { ForkOptions, GenerateRequest } from "./request.js";
import { RequestBuilder } from "./requestBuilder.js";
import type { RequestState } from "./requestState.js";
import type { SequenceSampling } from "./modelRunner.js";
import type { ScheduledBatch } from "./scheduler.js";
import type { Sequence } from "./sequence.js";
import { DEFAULT_VERIFY_GROUP, DEFAULT_VERIFY_WINDOW, type ChunkKind, type Commit } from "./verifier/verifier.js";

export interface EngineModelSpec {
  /** Name requests use to pick it (request.model); default "default" for the first, then "model<i>". */
  name?: string;
  /** A loaded Model (its tokenizer is used), or anything implementing the engine's model contract. */
  model: Model | EngineModel;
  /** For an EngineModel: needed for text prompts, text output and stop strings; omit to work in token ids. */
  tokenizer?: TextCodec | null;
}

export interface EngineOptions {
  models: EngineModelSpec | EngineModelSpec[];
  /** "fast" (default): reduction schedules from the batch shape; "batch-invariant": fixed schedules. */
  kernelMode?: KernelMode;
  /** Inter-program policy ordering admission and preemption (default "fcfs"); see ts/sched. */
  schedulingPolicy?: SchedulingPolicy | OrderFn;
  /** Token budget per step per model (decode tokens + prefill chunks). Default 2048. */
  maxBatchTokens?: number;
  /** Most sequences per step per model. Default 256. */
  maxBatchSeqs?: number;
  /** SJF aging rate, tokens of estimate forgiven per second waited. Default 64. */
  agingTokensPerSecond?: number;
  /** Deterministic requests: tokens per verify row (last committed + candidates). Default 32; at least 2. */
  verifyWindow?: number;
  /** Deterministic requests, fuseVerify false: rows per verify pass (padded with dummies on the GPU). Default 8. */
  verifyGroup?: number;
  /**
   * Deterministic requests: verify rows ride in the next step's one forward on the fixed schedule beside the fast
   * rows, as many as maxBatchTokens leaves room for (default true); or, false, run as verify passes of their own
   * of verifyGroup rows (LLM-42's fixed-shape passes on the GPU).
   */
  fuseVerify?: boolean;
}

export class Engine implements AsyncDisposable {
  private readonly slots: ModelSlot[];
  private readonly builder: RequestBuilder;
  private readonly meter = new ThroughputMeter();
  private readonly live = new Set<RequestState>();
  private wake: (() => void) | null = null;
  private loop: Promise<void> | null = null;
  private isDisposed = false;
  private steps = 0;
  /** Models Engine.load loaded, disposed with the engine. */
  private ownedModels: Model[] = [];

  /** Loads model folders (each with its own KV budget) and starts an engine that owns them. */
  static async load(options: Omit<EngineOptions, "models"> & { models: EngineModelSource | EngineModelSource[] }): Promise<Engine> {
    const sources = Array.isArray(options.models) ? options.models : [options.models];
    const models = await loadModels(sources);
    try {
      const engine = new Engine({ ...options, models: models.map((model, i) => ({ name: sources[i].name, model })) });
      engine.ownedModels = models;
      return engine;
    } catch (e) {
      for (const m of models) m.dispose();
      throw e;
    }
  }

  constructor(options: EngineOptions) {
    const specs = Array.isArray(options.models) ? options.models : [options.models];
    if (specs.length === 0) throw new Error("Engine: options.models is empty; pass at least one loaded model");
    const schedulerOptions = {
      maxBatchTokens: positiveInt("maxBatchTokens", options.maxBatchTokens ?? 2048),
      maxBatchSeqs: positiveInt("maxBatchSeqs", options.maxBatchSeqs ?? 256),
      policy: typeof options.schedulingPolicy === "function" ? options.schedulingPolicy : parseSchedulingPolicy(options.schedulingPolicy ?? "fcfs"),
      agingTokensPerSecond: options.agingTokensPerSecond ?? DEFAULT_AGING_TOKENS_PER_SECOND,
    };
    const kernelMode = parseKernelMode(options.kernelMode ?? "fast");
    const verifyOptions = {
      verifyWindow: positiveInt("verifyWindow", options.verifyWindow ?? DEFAULT_VERIFY_WINDOW),
      verifyGroup: positiveInt("verifyGroup", options.verifyGroup ?? DEFAULT_VERIFY_GROUP),
      fuseVerify: booleanOption("fuseVerify", options.fuseVerify ?? true),
    };
    if (verifyOptions.verifyWindow < 2) throw new Error(`Engine: options.verifyWindow is ${verifyOptions.verifyWindow}; expected an integer >= 2 (the last committed token + candidates)`);
    this.slots = specs.map((spec, i) => {
      const name = spec.name ?? (i === 0 ? "default" : `model${i}`);
      const model = isModel(spec.model) ? engineModelOf(spec.model) : spec.model;
      const codec = isModel(spec.model) ? codecOf(spec.model) : (spec.tokenizer ?? null);
      return new ModelSlot(name, model, codec, kernelMode, schedulerOptions, verifyOptions);
    });
    const names = new Set(this.slots.map((s) => s.name));
    if (names.size !== this.slots.length) throw new Error(`Engine: model names must be unique, got ${this.slots.map((s) => s.name).join(", ")}`);
    this.builder = new RequestBuilder(this.slots);
  }

  get modelNames(): string[] {
    return this.slots.map((s) => s.name);
  }
  get disposed(): boolean {
    return this.isDisposed;
  }

  /** Queues a request; throws (synchronously) on invalid parameters or a prompt larger than the KV pool. */
  submit(request: GenerateRequest): RequestHandle {
    this.checkAlive("submit");
    const built = this.builder.submit(request);
    this.trackDeterministic(built.slot, built.state, built.seqs);
    return this.start(built.slot, built.state, request.signal);
  }

  /**
   * A new request continuing `handle`'s sequence (running or finished): KV pages are shared with the parent while
   * it is alive, else revived from the prefix cache. Options may cut the parent (`length`), append a suffix and
   * override sampling; an omitted seed is derived from the parent's, so forks of a sampled branch diverge.
   */
  fork(handle: RequestHandle, options: ForkOptions = {}): RequestHandle {
    this.checkAlive("fork");
    const built = this.builder.fork(handle, options);
    this.trackDeterministic(built.slot, built.state, built.seqs);
    return this.start(built.slot, built.state, options.signal);
  }

  /** A loaded model's tokenizer (null if loaded without one), to encode prompts exactly as submit() does. */
  tokenizer(model?: string): TextCodec | null {
    const slot = model === undefined ? this.slots[0] : this.slots.find((s) => s.name === model);
    if (!slot) throw new Error(`Engine.tokenizer: model "${model}" is not loaded; loaded: ${this.modelNames.join(", ")}`);
    return slot.codec;
  }

  metrics(): EngineMetrics {
    return combineMetrics(
      this.slots.map((s) => s.metrics()),
      this.meter,
      this.steps,
      Date.now(),
    );
  }

  /** Stops the loop after the step in flight; unfinished requests resolve "aborted". Idempotent. */
  async dispose(): Promise<void> {
    if (this.isDisposed) return;
    this.isDisposed = true;
    this.wake?.();
    await this.loop;
    for (const state of [...this.live]) this.abortRequest(state);
    for (const m of this.ownedModels) m.dispose();
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.dispose();
  }

  private checkAlive(what: string): void {
    if (this.isDisposed) throw new Error(`Engine.${what}: the engine is disposed`);
  }

  private start(slot: ModelSlot, state: RequestState, signal: AbortSignal | undefined): RequestHandle {
    this.live.add(state);
    if (signal) {
      const onAbort = (): void => state.abortController.abort();
      if (signal.aborted) onAbort();
      else signal.addEventListener("abort", onAbort, { once: true });
      state.result.finally(() => signal.removeEventListener("abort", onAbort)).catch(() => undefined);
    }
    state.abortController.signal.addEventListener("abort", () => this.wake?.(), { once: true });
    const handle = new RequestHandle(state.id, slot.name, state.channel, state.result, {
      abort: () => state.abortController.abort(),
      updateMetadata: (patch) => {
        for (const seq of state.seqs) if (seq) Object.assign(seq.metadata, patch);
      },
    });
    this.builder.remember(handle, state);
    this.loop ??= this.run();
    this.wake?.();
    return handle;
  }

  private async run(): Promise<void> {
    await yieldToEventLoop(); // let a burst of synchronous submits land in the first step together
    while (!this.isDisposed) {
      this.sweepAborted();
      if (!this.slots.some((s) => s.scheduler.hasWork)) {
        await new Promise<void>((resolve) => (this.wake = resolve));
        this.wake = null;
        continue;
      }
      if (!(await this.step())) {
        // Nothing could run (cannot happen while the scheduler keeps its invariants): sleep until a submit,
        // fork or abort changes the queues rather than spin.
        await new Promise<void>((resolve) => (this.wake = resolve));
        this.wake = null;
        continue;
      }
      await yieldToEventLoop();
    }
  }

  /** One engine step: schedule, run (one forward per model, concurrently), postprocess. False if idle. */
  private async step(): Promise<boolean> {
    const now = Date.now();
    const work: Array<{ slot: ModelSlot; batch: ScheduledBatch }> = [];
    let progressed = false;
    for (const slot of this.slots) {
      const batch = slot.scheduler.schedule(now);
      for (const seq of batch.preempted) slot.verifier?.preempted(seq);
      for (const { seq, error } of batch.failed) this.failRequest(seq.owner?.state, error);
      // A fused verifier runs its due rows in the step's forward, even a step with nothing else scheduled.
      if (batch.seqs.length > 0 || slot.verifier?.hasDueFusedRows) work.push({ slot, batch });
      // A request admitted with its shared prompt already cached forks its samples now, to run next step.
      const expanded = this.expandSamples(slot);
      progressed ||= expanded || batch.seqs.length > 0 || batch.failed.length > 0 || batch.preempted.length > 0;
    }
    const results = await Promise.allSettled(work.map(({ slot, batch }) => this.runStep(slot, batch)));
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
  private trackDeterministic(slot: ModelSlot, state: RequestState, seqs: readonly Sequence[]): void {
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
      captureHiddenLayer: p.captureHiddenLayer,
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

  private sweepAborted(): void {
    for (const state of this.live) if (state.aborted) this.abortRequest(state);
  }

  private abortRequest(state: RequestState): void {
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

function positiveInt(field: string, value: number): number {
  if (!Number.isInteger(value) || value < 1) throw new Error(`Engine: options.${field} is ${JSON.stringify(value)}; expected an integer >= 1`);
  return value;
}

function booleanOption(field: string, value: boolean): boolean {
  if (typeof value !== "boolean") throw new Error(`Engine: options.${field} is ${JSON.stringify(value)}; expected true or false`);
  return value;
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
