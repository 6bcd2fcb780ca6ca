// Sequence: the scheduler's and block manager's plain record of one token stream (one sample of one request).
// Tokens are prompt + generated; the KV of tokens[0, numComputedTokens) lives in the pages of `blockTable`.
// Invariant while the sequence is alive: numComputedTokens <= numTokens - 1, because the newest token is always
// the one fed to the next forward (its logits give the following token).

export type SequenceStatus = "waiting" | "running" | "finished";

/** What an inter-program scheduling policy may read about a sequence (see ts/sched). */
export interface SchedMetadata {
  /** Requests of one reasoning program share this id (gang scheduling, SJF by program). */
  programId?: string;
  /** When the program started (ms, Date.now() scale): gang and SJF aging order programs by it. */
  programArrivalMs?: number;
  /** Higher runs first and is preempted last. Default 0. */
  priority?: number;
  /** The program's remaining compute knob (rounds, branches...) for SJF; see ts/sched/sjf.ts. */
  remainingKnob?: number;
  /** The program's mean tokens per knob unit so far, for SJF. */
  meanTokensPerRound?: number;
}

export class Sequence {
  /** KV of tokens[0, numComputedTokens) is written in the pages of blockTable. */
  numComputedTokens = 0;
  /** Tokens whose KV came from the prefix cache at admission (usage accounting). */
  numCachedTokens = 0;
  /** Page ids, in order; page i holds positions [i * pageSize, (i + 1) * pageSize). */
  blockTable: number[] = [];
  status: SequenceStatus = "waiting";
  /** Times this sequence was preempted (its KV dropped, to be recomputed). */
  numPreemptions = 0;
  /** Most completion tokens it may generate (SJF's fallback estimate of remaining work). */
  maxCompletionTokens = Number.POSITIVE_INFINITY;
  /** When set, KV is computed no further than this many tokens (e.g. until n samples fork off the prompt). */
  computeLimit: number | null = null;
  /**
   * Prefix-cache namespace: pages are shared only between sequences of one namespace (0 = the default; a
   * deterministic request's pages hold fixed-schedule KV only and live in their own, see deterministicDecoder.ts).
   */
  kvNamespace = 0;
  /** Set while a deterministic sequence's candidate tokens await verification: the scheduler gives it no tokens. */
  holdForVerify = false;

  constructor(
    readonly id: number,
    /** Prompt followed by generated tokens; mutated by append and truncate. */
    public tokens: number[],
    /** Tokens that were given (prompt, plus any fork-time suffix); the rest were generated. */
    public numPromptTokens: number,
    readonly pageSize: number,
    /** Wall-clock arrival in ms (FCFS order, aging). */
    readonly arrivalMs: number,
    public metadata: SchedMetadata = {},
  ) {}

  get numTokens(): number {
    return this.tokens.length;
  }
  get numCompletionTokens(): number {
    return this.tokens.length - this.numPromptTokens;
  }
  /** Tokens whose KV still has to be computed before the next token can be sampled. */
  get numUncomputedTokens(): number {
    return this.tokens.length - this.numComputedTokens;
  }
  get numPages(): number {
    return this.blockTable.length;
  }
  /** Tokens in the last allocated page (1..pageSize), 0 with no pages. */
  get lastPageLen(): number {
    if (this.blockTable.length === 0) return 0;
    return this.numComputedTokens - (this.blockTable.length - 1) * this.pageSize;
  }
  get lastToken(): number {
    return this.tokens[this.tokens.length - 1];
  }
  get priority(): number {
    return this.metadata.priority ?? 0;
  }
  /** Tokens of page i (the last page may be partial). */
  pageTokens(i: number): number[] {
    return this.tokens.slice(i * this.pageSize, (i + 1) * this.pageSize);
  }
}

/** Pages needed to hold `numTokens` tokens. */
export function pagesFor(numTokens: number, pageSize: number): number {
  return Math.ceil(numTokens / pageSize);
}
