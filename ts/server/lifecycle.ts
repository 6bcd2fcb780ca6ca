// A request's life around its generations: aborted when the client leaves, timed for the latency histograms, and
// counted in the metrics once every sample has settled.
import type { FastifyReply } from "fastify";
import type { Generation } from "./generation.js";
import type { FinishedSample, ServerMetrics } from "./metrics.js";
import type { ServerState } from "./state.js";
import { finishReasonOf } from "./wire.js";

/** Aborts the generation when the client goes away before its response is complete. */
export function abortOnDisconnect(reply: FastifyReply, abort: () => void): void {
  // A client that left while its prompt was tokenized (off the event loop) sends no close event any more.
  if (reply.raw.destroyed) {
    abort();
    return;
  }
  reply.raw.on("close", () => {
    if (!reply.raw.writableFinished) abort();
  });
}

/**
 * Per-request latency bookkeeping: its arrival, and each sample's (choice index's) first and last token and token
 * count, as the client sees them. TTFT is per sample and inter-token latency between a sample's own token steps, as
 * vLLM counts the n child requests it runs for n samples.
 */
export class Timing {
  readonly arrival = performance.now();
  private readonly firstMs: number[] = [];
  private readonly lastMs: number[] = [];
  private readonly tokens: number[] = [];

  /** `tokens` tokens of sample `index` reached the client. */
  token(metrics: ServerMetrics, index: number, tokens: number): void {
    const now = performance.now();
    const last = this.lastMs[index];
    if (last === undefined) {
      this.firstMs[index] = now;
      metrics.firstToken((now - this.arrival) / 1000);
    } else metrics.interToken((now - last) / 1000);
    this.lastMs[index] = now;
    this.tokens[index] = (this.tokens[index] ?? 0) + tokens;
  }
  get e2eSeconds(): number {
    return (performance.now() - this.arrival) / 1000;
  }

  /**
   * Samples `from`.. of a finished request, one per finish reason, in seconds since arrival. A sample ends at its last
   * token, or at `endSeconds` (the request's end) when it was aborted or had none.
   */
  samples(from: number, finishReasons: readonly string[], endSeconds: number): FinishedSample[] {
    const seconds = (ms: number | undefined): number | undefined =>
      ms === undefined ? undefined : (ms - this.arrival) / 1000;
    return finishReasons.map((finishReason, i) => {
      const last = seconds(this.lastMs[from + i]);
      return {
        finishReason,
        generationTokens: this.tokens[from + i] ?? 0,
        e2eSeconds: finishReason === "abort" || last === undefined ? endSeconds : last,
        firstTokenSeconds: seconds(this.firstMs[from + i]),
        lastTokenSeconds: last,
      };
    });
  }
}

/** Counts each generation (one per prompt, maxTokens[g] its resolved max_tokens) as a finished request of n samples. */
export async function recordFinished(
  state: ServerState,
  gens: Generation[],
  timing: Timing,
  maxTokens: readonly number[],
): Promise<void> {
  const endSeconds = timing.e2eSeconds;
  await Promise.all(gens.map((g) => g.settled()));
  state.metrics!.rolledBack(gens.reduce((n, g) => n + g.rollbacks, 0));
  gens.forEach((g, i) => {
    const hidden = g.hiddenTokens();
    state.metrics!.finished({
      n: g.n,
      maxTokens: maxTokens[i],
      promptTokens: g.promptLength,
      queueSeconds: g.queueMs / 1000,
      // Choice indexes run g * n + sample (completions' prompts, each with n samples).
      samples: timing
        .samples(
          i * g.n,
          g
            .finishReasons()
            .map((r) =>
              r === undefined && g.hasFailed ? "error" : (finishReasonOf(r ?? "aborted").finish_reason ?? "abort"),
            ),
          endSeconds,
        )
        // Probes and dropped tokens are generated tokens too (usage's completion_tokens counts them).
        .map((s, j) => ({ ...s, hiddenTokens: hidden[j] })),
    });
  });
}
