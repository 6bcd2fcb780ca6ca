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
import type { ForkOptions, GenerateRequest } from "./request.js";
import { RequestBuilder } from "./requestBuilder.js";
import type { RequestState } from "./requestState.js";
import type { SequenceSampling } from "./modelRunner.js";
import type { ScheduledBatch } from "./scheduler.js";
import type { Sequence } from "./sequence.js";

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
}

/** Which request (and which of its samples) a live sequence belongs to. */
interface Owner {
  state: RequestState;
  sample: number;
  slot: ModelSlot;
}

export class Engine implements AsyncDisposable {
  private readonly slots: ModelSlot[];
  private readonly owners = new Map<number, Owner>();
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
    this.slots = specs.map((spec, i) => {
      const name = spec.name ?? (i === 0 ? "default" : `model${i}`);
      const model = isModel(spec.model) ? engineModelOf(spec.model) : spec.model;
      const codec = isModel(spec.model) ? codecOf(spec.model) : (spec.tokenizer ?? null);
      return new ModelSlot(name, model, codec, kernelMode, schedulerOptions);
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
    return this.start(built.slot, built.state, built.seqs, request.signal);
  }

  /**
   * A new request continuing `handle`'s sequence (running or finished): KV pages are shared with the parent while
   * it is alive, else revived from the prefix cache. Options may cut the parent (`length`), append a suffix and
   * override sampling; an omitted seed is derived from the parent's, so forks of a sampled branch diverge.
   */
  fork(handle: RequestHandle, options: ForkOptions = {}): RequestHandle {
    this.checkAlive("fork");
    const built = this.builder.fork(handle, options);
    return this.start(built.slot, built.state, built.seqs, options.signal);
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

  private start(slot: ModelSlot, state: RequestState, seqs: Sequence[], signal: AbortSignal | undefined): RequestHandle {
    this.live.add(state);
    for (const seq of seqs) this.owners.set(seq.id, { state, sample: state.seqs.indexOf(seq), slot });
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
      for (const { seq, error } of batch.failed) this.failRequest(this.owners.get(seq.id)!.state, error);
      if (batch.seqs.length > 0) work.push({ slot, batch });
      // A request admitted with its shared prompt already cached forks its samples now, to run next step.
      const expanded = this.expandSamples(slot);
      progressed ||= expanded || batch.seqs.length > 0 || batch.failed.length > 0 || batch.preempted.length > 0;
    }
    const results = await Promise.allSettled(work.map(({ slot, batch }) => slot.runner.run(batch, (seq) => this.samplingOf(seq))));
    this.steps++;
    results.forEach((r, i) => {
      const { slot, batch } = work[i];
      if (r.status === "fulfilled") this.postprocess(slot, batch, r.value);
      else for (const { seq } of batch.seqs) this.failRequest(this.owners.get(seq.id)?.state, r.reason);
    });
    return progressed;
  }

  private postprocess(slot: ModelSlot, batch: ScheduledBatch, results: ForwardResult[]): void {
    let generated = 0;
    let prompt = 0;
    batch.seqs.forEach(({ seq, numNewTokens, emitToken }, i) => {
      const owner = this.owners.get(seq.id);
      if (owner === undefined || seq.status !== "running") return; // finished or failed while in flight
      slot.blockManager.commitComputed(seq, seq.numComputedTokens + numNewTokens);
      if (!emitToken) {
        prompt += numNewTokens;
        return;
      }
      prompt += numNewTokens - 1;
      if (owner.state.aborted) return;
      const r = results[i];
      seq.tokens.push(r.token);
      generated++;
      const tracker = owner.state.samples[owner.sample];
      owner.state.channel.push(tracker.add(r));
      if (tracker.finished) this.finishSequence(seq);
    });
    this.meter.record(Date.now(), generated, prompt);
    this.expandSamples(slot);
  }

  /** Forks samples 1..n-1 off sample 0 once its prompt KV (all but the last token) is computed. */
  private expandSamples(slot: ModelSlot): boolean {
    let expanded = false;
    for (const seq of slot.scheduler.running.slice()) {
      if (seq.computeLimit === null || seq.numComputedTokens < seq.computeLimit) continue;
      seq.computeLimit = null;
      expanded = true;
      const owner = this.owners.get(seq.id)!;
      for (const child of this.builder.expandSamples(owner.state, seq, slot)) {
        this.owners.set(child.id, { state: owner.state, sample: owner.state.seqs.indexOf(child), slot });
      }
    }
    return expanded;
  }

  private samplingOf(seq: Sequence): SequenceSampling {
    const { state, sample } = this.owners.get(seq.id)!;
    const p = state.params;
    return {
      sampling: { temperature: p.temperature, topK: p.topK, topP: p.topP, seed: (p.seed + sample) % Number.MAX_SAFE_INTEGER },
      numTopLogprobs: p.logprobs ?? 0,
      captureHiddenLayer: p.captureHiddenLayer,
      needsLogits: p.tokenLogprobs !== null,
    };
  }

  private finishSequence(seq: Sequence): void {
    const owner = this.owners.get(seq.id);
    if (owner === undefined) return;
    this.owners.delete(seq.id);
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
