// First come, first served: by arrival time, ties by id (submission order).
import type { SchedRequest } from "./types.js";

export function byArrival(a: SchedRequest, b: SchedRequest): number {
  return a.arrivalMs - b.arrivalMs || a.id - b.id;
}

export function fcfs(queue: readonly SchedRequest[]): SchedRequest[] {
  return queue.slice().sort(byArrival);
}
