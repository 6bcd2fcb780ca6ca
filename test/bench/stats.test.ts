// The bench statistics: the median and range a report gives for repeats, the nearest-rank P90 of a latency table,
// and the open-loop load (seeded Poisson arrivals, programs started at their arrival times).
import { describe, expect, it } from "vitest";
import { percentile } from "../../ts/probe/stats.js";
import {
  formatRange,
  formatSpread,
  median,
  parseRepeats,
  percentileNearestRank,
  poissonArrivalsMs,
  runOpenLoop,
} from "../../scripts/bench/stats.js";

describe("repeats", () => {
  it("takes the median of an even count as the mean of the middle two", () => {
    expect(median([3, 1, 2])).toBe(2);
    expect(median([4, 1, 3, 2])).toBe(2.5);
  });

  it("reports median (min–max), as bench/RESULTS.md does", () => {
    expect(formatSpread([12.25, 9.5, 14], (x) => x.toFixed(1))).toBe("12.3 (9.5–14.0)");
    expect(formatSpread({ median: 2, min: 1, max: 3 })).toBe("2 (1–3)");
    expect(formatRange([0.5, 0.25, 0.75], (x) => `${x * 100}%`)).toBe("25%–75%");
  });

  it("rejects a --repeats that is not a positive integer, naming the flag", () => {
    expect(parseRepeats("3")).toBe(3);
    expect(() => parseRepeats("0")).toThrow(/--repeats 0: expected an integer >= 1/);
    expect(() => parseRepeats("1.5")).toThrow(/--repeats 1.5/);
  });
});

describe("percentileNearestRank", () => {
  it("is a value some request saw: the smallest with at least q% at or below it", () => {
    const xs = [50, 10, 40, 20, 30, 60, 70, 80, 90, 100];
    expect(percentileNearestRank(xs, 90)).toBe(90);
    expect(percentileNearestRank(xs, 91)).toBe(100);
    expect(percentileNearestRank(xs, 50)).toBe(50);
    expect(percentileNearestRank(xs, 0)).toBe(10);
    expect(percentileNearestRank(xs, 100)).toBe(100);
    expect(percentileNearestRank([], 90)).toBeNaN();
    expect(() => percentileNearestRank(xs, 101)).toThrow(/q must be in \[0, 100\]/);
    // Where the probe's interpolating percentile gives a value between two requests' latencies.
    expect(percentile(xs, 90)).toBeCloseTo(91);
  });
});

describe("open-loop load", () => {
  it("draws the same increasing arrivals for a seed, at the asked mean rate", () => {
    const a = poissonArrivalsMs(2000, 4, 7);
    expect(poissonArrivalsMs(2000, 4, 7)).toEqual(a);
    expect(poissonArrivalsMs(2000, 4, 8)).not.toEqual(a);
    expect(a.every((t, i) => i === 0 || t > a[i - 1])).toBe(true);
    expect(a[a.length - 1] / a.length).toBeGreaterThan(225); // 250 ms a gap on average
    expect(a[a.length - 1] / a.length).toBeLessThan(275);
  });

  it("keeps the trace a seed gave the reported serving runs", () => {
    expect(poissonArrivalsMs(3, 2, 1).map((t) => Math.round(t * 1000) / 1000)).toEqual([134.892, 365.331, 716.165]);
  });

  it("starts each program at its arrival whether or not earlier ones finished, latency from its start", async () => {
    const events: string[] = [];
    const t0 = Date.now();
    const out = await runOpenLoop(["slow", "fast"], [0, 20], async (item) => {
      events.push(`start ${item}`);
      await new Promise((r) => setTimeout(r, item === "slow" ? 80 : 0));
      events.push(`end ${item}`);
      return item.toUpperCase();
    });
    expect(events).toEqual(["start slow", "start fast", "end fast", "end slow"]);
    expect(out.map((r) => r.result)).toEqual(["SLOW", "FAST"]);
    expect(out[0].latencyMs).toBeGreaterThanOrEqual(70);
    expect(out[1].latencyMs).toBeLessThan(60);
    expect(Date.now() - t0).toBeLessThan(200);
  });
});
