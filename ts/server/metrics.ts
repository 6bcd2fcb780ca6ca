// GET /metrics: Prometheus text with vLLM's metric names (so its Grafana dashboards work) and ours. Gauges read the
// engine at scrape time; counters and histograms are fed by the routes as requests finish. One registry per server,
// so two servers in one process (tests, a router) never share counts.
import { Counter, Gauge, Histogram, Registry } from "prom-client";
import type { Engine, ModelMetrics } from "../engine/index.js";

const LATENCY_BUCKETS = [
  0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10, 20, 40, 80,
];
const ITL_BUCKETS = [
  0.001, 0.0025, 0.005, 0.01, 0.015, 0.02, 0.025, 0.03, 0.04, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1, 2.5,
];

/** What one finished request adds to the counters. */
export interface FinishedRequest {
  model: string;
  promptTokens: number;
  generationTokens: number;
  finishReasons: string[];
  e2eSeconds: number;
  queueSeconds: number;
}

export class ServerMetrics {
  readonly registry = new Registry();
  private readonly promptTokens: Counter;
  private readonly generationTokens: Counter;
  private readonly success: Counter;
  private readonly ttft: Histogram;
  private readonly itl: Histogram;
  private readonly e2e: Histogram;
  private readonly queue: Histogram;
  private readonly programsRunning: Gauge;
  private readonly certaindexExits: Counter;
  private readonly tokensSaved: Counter;
  private readonly rollbacks: Counter;
  private readonly aborted: Counter;

  /** modelName: the label (the served name); engineModel: which of the engine's models is served (default: its first). */
  constructor(
    engine: Engine,
    private readonly modelName: string,
    engineModel?: string,
  ) {
    const registers = [this.registry];
    // The served model's own figures (an engine may also hold, say, a reward model: not this server's).
    const served = (): ModelMetrics => {
      const models = engine.metrics().models;
      return models.find((mm) => mm.name === engineModel) ?? models[0];
    };
    const labelNames = ["model_name"] as const;
    const m = (model: string): { model_name: string } => ({ model_name: model });
    const perModel = (name: string, help: string, read: (mm: ModelMetrics) => number): void => {
      new Gauge({
        name,
        help,
        labelNames,
        registers,
        collect() {
          this.reset();
          this.set(m(modelName), read(served()));
        },
      });
    };
    perModel("vllm:num_requests_running", "Sequences in the running batch.", (mm) => mm.running);
    perModel("vllm:num_requests_waiting", "Sequences waiting to be scheduled.", (mm) => mm.waiting);
    perModel("vllm:kv_cache_usage_perc", "KV-cache usage: 1 means 100 percent.", (mm) =>
      mm.kvPagesTotal === 0 ? 0 : mm.kvPagesUsed / mm.kvPagesTotal,
    );
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
          if (v > last) this.inc(m(modelName), v - last);
          last = Math.max(last, v);
        },
      });
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
    this.promptTokens = new Counter({
      name: "vllm:prompt_tokens_total",
      help: "Prompt tokens of finished requests.",
      labelNames,
      registers,
    });
    this.generationTokens = new Counter({
      name: "vllm:generation_tokens_total",
      help: "Generated tokens of finished requests.",
      labelNames,
      registers,
    });
    this.success = new Counter({
      name: "vllm:request_success_total",
      help: "Finished requests, by finish reason.",
      labelNames: ["model_name", "finished_reason"],
      registers,
    });
    this.ttft = new Histogram({
      name: "vllm:time_to_first_token_seconds",
      help: "Time to first token.",
      labelNames,
      buckets: LATENCY_BUCKETS,
      registers,
    });
    this.itl = new Histogram({
      name: "vllm:inter_token_latency_seconds",
      help: "Time between streamed token steps.",
      labelNames,
      buckets: ITL_BUCKETS,
      registers,
    });
    this.e2e = new Histogram({
      name: "vllm:e2e_request_latency_seconds",
      help: "Request latency from arrival to last token.",
      labelNames,
      buckets: LATENCY_BUCKETS,
      registers,
    });
    this.queue = new Histogram({
      name: "vllm:request_queue_time_seconds",
      help: "Time a request waited for the scheduler.",
      labelNames,
      buckets: LATENCY_BUCKETS,
      registers,
    });
    this.programsRunning = new Gauge({
      name: "deliberate:programs_running",
      help: "Reasoning programs running.",
      labelNames,
      registers,
    });
    this.certaindexExits = new Counter({
      name: "deliberate:certaindex_exits_total",
      help: "Programs stopped early by their certaindex policy.",
      labelNames: ["model_name", "program"],
      registers,
    });
    this.tokensSaved = new Counter({
      name: "deliberate:tokens_saved_total",
      help: "Token budget programs did not spend (budget - used).",
      labelNames: ["model_name", "program"],
      registers,
    });
    this.rollbacks = new Counter({
      name: "deliberate:deterministic_rollbacks_total",
      help: "Verify passes of deterministic requests that rolled back.",
      labelNames,
      registers,
    });
    this.aborted = new Counter({
      name: "deliberate:requests_aborted_total",
      help: "Requests aborted by a client disconnect, a control call or a drain.",
      labelNames,
      registers,
    });
  }

  // Per-token observations go through children bound to the model's label once (no label hashing per token).
  private ttftChild: ReturnType<Histogram["labels"]> | null = null;
  private itlChild: ReturnType<Histogram["labels"]> | null = null;
  firstToken(seconds: number): void {
    (this.ttftChild ??= this.ttft.labels({ model_name: this.modelName })).observe(seconds);
  }
  interToken(seconds: number): void {
    (this.itlChild ??= this.itl.labels({ model_name: this.modelName })).observe(seconds);
  }
  finished(r: FinishedRequest): void {
    const l = { model_name: r.model };
    this.promptTokens.inc(l, r.promptTokens);
    this.generationTokens.inc(l, r.generationTokens);
    for (const reason of r.finishReasons) {
      if (reason === "abort") this.aborted.inc(l);
      else this.success.inc({ ...l, finished_reason: reason });
    }
    this.e2e.observe(l, r.e2eSeconds);
    this.queue.observe(l, r.queueSeconds);
  }
  rolledBack(rollbacks: number): void {
    if (rollbacks > 0) this.rollbacks.inc({ model_name: this.modelName }, rollbacks);
  }
  programStarted(): void {
    this.programsRunning.inc({ model_name: this.modelName });
  }
  programFinished(program: string, early: boolean, tokensSaved: number): void {
    this.programsRunning.dec({ model_name: this.modelName });
    if (early) this.certaindexExits.inc({ model_name: this.modelName, program });
    if (tokensSaved > 0) this.tokensSaved.inc({ model_name: this.modelName, program }, tokensSaved);
  }
}
