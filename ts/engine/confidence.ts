// DeepConf's confidence over one trace (Fu et al., "Deep Think with Confidence"): token confidence C_i = -mean of the
// top-k logprobs at token i (the native sampler computes it: NativeForwardSequence.confidenceTopK); group confidence
// = the mean of C over a sliding window of `window` tokens; the trace's lowest group, the mean of its lowest 10% of
// groups, its tail (the last `tail` tokens) and overall mean. A trace shorter than the window has one group: all of
// it. The early-stop rule (the vLLM patch's) fires at the first full window whose mean is below the threshold.
import type { ConfidenceReport } from "./outputs.js";
import type { ResolvedConfidence } from "./request.js";

export class ConfidenceTracker {
  // Token confidences in a plain array (doubles, on the heap); the group means are not stored: report() derives them from
  // the values in one pass. add() runs once per generated token of every DeepConf sequence, on the engine's host
  // path (bench:host --confidence measures it), so it does the least it can: a sliding sum and one comparison.
  private readonly values: number[] = [];
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
    const w = this.window;
    const n = ++this.n;
    this.values.push(confidence);
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
    const groups = this.groupMeans();
    const lowest = Math.max(1, Math.ceil(groups.length * 0.1));
    const bottom = smallest(groups, lowest);
    const tail = Math.min(this.c.tail, n);
    return {
      mean: this.total / n,
      lowestGroup: bottom[0],
      bottom10Group: sum(bottom, 0, lowest) / lowest,
      tail: sum(this.values, n - tail, n) / tail,
      tokens: n,
    };
  }

  /** Every full window's mean, as add() computed them (the same sliding sum, re-summed every window tokens); the
   *  whole trace's mean while it is shorter than a window. */
  private groupMeans(): Float64Array {
    const n = this.n,
      w = this.window,
      v = this.values;
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

/**
 * The k smallest of xs, ascending (xs is reordered): a quickselect moves them to the front, then only they are
 * sorted -- the same numbers, summed in the same order, as sorting all of xs (a trace has a group per token, and a
 * full sort per finished trace showed in bench:host). NaN sorts last, as a typed array's sort() puts it.
 */
export function smallest(xs: Float64Array, k: number): Float64Array {
  if (xs.some(Number.isNaN) || xs.length <= 64) return xs.sort().subarray(0, k);
  let lo = 0,
    hi = xs.length - 1;
  while (lo < hi) {
    // Hoare partition around the median of three; afterwards [lo, j] <= pivot <= [j + 1, hi].
    const mid = (lo + hi) >>> 1;
    const pivot = median3(xs[lo], xs[mid], xs[hi]);
    let i = lo - 1,
      j = hi + 1;
    for (;;) {
      do i++;
      while (xs[i] < pivot);
      do j--;
      while (xs[j] > pivot);
      if (i >= j) break;
      const t = xs[i];
      xs[i] = xs[j];
      xs[j] = t;
    }
    if (k - 1 <= j) hi = j;
    else lo = j + 1;
  }
  return xs.subarray(0, k).sort();
}

function median3(a: number, b: number, c: number): number {
  return a < b ? (b < c ? b : a < c ? c : a) : a < c ? a : b < c ? c : b;
}

function sum(xs: ArrayLike<number>, from: number, to: number): number {
  let s = 0;
  for (let i = from; i < to; i++) s += xs[i];
  return s;
}
