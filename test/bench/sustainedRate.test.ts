import { describe, expect, it } from "vitest";
import { sustainedRate } from "../../scripts/bench/sustainedRate.js";

describe("sustainedRate", () => {
  it("interpolates the 90% crossing between the last good and the first bad rate", () => {
    const r = sustainedRate([
      { rate: 2, attainment: 1 },
      { rate: 1, attainment: 1 },
      { rate: 3, attainment: 0.95 },
      { rate: 4, attainment: 0.7 },
    ]);
    expect(r.swept).toBe(3);
    expect(r.interpolated).toBeCloseTo(3.2, 12);
    expect(r.bounded).toBe(true);
  });

  it("stops at the first miss: a noisy recovery at a higher rate does not count", () => {
    const r = sustainedRate([
      { rate: 1, attainment: 0.92 },
      { rate: 2, attainment: 0.88 },
      { rate: 3, attainment: 0.95 },
    ]);
    expect(r.swept).toBe(1);
    expect(r.interpolated).toBeCloseTo(1.5, 12);
  });

  it("is 0 when the lowest rate already misses, and a lower bound when none does", () => {
    expect(
      sustainedRate([
        { rate: 1, attainment: 0.5 },
        { rate: 2, attainment: 0.4 },
      ]),
    ).toEqual({ swept: 0, interpolated: 0, bounded: true });
    expect(
      sustainedRate([
        { rate: 1, attainment: 1 },
        { rate: 2, attainment: 0.9 },
      ]),
    ).toEqual({ swept: 2, interpolated: 2, bounded: false });
    expect(sustainedRate([])).toEqual({ swept: 0, interpolated: 0, bounded: false });
  });
});
