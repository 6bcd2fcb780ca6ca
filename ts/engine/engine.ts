// Engine: continuous batching over paged KV for one or more models; the public face (options, submit, fork,
// metrics, dispose) and the loop. Each step (stepper.ts) runs every model's ModelSlot.step() (schedule, one
// forward, tokens committed) and then the output processor; the loop awaits it and yields to the event loop between
// steps, so it never blocks it. Requests enter through submit() / fork() and leave
// through their RequestHandle (stream of deltas, promise of the output).
import { setImmediate as yieldToEventLoop } from "node:timers/promises";
import { DisposedError, NotFoundError } from "../errors/index.js";
import { RequestHandle, WakeGate } from "./handle.js";
import { combineMetrics, ThroughputMeter, type EngineMetrics, type ModelMetrics } from "./metrics.js";
import type { Model } from "../model/model.js";
import { codecOf, engineModelOf, isModel, loadModels, type EngineModelSource } from "./loadedModel.js";
import type { TextCodec } from "./modelTypes.js";
import { ModelSlot } from "./modelSlot.js";
import type { ForkOptions, GenerateRequest } from "./request.js";
import { RequestBuilder } from "./requestBuilder.js";
import type { StructuredFormat, StructuredOutput } from "../grammar/types.js";
import { generateRequestSchema } from "../options/schemas.js";
import { parseOptions } from "../options/validate.js";
import { Stepper } from "./stepper.js";
import { parseEngineOptions, type EngineOptions } from "./options.js";
import type { RequestState } from "./requestState.js";

export type { EngineModelSpec, EngineOptions } from "./options.js";

export class Engine implements AsyncDisposable {
  private readonly slots: ModelSlot[];
  private readonly builder: RequestBuilder;
  private readonly stepper: Stepper;
  private readonly meter = new ThroughputMeter();
  /** Consumers of a step's deltas wake once the next step's forward is dispatched (handle.ts WakeGate). */
  private readonly gate = new WakeGate();
  private wake: (() => void) | null = null;
  private loop: Promise<void> | null = null;
  private isDisposed = false;
  /** Models Engine.load loaded, disposed with the engine. */
  private ownedModels: Model[] = [];

  /** Loads model folders (each with its own KV budget) and starts an engine that owns them. */
  static async load(
    options: Omit<EngineOptions, "models"> & { models: EngineModelSource | EngineModelSource[] },
  ): Promise<Engine> {
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
    const o = parseEngineOptions(options);
    this.slots = o.models.map((spec) => {
      const model = isModel(spec.model) ? engineModelOf(spec.model) : spec.model;
      const codec = isModel(spec.model) ? codecOf(spec.model) : (spec.tokenizer ?? null);
      return new ModelSlot(spec.name, model, codec, o.kernelMode, o.scheduler, o.verify);
    });
    this.builder = new RequestBuilder(this.slots, this.gate, () => this.wake?.());
    this.stepper = new Stepper(this.slots, this.builder, this.meter, this.gate);
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
    this.stepper.admit(built.slot, built.state, built.seqs);
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
    this.stepper.admit(built.slot, built.state, built.seqs);
    return this.start(built.slot, built.state, options.signal);
  }

  /**
   * Compiles a structured-output format for a model (cached, as submit() would): rejects with an InvalidOptionError
   * naming the problem when XGrammar cannot use it. A server calls it before submit(), so a bad schema is refused
   * before any stream starts; submit() alone reports it as the request's failure at its first sampled token.
   */
  async prepareStructured(structured: StructuredOutput, model?: string): Promise<void> {
    this.checkAlive("prepareStructured");
    parseOptions(generateRequestSchema, { prompt: [0], structured }, "request");
    const { thought: _t, answerTokens: _a, ...format } = structured;
    await this.slotOf(model, "prepareStructured")
      .grammars("request.structured")
      .compile(format as StructuredFormat, "request.structured");
  }

  /** A loaded model's tokenizer (null if loaded without one), to encode prompts exactly as submit() does. */
  tokenizer(model?: string): TextCodec | null {
    return this.slotOf(model, "tokenizer").codec;
  }

  private slotOf(model: string | undefined, what: string): ModelSlot {
    const slot = model === undefined ? this.slots[0] : this.slots.find((s) => s.name === model);
    if (!slot)
      throw new NotFoundError(`Engine.${what}: model "${model}" is not loaded; loaded: ${this.modelNames.join(", ")}`);
    return slot;
  }

  /** One model's metrics (default: the first model's) without the engine-wide throughput: cheap enough per event. */
  modelMetrics(model?: string): ModelMetrics {
    return this.slotOf(model, "modelMetrics").metrics();
  }

  metrics(): EngineMetrics {
    return combineMetrics(
      this.slots.map((s) => s.metrics()),
      this.meter,
      this.stepper.steps,
      Date.now(),
    );
  }

  /** Stops the loop after the step in flight; unfinished requests resolve "aborted". Idempotent. */
  async dispose(): Promise<void> {
    if (this.isDisposed) return;
    this.isDisposed = true;
    this.wake?.();
    await this.loop;
    for (const state of [...this.stepper.live]) this.stepper.abortRequest(state);
    this.gate.flush();
    for (const slot of this.slots) slot.dispose(); // compiled grammars: XGrammar's wasm heap, no GC frees them
    for (const m of this.ownedModels) m.dispose();
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.dispose();
  }

  private checkAlive(what: string): void {
    if (this.isDisposed) throw new DisposedError(`Engine.${what}: the engine is disposed`);
  }

  private start(slot: ModelSlot, state: RequestState, signal: AbortSignal | undefined): RequestHandle {
    this.stepper.live.add(state);
    state.onAbort = () => this.wake?.();
    if (signal) {
      const onAbort = (): void => state.abort();
      if (signal.aborted) onAbort();
      else signal.addEventListener("abort", onAbort, { once: true });
      state.result.finally(() => signal.removeEventListener("abort", onAbort)).catch(() => undefined);
    }
    const handle = new RequestHandle(state.id, slot.name, state.channel, state.result, {
      abort: () => state.abort(),
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
      this.stepper.sweepAborted();
      if (!this.stepper.hasWork) {
        this.gate.flush(); // no next step to overlap with: consumers see the last deltas now
        await new Promise<void>((resolve) => (this.wake = resolve));
        this.wake = null;
        continue;
      }
      if (!(await this.stepper.step())) {
        // Nothing could run (cannot happen while the scheduler keeps its invariants): sleep until a submit,
        // fork or abort changes the queues rather than spin.
        await new Promise<void>((resolve) => (this.wake = resolve));
        this.wake = null;
        continue;
      }
      await yieldToEventLoop();
    }
  }
}
