// What inter-program scheduling policies read: a snapshot of each queued request's scheduling metadata. Policies
// are pure functions of these records (no engine, no tensors), so they are unit-testable and swappable.

export interface SchedRequest {
  /** Sequence id (unique within one engine). */
  id: number;
  /** Requests of one reasoning program share this id; requests without one are programs of their own. */
  programId?: string;
  /** Higher is served first and preempted last (every policy honours it before its own order). */
  priority: number;
  /** Wall-clock arrival, ms (Date.now() scale). */
  arrivalMs: number;
  /** When the request's program started (ms): gang orders programs by it and SJF ages their requests from it, so
   * a program's later rounds are not queued behind programs that arrived after it. Default: arrivalMs. */
  programArrivalMs?: number;
  /** Tokens the request may still generate (maxTokens - generated): SJF's fallback estimate. */
  remainingTokens: number;
  /** Program's remaining knob (rounds, branches, iterations) as last reported by the program. */
  remainingKnob?: number;
  /** Program's mean tokens per knob unit so far. */
  meanTokensPerRound?: number;
  /** The program's predicted total tokens from its prompt (DUCHESS's difficulty classifier): complexity-aware SJF. */
  predictedTokens?: number;
  /** Prompt tokens already in the prefix cache (filled only for policies that read it: lpm). */
  prefixMatchTokens?: number;
}

export interface SchedContext {
  nowMs: number;
  /** SJF aging: each second a request waits lowers its estimate by this many tokens. */
  agingTokensPerSecond: number;
}

/** Orders a queue: first element is served first. Never mutates its input. */
export type OrderFn = (queue: readonly SchedRequest[], ctx: SchedContext) => SchedRequest[];
