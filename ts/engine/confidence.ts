// DeepConf's confidence over one trace (Fu et al., "Deep Think with Confidence"): token confidence C_i = -mean of the
// top-k logprobs at token i (the native sampler computes it: NativeForwardSequence.confidenceTopK); group confidence
// = the mean of C over a sliding window of `window` tokens; the trace's lowest group, the mean of its lowest 10% of
// groups, its tail (the last `tail` tokens) and overall mean. A trace shorter than the window has one group: all of
// it. The early-stop rule (the vLLM patch's) fires at the first full window whose mean is below the threshold.
import type { ConfidenceReport } from "./outputs.js";
import type { ResolvedConfidence } from "./request.js";

export class ConfidenceTracker {
  // Token confidences in a typed array grown by doubling; the group means are not stored: report() derives them from
  // the values in one pass. add() runs once per generated token of every DeepConf sequence, on the engine's host
  // path (bench:host --confidence measures it), so it does the least it can: a sliding sum and one comparison.
  private values = new Float64Array(256);
  private n = 0;
  private windowSum = 0;
  private phase = 0;
  private total = 0;
  private readonly window: number;
  private readonly threshold: number | null;

  constructor(private readonly c: ResolvedConfidence) {
    this.window = c.window;
    this.threshold = c.threshold;
  }

  /** Adds token i's confidence; true when the stop rule fires on the window it completes. */
  add(confidence: number): boolean {
    if (this.n === this.values.length) this.values = grow(this.values);
    const w = this.window;
    const n = ++this.n;
    this.values[n - 1] = confidence;
    this.total += confidence;
    this.windowSum += confidence;
    if (n > w) this.windowSum -= this.values[n - 1 - w];
    // Re-sum at every multiple of window tokens: a running sum over thousands of tokens would drift from the plain
    // mean. (A counter, not n % w: an integer division per token shows in bench:host.)
    const resum = ++this.phase === w;
    if (resum) this.phase = 0;
    if (n < w) return false;
    if (resum) this.windowSum = sum(this.values, n - w, n);
    return this.threshold !== null && this.windowSum / w < this.threshold;
  }

  /** The latest full window's mean (the whole trace while it is shorter), or null before any token. */
  get current(): number | null {
    const n = this.n;
    if (n === 0) return null;
    return n < this.window ? this.total / n : this.windowSum / this.window;
  }

  report(): ConfidenceReport | undefined {
    const n = this.n;
    if (n === 0) return undefined;
    const sorted = this.groupMeans().sort(); // a typed array sorts numerically
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

  /** Every full window's mean, as add() computed them (the same sliding sum, re-summed every window tokens); the
   *  whole trace's mean while it is shorter than a window. */
  private groupMeans(): Float64Array {
    const n = this.n, w = this.window, v = this.values;
    if (n < w) return Float64Array.of(this.total / n);
    const groups = new Float64Array(n - w + 1);
    let windowSum = 0;
    for (let i = 1; i <= n; i++) {
      windowSum += v[i - 1];
      if (i > w) windowSum -= v[i - 1 - w];
      if (i < w) continue;
      if (i % w === 0) windowSum = sum(v, i - w, i);
      groups[i - w] = windowSum / w;
    }
    return groups;
  }
}

function grow(xs: Float64Array<ArrayBuffer>): Float64Array<ArrayBuffer> {
  const bigger = new Float64Array(xs.length * 2);
  bigger.set(xs);
  return bigger;
}

function sum(xs: ArrayLike<number>, from: number, to: number): number {
  let s = 0;
  for (let i = from; i < to; i++) s += xs[i];
  return s;
}
