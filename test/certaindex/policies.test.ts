import { describe, expect, it } from "vitest";
import { calibrate, countRegressions, evaluatePolicy, replay, type ProgramTrace } from "../../ts/certaindex/calibrate.js";
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
    for (const p of [{ kind: "baseline-even" }, { kind: "threshold", threshold: 1, detectAt: 1 }] as const) expect(decide(p, capped)).toEqual({ grant: false, reason: "cap" });
    expect(decide({ kind: "baseline-even" }, { ...snap, certaindex: 1 }).grant).toBe(true);
  });
  it("curve interpolates certaindex → max knob", () => {
    const points = [[0, 8], [1, 2]] as const;
    expect(curveLimit(points, 0.5)).toBe(5);
    expect(decide({ kind: "curve", points }, { ...snap, certaindex: 1, used: 2 }).grant).toBe(false);
    expect(decide({ kind: "curve", points }, { ...snap, certaindex: 0, used: 7 }).grant).toBe(true);
  });
  it("baseline-length uses the token-count signal", () => {
    expect(decide({ kind: "baseline-length", threshold: 0.5, detectAt: 1 }, { ...snap, lengthSignal: 0.7 }).grant).toBe(false);
    expect(decide({ kind: "baseline-length", threshold: 0.5, detectAt: 1 }, { ...snap, lengthSignal: 0.2 }).grant).toBe(true);
  });
  it("rejects bad parameters with the field named", () => {
    expect(() => validatePolicy({ kind: "threshold", threshold: 2, detectAt: 1 })).toThrow(/threshold must be in \[0, 1\]/);
    expect(() => validatePolicy({ kind: "threshold", threshold: 0.5, detectAt: 0 })).toThrow(/detectAt/);
  });
});

describe("calibration", () => {
  // Easy programs converge on the right answer early; hard ones keep changing their mind and get it right late.
  const easy: ProgramTrace = { steps: [1, 2, 3, 4].map((k) => ({ certaindex: 1, answer: "A", tokensUsed: 100 * k })) };
  const hard: ProgramTrace = { steps: [0.1, 0.3, 0.5, 0.6].map((c, k) => ({ certaindex: c, answer: k === 3 ? "B" : "X", tokensUsed: 100 * (k + 1) })) };
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
    const lucky: ProgramTrace = { steps: [1, 2, 3].map((k) => ({ certaindex: 1, answer: k === 3 ? "Y" : "C", tokensUsed: 10 * k })) };
    const unlucky: ProgramTrace = { steps: [1, 2, 3].map((k) => ({ certaindex: k === 1 ? 1 : 0.2, answer: k === 3 ? "D" : "Z", tokensUsed: 10 * k })) };
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
    const wide: ProgramTrace = { steps: [4, 8, 12, 16].map((used, k) => ({ used, certaindex: k === 0 ? 0.5 : 1, answer: "A", tokensUsed: 10 * used })) };
    expect(replay({ kind: "threshold", threshold: 0.9, detectAt: 8 }, wide).stepIndex).toBe(1);
    expect(replay({ kind: "threshold", threshold: 0.9, detectAt: 9 }, wide).stepIndex).toBe(2);
    expect(replay({ kind: "baseline-even" }, wide).tokensUsed).toBe(160);
    const r = calibrate([wide, wide], ["A", "A"]);
    expect(r.policy).toMatchObject({ kind: "threshold", detectAt: 4 });
    expect(replay(r.policy, wide).stepIndex).toBe(0);
    expect(r.tokenSavings).toBeCloseTo(0.75, 12);
  });
});
