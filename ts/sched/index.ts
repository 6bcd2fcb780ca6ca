// Inter-program scheduling policies: pure functions over queued requests' metadata.
export { fcfs, byArrival, byProgramArrival } from "./fcfs.js";
export { lpm } from "./lpm.js";
export { gang } from "./gang.js";
export { sjf, agedEstimate, estimatedRemainingTokens } from "./sjf.js";
export { complexity, agedComplexity } from "./complexity.js";
export {
  orderRequests,
  parseSchedulingPolicy,
  readsPrefixMatch,
  SCHEDULING_POLICIES,
  DEFAULT_AGING_TOKENS_PER_SECOND,
} from "./policy.js";
export type { SchedulingPolicy } from "./policy.js";
export type { SchedRequest, SchedContext, OrderFn } from "./types.js";
