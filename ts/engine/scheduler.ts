// Scheduler: the waiting and running queues of one model and the per-step policy (nano-vllm's scheduler, with
// vLLM v1's unified token budget). Each step: running sequences first, in policy order, each gets its decode token
// or its next prefill chunk; when the pool is full, a prefill chunk shrinks to what fits, else the lowest-ordered
// running sequence is preempted (its pages freed, recomputed later; full pages stay in the prefix cache, so the
// recompute is mostly revival). Then, if nothing was preempted, waiting sequences are admitted in policy order.
// The scheduler never touches tensors: it hands the runner page copies and (sequence, token count) pairs.
import { KvExhaustedError } from "../errors/index.js";
import { inPolicyOrder, orderRequests, readsPrefixMatch, type SchedulingPolicy } from "../sched/policy.js";
import type { OrderFn, SchedRequest } from "../sched/types.js";
import { KV_POOL_ADVICE, type BlockManager, type PageCopy } from "./blockManager.js";
import type { Sequence } from "./sequence.js";

export interface SchedulerOptions {
  /** Token budget of one step (decode tokens + prefill chunk tokens). */
  maxBatchTokens: number;
  /** Most sequences in one step. */
  maxBatchSeqs: number;
  /** A named policy (ts/sched) or a custom ordering function. */
  policy: SchedulingPolicy | OrderFn;
  agingTokensPerSecond: number;
  /** "swap": a preempted sequence's KV goes to host memory and comes back (ScheduledBatch.swapOut / swapIn). */
  preemption?: "recompute" | "swap";
}

export interface ScheduledSeq {
  seq: Sequence;
  /** Tokens fed this step: tokens[numComputedTokens, numComputedTokens + numNewTokens). */
  numNewTokens: number;
  /** Whether this chunk reaches the newest token, so its logits sample the next one. */
  emitToken: boolean;
}

export interface ScheduledBatch {
  seqs: ScheduledSeq[];
  /** Copy-on-write page copies to run before the forward. */
  pageCopies: PageCopy[];
  preempted: Sequence[];
  /** Sequences that cannot fit in the pool even alone; the engine fails their requests. */
  failed: Array<{ seq: Sequence; error: Error }>;
  /** Swap preemption: KV of these pages to read into seq.swapped before this step's forward (the pages are already
   * free, and may be rewritten by the forward). */
  swapOut: Array<{ seq: Sequence; pages: number[] }>;
  /** Swap readmission: seq.swapped's data to write into these pages before the forward. */
  swapIn: Array<{ seq: Sequence; pages: number[]; data: Uint8Array }>;
}

export class Scheduler {
  readonly waiting: Sequence[] = [];
  readonly running: Sequence[] = [];
  numPreemptions = 0;
  numSwapOuts = 0;
  numSwapIns = 0;

  constructor(
    readonly blockManager: BlockManager,
    private readonly options: SchedulerOptions,
  ) {}

  get hasWork(): boolean {
    return this.waiting.length > 0 || this.running.length > 0;
  }

  /** Queues a sequence holding no pages. */
  addWaiting(seq: Sequence): void {
    seq.markWaiting();
    this.waiting.push(seq);
  }

  /** Adds a sequence that already holds pages (a fork of a running one). */
  addRunning(seq: Sequence): void {
    seq.markRunning();
    this.running.push(seq);
  }

  /** Takes a sequence out of the queues for good and frees its pages. */
  finish(seq: Sequence): void {
    removeFrom(this.running, seq) || removeFrom(this.waiting, seq);
    this.blockManager.free(seq);
    seq.markFinished();
  }

  /**
   * Rolls a sequence back to its first `length` tokens (prompt included): tokens past it are dropped and their
   * KV released; the last kept token is fed again next step, as if the dropped tokens had never been generated.
   */
  truncate(seq: Sequence, length: number): void {
    if (!Number.isInteger(length) || length < 1 || length > seq.numTokens) {
      throw new Error(`truncate: length ${length} is outside [1, ${seq.numTokens}] for sequence ${seq.id}`);
    }
    seq.truncateTokens(length);
    this.blockManager.truncate(seq, Math.min(seq.numComputedTokens, length - 1));
  }

  schedule(nowMs: number): ScheduledBatch {
    const batch: ScheduledBatch = { seqs: [], pageCopies: [], preempted: [], failed: [], swapOut: [], swapIn: [] };
    let budget = this.options.maxBatchTokens;
    const queue = this.order(this.running, nowMs, false);
    while (queue.length > 0) {
      const seq = queue.shift()!;
      if (batch.seqs.length >= this.options.maxBatchSeqs || budget <= 0) break;
      const wanted = this.chunkSize(seq, budget);
      if (wanted === 0) continue;
      const n = this.reserve(seq, wanted, queue, batch);
      if (n > 0) budget -= this.take(seq, n, batch);
    }
    if (batch.preempted.length > 0) return batch; // the pool is full: admitting more would only thrash
    for (const seq of this.order(this.waiting, nowMs, true)) {
      if (batch.seqs.length >= this.options.maxBatchSeqs || budget <= 0) break;
      // Its structured output's grammar is still compiling: admitted once it is (the engine wakes then), so the
      // compile never stalls the running batch's steps and does not hold up the queue behind it.
      if (seq.constraint?.compiling) continue;
      if (seq.swapped !== null) {
        // Back from host memory: fresh pages for its KV (and the next token), written before the forward.
        const { tokens, data } = seq.swapped;
        if (data === null || this.blockManager.numFreePages < Math.ceil((tokens + 1) / this.blockManager.pageSize))
          break;
        this.blockManager.appendSlots(seq, tokens);
        this.blockManager.commitComputed(seq, tokens);
        batch.swapIn.push({ seq, pages: seq.blockTable.slice(), data });
        seq.swapped = null;
        this.numSwapIns++;
        removeFrom(this.waiting, seq);
        this.addRunning(seq);
        const n = Math.min(this.chunkSize(seq, budget), this.tokensThatFit(seq, this.chunkSize(seq, budget)));
        if (n > 0) budget -= this.take(seq, n, batch);
        continue;
      }
      const cached = this.blockManager.allocatePrefix(seq);
      let n = this.chunkSize(seq, budget);
      if (n > 0 && !this.blockManager.canAppend(seq, n)) n = this.tokensThatFit(seq, n);
      if (n === 0 && seq.computeLimit !== seq.numComputedTokens) {
        this.blockManager.free(seq); // no room: keep FCFS-like order, try again next step
        break;
      }
      this.blockManager.recordLookup(seq.numTokens, cached);
      removeFrom(this.waiting, seq);
      this.addRunning(seq);
      if (n > 0) budget -= this.take(seq, n, batch);
    }
    return batch;
  }

  /** Tokens the sequence would feed this step, ignoring the pool. */
  private chunkSize(seq: Sequence, budget: number): number {
    // Held for verification, or its structured output's grammar still compiling (a fork given a new format runs on
    // its parent's pages but samples nothing until it compiles; the engine is woken then).
    if (seq.heldForVerify || seq.constraint?.compiling) return 0;
    let n = Math.min(seq.numUncomputedTokens, budget);
    if (seq.computeLimit !== null) n = Math.min(n, seq.computeLimit - seq.numComputedTokens);
    return Math.max(0, n);
  }

  /**
   * Makes room for `n` tokens of `seq`: shrink a prefill chunk to what fits, else preempt the lowest-ordered
   * running sequence not yet scheduled (possibly `seq` itself). Returns the tokens reserved (0: seq was preempted
   * or failed).
   */
  private reserve(seq: Sequence, n: number, queue: Sequence[], batch: ScheduledBatch): number {
    for (;;) {
      if (this.blockManager.canAppend(seq, n)) return n;
      const fit = this.tokensThatFit(seq, n);
      if (fit > 0) return fit;
      const victim = queue.pop();
      if (victim !== undefined) {
        this.preempt(victim, batch);
        continue;
      }
      if (this.running.length === 1) {
        const bm = this.blockManager;
        const needed = seq.numPages + bm.pagesNeeded(seq, n);
        batch.failed.push({
          seq,
          error: new KvExhaustedError(
            `KV pool exhausted: sequence ${seq.id} needs ${needed} pages of ${bm.pageSize} tokens for ` +
              `${seq.numComputedTokens + n} tokens, the pool has ${bm.numPages} in total; ${KV_POOL_ADVICE} or shorten the prompt / maxTokens`,
          ),
        });
        removeFrom(this.running, seq);
        return 0;
      }
      this.preempt(seq, batch);
      return 0;
    }
  }

  /** Largest m <= n whose pages fit in the free pool (0 if none). */
  private tokensThatFit(seq: Sequence, n: number): number {
    let lo = 0;
    let hi = n;
    while (lo < hi) {
      const mid = Math.ceil((lo + hi) / 2);
      if (this.blockManager.canAppend(seq, mid)) lo = mid;
      else hi = mid - 1;
    }
    return lo;
  }

  private take(seq: Sequence, n: number, batch: ScheduledBatch): number {
    batch.pageCopies.push(...this.blockManager.appendSlots(seq, n));
    batch.seqs.push({ seq, numNewTokens: n, emitToken: seq.numComputedTokens + n === seq.numTokens });
    return n;
  }

  private preempt(seq: Sequence, batch: ScheduledBatch): void {
    removeFrom(this.running, seq);
    const tokens = seq.numComputedTokens;
    if (this.options.preemption === "swap" && tokens > 0 && seq.swappable) {
      // data is filled in by ModelSlot.step before the forward (the pages' contents are intact until then).
      seq.swapped = { tokens, data: null };
      batch.swapOut.push({ seq, pages: seq.blockTable.slice(0, Math.ceil(tokens / this.blockManager.pageSize)) });
      this.numSwapOuts++;
    }
    this.blockManager.free(seq);
    seq.numPreemptions++;
    this.numPreemptions++;
    this.addWaiting(seq);
    batch.preempted.push(seq);
  }

  /** Sequences in policy order (first = served first, last = preempted first). */
  private order(seqs: readonly Sequence[], nowMs: number, waiting: boolean): Sequence[] {
    const policy = this.options.policy;
    if (seqs.length <= 1 || (typeof policy === "string" && inPolicyOrder(policy, seqs))) return seqs.slice();
    const byId = new Map(seqs.map((s) => [s.id, s]));
    const withPrefix = waiting && typeof policy === "string" && readsPrefixMatch(policy);
    const requests = seqs.map((s) => this.describe(s, withPrefix));
    const ctx = { nowMs, agingTokensPerSecond: this.options.agingTokensPerSecond };
    const ordered = typeof policy === "function" ? policy(requests, ctx) : orderRequests(policy, requests, ctx);
    return ordered.map((r) => byId.get(r.id)!);
  }

  private describe(seq: Sequence, withPrefix: boolean): SchedRequest {
    const m = seq.metadata;
    const r: SchedRequest = {
      id: seq.id,
      priority: m.priority ?? 0,
      arrivalMs: seq.arrivalMs,
      remainingTokens: Math.max(0, seq.maxCompletionTokens - seq.numCompletionTokens),
    };
    if (m.programId !== undefined) r.programId = m.programId;
    if (m.programArrivalMs !== undefined) r.programArrivalMs = m.programArrivalMs;
    if (m.remainingKnob !== undefined) r.remainingKnob = m.remainingKnob;
    if (m.meanTokensPerRound !== undefined) r.meanTokensPerRound = m.meanTokensPerRound;
    if (m.predictedTokens !== undefined) r.predictedTokens = m.predictedTokens;
    r.prefixMatchTokens = withPrefix
      ? this.blockManager.matchPrefix(seq.tokens, seq.kvNamespace)
      : seq.numComputedTokens;
    return r;
  }
}

function removeFrom(list: Sequence[], seq: Sequence): boolean {
  const i = list.indexOf(seq);
  if (i < 0) return false;
  list.splice(i, 1);
  return true;
}
