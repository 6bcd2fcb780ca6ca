// Intra-program policies: given how sure a program is and how much compute (knob) it has used, grant or deny the
// next round. Pure functions over a snapshot; chosen by a string union checked with `satisfies never`.
import { InvalidOptionError } from "../errors/index.js";

/** What a policy sees of a program after a round. `used`/`max` count knob units (branches, probe intervals...). */
export interface ProgramSnapshot {
  certaindex: number;
  used: number;
  max: number;
  tokensUsed: number;
  /** Length signal in [0, 1] for baseline-length: 1 − mean tokens per unit / token cap per unit (short = easy). */
  lengthSignal?: number;
}

export type PolicySpec =
  /** Stop once certaindex ≥ threshold at or after knob step `detectAt`; otherwise run to the cap. */
  | { kind: "threshold"; threshold: number; detectAt: number }
  /** The certaindex → maximum-knob curve: points (certaindex, maxKnob) interpolated linearly, sorted by certaindex. */
  | { kind: "curve"; points: ReadonlyArray<readonly [number, number]> }
  /** Every program gets the same knob: run to the cap. */
  | { kind: "baseline-even" }
  /** Token-count signal instead of certaindex: stop at `detectAt` when lengthSignal ≥ threshold. */
  | { kind: "baseline-length"; threshold: number; detectAt: number };

export type PolicyKind = PolicySpec["kind"];

export interface Decision {
  grant: boolean;
  reason: "cap" | "certain" | "curve" | "continue";
}

export function curveLimit(points: ReadonlyArray<readonly [number, number]>, certaindex: number): number {
  if (points.length === 0) throw new RangeError("curve policy needs at least one (certaindex, maxKnob) point");
  if (certaindex <= points[0][0]) return points[0][1];
  for (let i = 1; i < points.length; i++) {
    const [x0, y0] = points[i - 1];
    const [x1, y1] = points[i];
    if (certaindex <= x1) return x1 === x0 ? y1 : y0 + ((certaindex - x0) / (x1 - x0)) * (y1 - y0);
  }
  return points[points.length - 1][1];
}

/** Whether the program may run another round. */
export function decide(policy: PolicySpec, s: ProgramSnapshot): Decision {
  if (s.used >= s.max) return { grant: false, reason: "cap" };
  switch (policy.kind) {
    case "baseline-even":
      return { grant: true, reason: "continue" };
    case "threshold":
      if (s.used >= policy.detectAt && s.certaindex >= policy.threshold) return { grant: false, reason: "certain" };
      return { grant: true, reason: "continue" };
    case "baseline-length":
      if (s.used >= policy.detectAt && (s.lengthSignal ?? 0) >= policy.threshold)
        return { grant: false, reason: "certain" };
      return { grant: true, reason: "continue" };
    case "curve":
      return s.used < curveLimit(policy.points, s.certaindex)
        ? { grant: true, reason: "continue" }
        : { grant: false, reason: "curve" };
    default:
      return policy satisfies never;
  }
}

export function validatePolicy(p: PolicySpec): PolicySpec {
  const bad = (m: string): never => {
    throw new InvalidOptionError(`policy ${p.kind}: ${m}`, { field: "policy" });
  };
  if (p.kind === "threshold" || p.kind === "baseline-length") {
    if (!(p.threshold >= 0 && p.threshold <= 1)) bad(`threshold must be in [0, 1], got ${p.threshold}`);
    if (!(Number.isInteger(p.detectAt) && p.detectAt >= 1)) bad(`detectAt must be an integer ≥ 1, got ${p.detectAt}`);
  }
  if (p.kind === "curve") {
    if (p.points.length === 0) bad("needs at least one point");
    for (let i = 1; i < p.points.length; i++)
      if (p.points[i][0] < p.points[i - 1][0]) bad("points must be sorted by certaindex");
  }
  return p;
}
