import { describe, expect, it } from "vitest";
import { clusterAnswers, combineCertaindex, entropyCertaindex, rewardCertaindex } from "../../ts/certaindex/signals.js";
import { hasHesitation, probeCertaindex, shouldExitOnProbes } from "../../ts/certaindex/probe.js";

describe("entropy certaindex", () => {
  it("is 1 when all answers agree and 0 when all differ", () => {
    expect(entropyCertaindex(["42", "42", "42", "42"])).toBeCloseTo(1, 12);
    expect(entropyCertaindex(["1", "2", "3", "4"])).toBeCloseTo(0, 12);
  });
  it("matches (log n − H)/log n for a mixed vote", () => {
    const n = 4;
    const h = -(0.75 * Math.log(0.75) + 0.25 * Math.log(0.25));
    expect(entropyCertaindex(["7", "7", "7", "8"])).toBeCloseTo((Math.log(n) - h) / Math.log(n), 12);
  });
  it("counts missing answers as uncertainty and uses a pluggable equivalence", () => {
    expect(entropyCertaindex(["5", "5", null, ""])).toBeLessThan(entropyCertaindex(["5", "5", "5", "5"]));
    const numeric = (a: string, b: string) => Number(a) === Number(b);
    expect(entropyCertaindex(["3", "3.0", "03"], numeric)).toBeCloseTo(1, 12);
    expect(clusterAnswers(["b", "a", "a"])).toEqual([{ answer: "a", count: 2 }, { answer: "b", count: 1 }]);
  });
  it("gives 0 below two samples; rewards aggregate by mean or max; combination takes the minimum", () => {
    expect(entropyCertaindex(["1"])).toBe(0);
    expect(rewardCertaindex([0.2, 0.8], "mean")).toBeCloseTo(0.5);
    expect(rewardCertaindex([0.2, 0.8], "max")).toBe(0.8);
    expect(() => rewardCertaindex([1.5], "max")).toThrow(/outside \[0, 1\]/);
    expect(combineCertaindex([0.9, 0.4])).toBe(0.4);
  });
});

describe("CoT probe early exit", () => {
  it("does not exit merely because enough probes exist (Dynasor issue #25)", () => {
    expect(shouldExitOnProbes(["12", "15", "19"])).toBe(false);
    expect(shouldExitOnProbes(["", "", ""])).toBe(false);
    expect(shouldExitOnProbes(["12", "12"])).toBe(false);
  });
  it("exits when the last window answers are equal, non-empty and free of hesitation", () => {
    expect(shouldExitOnProbes(["3", "12", "12", "12"])).toBe(true);
    expect(shouldExitOnProbes(["12", "12", "wait 12"])).toBe(false);
    expect(probeCertaindex(["3", "12", "12"])).toBeCloseTo(2 / 3);
    expect(probeCertaindex(["12", "12", "12"])).toBe(1);
  });
  it("matches hesitation words as whole words only", () => {
    expect(hasHesitation("but maybe 7")).toBe(true);
    expect(hasHesitation("button 7")).toBe(false);
    expect(hasHesitation("Hmm, 7")).toBe(true);
    expect(hasHesitation("awaits")).toBe(false);
  });
});
