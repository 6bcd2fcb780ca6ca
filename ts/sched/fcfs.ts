// First come, first served: by arrival time, ties by id (submission order).
import type { SchedRequest } from "./types.js";

export function byArrival(
  a: Pick<SchedRequest, "arrivalMs" | "id">,
  b: Pick<SchedRequest, "arrivalMs" | "id">,
): number {
  return a.arrivalMs - b.arrivalMs || a.id - b.id;
}

/** FCFS over programs: by the program's arrival (a request's own arrival when it has no program). */
export function byProgramArrival(a: SchedRequest, b: SchedRequest): number {
  return (a.programArrivalMs ?? a.arrivalMs) - (b.programArrivalMs ?? b.arrivalMs) || byArrival(a, b);
}

export function fcfs(queue: readonly SchedRequest[]): SchedRequest[] {
  return queue.slice().sort(byArrival);
}
