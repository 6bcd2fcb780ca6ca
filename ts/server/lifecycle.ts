// A request's life around its generations: aborted when the client leaves, timed for the latency histograms, and
// counted in the metrics once every sample has settled.
import type { FastifyReply } from "fastify";
import type { Generation } from "./generation.js";
import type { ServerMetrics } from "./metrics.js";
import type { ServerState } from "./state.js";
import { finishReasonOf } from "./wire.js";

/** Aborts the generation when the client goes away before its response is complete. */
export function abortOnDisconnect(reply: FastifyReply, abort: () => void): void {
  reply.raw.on("close", () => {
    if (!reply.raw.writableFinished) abort();
  });
}

/** Per-request latency bookkeeping for the TTFT / ITL / e2e histograms. */
export class Timing {
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

export async function recordFinished(state: ServerState, gens: Generation[], timing: Timing): Promise<void> {
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
