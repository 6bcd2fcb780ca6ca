// The statistics the bench scripts report, in one place: --repeats, the median of repeated rounds with its range
// ("median (min–max)", as bench/RESULTS.md gives them), nearest-rank latency percentiles, and the open-loop load of
// the serving benches (serving.ts, duchess.ts): seeded Poisson arrivals and a runner that starts each program at
// its arrival time.

/** --repeats N: an integer >= 1, or a clear error. */
export function parseRepeats(raw: string | undefined): number {
  const n = Number(raw);
  if (!Number.isInteger(n) || n < 1) throw new Error(`--repeats ${raw}: expected an integer >= 1`);
  return n;
}

export function median(xs: readonly number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  return s.length % 2 ? s[(s.length - 1) / 2]! : (s[s.length / 2 - 1]! + s[s.length / 2]!) / 2;
}

export function mean(xs: readonly number[]): number {
  return xs.reduce((a, b) => a + b, 0) / xs.length;
}

/**
 * The q-th percentile (q in [0, 100]) by nearest rank: the smallest value with at least q% of `xs` at or below it,
 * NaN for no values. A latency table reports a latency some request saw; ts/probe/stats.ts's `percentile`
 * interpolates between order statistics (numpy's default), which the probe's threshold wants and a P90 does not.
 */
export function percentileNearestRank(xs: readonly number[], q: number): number {
  if (!(q >= 0 && q <= 100)) throw new RangeError(`percentileNearestRank: q must be in [0, 100], got ${q}`);
  if (xs.length === 0) return NaN;
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.max(0, Math.ceil((q / 100) * s.length) - 1)]!;
}

/** Repeated rounds of one figure: their median and range. */
export interface Spread {
  median: number;
  min: number;
  max: number;
}

export function spreadOf(xs: readonly number[]): Spread {
  return { median: median(xs), min: Math.min(...xs), max: Math.max(...xs) };
}

/** "min–max" of `xs`, each through `format`. */
export function formatRange(xs: readonly number[], format: (x: number) => string = String): string {
  return `${format(Math.min(...xs))}–${format(Math.max(...xs))}`;
}

/** "median (min–max)", each figure through `format`: how the reports give repeated rounds. */
export function formatSpread(xs: readonly number[] | Spread, format: (x: number) => string = String): string {
  const s = "median" in xs ? xs : spreadOf(xs);
  return `${format(s.median)} (${format(s.min)}–${format(s.max)})`;
}

/**
 * Arrival times (ms from the start) of `n` programs arriving as a Poisson process of `ratePerSecond`: exponential
 * gaps drawn from a 32-bit LCG (Numerical Recipes' constants) seeded with `seed`. The LCG, not ts/util/random.ts,
 * so that a seed gives the same trace as the runs bench/RESULTS.md reports.
 */
export function poissonArrivalsMs(n: number, ratePerSecond: number, seed: number): number[] {
  let s = seed >>> 0;
  let t = 0;
  return Array.from({ length: n }, () => {
    s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
    t += -Math.log(1 - s / 2 ** 32) / ratePerSecond;
    return t * 1000;
  });
}

/**
 * Open-loop load: starts `run(items[i], i)` at `arrivalsMs[i]` after the call, whether or not earlier ones have
 * finished (clients do not wait for each other), and resolves with each result, in item order, and its latency:
 * ms from when it started to when it finished.
 */
export async function runOpenLoop<T, R>(
  items: readonly T[],
  arrivalsMs: readonly number[],
  run: (item: T, i: number) => Promise<R>,
): Promise<Array<{ latencyMs: number; result: R }>> {
  const t0 = Date.now();
  return Promise.all(
    items.map(async (item, i) => {
      await new Promise((r) => setTimeout(r, Math.max(0, t0 + arrivalsMs[i] - Date.now())));
      const started = Date.now();
      const result = await run(item, i);
      return { latencyMs: Date.now() - started, result };
    }),
  );
}
