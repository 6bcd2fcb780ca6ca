// engine.metrics(): queue sizes, KV usage per model, prefix-cache hit rate, throughput, preemptions.

export interface ModelMetrics {
  name: string;
  running: number;
  waiting: number;
  kvPagesUsed: number;
  kvPagesFree: number;
  kvPagesTotal: number;
  /** Free pages still holding a prefix-cache entry. */
  kvPagesCached: number;
  /** Prompt tokens found in the prefix cache / prompt tokens looked up, since start (0 when none looked up). */
  prefixCacheHitRate: number;
  prefixQueriedTokens: number;
  prefixHitTokens: number;
  preemptions: number;
  /** Swap preemption (engine option preemption: "swap"): sequences whose KV went to host memory / came back. */
  kvSwapOuts: number;
  kvSwapIns: number;
  /** Deterministic sequences the model's verifier tracks (0: no verifier exists, steps take the plain path). */
  verifyingSequences: number;
}

export interface EngineMetrics {
  running: number;
  waiting: number;
  models: ModelMetrics[];
  /** Over all models. */
  prefixCacheHitRate: number;
  /** Generated tokens per second over the last few seconds. */
  tokensPerSecond: number;
  /** Prompt (prefill) tokens computed per second over the last few seconds. */
  promptTokensPerSecond: number;
  generatedTokens: number;
  promptTokensComputed: number;
  preemptions: number;
  steps: number;
}

/** Engine-wide metrics from the per-model ones and the throughput meter. */
export function combineMetrics(models: ModelMetrics[], meter: ThroughputMeter, steps: number, nowMs: number): EngineMetrics {
  const sum = (f: (m: ModelMetrics) => number): number => models.reduce((n, m) => n + f(m), 0);
  const queried = sum((m) => m.prefixQueriedTokens);
  return {
    running: sum((m) => m.running),
    waiting: sum((m) => m.waiting),
    models,
    prefixCacheHitRate: queried === 0 ? 0 : sum((m) => m.prefixHitTokens) / queried,
    ...meter.rates(nowMs),
    generatedTokens: meter.generatedTotal,
    promptTokensComputed: meter.promptTotal,
    preemptions: sum((m) => m.preemptions),
    steps,
  };
}

/** Sliding-window token rates: per-step counts bucketed by time. */
export class ThroughputMeter {
  private readonly samples: Array<{ atMs: number; generated: number; prompt: number }> = [];
  generatedTotal = 0;
  promptTotal = 0;

  constructor(private readonly windowMs = 5000) {}

  record(atMs: number, generated: number, prompt: number): void {
    this.generatedTotal += generated;
    this.promptTotal += prompt;
    this.samples.push({ atMs, generated, prompt });
    this.trim(atMs);
  }

  rates(nowMs: number): { tokensPerSecond: number; promptTokensPerSecond: number } {
    this.trim(nowMs);
    if (this.samples.length === 0) return { tokensPerSecond: 0, promptTokensPerSecond: 0 };
    const spanSeconds = Math.max(nowMs - this.samples[0].atMs, 1) / 1000;
    let generated = 0;
    let prompt = 0;
    for (const s of this.samples) {
      generated += s.generated;
      prompt += s.prompt;
    }
    return { tokensPerSecond: generated / spanSeconds, promptTokensPerSecond: prompt / spanSeconds };
  }

  private trim(nowMs: number): void {
    let drop = 0;
    while (drop < this.samples.length && this.samples[drop].atMs < nowMs - this.windowMs) drop++;
    if (drop > 0) this.samples.splice(0, drop);
  }
}
