// The server's state, one per plugin: what it serves (once the target resolves), whether it drains, the generations
// and programs in flight (for control and drain) and the metrics. The plugin decorates its fastify instance with it
// (`deliberate`); routes reach it through getDecorator.
import { basename } from "node:path";
import type { Engine } from "../engine/index.js";
import type { Model } from "../model/model.js";
import { ProgramFactory } from "../programs/index.js";
import type { Task } from "../tasks/index.js";
import { UnsupportedError } from "../errors/index.js";
import { ApiError, modelNotFound, unavailable } from "./errors.js";
import type { Generation, ThinkTokens } from "./generation.js";
import { ServerMetrics } from "./metrics.js";
import { PromptEncoder } from "./promptEncoder.js";

/** The name the plugin decorates its fastify instance with. */
export const STATE_DECORATOR = "deliberate";

/** A loaded model served under a name, on an engine. */
export interface ServeTarget {
  engine: Engine;
  model: Model;
  /** The model's folder (its calibration and probe live there). */
  modelDir: string;
  /** The engine's name of the model (default: its first). */
  engineModel?: string;
}

export interface DeliberatePluginOptions {
  /** What to serve, or a promise of it: until it resolves, /health answers 503 and routes 503 "loading". */
  target: ServeTarget | Promise<ServeTarget>;
  /** The name clients pass as `model` (default: the model folder's name). */
  servedModelName?: string;
  /** Require `Authorization: Bearer <apiKey>` on /v1 routes. */
  apiKey?: string;
  /** Most requests waiting for the scheduler; more get 503 + Retry-After (default: unbounded). */
  maxQueue?: number;
  /** How programs read and compare answers (default: the arithmetic task's \boxed{} answers). */
  task?: Task;
  /** Certaindex calibration for programs: a file, false for none, default the model's own. */
  calibration?: string | false;
  /** The bundled model's folder (its calibration ships in the package). */
  bundledDir?: string;
  /**
   * Largest request body in bytes; a larger one is refused (413) before it is read. Default: the served model's
   * context length x 32 bytes, at least 1 MiB (maxBodyBytesFor).
   */
  maxBodyBytes?: number;
  /**
   * Most tokens one program request may plan for: program_options.cap times the tokens a branch may generate; a
   * larger cap is a 400 naming this limit. Default: the served model's context length x 16 (maxProgramTokensFor).
   */
  maxProgramTokens?: number;
  /** The state object to use (createServer passes its own, to drain and close); default: a new one. */
  state?: ServerState;
}

/** The default program token budget of a model with `contextLength` tokens of context (DeliberatePluginOptions). */
export const maxProgramTokensFor = (contextLength: number): number => contextLength * 16;

/** The server's state: one owner (this object) for readiness, draining, live generations and metrics. */
export class ServerState {
  target: ServeTarget | null = null;
  loadError: Error | null = null;
  draining = false;
  metrics: ServerMetrics | null = null;
  factory: ProgramFactory | null = null;
  think: ThinkTokens | null = null;
  /** Tokenizes prompts, off the event loop when long. */
  encoder: PromptEncoder | null = null;
  readonly live = new Map<string, Generation>();
  private readonly running = new Set<Promise<unknown>>();
  readonly programs = new Map<string, AbortController>();

  constructor(readonly options: DeliberatePluginOptions) {}

  get servedName(): string {
    return this.options.servedModelName ?? (this.target ? basename(this.target.modelDir) : "loading");
  }

  /** Serves `t`; throws (and serves nothing) if its program factory cannot be built (a corrupt calibration file,
   *  say): the plugin records that as the load error. */
  ready(t: ServeTarget): void {
    if (t.model.config.scoreHead !== null)
      throw new UnsupportedError(
        `${t.modelDir}: a process reward model (${t.model.config.architecture}) scores steps and writes no text, so it cannot be served; serve a language model and give the PRM to programs as --prm DIR`,
        { field: "modelDir" },
      );
    const factory = ProgramFactory.open({
      modelDir: t.modelDir,
      hiddenSize: t.model.config.hiddenSize,
      numLayers: t.model.config.numLayers,
      calibration: this.options.calibration,
      bundledDir: this.options.bundledDir,
    });
    this.target = t; // servedName reads it
    this.metrics = new ServerMetrics(t.engine, this.servedName, {
      engineModel: t.engineModel,
      maxModelLen: t.model.contextLength,
    });
    this.factory = factory;
    this.encoder = new PromptEncoder(t.model.tokenizer, t.modelDir);
    this.think = t.model.tokenizer.thinkTokens();
  }

  /** The target, or 503 while loading / draining. */
  serving(): ServeTarget {
    if (this.loadError)
      throw new ApiError(
        500,
        `the model failed to load: ${this.loadError.message}`,
        "server_error",
        null,
        "model_load_failed",
      );
    if (this.target === null) throw unavailable("the model is still loading; retry shortly", 2);
    if (this.draining) throw unavailable("the server is shutting down; retry on another replica", 5);
    return this.target;
  }

  /** Counts a request's work so drain() can wait for it. */
  track<T>(p: Promise<T>): Promise<T> {
    this.running.add(p);
    const drop = (): void => void this.running.delete(p);
    p.then(drop, drop);
    return p;
  }

  /** Stops taking requests (health 503) and waits for the ones in flight. */
  async drain(): Promise<void> {
    this.draining = true;
    while (this.running.size > 0) await Promise.allSettled([...this.running]);
  }

  /** Releases what the state holds besides the target (whose owner disposes it); after drain(). */
  async close(): Promise<void> {
    this.metrics?.registry.clear();
    await this.encoder?.close();
  }
}

export function checkModel(state: ServerState, model: string | undefined): void {
  if (model !== undefined && model !== state.servedName) throw modelNotFound(model, [state.servedName]);
}

export function checkQueue(state: ServerState, t: ServeTarget): void {
  const max = state.options.maxQueue;
  if (max === undefined) return;
  if (t.engine.metrics().waiting >= max)
    throw unavailable(`the server's queue is full (${max} requests waiting); retry later`, 1);
}
