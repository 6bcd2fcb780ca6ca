import { describe, expect, it } from "vitest";
import {
  calibrate,
  countRegressions,
  evaluatePolicy,
  replay,
  staircaseCurve,
  type ProgramTrace,
} from "../../ts/certaindex/calibrate.js";
import { curveLimit, decide, validatePolicy } from "../../ts/certaindex/policies.js";

describe("policies", () => {
  const snap = { certaindex: 0.9, used: 2, max: 8, tokensUsed: 100 };
  it("threshold stops certain programs only from the detection step on", () => {
    expect(decide({ kind: "threshold", threshold: 0.8, detectAt: 2 }, snap).grant).toBe(false);
    expect(decide({ kind: "threshold", threshold: 0.8, detectAt: 3 }, snap).grant).toBe(true);
    expect(decide({ kind: "threshold", threshold: 0.95, detectAt: 2 }, snap).grant).toBe(true);
  });
  it("every policy respects the cap; baseline-even runs to it", () => {
    const capped = { ...snap, used: 8 };
    for (const p of [{ kind: "baseline-even" }, { kind: "threshold", threshold: 1, detectAt: 1 }] as const)
      expect(decide(p, capped)).toEqual({ grant: false, reason: "cap" });
    expect(decide({ kind: "baseline-even" }, { ...snap, certaindex: 1 }).grant).toBe(true);
  });
  it("curve interpolates certaindex → max knob", () => {
    const points = [
      [0, 8],
      [1, 2],
    ] as const;
    expect(curveLimit(points, 0.5)).toBe(5);
    expect(decide({ kind: "curve", points }, { ...snap, certaindex: 1, used: 2 }).grant).toBe(false);
    expect(decide({ kind: "curve", points }, { ...snap, certaindex: 0, used: 7 }).grant).toBe(true);
  });
  it("baseline-length uses the token-count signal", () => {
    expect(decide({ kind: "baseline-length", threshold: 0.5, detectAt: 1 }, { ...snap, lengthSignal: 0.7 }).grant).toBe(
      false,
    );
    expect(decide({ kind: "baseline-length", threshold: 0.5, detectAt: 1 }, { ...snap, lengthSignal: 0.2 }).grant).toBe(
      true,
    );
  });
  it("rejects bad parameters with the field named", () => {
    expect(() => validatePolicy({ kind: "threshold", threshold: 2, detectAt: 1 })).toThrow(
      /threshold must be in \[0, 1\]/,
    );
    expect(() => validatePolicy({ kind: "threshold", threshold: 0.5, detectAt: 0 })).toThrow(/detectAt/);
  });
});

describe("calibration", () => {
  // Easy programs converge on the right answer early; hard ones keep changing their mind and get it right late.
  const easy: ProgramTrace = { steps: [1, 2, 3, 4].map((k) => ({ certaindex: 1, answer: "A", tokensUsed: 100 * k })) };
  const hard: ProgramTrace = {
    steps: [0.1, 0.3, 0.5, 0.6].map((c, k) => ({
      certaindex: c,
      answer: k === 3 ? "B" : "X",
      tokensUsed: 100 * (k + 1),
    })),
  };
  const traces = [easy, easy, hard];
  const labels = ["A", "A", "B"];

  it("finds thresholds that lose no accuracy and reports the savings", () => {
    const r = calibrate(traces, labels);
    expect(r.baseline.accuracy).toBe(1);
    expect(r.outcome.accuracy).toBe(1);
    expect(r.tokenSavings).toBeCloseTo(1 - (100 + 100 + 400) / 1200, 9);
    expect(evaluatePolicy(r.policy, traces, labels).meanTokens).toBeCloseTo(200);
  });
  it("never trades accuracy unless allowed", () => {
    const r = calibrate([hard], ["B"]);
    expect(r.outcome.accuracy).toBe(1);
    expect(r.tokenSavings).toBe(0);
    expect(() => calibrate([hard], [])).toThrow(/1 traces but 0 labels/);
  });
  it("with maxRegressions, an early lucky answer cannot pay for a question the cap answered right", () => {
    // lucky: certain and right at step 1, the cap drifts to a wrong answer; unlucky: certain and wrong at step 1,
    // the cap gets it right. Stopping at step 1 keeps accuracy (1 of 2) but loses the unlucky question.
    const lucky: ProgramTrace = {
      steps: [1, 2, 3].map((k) => ({ certaindex: 1, answer: k === 3 ? "Y" : "C", tokensUsed: 10 * k })),
    };
    const unlucky: ProgramTrace = {
      steps: [1, 2, 3].map((k) => ({ certaindex: k === 1 ? 1 : 0.2, answer: k === 3 ? "D" : "Z", tokensUsed: 10 * k })),
    };
    const loose = calibrate([lucky, unlucky], ["C", "D"]);
    expect(loose.outcome.accuracy).toBe(0.5);
    expect(loose.regressions).toBe(1);
    expect(replay(loose.policy, unlucky).stepIndex).toBe(0);
    const strict = calibrate([lucky, unlucky], ["C", "D"], { maxRegressions: 0 });
    expect(strict.regressions).toBe(0);
    expect(replay(strict.policy, unlucky).answer).toBe("D");
    expect(countRegressions(strict.policy, [lucky, unlucky], ["C", "D"])).toBe(0);
    expect(() => calibrate([lucky], ["C"], { maxRegressions: -1 })).toThrow(/maxRegressions must be ≥ 0/);
  });
  it("replays rounds that spend several knob units (steps with `used`)", () => {
    const wide: ProgramTrace = {
      steps: [4, 8, 12, 16].map((used, k) => ({
        used,
        certaindex: k === 0 ? 0.5 : 1,
        answer: "A",
        tokensUsed: 10 * used,
      })),
    };
    expect(replay({ kind: "threshold", threshold: 0.9, detectAt: 8 }, wide).stepIndex).toBe(1);
    expect(replay({ kind: "threshold", threshold: 0.9, detectAt: 9 }, wide).stepIndex).toBe(2);
    expect(replay({ kind: "baseline-even" }, wide).tokensUsed).toBe(160);
    const r = calibrate([wide, wide], ["A", "A"]);
    expect(r.policy).toMatchObject({ kind: "threshold", detectAt: 4 });
    expect(replay(r.policy, wide).stepIndex).toBe(0);
    expect(r.tokenSavings).toBeCloseTo(0.75, 12);
  });

  it("a staircase (a bar per detection step) stops where one threshold cannot, and replays as a curve", () => {
    // a: certain (0.9) and right from step 1. b: 0.9 at step 1 but wrong then, right and 0.6 from step 2.
    // One threshold must be > 0.9 at step 1 (b) or exclude step 1; per step, 0.9 is unsafe at 1 but 0.6 is safe at 2.
    const a: ProgramTrace = { steps: [1, 2, 3, 4].map((k) => ({ certaindex: 0.95, answer: "A", tokensUsed: 10 * k })) };
    const b: ProgramTrace = {
      steps: [1, 2, 3, 4].map((k) => ({
        certaindex: k === 1 ? 0.9 : 0.6,
        answer: k === 1 ? "X" : "B",
        tokensUsed: 10 * k,
      })),
    };
    const c: ProgramTrace = {
      steps: [1, 2, 3, 4].map((k) => ({ certaindex: 0.3, answer: k === 4 ? "C" : "Y", tokensUsed: 10 * k })),
    };
    const traces = [a, b, c];
    const labels = ["A", "B", "C"];
    const single = calibrate(traces, labels, { maxRegressions: 0 });
    const stairs = calibrate(traces, labels, { kind: "curve", maxRegressions: 0 });
    expect(single.outcome.accuracy).toBe(1);
    expect(stairs.outcome.accuracy).toBe(1);
    expect(stairs.regressions).toBe(0);
    expect(stairs.policy.kind).toBe("curve");
    // a stops at 1 (0.95), b at 2 (0.6), c runs to the cap: 10 + 20 + 40.
    expect(stairs.outcome.meanTokens).toBeCloseTo(70 / 3, 9);
    expect(stairs.outcome.meanTokens).toBeLessThan(single.outcome.meanTokens);
    expect(replay(stairs.policy, a).stepIndex).toBe(0);
    expect(replay(stairs.policy, b).stepIndex).toBe(1);
    expect(replay(stairs.policy, c).stepIndex).toBe(3);
  });

  it("staircaseCurve: thresholds apply from their step on, the running minimum wins, Infinity never stops", () => {
    const p = staircaseCurve(
      [
        { used: 1, threshold: 0.9 },
        { used: 2, threshold: Infinity },
        { used: 3, threshold: 0.5 },
      ],
      4,
    );
    const stopAt = (certaindex: number): number => {
      for (let used = 1; used < 4; used++)
        if (
          replay(p, {
            steps: [
              { used, certaindex, answer: "a", tokensUsed: used },
              { used: 4, certaindex, answer: "a", tokensUsed: 4 },
            ],
          }).stepIndex === 0
        )
          return used;
      return 4;
    };
    expect(stopAt(0.95)).toBe(1);
    expect(stopAt(0.9)).toBe(1);
    expect(stopAt(0.89)).toBe(3);
    expect(stopAt(0.5)).toBe(3);
    expect(stopAt(0.49)).toBe(4);
    expect(staircaseCurve([{ used: 1, threshold: Infinity }], 4)).toEqual({ kind: "curve", points: [[1, 4]] });
  });
});
