// GET /metrics: Prometheus text with vLLM v1's metric names, labels and counting (so its Grafana dashboards work), and
// ours. Gauges and engine counters read the engine at scrape time; the rest are fed by the routes as tokens stream and
// requests finish. As in vLLM v1, each of a request's n samples counts as a finished request of its own (vLLM runs
// them as n child requests: success, latency and token histograms per sample), while `n` and the longest sample are
// observed once per request. Every series exists from the start at 0. One registry per server, so two servers in one
// process (tests, a router) never share counts.
import { Counter, Gauge, Histogram, Registry } from "prom-client";
import type { Engine, ModelMetrics } from "../engine/index.js";
import { PROGRAM_KINDS } from "../programs/index.js";
import { StepTokensHistogram } from "./stepTokensHistogram.js";

// Bucket bounds: vLLM v1's (vllm/v1/metrics/loggers.py), every one kept, with finer bounds below vLLM's first for the
// latencies, where a small model's times fall.
const TTFT_BUCKETS = [
  0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10, 20, 40, 80, 160, 640, 2560,
];
/** Inter-token latency and time per output token (vLLM's from 0.01). */
const TOKEN_INTERVAL_BUCKETS = [
  0.001, 0.0025, 0.005, 0.0075, 0.01, 0.015, 0.02, 0.025, 0.03, 0.04, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75,
  1, 2.5, 5, 7.5, 10, 20, 40, 80,
];
/** e2e, queue, inference, prefill and decode time of a request (vLLM's from 0.3). */
const REQUEST_LATENCY_BUCKETS = [
  0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.2, 0.3, 0.5, 0.8, 1, 1.5, 2, 2.5, 5, 10, 15, 20, 30, 40, 50, 60, 120, 240,
  480, 960, 1920, 7680,
];
const N_BUCKETS = [1, 2, 5, 10, 20];
/** vLLM v1's finished_reason values we produce ("error": the request failed), each series present from the start. */
const FINISHED_REASONS = ["stop", "length", "abort", "error"] as const;

/** 1, 2, 5, 10, 20, 50, ... up to max (vLLM's build_1_2_5_buckets): token-count buckets up to the context length. */
export function oneTwoFiveBuckets(max: number): number[] {
  const out: number[] = [];
  for (let scale = 1; ; scale *= 10)
    for (const m of [1, 2, 5]) {
      if (m * scale > max) return out.length > 0 ? out : [1];
      out.push(m * scale);
    }
}

/** One sample of a finished request: a finished request in vLLM's counting. Seconds are from the request's arrival. */
export interface FinishedSample {
  /** vLLM's finished_reason: "stop", "length", "abort", or "error" (the generation failed). */
  finishReason: string;
  generationTokens: number;
  /** Tokens generated for the sample that the client did not get as text (reasoning_effort's probes and the tokens an
   * exit dropped): counted as generated, as usage counts them, but not in its per-output-token latency. */
  hiddenTokens?: number;
  e2eSeconds: number;
  /** Absent when no token came (or, for a program, not measured). */
  firstTokenSeconds?: number;
  lastTokenSeconds?: number;
}

/** What one finished request adds to the counters. */
export interface FinishedRequest {
  /** The request's n (its samples). */
  n: number;
  /** max_tokens as resolved (absent: no single bound, e.g. a program). */
  maxTokens?: number;
  /** Prompt tokens of each sample (they share the prompt). */
  promptTokens: number;
  /** Seconds from arrival to the scheduler's first admission (absent: not one engine request, e.g. a program). */
  queueSeconds?: number;
  samples: FinishedSample[];
}

export interface ServerMetricsOptions {
  /** Which of the engine's models is served (default: its first). */
  engineModel?: string;
  /** The context length: token-count histograms' buckets go up to it. */
  maxModelLen: number;
}

export class ServerMetrics {
  readonly registry = new Registry();
  private readonly labels: { model_name: string };
  private readonly promptTokens: Counter;
  private readonly generationTokens: Counter;
  private readonly success: Counter;
  private readonly ttft: Histogram;
  private readonly itl: Histogram;
  private readonly tpot: Histogram;
  private readonly e2e: Histogram;
  private readonly queue: Histogram;
  private readonly inference: Histogram;
  private readonly prefill: Histogram;
  private readonly decode: Histogram;
  private readonly requestTpot: Histogram;
  private readonly requestPromptTokens: Histogram;
  private readonly requestGenerationTokens: Histogram;
  private readonly requestMaxGenerationTokens: Histogram;
  private readonly paramsN: Histogram;
  private readonly paramsMaxTokens: Histogram;
  private readonly programsRunning: Gauge;
  private readonly certaindexExits: Counter;
  private readonly tokensSaved: Counter;
  private readonly rollbacks: Counter;
  private readonly aborted: Counter;

  /** modelName: the label (the served name). */
  constructor(engine: Engine, modelName: string, options: ServerMetricsOptions) {
    const registers = [this.registry];
    // The served model's own figures (an engine may also hold, say, a reward model: not this server's).
    const served = (): ModelMetrics => {
      const models = engine.metrics().models;
      return models.find((mm) => mm.name === options.engineModel) ?? models[0];
    };
    const labelNames = ["model_name"] as const;
    const l = (this.labels = { model_name: modelName });
    const perModel = (name: string, help: string, read: (mm: ModelMetrics) => number): void => {
      new Gauge({
        name,
        help,
        labelNames,
        registers,
        collect() {
          this.set(l, read(served()));
        },
      });
    };
    perModel("vllm:num_requests_running", "Sequences in the running batch.", (mm) => mm.running);
    perModel("vllm:num_requests_waiting", "Sequences waiting to be scheduled.", (mm) => mm.waiting);
    perModel("vllm:kv_cache_usage_perc", "KV-cache usage: 1 means 100 percent.", (mm) =>
      mm.kvPagesTotal === 0 ? 0 : mm.kvPagesUsed / mm.kvPagesTotal,
    );
    const counter = (name: string, help: string, labelNames: readonly string[] = ["model_name"]): Counter =>
      new Counter({ name, help, labelNames, registers });
    // Counters the engine keeps: exported as the increase since the last scrape.
    const engineCounter = (name: string, help: string, read: () => number): void => {
      let last = 0;
      new Counter({
        name,
        help,
        labelNames,
        registers,
        collect() {
          const v = read();
          this.inc(l, Math.max(0, v - last));
          last = Math.max(last, v);
        },
      });
    };
    const histogram = (name: string, help: string, buckets: number[]): Histogram => {
      const h = new Histogram({ name, help, labelNames, buckets, registers });
      h.zero(l);
      return h;
    };
    engineCounter(
      "vllm:prefix_cache_queries_total",
      "Prompt tokens looked up in the prefix cache.",
      () => served().prefixQueriedTokens,
    );
    engineCounter(
      "vllm:prefix_cache_hits_total",
      "Prompt tokens found in the prefix cache.",
      () => served().prefixHitTokens,
    );
    engineCounter(
      "vllm:num_preemptions_total",
      "Preemptions (a sequence's pages freed and recomputed later).",
      () => served().preemptions,
    );
    new StepTokensHistogram(
      "vllm:iteration_tokens_total",
      "Tokens per engine step (prompt tokens computed + tokens sampled).",
      l,
      () => served(),
      registers,
    );
    this.promptTokens = counter("vllm:prompt_tokens_total", "Prompt tokens of finished requests, once per sample.");
    this.generationTokens = counter("vllm:generation_tokens_total", "Generated tokens of finished requests.");
    this.success = counter("vllm:request_success_total", "Finished requests (samples), by finish reason.", [
      "model_name",
      "finished_reason",
    ]);
    this.ttft = histogram("vllm:time_to_first_token_seconds", "Time to first token, per sample.", TTFT_BUCKETS);
    this.itl = histogram(
      "vllm:inter_token_latency_seconds",
      "Time between streamed token steps of a sample.",
      TOKEN_INTERVAL_BUCKETS,
    );
    this.tpot = histogram(
      "vllm:time_per_output_token_seconds",
      "Time per output token (the same intervals as vllm:inter_token_latency_seconds, vLLM's older name).",
      TOKEN_INTERVAL_BUCKETS,
    );
    this.e2e = histogram(
      "vllm:e2e_request_latency_seconds",
      "Request latency from arrival to a sample's last token.",
      REQUEST_LATENCY_BUCKETS,
    );
    this.queue = histogram(
      "vllm:request_queue_time_seconds",
      "Time a request waited for the scheduler (WAITING phase).",
      REQUEST_LATENCY_BUCKETS,
    );
    this.inference = histogram(
      "vllm:request_inference_time_seconds",
      "Time from the first scheduling to a sample's last token (RUNNING phase).",
      REQUEST_LATENCY_BUCKETS,
    );
    this.prefill = histogram(
      "vllm:request_prefill_time_seconds",
      "Time from the first scheduling to a sample's first token (PREFILL phase).",
      REQUEST_LATENCY_BUCKETS,
    );
    this.decode = histogram(
      "vllm:request_decode_time_seconds",
      "Time from a sample's first token to its last (DECODE phase).",
      REQUEST_LATENCY_BUCKETS,
    );
    this.requestTpot = histogram(
      "vllm:request_time_per_output_token_seconds",
      "A sample's decode time over its tokens after the first.",
      TOKEN_INTERVAL_BUCKETS,
    );
    const tokenBuckets = oneTwoFiveBuckets(options.maxModelLen);
    this.requestPromptTokens = histogram("vllm:request_prompt_tokens", "Prompt tokens of a sample.", tokenBuckets);
    this.requestGenerationTokens = histogram(
      "vllm:request_generation_tokens",
      "Generated tokens of a sample.",
      tokenBuckets,
    );
    this.requestMaxGenerationTokens = histogram(
      "vllm:request_max_num_generation_tokens",
      "Generated tokens of a request's longest sample.",
      tokenBuckets,
    );
    this.paramsN = histogram("vllm:request_params_n", "The n request parameter.", N_BUCKETS);
    this.paramsMaxTokens = histogram(
      "vllm:request_params_max_tokens",
      "The max_tokens request parameter as resolved, per sample.",
      tokenBuckets,
    );
    this.programsRunning = new Gauge({
      name: "deliberate:programs_running",
      help: "Reasoning programs running.",
      labelNames,
      registers,
    });
    this.certaindexExits = counter(
      "deliberate:certaindex_exits_total",
      "Programs stopped early by their certaindex policy.",
      ["model_name", "program"],
    );
    this.tokensSaved = counter(
      "deliberate:tokens_saved_total",
      "Tokens programs did not spend against running to their cap, estimated from the rounds not taken (ProgramResult.usage.tokensSaved).",
      ["model_name", "program"],
    );
    this.rollbacks = counter(
      "deliberate:deterministic_rollbacks_total",
      "Verify passes of deterministic requests that rolled back.",
    );
    this.aborted = counter(
      "deliberate:requests_aborted_total",
      "Samples aborted by a client disconnect, a control call or a drain.",
    );
    // Every series from the start, at 0: a rate() over a scrape before the first event is 0, not absent.
    for (const c of [this.promptTokens, this.generationTokens, this.rollbacks, this.aborted]) c.inc(l, 0);
    for (const reason of FINISHED_REASONS) this.success.inc({ ...l, finished_reason: reason }, 0);
    this.programsRunning.set(l, 0);
    for (const program of PROGRAM_KINDS) {
      this.certaindexExits.inc({ ...l, program }, 0);
      this.tokensSaved.inc({ ...l, program }, 0);
    }
  }

  /** A sample's first token, `seconds` after the request arrived. */
  firstToken(seconds: number): void {
    this.ttft.observe(this.labels, seconds);
  }
  /** Seconds between two token steps of one sample. */
  interToken(seconds: number): void {
    this.itl.observe(this.labels, seconds);
    this.tpot.observe(this.labels, seconds);
  }
  finished(r: FinishedRequest): void {
    const l = this.labels;
    let longest = 0;
    for (const s of r.samples) {
      this.success.inc({ ...l, finished_reason: s.finishReason });
      if (s.finishReason === "abort") this.aborted.inc(l);
      this.promptTokens.inc(l, r.promptTokens);
      this.generationTokens.inc(l, s.generationTokens + (s.hiddenTokens ?? 0));
      this.requestPromptTokens.observe(l, r.promptTokens);
      this.requestGenerationTokens.observe(l, s.generationTokens + (s.hiddenTokens ?? 0));
      if (r.maxTokens !== undefined) this.paramsMaxTokens.observe(l, r.maxTokens);
      this.e2e.observe(l, s.e2eSeconds);
      longest = Math.max(longest, s.generationTokens);
      if (r.queueSeconds === undefined) continue;
      this.queue.observe(l, r.queueSeconds);
      if (s.firstTokenSeconds === undefined || s.lastTokenSeconds === undefined) continue;
      const decode = s.lastTokenSeconds - s.firstTokenSeconds;
      this.prefill.observe(l, Math.max(0, s.firstTokenSeconds - r.queueSeconds));
      this.decode.observe(l, decode);
      this.inference.observe(l, Math.max(0, s.lastTokenSeconds - r.queueSeconds));
      this.requestTpot.observe(l, s.generationTokens > 1 ? decode / (s.generationTokens - 1) : 0);
    }
    this.paramsN.observe(l, r.n);
    this.requestMaxGenerationTokens.observe(l, longest);
  }
  rolledBack(rollbacks: number): void {
    if (rollbacks > 0) this.rollbacks.inc(this.labels, rollbacks);
  }
  programStarted(): void {
    this.programsRunning.inc(this.labels);
  }
  programFinished(program: string, early: boolean, tokensSaved: number): void {
    this.programsRunning.dec(this.labels);
    if (early) this.certaindexExits.inc({ ...this.labels, program });
    if (tokensSaved > 0) this.tokensSaved.inc({ ...this.labels, program }, tokensSaved);
  }
}
