// Shortest job first over estimated remaining work, with aging so nothing starves.
// Estimate (Dynasor): remaining knob x mean tokens per round when the program reports them, else the tokens the
// request may still generate. Aging subtracts agingTokensPerSecond x seconds waited, so a request with estimate E
// waits at most (E - E_min) / agingTokensPerSecond seconds behind newer, shorter work: finish times stay fair.
import { byArrival } from "./fcfs.js";
import type { SchedContext, SchedRequest } from "./types.js";

export function estimatedRemainingTokens(r: SchedRequest): number {
  if (r.remainingKnob !== undefined && r.meanTokensPerRound !== undefined)
    return r.remainingKnob * r.meanTokensPerRound;
  return r.remainingTokens;
}

/** Sort key: lower runs first. */
export function agedEstimate(r: SchedRequest, ctx: SchedContext): number {
  const waitedSeconds = Math.max(0, ctx.nowMs - (r.programArrivalMs ?? r.arrivalMs)) / 1000;
  return estimatedRemainingTokens(r) - ctx.agingTokensPerSecond * waitedSeconds;
}

export function sjf(queue: readonly SchedRequest[], ctx: SchedContext): SchedRequest[] {
  const keys = new Map(queue.map((r) => [r.id, agedEstimate(r, ctx)]));
  return queue.slice().sort((a, b) => keys.get(a.id)! - keys.get(b.id)! || byArrival(a, b));
}
