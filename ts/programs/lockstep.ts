// LockstepQueue: the order in which a program takes its branches' events in a deterministic run (RunOptions.
// deterministic). Verified tokens reach a program in chunks whose timing depends on the engine's load, so "which
// branch got there first" is taken as what it means when every branch decodes one token per step in lockstep: an
// event happens at a time (the branch's generated tokens counted from the prompt, across forks), and events are taken
// in (time, branch, arrival) order. An event at time t is taken only once every branch still streaming has streamed
// to t (its own events up to t have then arrived: a capture comes with the token after it, an end with the last
// token), so no event before it can still arrive. Branches keep decoding meanwhile; what they stream past the point
// where the program's decisions cut them is not the program's (ProgramContext.countUpTo).

export interface LockstepEvent {
  /** Generated tokens of the branch, from the prompt, when the event happened. */
  time: number;
  branch: number;
}

export class LockstepQueue<E extends LockstepEvent> {
  private readonly events: E[] = [];
  /** Streamed time of each branch still streaming. */
  private readonly clocks = new Map<number, number>();
  private arrivals = 0;
  private readonly order = new Map<E, number>();

  /** A branch starts streaming at `time` (0, or its parent's time at the fork). */
  open(branch: number, time: number): void {
    this.clocks.set(branch, time);
  }

  /** The branch has streamed to `time`. */
  advance(branch: number, time: number): void {
    if (this.clocks.has(branch)) this.clocks.set(branch, time);
  }

  /** The branch streams no more (ended, or its events no longer matter): it holds nothing back. */
  close(branch: number): void {
    this.clocks.delete(branch);
  }

  push(event: E): void {
    this.order.set(event, this.arrivals++);
    this.events.push(event);
  }

  /** The next event every streaming branch has caught up with, removed from the queue; undefined if none yet. */
  next(): E | undefined {
    if (this.events.length === 0) return undefined;
    let best = 0;
    for (let i = 1; i < this.events.length; i++) if (this.before(this.events[i], this.events[best])) best = i;
    const e = this.events[best];
    for (const t of this.clocks.values()) if (t < e.time) return undefined;
    this.events.splice(best, 1);
    this.order.delete(e);
    return e;
  }

  get pending(): number {
    return this.events.length;
  }

  private before(a: E, b: E): boolean {
    if (a.time !== b.time) return a.time < b.time;
    if (a.branch !== b.branch) return a.branch < b.branch;
    return this.order.get(a)! < this.order.get(b)!;
  }
}
