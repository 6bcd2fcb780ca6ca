// Calibration: find per-workload policy parameters that lose no accuracy on a labelled calibration set, and report
// the token savings against running every program to its cap.
import { exactMatch, type AnswerEquivalence } from "./signals.js";
import { decide, type PolicySpec } from "./policies.js";

/** One program's run to its cap, recorded after every round. steps[k] is the state after `used` knob units
 * (default k + 1: one unit per round); the last step is the cap. */
export interface ProgramTrace {
  steps: ReadonlyArray<{
    certaindex: number;
    answer: string | null;
    tokensUsed: number;
    lengthSignal?: number;
    used?: number;
  }>;
}

export interface PolicyOutcome {
  accuracy: number;
  meanTokens: number;
}

/** Replays a trace under a policy: the program stops at the first step the policy denies. */
export function replay(
  policy: PolicySpec,
  trace: ProgramTrace,
): { stepIndex: number; answer: string | null; tokensUsed: number } {
  const n = trace.steps.length;
  if (n === 0) throw new RangeError("replay: a trace needs at least one step");
  const max = trace.steps[n - 1].used ?? n;
  for (let k = 0; k < n; k++) {
    const s = trace.steps[k];
    const d = decide(policy, {
      certaindex: s.certaindex,
      used: s.used ?? k + 1,
      max,
      tokensUsed: s.tokensUsed,
      lengthSignal: s.lengthSignal,
    });
    if (!d.grant) return { stepIndex: k, answer: s.answer, tokensUsed: s.tokensUsed };
  }
  const last = trace.steps[n - 1];
  return { stepIndex: n - 1, answer: last.answer, tokensUsed: last.tokensUsed };
}

export function evaluatePolicy(
  policy: PolicySpec,
  traces: readonly ProgramTrace[],
  labels: readonly string[],
  equivalent: AnswerEquivalence = exactMatch,
): PolicyOutcome {
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
export function countRegressions(
  policy: PolicySpec,
  traces: readonly ProgramTrace[],
  labels: readonly string[],
  equivalent: AnswerEquivalence = exactMatch,
): number {
  let lost = 0;
  traces.forEach((t, i) => {
    const full = t.steps[t.steps.length - 1]?.answer ?? null;
    if (full === null || !equivalent(full, labels[i])) return;
    const r = replay(policy, t);
    if (r.answer === null || !equivalent(r.answer, labels[i])) lost++;
  });
  return lost;
}

export interface CalibrateOptions {
  /** threshold (default): one threshold from one detection step. baseline-length: the same over the length signal.
   * curve: a threshold per detection step (a staircase, see calibrateStaircase), stored as a curve policy. */
  kind?: "threshold" | "baseline-length" | "curve";
  maxAccuracyLoss?: number;
  maxRegressions?: number;
  equivalent?: AnswerEquivalence;
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
  opts: CalibrateOptions = {},
): CalibrationResult {
  if (traces.length === 0) throw new RangeError("calibrate needs at least one labelled trace");
  if (opts.kind === "curve") return calibrateStaircase(traces, labels, opts);
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
  let best: CalibrationResult = {
    policy: { kind: "baseline-even" },
    outcome: baseline,
    baseline,
    tokenSavings: 0,
    regressions: 0,
  };
  for (const detectAt of [...detectAts].sort((a, b) => a - b)) {
    for (const threshold of [...values].sort((a, b) => a - b)) {
      const policy: PolicySpec = { kind, threshold, detectAt };
      const outcome = evaluatePolicy(policy, traces, labels, eq);
      if (outcome.accuracy < floor || outcome.meanTokens >= best.outcome.meanTokens) continue;
      const regressions = Number.isFinite(maxRegressions) ? countRegressions(policy, traces, labels, eq) : 0;
      if (regressions > maxRegressions) continue;
      best = {
        policy,
        outcome,
        baseline,
        tokenSavings: baseline.meanTokens > 0 ? 1 - outcome.meanTokens / baseline.meanTokens : 0,
        regressions,
      };
    }
  }
  if (!Number.isFinite(maxRegressions)) best.regressions = countRegressions(best.policy, traces, labels, eq);
  return best;
}

/**
 * The curve policy of a staircase: stop at knob step `used` once certaindex ≥ the threshold of the last step at or
 * before it (thresholds non-increasing over steps; Infinity = never). Returned as (certaindex, maximum knob)
 * points: certaindex in [T_i, T_i+1) allows knob u_i, the step where threshold T_i first applies; below the lowest
 * threshold, the cap.
 */
export function staircaseCurve(steps: ReadonlyArray<{ used: number; threshold: number }>, max: number): PolicySpec {
  const firstUse = new Map<number, number>();
  let running = Infinity;
  for (const s of [...steps].sort((a, b) => a.used - b.used)) {
    running = Math.min(running, s.threshold);
    if (Number.isFinite(running) && !firstUse.has(running)) firstUse.set(running, s.used);
  }
  const stairs = [...firstUse].sort((a, b) => a[0] - b[0]);
  if (stairs.length === 0) return { kind: "curve", points: [[1, max]] };
  const eps = 1e-9;
  const points: Array<readonly [number, number]> = [[stairs[0][0] - eps, max]];
  stairs.forEach(([t, used], i) => {
    if (i > 0) points.push([t - eps, stairs[i - 1][1]]);
    points.push([t, used]);
  });
  return { kind: "curve", points };
}

/**
 * Calibration of a threshold per detection step (Dynasor's detection steps, each with its own bar): starts from the
 * best single threshold and lowers or raises one step's threshold at a time (coordinate descent over every signal
 * value seen, a few passes), keeping the setting only when it is cheaper and still meets the accuracy floor and
 * `maxRegressions`. The result is a curve policy (staircaseCurve) and never costs more than the single threshold.
 */
export function calibrateStaircase(
  traces: readonly ProgramTrace[],
  labels: readonly string[],
  opts: CalibrateOptions = {},
): CalibrationResult {
  const eq = opts.equivalent ?? exactMatch;
  const single = calibrate(traces, labels, { ...opts, kind: "threshold" });
  const max = Math.max(...traces.map((t) => t.steps[t.steps.length - 1].used ?? t.steps.length));
  const usedSet = new Set<number>();
  const values = new Set<number>([0, 1]);
  for (const t of traces) {
    t.steps.forEach((s, k) => {
      if ((s.used ?? k + 1) < max) usedSet.add(s.used ?? k + 1);
      values.add(s.certaindex);
    });
  }
  const used = [...usedSet].sort((a, b) => a - b);
  const candidates = [...values, Infinity].sort((a, b) => a - b);
  const sp = single.policy;
  const th = used.map((u) => (sp.kind === "threshold" && u >= sp.detectAt ? sp.threshold : Infinity));
  const floor = single.baseline.accuracy - (opts.maxAccuracyLoss ?? 0) - 1e-12;
  const maxRegressions = opts.maxRegressions ?? Infinity;
  const capRight = traces.map((t, i) => {
    const a = t.steps[t.steps.length - 1].answer;
    return a != null && eq(a, labels[i]);
  });
  // Per-trace replay of a staircase without building policies: the first step whose running threshold is met.
  const outcomeOf = (ths: number[]): { accuracy: number; meanTokens: number; regressions: number } => {
    const bar = new Map<number, number>();
    let running = Infinity;
    used.forEach((u, i) => bar.set(u, (running = Math.min(running, ths[i]))));
    let correct = 0;
    let tokens = 0;
    let regressions = 0;
    traces.forEach((t, i) => {
      let stop = t.steps[t.steps.length - 1];
      for (let k = 0; k < t.steps.length; k++) {
        const s = t.steps[k];
        if (s.certaindex >= (bar.get(s.used ?? k + 1) ?? Infinity)) {
          stop = s;
          break;
        }
      }
      const right = stop.answer != null && eq(stop.answer, labels[i]);
      if (right) correct++;
      else if (capRight[i]) regressions++;
      tokens += stop.tokensUsed;
    });
    return { accuracy: correct / traces.length, meanTokens: tokens / traces.length, regressions };
  };
  let best = outcomeOf(th);
  for (let pass = 0; pass < 3; pass++) {
    let improved = false;
    for (let i = 0; i < used.length; i++) {
      const keep = th[i];
      let accepted = false;
      // Lowest first: the lowest bar that still qualifies stops the most programs at this step.
      for (const v of candidates) {
        if (v === keep) continue;
        th[i] = v;
        const o = outcomeOf(th);
        if (o.accuracy >= floor && o.regressions <= maxRegressions && o.meanTokens < best.meanTokens - 1e-9) {
          best = o;
          accepted = improved = true;
          break;
        }
      }
      if (!accepted) th[i] = keep;
    }
    if (!improved) break;
  }
  const policy = staircaseCurve(
    used.map((u, i) => ({ used: u, threshold: th[i] })),
    max,
  );
  const outcome = evaluatePolicy(policy, traces, labels, eq);
  const regressions = countRegressions(policy, traces, labels, eq);
  // The curve must replay exactly as the staircase did; if a rounding edge made it differ, keep the single threshold.
  if (
    Math.abs(outcome.meanTokens - best.meanTokens) > 1e-6 ||
    outcome.accuracy < floor ||
    regressions > maxRegressions ||
    outcome.meanTokens >= single.outcome.meanTokens
  ) {
    return single;
  }
  return {
    policy,
    outcome,
    baseline: single.baseline,
    tokenSavings: single.baseline.meanTokens > 0 ? 1 - outcome.meanTokens / single.baseline.meanTokens : 0,
    regressions,
  };
}
