// The inter-program scheduling policies the engine consults each step, chosen by name.
import { complexity } from "./complexity.js";
import { byArrival, byProgramArrival, fcfs } from "./fcfs.js";
import { gang } from "./gang.js";
import { lpm } from "./lpm.js";
import { sjf } from "./sjf.js";
import type { SchedContext, SchedRequest } from "./types.js";

export type SchedulingPolicy = "fcfs" | "lpm" | "gang" | "sjf" | "gang+sjf" | "complexity" | "gang+complexity";
export const SCHEDULING_POLICIES: readonly SchedulingPolicy[] = [
  "fcfs",
  "lpm",
  "gang",
  "sjf",
  "gang+sjf",
  "complexity",
  "gang+complexity",
];

/** Default SJF aging rate (tokens of estimate forgiven per second waited). */
export const DEFAULT_AGING_TOKENS_PER_SECOND = 64;

/** Whether the policy reads SchedRequest.prefixMatchTokens (costly to fill: a prefix-cache lookup per request). */
export function readsPrefixMatch(policy: SchedulingPolicy): boolean {
  return policy === "lpm";
}

/** Queue order under `policy`; priority (higher first) always dominates, the policy orders within a priority. */
export function orderRequests(
  policy: SchedulingPolicy,
  queue: readonly SchedRequest[],
  ctx: SchedContext,
): SchedRequest[] {
  const ordered = orderWithinPriority(policy, queue, ctx);
  return ordered.sort(byPriority); // stable: keeps the policy's order within a priority
}

const byPriority = (a: Pick<SchedRequest, "priority">, b: Pick<SchedRequest, "priority">): number =>
  b.priority - a.priority;

/**
 * Whether `queue` is already in `policy`'s order, so orderRequests would return it as it is: known only for fcfs
 * (a queue of running sequences usually is: they join it in arrival order), false otherwise. Lets the scheduler skip
 * building a record per sequence every step (bench:host).
 */
export function inPolicyOrder(
  policy: SchedulingPolicy,
  queue: ReadonlyArray<Pick<SchedRequest, "priority" | "arrivalMs" | "id">>,
): boolean {
  if (policy !== "fcfs") return false;
  for (let i = 1; i < queue.length; i++)
    if ((byPriority(queue[i - 1], queue[i]) || byArrival(queue[i - 1], queue[i])) > 0) return false;
  return true;
}

function orderWithinPriority(
  policy: SchedulingPolicy,
  queue: readonly SchedRequest[],
  ctx: SchedContext,
): SchedRequest[] {
  switch (policy) {
    case "fcfs":
      return fcfs(queue);
    case "lpm":
      return lpm(queue);
    case "gang":
      return gang(queue.slice().sort(byProgramArrival));
    case "sjf":
      return sjf(queue, ctx);
    case "gang+sjf":
      return gang(sjf(queue, ctx));
    case "complexity":
      return complexity(queue, ctx);
    case "gang+complexity":
      return gang(complexity(queue, ctx));
    default:
      return policy satisfies never;
  }
}

export function parseSchedulingPolicy(value: string): SchedulingPolicy {
  const policy = SCHEDULING_POLICIES.find((p) => p === value);
  if (policy === undefined) {
    throw new Error(`schedulingPolicy: unknown policy "${value}"; expected one of ${SCHEDULING_POLICIES.join(", ")}`);
  }
  return policy;
}
