// The OpenAI-compatible HTTP server: a fastify plugin (`deliberatePlugin`, mount it in your own app) and
// `createServer` (a fastify app with the plugin, what `deliberate serve` runs). Routes speak vLLM's dialect:
// /v1/chat/completions, /v1/completions, /v1/models, /health, /metrics, /tokenize, /detokenize, plus our
// extensions (`program`, `deterministic`, POST /v1/chat/completions/control). Built on the public API only.
import { basename } from "node:path";
import Fastify, { type FastifyInstance, type FastifyReply, type FastifyRequest } from "fastify";
import { Engine, type GenerateRequest } from "../engine/index.js";
import type { ChatMessage } from "../model/chatTemplate.js";
import { loadModel, type Model } from "../model/model.js";
import {
  parseProgramKind,
  ProgramFactory,
  ProgramRuntime,
  type PolicySpec,
  type ProgramKind,
} from "../programs/index.js";
import { arithTask, type Task } from "../tasks/index.js";
import { DeliberateError } from "../errors/index.js";
import {
  ApiError,
  badRequest,
  fromDeliberateError,
  modelNotFound,
  toApiError,
  unauthorized,
  unavailable,
} from "./errors.js";
import { Generation, type GenerationEvent, type ThinkTokens } from "./generation.js";
import { ServerMetrics } from "./metrics.js";
import {
  chatSchema,
  completionSchema,
  controlSchema,
  detokenizeSchema,
  parseBody,
  tokenizeSchema,
  type ChatBody,
  type ChatMessageBody,
  type CompletionBody,
  type ReasoningEffort,
} from "./schemas.js";
import { chatLogprobs, completionLogprobs, finishReasonOf, newId, nowSeconds, SseWriter, usageOf } from "./wire.js";

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
  /** The state object to use (createServer passes its own, to drain and close); default: a new one. */
  state?: ServerState;
}

/** Thinking budgets of reasoning_effort (tokens of thought before it is closed; undefined = no limit). */
const EFFORT_BUDGET: Record<ReasoningEffort, number | undefined> = {
  none: 0,
  minimal: 16,
  low: 64,
  medium: 192,
  high: undefined,
  xhigh: undefined,
  max: undefined,
};
/** Certaindex policies of reasoning_effort for program requests (medium / unset: the calibrated one). */
const EFFORT_POLICY: Partial<Record<ReasoningEffort, PolicySpec>> = {
  none: { kind: "threshold", threshold: 0.3, detectAt: 1 },
  minimal: { kind: "threshold", threshold: 0.4, detectAt: 1 },
  low: { kind: "threshold", threshold: 0.5, detectAt: 1 },
  high: { kind: "threshold", threshold: 0.9, detectAt: 1 },
  xhigh: { kind: "baseline-even" },
  max: { kind: "baseline-even" },
};

/** Room a program keeps after a thought for its probe suffix and answer (as `deliberate run`). */
const PROGRAM_RESERVE_TOKENS = 24;
const PROGRAM_MAX_TOKENS = 448;

/** The server's state: one owner (this object) for readiness, draining, live generations and metrics. */
export class ServerState {
  target: ServeTarget | null = null;
  loadError: Error | null = null;
  draining = false;
  metrics: ServerMetrics | null = null;
  factory: ProgramFactory | null = null;
  think: ThinkTokens | null = null;
  readonly live = new Map<string, Generation>();
  private readonly running = new Set<Promise<unknown>>();
  readonly programs = new Map<string, AbortController>();

  constructor(readonly options: DeliberatePluginOptions) {}

  get servedName(): string {
    return this.options.servedModelName ?? (this.target ? basename(this.target.modelDir) : "loading");
  }

  ready(t: ServeTarget): void {
    this.target = t;
    this.metrics = new ServerMetrics(t.engine, this.servedName, t.engineModel);
    this.factory = ProgramFactory.open({
      modelDir: t.modelDir,
      hiddenSize: t.model.config.hiddenSize,
      numLayers: t.model.config.numLayers,
      calibration: this.options.calibration,
      bundledDir: this.options.bundledDir,
    });
    const start = t.model.tokenizer.tokenToId("<think>");
    const end = t.model.tokenizer.tokenToId("</think>");
    this.think = start !== undefined && end !== undefined ? { start, end } : null;
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
}

function checkModel(state: ServerState, model: string | undefined): void {
  if (model !== undefined && model !== state.servedName) throw modelNotFound(model, [state.servedName]);
}

function checkQueue(state: ServerState, t: ServeTarget): void {
  const max = state.options.maxQueue;
  if (max === undefined) return;
  if (t.engine.metrics().waiting >= max)
    throw unavailable(`the server's queue is full (${max} requests waiting); retry later`, 1);
}

/** Text of a message's content (string or text parts). */
function textOf(m: ChatMessageBody, i: number): string {
  if (m.content === null || m.content === undefined) {
    if (m.role === "assistant") return "";
    throw badRequest(`messages[${i}].content is missing; expected a string`, `messages[${i}].content`);
  }
  return typeof m.content === "string" ? m.content : m.content.map((p) => p.text).join("");
}

function chatPrompt(
  state: ServerState,
  t: ServeTarget,
  body: ChatBody,
  closeThought: boolean,
): { ids: number[]; question: string; opensThought: boolean } {
  const tok = t.model.tokenizer;
  if (tok.chatTemplate === null)
    throw badRequest(
      `model ${state.servedName} has no chat template; use POST /v1/completions with a prompt`,
      "messages",
    );
  const messages: ChatMessage[] = body.messages.map((m, i) => ({
    role: m.role === "developer" ? "system" : m.role,
    content: textOf(m, i),
  }));
  let ids: number[];
  try {
    ids = tok.encodeChat(messages, { variables: body.chat_template_kwargs ?? undefined });
  } catch (e) {
    throw badRequest((e as Error).message, "messages");
  }
  const think = state.think;
  if (closeThought && think !== null)
    ids = ids[ids.length - 1] === think.start ? [...ids, think.end] : [...ids, think.start, think.end];
  const lastUser = [...messages].reverse().find((m) => m.role === "user");
  return {
    ids,
    question: lastUser?.content ?? messages[messages.length - 1].content,
    opensThought: think !== null && ids[ids.length - 1] === think.start,
  };
}

/** max_tokens as vLLM resolves it: asked, else what the context leaves; over the context is a 400 in vLLM's words. */
function resolveMaxTokens(
  t: ServeTarget,
  promptTokens: number,
  asked: number | null | undefined,
  what: "messages" | "prompt",
): number {
  const ctx = t.model.contextLength;
  if (promptTokens >= ctx) {
    throw badRequest(
      `This model's maximum context length is ${ctx} tokens. However, your request has ${promptTokens} input tokens. Please reduce the length of the input ${what}.`,
      what,
      "context_length_exceeded",
    );
  }
  if (asked === null || asked === undefined) return ctx - promptTokens;
  if (promptTokens + asked > ctx) {
    throw badRequest(
      `This model's maximum context length is ${ctx} tokens. However, you requested ${promptTokens + asked} tokens (${promptTokens} in the ${what}, ${asked} in the completion). Please reduce the length of the ${what} or completion.`,
      "max_tokens",
      "context_length_exceeded",
    );
  }
  return asked;
}

type SamplingBody = Pick<
  ChatBody,
  "temperature" | "top_p" | "top_k" | "seed" | "n" | "stop" | "stop_token_ids" | "ignore_eos" | "deterministic"
>;

function engineRequest(
  t: ServeTarget,
  b: SamplingBody,
  prompt: number[],
  maxTokens: number,
  logprobs: number | undefined,
): GenerateRequest & { prompt: number[]; maxTokens: number } {
  // The model's defaults as generate() takes them (Model.samplingDefaults: greedy when generation_config.json says
  // do_sample: false, where vLLM would sample at 1).
  const g = t.model.samplingDefaults();
  const r: GenerateRequest & { prompt: number[]; maxTokens: number } = {
    prompt,
    maxTokens,
    model: t.engineModel,
    temperature: b.temperature ?? g.temperature,
    topP: b.top_p ?? g.topP,
    topK: b.top_k === undefined || b.top_k === null ? g.topK : Math.max(0, b.top_k),
    n: b.n ?? 1,
  };
  if (b.seed !== undefined && b.seed !== null) r.seed = b.seed;
  if (b.stop !== undefined && b.stop !== null) r.stop = b.stop;
  if (b.stop_token_ids) r.stopTokenIds = b.stop_token_ids;
  if (b.ignore_eos) r.ignoreEos = true;
  if (b.deterministic) r.deterministic = true;
  if (logprobs !== undefined) r.logprobs = logprobs;
  return r;
}

/**
 * Starts a generation. The engine's synchronous refusals are DeliberateErrors mapped by code (a bad token id, a
 * prompt over the KV pool: 400s naming the wire field; the prompt is `promptParam`); anything else it throws is a
 * bug, a 500.
 */
function startGeneration(
  state: ServerState,
  t: ServeTarget,
  req: ReturnType<typeof engineRequest>,
  opensThought: boolean,
  thinkingBudget: number | undefined,
  promptParam: "messages" | "prompt",
): Generation {
  try {
    return new Generation(t.engine, req, {
      think: state.think,
      promptOpensThought: opensThought,
      thinkingBudget,
      codec: t.model.tokenizer,
    });
  } catch (e) {
    throw e instanceof DeliberateError ? fromDeliberateError(e, promptParam) : e;
  }
}

/** Aborts the generation when the client goes away before its response is complete. */
function abortOnDisconnect(reply: FastifyReply, abort: () => void): void {
  reply.raw.on("close", () => {
    if (!reply.raw.writableFinished) abort();
  });
}

/** Per-request latency bookkeeping for the TTFT / ITL / e2e histograms. */
class Timing {
  readonly arrival = performance.now();
  private first = true;
  /** Last token time per sample (choice index): inter-token latency is per sample, as a client sees it. */
  private readonly last = new Map<number, number>();
  token(metrics: ServerMetrics, index: number): void {
    const now = performance.now();
    if (this.first) metrics.firstToken((now - this.arrival) / 1000);
    this.first = false;
    const last = this.last.get(index);
    if (last !== undefined) metrics.interToken((now - last) / 1000);
    this.last.set(index, now);
  }
  get e2eSeconds(): number {
    return (performance.now() - this.arrival) / 1000;
  }
}

async function recordFinished(state: ServerState, gens: Generation[], timing: Timing): Promise<void> {
  const e2eSeconds = timing.e2eSeconds;
  await Promise.all(gens.map((g) => g.settled()));
  state.metrics!.rolledBack(gens.reduce((n, g) => n + g.rollbacks, 0));
  state.metrics!.finished({
    model: state.servedName,
    promptTokens: gens.reduce((n, g) => n + g.promptLength, 0),
    generationTokens: gens.reduce((n, g) => n + g.completionTokens, 0),
    finishReasons: gens.flatMap((g) =>
      g.finishReasons().map((r) => finishReasonOf(r ?? "aborted").finish_reason ?? "abort"),
    ),
    e2eSeconds,
    queueSeconds: Math.max(...gens.map((g) => g.queueMs)) / 1000,
  });
}

function errorPayload(e: unknown): Record<string, unknown> {
  return toApiError(e).body();
}

// ---- /v1/chat/completions ----

async function chatCompletions(state: ServerState, request: FastifyRequest, reply: FastifyReply): Promise<unknown> {
  const body = parseBody(chatSchema, request.body);
  const t = state.serving();
  checkModel(state, body.model);
  if (body.program !== undefined) return runProgram(state, t, body, request, reply);
  checkQueue(state, t);
  const effort = body.reasoning_effort ?? undefined;
  const budget = body.thinking_token_budget ?? (effort === undefined ? undefined : EFFORT_BUDGET[effort]);
  const prompt = chatPrompt(state, t, body, budget === 0);
  const maxTokens = resolveMaxTokens(t, prompt.ids.length, body.max_completion_tokens ?? body.max_tokens, "messages");
  const wantLogprobs = body.logprobs === true;
  if (!wantLogprobs && body.top_logprobs !== undefined && body.top_logprobs !== null && body.top_logprobs > 0) {
    throw badRequest("top_logprobs needs logprobs: true", "top_logprobs");
  }
  const req = engineRequest(t, body, prompt.ids, maxTokens, wantLogprobs ? (body.top_logprobs ?? 0) : undefined);
  const gen = startGeneration(state, t, req, prompt.opensThought, budget === 0 ? undefined : budget, "messages");
  const id = newId("chatcmpl");
  const created = nowSeconds();
  const model = state.servedName;
  const includeReasoning = body.include_reasoning !== false;
  const decode = (tok: number): string => t.model.tokenizer.decode([tok], { skipSpecialTokens: false });
  const timing = new Timing();
  state.live.set(id, gen);
  abortOnDisconnect(reply, () => gen.abort());
  const usage = (): Record<string, unknown> =>
    usageOf({
      promptTokens: gen.promptLength,
      completionTokens: gen.completionTokens,
      cachedTokens: gen.cachedTokens,
      reasoningTokens: gen.reasoningTokens,
    });

  const work = state.track(
    (async () => {
      if (body.stream) {
        reply.hijack();
        const sse = new SseWriter(reply.raw);
        // The fields every chunk repeats, serialized once: a token's chunk costs one small JSON.stringify.
        const head = `{"id":${JSON.stringify(id)},"object":"chat.completion.chunk","created":${created},"model":${JSON.stringify(model)},"choices":`;
        const continuous = body.stream_options?.continuous_usage_stats === true;
        const chunk = (choices: unknown[]): void =>
          sse.raw(`${head}${JSON.stringify(choices)}${continuous ? `,"usage":${JSON.stringify(usage())}` : ""}}`);
        for (let i = 0; i < gen.n; i++)
          chunk([{ index: i, delta: { role: "assistant", content: "" }, logprobs: null, finish_reason: null }]);
        for await (const e of gen.stream()) {
          if (e.kind === "error") {
            sse.data(errorPayload(e.error));
            break;
          }
          if (e.tokens.length > 0) timing.token(state.metrics!, e.index);
          const delta: Record<string, unknown> = {};
          if (e.reasoning !== "" && includeReasoning) {
            delta.reasoning = e.reasoning;
            delta.reasoning_content = e.reasoning;
          }
          if (e.content !== "") delta.content = e.content;
          const fr = finishReasonOf(e.finishReason);
          if (Object.keys(delta).length === 0 && fr.finish_reason === null && !(wantLogprobs && e.logprobs?.length))
            continue;
          chunk([
            {
              index: e.index,
              delta,
              logprobs: wantLogprobs && e.logprobs ? { content: chatLogprobs(e.logprobs, decode) } : null,
              ...fr,
            },
          ]);
        }
        if (body.stream_options?.include_usage)
          sse.data({ id, object: "chat.completion.chunk", created, model, choices: [], usage: usage() });
        sse.done();
        return undefined;
      }
      const acc = Array.from({ length: gen.n }, () => ({
        reasoning: "",
        content: "",
        logprobs: [] as Array<Record<string, unknown>>,
      }));
      const finishes: Array<ReturnType<typeof finishReasonOf>> = Array.from({ length: gen.n }, () =>
        finishReasonOf(undefined),
      );
      for await (const e of gen.stream()) {
        if (e.kind === "error") throw e.error;
        if (e.tokens.length > 0) timing.token(state.metrics!, e.index);
        const a = acc[e.index];
        a.reasoning += e.reasoning;
        a.content += e.content;
        if (wantLogprobs && e.logprobs) a.logprobs.push(...chatLogprobs(e.logprobs, decode));
        if (e.finishReason !== undefined) finishes[e.index] = finishReasonOf(e.finishReason);
      }
      return {
        id,
        object: "chat.completion",
        created,
        model,
        choices: acc.map((a, i) => {
          const message: Record<string, unknown> = { role: "assistant", content: a.content };
          if (state.think !== null && includeReasoning) {
            message.reasoning = a.reasoning === "" ? null : a.reasoning;
            message.reasoning_content = message.reasoning;
          }
          return { index: i, message, logprobs: wantLogprobs ? { content: a.logprobs } : null, ...finishes[i] };
        }),
        usage: usage(),
      };
    })().finally(async () => {
      state.live.delete(id);
      await recordFinished(state, [gen], timing);
    }),
  );
  return work;
}

// ---- /v1/completions ----

function completionPrompts(t: ServeTarget, prompt: CompletionBody["prompt"]): number[][] {
  const tok = t.model.tokenizer;
  if (typeof prompt === "string") return [tok.encode(prompt)];
  if (prompt.every((p) => typeof p === "number")) return [prompt as number[]];
  return (prompt as Array<string | number[]>).map((p) => (typeof p === "string" ? tok.encode(p) : p));
}

async function completions(state: ServerState, request: FastifyRequest, reply: FastifyReply): Promise<unknown> {
  const body = parseBody(completionSchema, request.body);
  const t = state.serving();
  checkModel(state, body.model);
  if (body.program !== undefined)
    throw badRequest("program runs on /v1/chat/completions (it needs the question as a chat)", "program");
  checkQueue(state, t);
  const prompts = completionPrompts(t, body.prompt);
  const maxTokens = prompts.map((p) => resolveMaxTokens(t, p.length, body.max_tokens, "prompt"));
  const logprobs = body.logprobs ?? undefined;
  const gens: Generation[] = [];
  try {
    for (let p = 0; p < prompts.length; p++)
      gens.push(
        startGeneration(
          state,
          t,
          engineRequest(t, body, prompts[p], maxTokens[p], logprobs),
          false,
          undefined,
          "prompt",
        ),
      );
  } catch (e) {
    for (const g of gens) g.abort();
    throw e;
  }
  const n = body.n ?? 1;
  const id = newId("cmpl");
  const created = nowSeconds();
  const model = state.servedName;
  const decode = (tok: number): string => t.model.tokenizer.decode([tok], { skipSpecialTokens: false });
  const echoText = prompts.map((p) => (body.echo ? t.model.tokenizer.decode(p) : ""));
  const timing = new Timing();
  abortOnDisconnect(reply, () => gens.forEach((g) => g.abort()));
  const usage = (): Record<string, unknown> =>
    usageOf({
      promptTokens: gens.reduce((s, g) => s + g.promptLength, 0),
      completionTokens: gens.reduce((s, g) => s + g.completionTokens, 0),
      cachedTokens: gens.reduce((s, g) => s + g.cachedTokens, 0),
    });
  const events = mergeGenerations(gens);

  return state.track(
    (async () => {
      if (body.stream) {
        reply.hijack();
        const sse = new SseWriter(reply.raw);
        const offsets = new Map<number, number>();
        for await (const { g, e } of events) {
          if (e.kind === "error") {
            sse.data(errorPayload(e.error));
            break;
          }
          const index = g * n + e.index;
          if (e.tokens.length > 0) timing.token(state.metrics!, index);
          const first = !offsets.has(index);
          const text = (first ? echoText[g] : "") + e.reasoning + e.content;
          const at = offsets.get(index) ?? 0;
          offsets.set(index, at + text.length);
          const fr = finishReasonOf(e.finishReason);
          if (text === "" && fr.finish_reason === null) continue;
          sse.data({
            id,
            object: "text_completion",
            created,
            model,
            choices: [
              {
                index,
                text,
                logprobs: logprobs !== undefined && e.logprobs ? completionLogprobs(e.logprobs, decode, at) : null,
                ...fr,
              },
            ],
          });
        }
        if (body.stream_options?.include_usage)
          sse.data({ id, object: "text_completion", created, model, choices: [], usage: usage() });
        sse.done();
        return undefined;
      }
      const choices = gens.flatMap((_, g) =>
        Array.from({ length: n }, (_2, i) => ({
          index: g * n + i,
          text: echoText[g],
          lp: [] as Parameters<typeof completionLogprobs>[0][number][],
          fr: finishReasonOf(undefined),
        })),
      );
      for await (const { g, e } of events) {
        if (e.kind === "error") throw e.error;
        if (e.tokens.length > 0) timing.token(state.metrics!, g * n + e.index);
        const c = choices[g * n + e.index];
        c.text += e.reasoning + e.content;
        if (e.logprobs) c.lp.push(...e.logprobs);
        if (e.finishReason !== undefined) c.fr = finishReasonOf(e.finishReason);
      }
      return {
        id,
        object: "text_completion",
        created,
        model,
        choices: choices.map((c) => ({
          index: c.index,
          text: c.text,
          logprobs:
            logprobs !== undefined ? completionLogprobs(c.lp, decode, echoText[Math.floor(c.index / n)].length) : null,
          ...c.fr,
        })),
        usage: usage(),
      };
    })().finally(() => recordFinished(state, gens, timing)),
  );
}

/** The events of several generations, interleaved as they come. */
async function* mergeGenerations(
  gens: Generation[],
): AsyncGenerator<{ g: number; e: GenerationEvent }, void, undefined> {
  const iters = gens.map((g) => g.stream());
  const next = (g: number) => iters[g].next().then((r) => ({ g, r }));
  const pending = new Map(gens.map((_, g) => [g, next(g)]));
  while (pending.size > 0) {
    const { g, r } = await Promise.race(pending.values());
    if (r.done) {
      pending.delete(g);
      continue;
    }
    pending.set(g, next(g));
    yield { g, e: r.value };
  }
}

// ---- programs (our extension) ----

async function runProgram(
  state: ServerState,
  t: ServeTarget,
  body: ChatBody,
  request: FastifyRequest,
  reply: FastifyReply,
): Promise<unknown> {
  let kind: ProgramKind;
  try {
    kind = parseProgramKind(body.program!);
  } catch (e) {
    throw badRequest((e as Error).message, "program");
  }
  checkQueue(state, t);
  const o = body.program_options ?? {};
  const effort = body.reasoning_effort ?? undefined;
  const prompt = chatPrompt(state, t, body, false);
  // A thought needs room after it for the program's probe suffix and answer: the context check counts that room as
  // part of the completion (a thought of at least one token when max_tokens is not given).
  const perBranch = body.max_completion_tokens ?? body.max_tokens ?? undefined;
  resolveMaxTokens(t, prompt.ids.length, (perBranch ?? 1) + PROGRAM_RESERVE_TOKENS, "messages");
  const left = t.model.contextLength - prompt.ids.length - PROGRAM_RESERVE_TOKENS;
  const task = state.options.task ?? arithTask;
  let built;
  try {
    built = await state.factory!.build(kind, {
      question: prompt.question,
      prompt: prompt.ids,
      cap: o.cap,
      maxTokens: perBranch ?? Math.min(PROGRAM_MAX_TOKENS, left),
      seed: body.seed ?? undefined,
      temperature: body.temperature ?? undefined,
      interval: o.interval,
      model: t.engineModel,
      task,
      reward: task.stepVerifier,
      deepconfVariant: o.variant as "low" | "high" | undefined,
      deepconfOffline: o.offline,
    });
  } catch (e) {
    throw badRequest((e as Error).message, "program");
  }
  const policy: PolicySpec | undefined =
    o.policy === "baseline-even"
      ? { kind: "baseline-even" }
      : o.policy === "threshold"
        ? { kind: "threshold", threshold: o.threshold ?? 0.6, detectAt: 1 }
        : ((effort === undefined || effort === "medium" ? undefined : EFFORT_POLICY[effort]) ?? built.policy);
  const id = newId("chatcmpl");
  const created = nowSeconds();
  const model = state.servedName;
  const ac = new AbortController();
  state.programs.set(id, ac);
  abortOnDisconnect(reply, () => ac.abort());
  const metrics = state.metrics!;
  const timing = new Timing();
  const sse = body.stream ? (reply.hijack(), new SseWriter(reply.raw)) : null;
  const chunk = (choices: unknown[], extra: Record<string, unknown> = {}): void =>
    sse?.data({ id, object: "chat.completion.chunk", created, model, choices, ...extra });
  chunk([{ index: 0, delta: { role: "assistant", content: "" }, logprobs: null, finish_reason: null }]);
  metrics.programStarted();
  const work = (async () => {
    let early = false;
    let saved = 0;
    try {
      const r = await new ProgramRuntime(t.engine).run(built.program, {
        policy,
        signal: ac.signal,
        programId: id,
        onRound: (rec) =>
          chunk([], {
            deliberate: {
              round: rec.round,
              certaindex: rec.certaindex,
              answer: rec.answer,
              tokens_used: rec.tokensUsed,
            },
          }),
      });
      early = r.stopReason === "certain" || r.stopReason === "curve";
      saved = Math.max(0, r.tokenBudget - r.tokensUsed);
      const ext = {
        program: r.program,
        answer: r.answer,
        certaindex: r.certaindex,
        stop_reason: r.stopReason,
        rounds: r.rounds,
        knob: r.knob,
        tokens_used: r.tokensUsed,
        token_budget: r.tokenBudget,
        tokens_by_purpose: r.tokensByPurpose,
        policy: r.policy,
        elapsed_ms: r.elapsedMs,
      };
      const content = r.answer ?? "";
      const finish = r.stopReason === "aborted" ? "abort" : "stop";
      const usage = usageOf({ promptTokens: prompt.ids.length, completionTokens: r.tokensUsed, cachedTokens: 0 });
      metrics.finished({
        model,
        promptTokens: prompt.ids.length,
        generationTokens: r.tokensUsed,
        finishReasons: [finish],
        e2eSeconds: timing.e2eSeconds,
        queueSeconds: 0,
      });
      if (sse) {
        chunk([{ index: 0, delta: { content }, logprobs: null, finish_reason: finish, stop_reason: null }], {
          deliberate: ext,
        });
        if (body.stream_options?.include_usage) chunk([], { usage });
        sse.done();
        return undefined;
      }
      return {
        id,
        object: "chat.completion",
        created,
        model,
        choices: [
          {
            index: 0,
            message: { role: "assistant", content, reasoning: null, reasoning_content: null },
            logprobs: null,
            finish_reason: finish,
            stop_reason: null,
          },
        ],
        usage,
        deliberate: ext,
      };
    } catch (e) {
      if (!sse) throw e;
      sse.data(errorPayload(e));
      sse.done();
      return undefined;
    } finally {
      metrics.programFinished(kind, early, saved);
      state.programs.delete(id);
    }
  })();
  return state.track(work);
}

// ---- the plugin ----

/**
 * Mounts the OpenAI-compatible routes on a fastify app (`app.register(deliberatePlugin, { target })`). The plugin is
 * encapsulated: its auth hook and error format apply to its own routes only. Pass `state` (new ServerState(options))
 * to drain it from outside (SIGTERM).
 */
export function deliberatePlugin(
  app: FastifyInstance,
  options: DeliberatePluginOptions,
  done: (err?: Error) => void,
): void {
  const state = options.state ?? new ServerState(options);
  Promise.resolve(options.target).then(
    (t) => state.ready(t),
    (e: unknown) => (state.loadError = e instanceof Error ? e : new Error(String(e))),
  );

  app.addHook("onRequest", async (request) => {
    if (options.apiKey === undefined || !request.url.startsWith("/v1")) return;
    const auth = request.headers.authorization ?? "";
    if (auth !== `Bearer ${options.apiKey}`) throw unauthorized();
  });
  app.setErrorHandler((e, _request, reply) => {
    const err = toApiError(e);
    if (err.status >= 500 && err.status !== 503) app.log.error(e);
    void reply.status(err.status).headers(err.headers).send(err.body());
  });

  app.get("/health", async (_request, reply) => {
    if (state.target === null || state.draining || state.loadError !== null) return reply.status(503).send();
    return reply.status(200).send();
  });
  app.get("/v1/models", async () => {
    const t = state.serving();
    return {
      object: "list",
      data: [
        {
          id: state.servedName,
          object: "model",
          created: nowSeconds(),
          owned_by: "deliberate",
          root: t.modelDir,
          max_model_len: t.model.contextLength,
        },
      ],
    };
  });
  app.get("/metrics", async (_request, reply) => {
    if (state.metrics === null) return reply.status(503).send();
    const text = await state.metrics.registry.metrics();
    return reply.header("content-type", state.metrics.registry.contentType).send(text);
  });
  app.post("/v1/chat/completions", (request, reply) => chatCompletions(state, request, reply));
  app.post("/v1/completions", (request, reply) => completions(state, request, reply));
  app.post("/v1/chat/completions/control", async (request) => {
    const body = parseBody(controlSchema, request.body);
    state.serving();
    const gen = state.live.get(body.id);
    const program = state.programs.get(body.id);
    if (gen === undefined && program === undefined)
      throw new ApiError(
        404,
        `no running chat completion with id ${body.id} (it finished, or never ran here)`,
        "not_found_error",
        "id",
      );
    if (body.action === "abort") {
      gen?.abort();
      program?.abort();
      return { id: body.id, action: body.action, ok: true };
    }
    if (gen === undefined)
      throw badRequest("reasoning_end applies to a generation; a program ends its own thoughts (use abort)", "action");
    const closed = gen.endReasoning();
    return { id: body.id, action: body.action, ok: closed > 0, closed };
  });
  app.post("/tokenize", async (request) => {
    const body = parseBody(tokenizeSchema, request.body);
    const t = state.serving();
    checkModel(state, body.model);
    const tok = t.model.tokenizer;
    let tokens: number[];
    if (body.messages !== undefined) {
      if (tok.chatTemplate === null)
        throw badRequest(`model ${state.servedName} has no chat template; tokenize a prompt`, "messages");
      const messages = body.messages.map((m, i) => ({ role: m.role, content: textOf(m, i) }));
      tokens = tok.encodeChat(messages, { addGenerationPrompt: body.add_generation_prompt ?? true });
    } else if (body.prompt !== undefined) {
      tokens = tok.encode(body.prompt, { addSpecialTokens: body.add_special_tokens ?? true });
    } else {
      throw badRequest("give a prompt or messages", "prompt");
    }
    return { count: tokens.length, max_model_len: t.model.contextLength, tokens };
  });
  app.post("/detokenize", async (request) => {
    const body = parseBody(detokenizeSchema, request.body);
    const t = state.serving();
    checkModel(state, body.model);
    const vocab = t.model.config.vocabSize;
    const bad = body.tokens.findIndex((id) => id >= vocab);
    if (bad >= 0)
      throw badRequest(
        `tokens[${bad}] is ${body.tokens[bad]}; token ids must be in [0, ${vocab - 1}]`,
        `tokens[${bad}]`,
      );
    return { prompt: t.model.tokenizer.decode(body.tokens) };
  });
  done();
}

export interface CreateServerOptions extends Omit<DeliberatePluginOptions, "target"> {
  /** What to serve: a target, or a model folder to load (default: the caller must pass one). */
  target?: ServeTarget | Promise<ServeTarget>;
  modelDir?: string;
  device?: "cpu" | "cuda";
  /** fastify's logger (default off). */
  logger?: boolean;
  /** Scheduling policy of the engine createServer makes for modelDir (default: the engine's, fcfs). */
  schedulingPolicy?: ConstructorParameters<typeof Engine>[0]["schedulingPolicy"];
}

export interface DeliberateServer {
  app: FastifyInstance;
  state: ServerState;
  /** Listens (port 0: a free one); resolves with the address, e.g. http://127.0.0.1:8000. */
  listen(options?: { host?: string; port?: number }): Promise<string>;
  /** Stops taking requests (health 503), waits for those in flight, closes the socket and, if it made them, the
   *  engine and model. */
  close(): Promise<void>;
}

/** A fastify app serving one model: loads `modelDir` (health 503 until loaded) or serves the given target. */
export async function createServer(options: CreateServerOptions): Promise<DeliberateServer> {
  let owned: { engine: Engine; model: Model } | null = null;
  let target = options.target;
  if (target === undefined) {
    const dir = options.modelDir;
    if (dir === undefined) throw new Error("createServer: pass target ({ engine, model, modelDir }) or modelDir");
    target = (async () => {
      const model = await loadModel(dir, { device: options.device ?? "cpu" });
      const engine = new Engine({ models: { model }, schedulingPolicy: options.schedulingPolicy });
      owned = { engine, model };
      return { engine, model, modelDir: dir };
    })();
  }
  const app = Fastify({ logger: options.logger ?? false, bodyLimit: 32 * 1024 * 1024 });
  const state = new ServerState({ ...options, target });
  await app.register(deliberatePlugin, { ...options, target, state });
  app.setNotFoundHandler((request, reply) => {
    void reply
      .status(404)
      .send(new ApiError(404, `no route ${request.method} ${request.url}`, "not_found_error").body());
  });
  let closed = false;
  return {
    app,
    state,
    async listen(o = {}) {
      return app.listen({ host: o.host ?? "127.0.0.1", port: o.port ?? 8000 });
    },
    async close() {
      if (closed) return;
      closed = true;
      await state.drain();
      await app.close();
      await Promise.resolve(target).catch(() => undefined);
      const o = owned as { engine: Engine; model: Model } | null;
      if (o !== null) {
        await o.engine.dispose();
        o.model.dispose();
      }
    },
  };
}
