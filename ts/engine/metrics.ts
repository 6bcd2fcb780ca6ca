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
  /** Steps by their tokens (prompt tokens computed + tokens sampled) in power-of-two bins (StepTokenCounts.bins). */
  stepTokenBins: number[];
  /** Tokens over all those steps. */
  stepTokensSum: number;
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
export function combineMetrics(
  models: ModelMetrics[],
  meter: ThroughputMeter,
  steps: number,
  nowMs: number,
): EngineMetrics {
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
  // Samples [head, length) are inside the window. Trimming moves head; the array is compacted only once the dropped
  // part is the larger half, so a step costs O(1), not a shift of every sample of the window (5 s of 0.3 ms steps
  // is ~16,000 samples: that shift was ~8 us of host work a step, serial with the forward).
  private readonly samples: Array<{ atMs: number; generated: number; prompt: number }> = [];
  private head = 0;
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
    const s = this.samples;
    if (this.head === s.length) return { tokensPerSecond: 0, promptTokensPerSecond: 0 };
    const spanSeconds = Math.max(nowMs - s[this.head].atMs, 1) / 1000;
    let generated = 0;
    let prompt = 0;
    for (let i = this.head; i < s.length; i++) {
      generated += s[i].generated;
      prompt += s[i].prompt;
    }
    return { tokensPerSecond: generated / spanSeconds, promptTokensPerSecond: prompt / spanSeconds };
  }

  private trim(nowMs: number): void {
    const s = this.samples;
    while (this.head < s.length && s[this.head].atMs < nowMs - this.windowMs) this.head++;
    if (this.head > 64 && this.head * 2 > s.length) {
      s.splice(0, this.head);
      this.head = 0;
    }
  }
}

/**
 * Tokens per step of one model (prompt tokens computed + tokens sampled: the rows of its forward), counted in
 * power-of-two bins: bins[k] counts steps of 2^(k-1) < tokens <= 2^k (bins[0]: one token), so a histogram whose bounds
 * are powers of two (vLLM's iteration_tokens_total) reads off them exactly, with no per-step list kept.
 */
export class StepTokenCounts {
  readonly bins: number[] = [];
  sum = 0;

  record(tokens: number): void {
    if (tokens <= 0) return;
    const k = tokens === 1 ? 0 : 32 - Math.clz32(tokens - 1);
    while (this.bins.length <= k) this.bins.push(0);
    this.bins[k]++;
    this.sum += tokens;
  }
}
