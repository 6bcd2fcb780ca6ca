import { describe, expect, it } from "vitest";
import {
  clusterAnswers,
  combineCertaindex,
  confidenceCertaindex,
  entropyCertaindex,
  measureOf,
  meetsAll,
  rewardCertaindex,
} from "../../ts/certaindex/signals.js";
import { agreeingProbes, hasHesitation, probeCertaindex, shouldExitOnProbes } from "../../ts/certaindex/probe.js";
import { decide } from "../../ts/certaindex/policies.js";

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
    expect(clusterAnswers(["b", "a", "a"])).toEqual([
      { answer: "a", count: 2 },
      { answer: "b", count: 1 },
    ]);
  });
  it("gives 0 below two samples; rewards aggregate by mean or max", () => {
    expect(entropyCertaindex(["1"])).toBe(0);
    expect(rewardCertaindex([0.2, 0.8], "mean")).toBeCloseTo(0.5);
    expect(rewardCertaindex([0.2, 0.8], "max")).toBe(0.8);
    expect(() => rewardCertaindex([1.5], "max")).toThrow(/outside \[0, 1\]/);
  });
});

describe("combining certaindex signals, each against its own threshold (Dynasor §3.1)", () => {
  it("is 1 exactly when every signal meets its own threshold, whatever the signals' sizes", () => {
    // Reward 0.5 meets R_τ 0.4 and entropy 0.7 misses H̃_τ 0.99: not certain, although min(values) = 0.5 would pass
    // a single threshold of 0.4 and 0.7 > 0.5.
    const mcts = [
      { value: 0.5, threshold: 0.4 },
      { value: 0.7, threshold: 0.99 },
    ];
    expect(combineCertaindex(mcts)).toBeCloseTo(0.7 / 0.99, 12);
    expect(meetsAll(mcts)).toBe(false);
    // Entropy 0.995 ≥ 0.99 and reward 0.45 ≥ 0.4: certain, although both values differ from their thresholds.
    const met = [
      { value: 0.45, threshold: 0.4 },
      { value: 0.995, threshold: 0.99 },
    ];
    expect(combineCertaindex(met)).toBe(1);
    expect(meetsAll(met)).toBe(true);
    // A low value against a low threshold can be met while a higher value against a higher one is not.
    expect(
      combineCertaindex([
        { value: 0.3, threshold: 0.3 },
        { value: 0.8, threshold: 0.85 },
      ]),
    ).toBeCloseTo(0.8 / 0.85, 12);
  });

  it("is the least progress towards a threshold; a threshold of 0 is always met; a value at its threshold meets it", () => {
    expect(
      combineCertaindex([
        { value: 0.2, threshold: 0.8 },
        { value: 0.9, threshold: 0.9 },
      ]),
    ).toBeCloseTo(0.25, 12);
    expect(combineCertaindex([{ value: 0, threshold: 0 }])).toBe(1);
    expect(
      combineCertaindex([
        { value: 0.6, threshold: 0.6 },
        { value: 0.3, threshold: 0.3 },
      ]),
    ).toBe(1);
    expect(
      combineCertaindex([
        { value: 0, threshold: 0.5 },
        { value: 1, threshold: 0 },
      ]),
    ).toBe(0);
    // Just below the threshold never rounds up to "met".
    const below = 0.3 - 2 ** -54;
    expect(below).toBeLessThan(0.3);
    expect(combineCertaindex([{ value: below, threshold: 0.3 }])).toBeLessThan(1);
    expect(meetsAll([{ value: below, threshold: 0.3 }])).toBe(false);
  });

  it("rejects no signals and values or thresholds outside [0, 1]", () => {
    expect(() => combineCertaindex([])).toThrow(/at least one signal/);
    expect(() => combineCertaindex([{ value: 1.2, threshold: 0.5 }])).toThrow(/signal 1.2 is outside/);
    expect(() => combineCertaindex([{ value: 0.5, threshold: -0.1 }])).toThrow(/threshold -0.1 is outside/);
    expect(() => combineCertaindex([{ value: Number.NaN, threshold: 0.5 }])).toThrow(/outside/);
  });

  it("a threshold policy at 1 stops exactly when every signal is met", () => {
    const at = (signals: { value: number; threshold: number }[]) =>
      decide(
        { kind: "threshold", threshold: 1, detectAt: 1 },
        { certaindex: combineCertaindex(signals), used: 1, max: 4, tokensUsed: 0 },
      ).grant;
    expect(
      at([
        { value: 0.99, threshold: 0.99 },
        { value: 0.9, threshold: 0.85 },
      ]),
    ).toBe(false);
    expect(
      at([
        { value: 0.99, threshold: 0.99 },
        { value: 0.84, threshold: 0.85 },
      ]),
    ).toBe(true);
    expect(
      at([
        { value: 0.98, threshold: 0.99 },
        { value: 1, threshold: 0.85 },
      ]),
    ).toBe(true);
  });
});

describe("CoT probe early exit", () => {
  const words = ["wait", "hmm", "but", "maybe"];
  it("does not exit merely because enough probes exist (Dynasor issue #25)", () => {
    expect(shouldExitOnProbes(["12", "15", "19"])).toBe(false);
    expect(shouldExitOnProbes(["", "", ""])).toBe(false);
    expect(shouldExitOnProbes(["12", "12"])).toBe(false);
  });
  it("by default (agree = window = 3) exits when the last 3 answers are equal, non-empty and free of hesitation", () => {
    expect(shouldExitOnProbes(["3", "12", "12", "12"])).toBe(true);
    expect(shouldExitOnProbes(["12", "12", "wait 12"])).toBe(false);
    expect(shouldExitOnProbes(["12", "12", "12", "7"])).toBe(false);
    expect(probeCertaindex(["3", "12", "12"])).toBeCloseTo(2 / 3);
    expect(probeCertaindex(["12", "12", "12"])).toBe(1);
  });
  it("counts the probes in the window that are equal to the latest (C_k = agreeing / window), not a run", () => {
    const rule = { window: 4, agree: 3, hesitationWords: words };
    // 12 at positions 1, 3, 4 of the last four: 3 agree with the latest although they are not consecutive.
    expect(agreeingProbes(["12", "7", "12", "12"], rule)).toBe(3);
    expect(shouldExitOnProbes(["12", "7", "12", "12"], rule)).toBe(true);
    expect(probeCertaindex(["12", "7", "12", "12"], rule)).toBe(1);
    // Only the last `window` probes count: the first 12 has slid out.
    expect(agreeingProbes(["12", "7", "8", "12", "12"], rule)).toBe(2);
    expect(shouldExitOnProbes(["12", "7", "8", "12", "12"], rule)).toBe(false);
    expect(probeCertaindex(["12", "7", "8", "12", "12"], rule)).toBeCloseTo(2 / 3, 12);
    // Agreement is with the latest answer: three 12s followed by a 7 is 1 agreeing, not 3.
    expect(agreeingProbes(["12", "12", "12", "7"], rule)).toBe(1);
    expect(shouldExitOnProbes(["12", "12", "12", "7"], rule)).toBe(false);
    // agree 2 of window 2 is the plain two-in-a-row rule; agree 1 exits on any confident answer.
    expect(shouldExitOnProbes(["12", "12"], { window: 2, hesitationWords: words })).toBe(true);
    expect(shouldExitOnProbes(["5"], { window: 3, agree: 1, hesitationWords: words })).toBe(true);
  });
  it("leaves hesitating, empty and failed probes out of the count, and never exits on one", () => {
    const rule = { window: 4, agree: 3, hesitationWords: words };
    // A hesitating 12 in the window does not agree: 2 of 4.
    expect(agreeingProbes(["7", "hmm 12", "12", "12"], rule)).toBe(2);
    expect(shouldExitOnProbes(["7", "hmm 12", "12", "12"], rule)).toBe(false);
    // One of the four may hesitate when three agree.
    expect(shouldExitOnProbes(["12", "maybe 12", "12", "12"], rule)).toBe(true);
    // The latest hesitates (or is empty / failed): nothing agrees with it, certaindex 0.
    for (const latest of ["wait, 12", "", null]) {
      expect(agreeingProbes(["12", "12", "12", latest], rule)).toBe(0);
      expect(shouldExitOnProbes(["12", "12", "12", latest], rule)).toBe(false);
      expect(probeCertaindex(["12", "12", "12", latest], rule)).toBe(0);
    }
    // The words are the rule's: "but" hesitates under these words and not under an empty list.
    expect(shouldExitOnProbes(["12 but", "12", "12"])).toBe(false);
    expect(shouldExitOnProbes(["12 but", "12 but", "12 but"], { window: 3, hesitationWords: [] })).toBe(true);
  });
  it("reaches certaindex 1 exactly when the rule fires", () => {
    const rule = { window: 5, agree: 3, hesitationWords: words };
    const pool = ["1", "2", "wait 1", "", null];
    // Every sequence of up to 6 probes over the pool.
    const seqs: Array<Array<string | null>> = [[]];
    for (let len = 1; len <= 6; len++)
      for (const s of seqs.filter((x) => x.length === len - 1)) for (const p of pool) seqs.push([...s, p]);
    let fired = 0;
    for (const s of seqs) {
      const exit = shouldExitOnProbes(s, rule);
      fired += exit ? 1 : 0;
      expect(probeCertaindex(s, rule) === 1, JSON.stringify(s)).toBe(exit);
      expect(probeCertaindex(s, rule)).toBeGreaterThanOrEqual(0);
    }
    expect(fired).toBeGreaterThan(0);
  });
  it("rejects agree outside [1, window]", () => {
    expect(() => shouldExitOnProbes(["1"], { window: 3, agree: 4, hesitationWords: words })).toThrow(
      /agree must be an integer in \[1, window = 3\], got 4/,
    );
    expect(() => probeCertaindex(["1"], { window: 3, agree: 0, hesitationWords: words })).toThrow(/agree/);
    expect(() => probeCertaindex(["1"], { window: 0, hesitationWords: words })).toThrow(/window must be/);
  });
  it("matches hesitation words as whole words only", () => {
    expect(hasHesitation("but maybe 7")).toBe(true);
    expect(hasHesitation("button 7")).toBe(false);
    expect(hasHesitation("Hmm, 7")).toBe(true);
    expect(hasHesitation("awaits")).toBe(false);
  });
});

describe("confidence certaindex (DeepConf's weighted consensus as a signal)", () => {
  it("is the top answer's share of the confidence-weighted vote; unanswered and unweighted votes carry nothing", () => {
    const numeric = (a: string, b: string): boolean => Number(a) === Number(b);
    // "7" and "07" are one answer: 0.2 + 0.5 of the 1.0 that answered votes weigh.
    expect(
      confidenceCertaindex(
        [
          { answer: "7", weight: 0.2 },
          { answer: "07", weight: 0.5 },
          { answer: "8", weight: 0.3 },
          { answer: null, weight: 9 },
        ],
        numeric,
      ),
    ).toBeCloseTo(0.7, 12);
    expect(confidenceCertaindex([{ answer: "7", weight: 0 }])).toBe(0);
    expect(confidenceCertaindex([])).toBe(0);
    const report = { mean: 5, lowestGroup: 2, bottom10Group: 3, tail: 4, tokens: 10 };
    expect([measureOf(report, "lowest"), measureOf(report, "bottom10"), measureOf(report, "tail")]).toEqual([2, 3, 4]);
  });
});
