// Gang scheduling: a program's requests run together. Takes any order and regroups it so each program's requests
// are contiguous, programs placed where their first request stood (so gang(fcfs) orders programs by their
// earliest request, gang(sjf) by their shortest estimate). Requests without a programId are groups of one.
import type { SchedRequest } from "./types.js";

export function gang(ordered: readonly SchedRequest[]): SchedRequest[] {
  const groups = new Map<string, SchedRequest[]>();
  for (const r of ordered) {
    const key = r.programId === undefined ? `#${r.id}` : `p:${r.programId}`;
    const group = groups.get(key);
    if (group) group.push(r);
    else groups.set(key, [r]);
  }
  return [...groups.values()].flat();
}
