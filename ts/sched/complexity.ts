// Complexity-aware SJF (DUCHESS §3.3): programs whose prompt predicts less work run first. The prediction is the
// program's expected total tokens from a difficulty classifier on the prompt's last-token activation
// (metadata.predictedTokens); a request without one (a program that predicts nothing, or DUCHESS's own one-token
// classification request, which says 0) is ordered by SJF's estimate (sjf.ts). Aging as in SJF: each second a
// program waits forgives agingTokensPerSecond tokens of its prediction, so a long one is served at the latest
// (P - P_min) / agingTokensPerSecond seconds after shorter newcomers.
import { byArrival } from "./fcfs.js";
import { estimatedRemainingTokens } from "./sjf.js";
import type { SchedContext, SchedRequest } from "./types.js";

/** Sort key: lower runs first. */
export function agedComplexity(r: SchedRequest, ctx: SchedContext): number {
  const waitedSeconds = Math.max(0, ctx.nowMs - (r.programArrivalMs ?? r.arrivalMs)) / 1000;
  return (r.predictedTokens ?? estimatedRemainingTokens(r)) - ctx.agingTokensPerSecond * waitedSeconds;
}

export function complexity(queue: readonly SchedRequest[], ctx: SchedContext): SchedRequest[] {
  const keys = new Map(queue.map((r) => [r.id, agedComplexity(r, ctx)]));
  return queue.slice().sort((a, b) => keys.get(a.id)! - keys.get(b.id)! || byArrival(a, b));
}
