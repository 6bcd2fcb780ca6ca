// The engine's sliding-window token rates (ThroughputMeter): the same figures as a plain computation over the samples
// inside the window, however many samples have been dropped from its front (it compacts its array only now and then).
import { fc, test } from "@fast-check/vitest";
import { describe, expect, it } from "vitest";
import { ThroughputMeter } from "../../ts/engine/metrics.js";

/** The rule written plainly: samples with atMs >= now - window, span from the oldest of them to now (at least 1 ms). */
function plainRates(samples: Array<[number, number, number]>, nowMs: number, windowMs: number) {
  const inside = samples.filter(([at]) => at >= nowMs - windowMs);
  if (inside.length === 0) return { tokensPerSecond: 0, promptTokensPerSecond: 0 };
  const span = Math.max(nowMs - inside[0][0], 1) / 1000;
  return {
    tokensPerSecond: inside.reduce((n, [, g]) => n + g, 0) / span,
    promptTokensPerSecond: inside.reduce((n, [, , p]) => n + p, 0) / span,
  };
}

describe("ThroughputMeter", () => {
  it("counts only the last window's steps and keeps the totals of all of them", () => {
    const m = new ThroughputMeter(1000);
    m.record(0, 10, 100);
    m.record(500, 20, 0);
    m.record(1600, 30, 0);
    expect(m.rates(2000)).toEqual({ tokensPerSecond: 30 / 0.4, promptTokensPerSecond: 0 }); // only the step at 1600 is inside
    expect(m.generatedTotal).toBe(60);
    const edge = new ThroughputMeter(1000);
    edge.record(500, 20, 0);
    expect(edge.rates(1500)).toEqual({ tokensPerSecond: 20 / 1, promptTokensPerSecond: 0 }); // a step exactly a window old is inside
    expect(m.promptTotal).toBe(100);
  });

  test.prop([
    fc.array(
      fc.tuple(fc.integer({ min: 0, max: 50 }), fc.integer({ min: 0, max: 64 }), fc.integer({ min: 0, max: 512 })),
      { maxLength: 3000 },
    ),
    fc.integer({ min: 1, max: 400 }),
  ])("equals the plain rule after any run of steps", (steps, windowMs) => {
    const m = new ThroughputMeter(windowMs);
    const samples: Array<[number, number, number]> = [];
    let at = 0;
    for (const [dt, g, p] of steps) {
      at += dt;
      m.record(at, g, p);
      samples.push([at, g, p]);
    }
    const now = at + 3;
    const want = plainRates(samples, now, windowMs);
    const got = m.rates(now);
    expect(got.tokensPerSecond).toBeCloseTo(want.tokensPerSecond, 9);
    expect(got.promptTokensPerSecond).toBeCloseTo(want.promptTokensPerSecond, 9);
  });
});
