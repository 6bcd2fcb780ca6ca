// Calibration: find per-workload policy parameters that lose no accuracy on a labelled calibration set, and report
// the token savings against running every program to its cap.
import { exactMatch, type AnswerEquivalence } from "./signals.js";
import { decide, type PolicySpec } from "./policies.js";

/** One program's run to its cap, recorded after every round. steps[k] is the state after `used` knob units
 * (default k + 1: one unit per round); the last step is the cap. */
export interface ProgramTrace {
  steps: ReadonlyArray<{ certaindex: number; answer: string | null; tokensUsed: number; lengthSignal?: number; used?: number }>;
}

export interface PolicyOutcome {
  accuracy: number;
  meanTokens: number;
}

/** Replays a trace under a policy: the program stops at the first step the policy denies. */
export function replay(policy: PolicySpec, trace: ProgramTrace): { stepIndex: number; answer: string | null; tokensUsed: number } {
  const n = trace.steps.length;
  if (n === 0) throw new RangeError("replay: a trace needs at least one step");
  const max = trace.steps[n - 1].used ?? n;
  for (let k = 0; k < n; k++) {
    const s = trace.steps[k];
    const d = decide(policy, { certaindex: s.certaindex, used: s.used ?? k + 1, max, tokensUsed: s.tokensUsed, lengthSignal: s.lengthSignal });
    if (!d.grant) return { stepIndex: k, answer: s.answer, tokensUsed: s.tokensUsed };
  }
  const last = trace.steps[n - 1];
  return { stepIndex: n - 1, answer: last.answer, tokensUsed: last.tokensUsed };
}

export function evaluatePolicy(policy: PolicySpec, traces: readonly ProgramTrace[], labels: readonly string[], equivalent: AnswerEquivalence = exactMatch): PolicyOutcome {
  if (traces.length !== labels.length) throw new RangeError(`got ${traces.length} traces but ${labels.length} labels`);
  let correct = 0;
  let tokens = 0;
  traces.forEach((t, i) => {
    const r = replay(policy, t);
    if (r.answer != null && equivalent(r.answer, labels[i])) correct++;
    tokens += r.tokensUsed;
  });
  return { accuracy: correct / traces.length, meanTokens: tokens / traces.length };
}

export interface CalibrationResult {
  policy: PolicySpec;
  outcome: PolicyOutcome;
  baseline: PolicyOutcome;
  /** 1 − tokens under the policy / tokens at the cap. */
  tokenSavings: number;
  /** Questions the cap answered right and the policy wrong. */
  regressions: number;
}

/** Questions the trace's last step (the cap) answers right and `policy` answers wrong. */
export function countRegressions(policy: PolicySpec, traces: readonly ProgramTrace[], labels: readonly string[], equivalent: AnswerEquivalence = exactMatch): number {
  let lost = 0;
  traces.forEach((t, i) => {
    const full = t.steps[t.steps.length - 1]?.answer ?? null;
    if (full === null || !equivalent(full, labels[i])) return;
    const r = replay(policy, t);
    if (r.answer === null || !equivalent(r.answer, labels[i])) lost++;
  });
  return lost;
}

/**
 * Grid search over thresholds (every distinct signal value seen, plus 0 and 1) and detection steps for the threshold
 * policy (or baseline-length with `kind`): the cheapest setting whose accuracy is at least the cap's accuracy
 * minus `maxAccuracyLoss` (default 0: lose nothing). With `maxRegressions` the setting must also lose at most that
 * many questions the cap answered right (0: keep every one; a stricter "lose nothing" that does not let early
 * lucky answers pay for lost ones, so it carries over to unseen questions better).
 */
export function calibrate(
  traces: readonly ProgramTrace[],
  labels: readonly string[],
  opts: { kind?: "threshold" | "baseline-length"; maxAccuracyLoss?: number; maxRegressions?: number; equivalent?: AnswerEquivalence } = {},
): CalibrationResult {
  if (traces.length === 0) throw new RangeError("calibrate needs at least one labelled trace");
  const kind = opts.kind ?? "threshold";
  const eq = opts.equivalent ?? exactMatch;
  const baseline = evaluatePolicy({ kind: "baseline-even" }, traces, labels, eq);
  const floor = baseline.accuracy - (opts.maxAccuracyLoss ?? 0) - 1e-12;
  const detectAts = new Set<number>();
  // 0 = "stop at detectAt whatever the signal" (a smaller fixed cap), 1 = "only when fully certain".
  const values = new Set<number>([0, 1]);
  for (const t of traces) {
    t.steps.forEach((s, k) => detectAts.add(s.used ?? k + 1));
    for (const s of t.steps) values.add(kind === "threshold" ? s.certaindex : (s.lengthSignal ?? 0));
  }
  const maxRegressions = opts.maxRegressions ?? Infinity;
  if (!(maxRegressions >= 0)) throw new RangeError(`calibrate: maxRegressions must be ≥ 0, got ${opts.maxRegressions}`);
  let best: CalibrationResult = { policy: { kind: "baseline-even" }, outcome: baseline, baseline, tokenSavings: 0, regressions: 0 };
  for (const detectAt of [...detectAts].sort((a, b) => a - b)) {
    for (const threshold of [...values].sort((a, b) => a - b)) {
      const policy: PolicySpec = { kind, threshold, detectAt };
      const outcome = evaluatePolicy(policy, traces, labels, eq);
      if (outcome.accuracy < floor || outcome.meanTokens >= best.outcome.meanTokens) continue;
      const regressions = Number.isFinite(maxRegressions) ? countRegressions(policy, traces, labels, eq) : 0;
      if (regressions > maxRegressions) continue;
      best = { policy, outcome, baseline, tokenSavings: baseline.meanTokens > 0 ? 1 - outcome.meanTokens / baseline.meanTokens : 0, regressions };
    }
  }
  if (!Number.isFinite(maxRegressions)) best.regressions = countRegressions(best.policy, traces, labels, eq);
  return best;
}
