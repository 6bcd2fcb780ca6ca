// DeepConf's confidence over one trace (Fu et al., "Deep Think with Confidence"): token confidence C_i = -mean of the
// top-k logprobs at token i (the native sampler computes it: NativeForwardSequence.confidenceTopK); group confidence
// = the mean of C over a sliding window of `window` tokens; the trace's lowest group, the mean of its lowest 10% of
// groups, its tail (the last `tail` tokens) and overall mean. A trace shorter than the window has one group: all of
// it. The early-stop rule (the vLLM patch's) fires at the first full window whose mean is below the threshold.
import type { ConfidenceReport } from "./outputs.js";
import type { ResolvedConfidence } from "./request.js";

export class ConfidenceTracker {
  private readonly values: number[] = [];
  private readonly groups: number[] = [];
  private windowSum = 0;
  private total = 0;

  constructor(private readonly c: ResolvedConfidence) {}

  /** Adds token i's confidence; true when the stop rule fires on the window it completes. */
  add(confidence: number): boolean {
    this.values.push(confidence);
    this.total += confidence;
    this.windowSum += confidence;
    const n = this.values.length;
    if (n > this.c.window) this.windowSum -= this.values[n - 1 - this.c.window];
    if (n < this.c.window) return false;
    // Re-sum every window tokens: a running sum over thousands of tokens would drift from the plain mean.
    if (n % this.c.window === 0) this.windowSum = sum(this.values, n - this.c.window, n);
    const group = this.windowSum / this.c.window;
    this.groups.push(group);
    return this.c.threshold !== null && group < this.c.threshold;
  }

  /** The latest full window's mean (the whole trace while it is shorter), or null before any token. */
  get current(): number | null {
    const n = this.values.length;
    if (n === 0) return null;
    return n < this.c.window ? this.total / n : this.groups[this.groups.length - 1];
  }

  report(): ConfidenceReport | undefined {
    const n = this.values.length;
    if (n === 0) return undefined;
    const groups = this.groups.length > 0 ? this.groups : [this.total / n];
    const sorted = [...groups].sort((a, b) => a - b);
    const lowest = Math.max(1, Math.ceil(sorted.length * 0.1));
    const tail = Math.min(this.c.tail, n);
    return {
      mean: this.total / n,
      lowestGroup: sorted[0],
      bottom10Group: sum(sorted, 0, lowest) / lowest,
      tail: sum(this.values, n - tail, n) / tail,
      tokens: n,
    };
  }
}

function sum(xs: readonly number[], from: number, to: number): number {
  let s = 0;
  for (let i = from; i < to; i++) s += xs[i];
  return s;
}
