// vllm:iteration_tokens_total, a histogram the engine counts: ModelMetrics.stepTokenBins holds its steps by tokens in
// power-of-two bins, read at scrape time, so a step costs the engine one bin increment and the server nothing.
import { Histogram, type Registry } from "prom-client";
import type { ModelMetrics } from "../engine/index.js";

/** vLLM's bounds, powers of two: each reads exactly off the engine's bins. */
const ITERATION_TOKEN_BUCKETS = [1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384];

/** The histogram of one model's steps by tokens (`read`: the served model's metrics). */
export class StepTokensHistogram extends Histogram<"model_name"> {
  constructor(
    private readonly metricName: string,
    private readonly metricHelp: string,
    private readonly seriesLabels: { model_name: string },
    private readonly read: () => ModelMetrics,
    registers: Registry[],
  ) {
    super({
      name: metricName,
      help: metricHelp,
      labelNames: ["model_name"],
      buckets: ITERATION_TOKEN_BUCKETS,
      registers,
    });
  }

  // The registry reads a metric through getForPromString (text) or get (JSON); both give the engine's counts. The
  // object is what prom-client's own histograms return (its typings declare `type` an enum; the registry prints it).
  async getForPromString(): Promise<Awaited<ReturnType<Histogram["get"]>>> {
    const { stepTokenBins: bins, stepTokensSum: sum } = this.read();
    const bucket = `${this.metricName}_bucket`;
    const values: Array<{ labels: Record<string, string | number>; value: number; metricName: string }> = [];
    let count = 0;
    let bin = 0;
    for (const le of ITERATION_TOKEN_BUCKETS) {
      for (; bin < bins.length && 2 ** bin <= le; bin++) count += bins[bin];
      values.push({ labels: { le, ...this.seriesLabels }, value: count, metricName: bucket });
    }
    for (; bin < bins.length; bin++) count += bins[bin];
    values.push({ labels: { le: "+Inf", ...this.seriesLabels }, value: count, metricName: bucket });
    values.push({ labels: this.seriesLabels, value: sum, metricName: `${this.metricName}_sum` });
    values.push({ labels: this.seriesLabels, value: count, metricName: `${this.metricName}_count` });
    const metric = { name: this.metricName, help: this.metricHelp, type: "histogram", values, aggregator: "sum" };
    return metric as unknown as Awaited<ReturnType<Histogram["get"]>>;
  }

  override get(): Promise<Awaited<ReturnType<Histogram["get"]>>> {
    return this.getForPromString();
  }
}
