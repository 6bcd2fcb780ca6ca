// Sequence: one token stream (one sample of one request) and the one owner of its state: plain facts, no pointer to
// the request it serves (the Stepper maps sequence ids to requests, as vLLM v1's scheduler does). Tokens are prompt +
// generated; the KV of tokens[0, numComputedTokens) lives in the pages of `blockTable`. Every change goes through a
// method of this class, so a reader finds each kind of change in one place:
//   tokens          appendToken / truncateTokens            (the engine step, the verifier's rollback)
//   KV pages        assignPages / setPage / keepPages / setNumComputed   (BlockManager only: it owns page ids)
//   queue status    markWaiting / markRunning / markFinished             (Scheduler only)
//   verification    holdForVerify / releaseVerifyHold                    (the verifier only)
// Invariant while the sequence is alive: numComputedTokens <= numTokens - 1, because the newest token is always
// the one fed to the next forward (its logits give the following token).
import type { SequenceConstraint } from "../grammar/constraint.js";

const NO_STOP_IDS: ReadonlySet<number> = new Set();

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
  /** The program's predicted total tokens from its prompt (a difficulty classifier), for complexity-aware SJF. */
  predictedTokens?: number;
}

export class Sequence {
  /** Tokens whose KV came from the prefix cache at admission (usage accounting). */
  numCachedTokens = 0;
  /** Times this sequence was preempted (its KV dropped, to be recomputed). */
  numPreemptions = 0;
  /** Preempted by swap: its first `tokens` positions' KV in host memory, written back on readmission. */
  swapped: { tokens: number; data: Uint8Array | null } | null = null;
  /** When the scheduler first admitted the sequence (null while it has only waited): the Scheduler's. */
  firstScheduledMs: number | null = null;
  /** Most completion tokens it may generate: the step finishes it there ("length"); SJF's fallback estimate. */
  maxCompletionTokens = Number.POSITIVE_INFINITY;
  /** Token ids that end it ("stop"): its request's stop ids, plus the model's eos unless the request ignores eos. */
  stopIds: ReadonlySet<number> = NO_STOP_IDS;
  /** Decoded under decode-verify-rollback (its model's verifier tracks it); never swapped to host memory. */
  deterministic = false;
  /** Its request was aborted: a step appends nothing more to it, and the Stepper finishes it at its next sweep. */
  cancelled = false;
  /** When set, KV is computed no further than this many tokens (e.g. until n samples fork off the prompt). */
  computeLimit: number | null = null;
  /**
   * Prefix-cache namespace: pages are shared only between sequences of one namespace (0 = the default; a
   * deterministic request's pages hold fixed-schedule KV only and live in their own, see verifier/verifier.ts).
   */
  kvNamespace = 0;
  /** Structured output: the tokens each position may take (ts/grammar/constraint.ts), or null. It follows the
   *  tokens on its own (prepare() before each step), reading takeCut() for where they were cut. */
  constraint: SequenceConstraint | null = null;

  private readonly tokenList: number[];
  private cutTo = Number.POSITIVE_INFINITY;
  private pages: number[] = [];
  private pagesArray: Int32Array | null = null; // blockTableArray's copy of pages, null after a change
  private computed = 0;
  private queueStatus: SequenceStatus = "waiting";
  private held = false;

  constructor(
    readonly id: number,
    tokens: readonly number[],
    /** Tokens that were given (prompt, plus any fork-time suffix); the rest were generated. */
    readonly numPromptTokens: number,
    readonly pageSize: number,
    /** Wall-clock arrival in ms (FCFS order, aging). */
    readonly arrivalMs: number,
    public metadata: SchedMetadata = {},
  ) {
    this.tokenList = tokens.slice();
  }

  /** Prompt followed by generated tokens. */
  get tokens(): readonly number[] {
    return this.tokenList;
  }
  /** KV of tokens[0, numComputedTokens) is written in the pages of blockTable. */
  get numComputedTokens(): number {
    return this.computed;
  }
  /** Page ids, in order; page i holds positions [i * pageSize, (i + 1) * pageSize). */
  get blockTable(): readonly number[] {
    return this.pages;
  }
  /**
   * blockTable as the Int32Array a forward takes, built once per change of the pages (every pageSize tokens), not
   * once per step: a copy per sequence per step was the engine's largest allocation on the host path. Never
   * written after it is handed out (a change of the pages makes a new one).
   */
  get blockTableArray(): Int32Array {
    return (this.pagesArray ??= Int32Array.from(this.pages));
  }
  get status(): SequenceStatus {
    return this.queueStatus;
  }
  /** Set while a deterministic sequence's candidate tokens await verification: the scheduler gives it no tokens. */
  get heldForVerify(): boolean {
    return this.held;
  }
  get numTokens(): number {
    return this.tokenList.length;
  }
  get numCompletionTokens(): number {
    return this.tokenList.length - this.numPromptTokens;
  }
  /** Tokens whose KV still has to be computed before the next token can be sampled. */
  get numUncomputedTokens(): number {
    return this.tokenList.length - this.computed;
  }
  get numPages(): number {
    return this.pages.length;
  }
  /** Tokens in the last allocated page (1..pageSize), 0 with no pages. */
  get lastPageLen(): number {
    if (this.pages.length === 0) return 0;
    return this.computed - (this.pages.length - 1) * this.pageSize;
  }
  get lastToken(): number {
    return this.tokenList[this.tokenList.length - 1];
  }
  /** Preemption may copy its KV to host memory and back (a deterministic sequence's KV is the verifier's: never). */
  get swappable(): boolean {
    return !this.deterministic;
  }
  get priority(): number {
    return this.metadata.priority ?? 0;
  }
  /** Tokens of page i (the last page may be partial). */
  pageTokens(i: number): number[] {
    return this.tokenList.slice(i * this.pageSize, (i + 1) * this.pageSize);
  }

  // Tokens.

  appendToken(token: number): void {
    this.tokenList.push(token);
  }
  /** Keeps the first `length` tokens. The KV past them is the block manager's to release (truncate). */
  truncateTokens(length: number): void {
    if (!Number.isInteger(length) || length < 0 || length > this.tokenList.length) {
      throw new Error(`Sequence ${this.id}: cannot keep ${length} of ${this.tokenList.length} tokens`);
    }
    this.tokenList.length = length;
    if (length < this.cutTo) this.cutTo = length;
  }
  /** The shortest length truncateTokens() cut the tokens to since the last call (Infinity: none), and resets it. */
  takeCut(): number {
    const cut = this.cutTo;
    this.cutTo = Number.POSITIVE_INFINITY;
    return cut;
  }

  // KV pages: the BlockManager's, which owns page ids and refcounts.

  assignPages(pages: readonly number[], numComputedTokens: number): void {
    this.pages = pages.slice();
    this.pagesArray = null;
    this.computed = numComputedTokens;
  }
  setPage(index: number, pageId: number): void {
    this.pages[index] = pageId;
    this.pagesArray = null;
  }
  pushPage(pageId: number): void {
    this.pages.push(pageId);
    this.pagesArray = null;
  }
  keepPages(numPages: number): void {
    this.pages.length = numPages;
    this.pagesArray = null;
  }
  setNumComputed(numComputedTokens: number): void {
    this.computed = numComputedTokens;
  }

  // Queue status: the Scheduler's.

  markWaiting(): void {
    this.queueStatus = "waiting";
  }
  markRunning(nowMs: number = Date.now()): void {
    this.queueStatus = "running";
    this.firstScheduledMs ??= nowMs;
  }
  markFinished(): void {
    this.queueStatus = "finished";
  }

  // Verification hold: the verifier's.

  holdForVerify(): void {
    this.held = true;
  }
  releaseVerifyHold(): void {
    this.held = false;
  }
}

/** Pages needed to hold `numTokens` tokens. */
export function pagesFor(numTokens: number, pageSize: number): number {
  return Math.ceil(numTokens / pageSize);
}
