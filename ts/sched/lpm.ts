// Longest prefix match (SGLang's lpm): requests whose prompt is already most in the prefix cache go first, so
// cached pages are reused before eviction can take them; ties fall back to FCFS.
import { byArrival } from "./fcfs.js";
import type { SchedRequest } from "./types.js";

export function lpm(queue: readonly SchedRequest[]): SchedRequest[] {
  return queue.slice().sort((a, b) => (b.prefixMatchTokens ?? 0) - (a.prefixMatchTokens ?? 0) || byArrival(a, b));
}
