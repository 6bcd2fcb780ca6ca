// Decode-verify-rollback for `deterministic: true` requests (docs/determinism.md, after LLM-42): a step
// participant of one model that exists only while that model has deterministic sequences (ModelSlot creates it with
// the first and drops it with the last), so a step with none runs the plain path, which has no determinism code. A deterministic sequence decodes on the fast path like any other, but its sampled tokens are only
// candidates: once it holds verifyWindow - 1 of them (or a stop token, or enough to reach maxTokens) it is held
// out of scheduling and a fixed-shape verify pass (pass.ts) replays [last committed token, candidates…].
// The verifier's token after every position decides: matching candidates are committed plus the verifier's own
// next token; the first mismatch drops the rest (tokens and KV truncated) and decoding resumes from there. The
// verifier's KV replaces the fast path's at every committed position, so the KV of committed positions (and the
// pages the prefix cache keeps for them, in a namespace of their own) always comes from the fixed schedule.
// Deterministic prefill chunks run on the fixed schedule. A decode with no candidate before it, in a step where
// running it on the fixed schedule costs nothing (markExact), is "exact": a fixed row, committed at once.
//
// Where the verify rows run (`fuseVerify`, default true): fused, they ride in a step's one forward as fixedSchedule
// sequences beside the fast rows (as do deterministic prefill chunks and exact decodes), unpadded, oldest first, as
// many as the step's token budget leaves room for (dueFused): the native forward runs them on the fixed GEMM splitK
// and the prefill attention kernel whatever the fast rows do, so nothing about the fast rows reaches their bits,
// and no forward of their own is paid for. Not fused (LLM-42's shape), every group is a forward of its own, padded
// to verifyGroup x verifyWindow on the GPU, and deterministic prefill chunks get forwards of their own too.
//
// Why the result is deterministic: every fixed-schedule kernel computes a row from its own sequence's tokens and
// KV only, so the verifier's token at position p is a function of the committed tokens before p, whatever the
// batch, the window alignment, the prefill chunking, a prefix-cache hit or a preemption. The committed stream is
// thus a function of the request alone, and non-deterministic requests never wait for it. On the CPU, whose decode
// and prefill attention kernels agree bitwise, it is exactly what batch-invariant mode produces (tested); on the GPU
// the verifier runs every position through the prefill attention kernel, so a near tie may break differently
// from batch-invariant mode's decode kernel, the same way every time.
import { KvExhaustedError } from "../../errors/index.js";
import { FIXED_SCHEDULE, type KernelSchedule } from "../kernelSchedule.js";
import { KV_POOL_ADVICE, type BlockManager } from "../blockManager.js";
import type { ForwardResult } from "../modelTypes.js";
import type { ModelRunner, SequenceSampling } from "../modelRunner.js";
import type { DeterminismStats } from "../outputs.js";
import type { ScheduledBatch } from "../scheduler.js";
import { Sequence } from "../sequence.js";
import { buildVerifyBatch, scratchPagesPerRow, verifyRowSequence, type VerifyGeometry } from "./pass.js";
import { exactDecodesFree, fusedRowCount } from "./policy.js";
import { applyVerdicts, prepareVerifyRows, probePoint, type Commit, type VerifyTarget } from "./rows.js";

export type { Commit } from "./rows.js";

export const DEFAULT_VERIFY_WINDOW = 32;
export const DEFAULT_VERIFY_GROUP = 8;
/** Prefix-cache namespace of deterministic sequences (pages holding fixed-schedule KV only). */
export const DETERMINISTIC_KV_NAMESPACE = 1;

export interface VerifyOptions {
  /** Tokens per verify row: the last committed token + up to verifyWindow - 1 candidates. */
  verifyWindow: number;
  /** Rows per verify pass (padded with dummy rows) when not fused. */
  verifyGroup: number;
  /** Verify rows ride in the step's forward (default true) instead of passes of their own. */
  fuseVerify?: boolean;
  /** Fused: the step's token budget (the scheduler's maxBatchTokens) that verify rows share with the fast rows. */
  stepTokenBudget?: number;
}

/** What a deterministic sequence's readiness depends on, and where its counters go. */
export interface DeterministicLimits {
  maxTokens: number;
  /** Token ids that end generation (stop ids, plus eos unless ignoreEos). */
  stopIds: ReadonlySet<number>;
  stats: DeterminismStats;
  /**
   * Hidden states the request captures: at every probeEvery-th generated token as input (request.probe.every; 1 for
   * captureHidden), null for none. Such a position's row always runs fixed (rows.ts probePoint).
   */
  probeEvery?: number | null;
}

/**
 * How a scheduled chunk runs: plain (not deterministic), a fixed prefill of committed tokens, a candidate decode, or
 * an exact decode: a deterministic decode with no candidates pending, in a step where the fixed schedule costs
 * nothing (markExact); it runs as a fixedSchedule row, so its token is what the verifier would give and is
 * committed at once.
 */
export type ChunkKind = "plain" | "fixedPrefill" | "candidate" | "exact";

export interface StepRun {
  results: ForwardResult[];
  kinds: ChunkKind[];
  /** What the verify rows fused into this step committed (always empty when not fused). */
  commits: Commit[];
}

interface Tracked extends DeterministicLimits, VerifyTarget {
  /** Engine step at which the sequence became ready for verification. */
  readySince: number;
}

export class Verifier {
  /** Verify rows ride in the step's forward (see the top of this file). */
  readonly fused: boolean;
  private readonly tracked = new Map<number, Tracked>();
  private readonly geometry: VerifyGeometry;
  /** A partial group waits at most this many steps for more ready rows while others still decode. */
  private readonly maxWaitSteps: number;
  private readonly stepTokenBudget: number;
  private scratch: number[][] | null = null;
  private scratchHolder: Sequence | null = null;

  constructor(
    private readonly blockManager: BlockManager,
    private readonly runner: ModelRunner,
    options: VerifyOptions,
  ) {
    this.fused = options.fuseVerify ?? true;
    this.geometry = { window: options.verifyWindow, group: options.verifyGroup, pageSize: blockManager.pageSize };
    this.maxWaitSteps = Math.max(1, options.verifyWindow >> 2);
    this.stepTokenBudget = options.stepTokenBudget ?? Number.POSITIVE_INFINITY;
  }

  get numTracked(): number {
    return this.tracked.size;
  }

  /** No deterministic sequence left: the slot drops the verifier (dispose() first). */
  get idle(): boolean {
    return this.tracked.size === 0;
  }

  /** Gives the scratch pages back to the pool. */
  dispose(): void {
    if (this.scratchHolder) this.blockManager.free(this.scratchHolder);
    this.scratchHolder = null;
    this.scratch = null;
  }

  /** Starts verifying a new deterministic sequence whose tokens are all committed. Throws if no scratch fits. */
  track(seq: Sequence, limits: DeterministicLimits): void {
    if (!this.fused && this.fixedShape) this.reserveScratch();
    seq.kvNamespace = DETERMINISTIC_KV_NAMESPACE;
    this.tracked.set(seq.id, { ...limits, seq, numCommitted: seq.numTokens, readySince: -1 });
  }

  forget(seq: Sequence): void {
    this.tracked.delete(seq.id);
    seq.releaseVerifyHold();
  }

  /** Tokens of `seq` a caller may see and fork from (a deterministic sequence's candidates are not final). */
  visibleTokens(seq: Sequence): number {
    return this.tracked.get(seq.id)?.numCommitted ?? seq.numTokens;
  }

  /** Positions of a tracked `parent`'s KV a fork may keep (see forkableKv below); undefined if not tracked. */
  forkableKvOf(parent: Sequence, childDeterministic: boolean): number | undefined {
    const t = this.tracked.get(parent.id);
    if (t === undefined) return undefined;
    return childDeterministic ? t.numCommitted - 1 : 0;
  }

  kindOf(seq: Sequence): ChunkKind {
    const t = this.tracked.get(seq.id);
    if (t === undefined) return "plain";
    return seq.numComputedTokens < t.numCommitted - 1 ? "fixedPrefill" : "candidate";
  }

  /**
   * Runs a scheduled step and returns results aligned with batch.seqs. Fused: one forward on the step's (fast)
   * schedule with deterministic prefill chunks and the verify rows now due on the fixed one, whose commits
   * come back too. Not fused: the fast sequences in one forward, each deterministic prefill chunk in a forward of
   * its own on the fixed schedule (verify passes run later, from verify()). With nothing deterministic in flight
   * this is exactly the runner's one forward.
   */
  async run(batch: ScheduledBatch, samplingOf: (seq: Sequence) => SequenceSampling, step = 0): Promise<StepRun> {
    const kinds = batch.seqs.map(({ seq }) => this.kindOf(seq));
    if (this.fused) {
      const fixed = (i: number): boolean => kinds[i] === "fixedPrefill" || kinds[i] === "exact";
      const prepared = prepareVerifyRows(this.blockManager, this.dueFused(batch, fixed, step), samplingOf);
      const rows = prepared === null ? [] : prepared.rows.map((row) => verifyRowSequence(row, this.geometry.pageSize));
      if (batch.seqs.length === 0 && rows.length === 0) return { results: [], kinds, commits: [] };
      const pageCopies = prepared === null ? batch.pageCopies : [...batch.pageCopies, ...prepared.pageCopies];
      const extraTokens = rows.reduce((n, r) => n + r.tokens.length, 0);
      let schedule = this.runner.scheduleFor(batch, undefined, { fixed, extraTokens });
      // Exact rows leave the fast decode rows, which may change kvSplits (never gemmSplitK: the same token count).
      if (this.markExact(batch, kinds, schedule))
        schedule = this.runner.scheduleFor(batch, undefined, { fixed, extraTokens });
      const out = await this.runner.run({ ...batch, pageCopies }, samplingOf, schedule, {
        fixed,
        sequences: rows,
        returnLogits: prepared?.needsLogits,
      });
      const results = out.slice(0, batch.seqs.length);
      const rowTokens = rows.map((r) => r.tokens.length);
      const commits =
        prepared === null
          ? []
          : applyVerdicts(this.blockManager, prepared, out.slice(batch.seqs.length), rowTokens, this.isLive);
      return { results, kinds, commits };
    }
    const fastIndex = kinds.flatMap((k, i) => (k === "fixedPrefill" ? [] : [i]));
    const fastBatch = { ...batch, seqs: fastIndex.map((i) => batch.seqs[i]) };
    const exactIn = (j: number): boolean => kinds[fastIndex[j]] === "exact";
    let schedule = this.runner.scheduleFor(fastBatch, undefined, { fixed: exactIn });
    if (this.markExact(batch, kinds, schedule))
      schedule = this.runner.scheduleFor(fastBatch, undefined, { fixed: exactIn });
    if (!kinds.includes("fixedPrefill"))
      return { results: await this.runner.run(batch, samplingOf, schedule, { fixed: exactIn }), kinds, commits: [] };
    const results = new Array<ForwardResult>(batch.seqs.length);
    const fast = fastBatch.seqs;
    let pageCopies = batch.pageCopies; // copy-on-write copies go with whichever forward runs first
    if (fast.length > 0) {
      const out = await this.runner.run({ ...batch, seqs: fast, pageCopies }, samplingOf, schedule, { fixed: exactIn });
      pageCopies = [];
      let k = 0;
      kinds.forEach((kind, i) => {
        if (kind !== "fixedPrefill") results[i] = out[k++];
      });
    }
    for (let i = 0; i < kinds.length; i++) {
      if (kinds[i] !== "fixedPrefill") continue;
      // Flagged fixed: the prefill attention kernel for every fixed position, however the prompt was chunked.
      [results[i]] = await this.runner.run(
        { ...batch, seqs: [batch.seqs[i]], pageCopies },
        samplingOf,
        FIXED_SCHEDULE,
        { fixed: () => true },
      );
      pageCopies = [];
    }
    return { results, kinds, commits: [] };
  }

  /** Turns the step's eligible candidate decodes into exact ones where that is free (policy.ts); true if any. */
  private markExact(batch: ScheduledBatch, kinds: ChunkKind[], schedule: KernelSchedule): boolean {
    if (this.tracked.size === 0) return false;
    const eligible = batch.seqs.map(
      ({ seq }, i) => kinds[i] === "candidate" && seq.numTokens === this.tracked.get(seq.id)!.numCommitted,
    );
    // A committed probe point's row captures hidden states: it runs fixed, free or not.
    const forced = batch.seqs.map(
      ({ seq }, i) => eligible[i] && probePoint(seq, this.tracked.get(seq.id)!.probeEvery, seq.numTokens - 1),
    );
    const allDeterministic = kinds.every((k, i) => k === "fixedPrefill" || eligible[i]);
    const free = exactDecodesFree(schedule.gemmSplitK, allDeterministic, this.runner.model.device);
    const exact = free ? eligible : forced;
    exact.forEach((e, i) => {
      if (e) kinds[i] = "exact";
    });
    return exact.includes(true);
  }

  /**
   * A deterministic sequence's chunk emitted `token`: it is appended, and the return says whether it is final.
   * From a fixed prefill chunk or an exact decode it is (committed at once); from the fast path it is a candidate,
   * streamed once verified, and the sequence is held once its candidates are worth verifying.
   */
  accept(seq: Sequence, kind: Exclude<ChunkKind, "plain">, token: number, step: number): boolean {
    const t = this.tracked.get(seq.id)!;
    seq.appendToken(token);
    if (kind !== "candidate") {
      t.numCommitted = seq.numTokens;
      if (kind === "exact") t.stats.exactTokens++;
      return true;
    }
    const candidates = seq.numTokens - t.numCommitted;
    const committedGenerated = t.numCommitted - seq.numPromptTokens;
    if (
      candidates >= this.geometry.window - 1 ||
      t.stopIds.has(token) ||
      committedGenerated + candidates + 1 >= t.maxTokens ||
      probePoint(seq, t.probeEvery, seq.numTokens - 1) // the row stops before it (see probePoint)
    ) {
      seq.holdForVerify();
      t.readySince = step;
    }
    return false;
  }

  /** Preemption dropped the sequence's KV: its candidates go too (recompute resumes from the committed tokens). */
  preempted(seq: Sequence): void {
    const t = this.tracked.get(seq.id);
    if (t === undefined) return;
    seq.truncateTokens(t.numCommitted);
    seq.releaseVerifyHold();
  }

  /**
   * Runs the verify passes due after step `step`: every full group of ready sequences, and a partial one when no
   * other deterministic sequence is decoding (nothing more will become ready) or its oldest row waited
   * maxWaitSteps. Returns the commits, in pass order.
   */
  async verify(step: number, samplingOf: (seq: Sequence) => SequenceSampling): Promise<Commit[]> {
    if (this.fused) return []; // verify rows ride in the steps' forwards (run())
    const all = [...this.tracked.values()].filter((t) => t.seq.status === "running");
    const ready = this.ready();
    if (ready.length === 0) return [];
    const decoding = all.some((t) => !t.seq.heldForVerify);
    const commits: Commit[] = [];
    for (let i = 0; i < ready.length; i += this.geometry.group) {
      const group = ready.slice(i, i + this.geometry.group);
      if (group.length < this.geometry.group && decoding && step - group[0].readySince < this.maxWaitSteps) break;
      commits.push(...(await this.pass(group, samplingOf)));
    }
    return commits;
  }

  /** Whether a verify row's sequence is still the one tracked (not finished or aborted while its row ran). */
  private readonly isLive = (t: Tracked): boolean => this.tracked.get(t.seq.id) === t;

  /** Running sequences waiting for verification, oldest first. */
  private ready(): Tracked[] {
    return [...this.tracked.values()]
      .filter((t) => t.seq.status === "running" && t.seq.heldForVerify)
      .sort((a, b) => a.readySince - b.readySince || a.seq.id - b.seq.id);
  }

  /** Fused: the ready rows that ride in this step (policy.ts fusedRowCount), oldest first. */
  private dueFused(batch: ScheduledBatch, fixed: (i: number) => boolean, step: number): Tracked[] {
    const ready = this.ready();
    const n = fusedRowCount({
      ready: ready.map((t) => ({ rowTokens: t.seq.numTokens - t.numCommitted + 1, readySince: t.readySince })),
      scheduledTokens: batch.seqs.reduce((k, s) => k + s.numNewTokens, 0),
      tokenBudget: this.stepTokenBudget,
      gemmSplitKWith: (extraTokens) => this.runner.scheduleFor(batch, undefined, { fixed, extraTokens }).gemmSplitK,
      othersDecoding: [...this.tracked.values()].some((t) => t.seq.status === "running" && !t.seq.heldForVerify),
      group: this.geometry.group,
      maxWaitSteps: this.maxWaitSteps,
      step,
    });
    return ready.slice(0, n);
  }

  /** Whether the verify rows need the GPU's fixed shape (padded passes of their own; pass.ts). */
  private get fixedShape(): boolean {
    return this.runner.model.device !== undefined && this.runner.model.device !== "cpu";
  }

  /** Fused: verify rows are due, so the step runs even with nothing else scheduled. */
  get hasDueFusedRows(): boolean {
    return this.fused && this.hasPendingVerification;
  }

  /** Whether some sequence waits for a verify pass (the engine keeps stepping while one does). */
  get hasPendingVerification(): boolean {
    for (const t of this.tracked.values()) if (t.seq.heldForVerify && t.seq.status === "running") return true;
    return false;
  }

  /** Not fused: one verify pass of its own for `group`. */
  private async pass(group: Tracked[], samplingOf: (seq: Sequence) => SequenceSampling): Promise<Commit[]> {
    const prepared = prepareVerifyRows(this.blockManager, group, samplingOf);
    if (prepared === null) return [];
    // The fixed shape only where kernels depend on the pass's shape (the GPU; pass.ts).
    const fixedShape = this.fixedShape;
    const copies = {
      src: Int32Array.from(prepared.pageCopies, (c) => c.src),
      dst: Int32Array.from(prepared.pageCopies, (c) => c.dst),
    };
    const batch = buildVerifyBatch(this.geometry, prepared.rows, this.scratch ?? [], copies, fixedShape);
    if (prepared.needsLogits) batch.returnLogits = true; // tokenLogprobs: the logits rows of every committed position
    const results = await this.runner.model.forward(batch);
    return applyVerdicts(
      this.blockManager,
      prepared,
      results,
      batch.sequences.map((s) => s.tokens.length),
      this.isLive,
    );
  }

  /** Scratch pages for pads and dummy rows, taken from the pool once, for the verifier's lifetime. */
  private reserveScratch(): void {
    if (this.scratch) return;
    const g = this.geometry;
    const perRow = scratchPagesPerRow(g);
    const total = perRow * g.group;
    const holder = new Sequence(-1, [], 0, g.pageSize, 0);
    if (!this.blockManager.canAppend(holder, total * g.pageSize)) {
      throw new KvExhaustedError(
        `deterministic: the verifier needs ${total} scratch KV pages (verifyGroup ${g.group} × ${perRow} for a window of ` +
          `${g.window}); ${this.blockManager.numFreePages} of ${this.blockManager.numPages} pages are free now; ${KV_POOL_ADVICE} or lower verifyGroup / verifyWindow`,
        { transient: total <= this.blockManager.numPages },
      );
    }
    this.blockManager.appendSlots(holder, total * g.pageSize);
    this.scratchHolder = holder;
    this.scratch = Array.from({ length: g.group }, (_, r) => holder.blockTable.slice(r * perRow, (r + 1) * perRow));
  }
}

/**
 * Positions of `parent`'s KV a fork may keep. Batch-invariant mode (no verifier ever): all of it, every step is
 * fixed. Otherwise a deterministic child keeps only fixed-schedule KV (a tracked parent's committed positions, none
 * of an untracked parent's fast KV), and a non-deterministic child must not chain its fast KV into the
 * deterministic prefix-cache namespace.
 */
export function forkableKv(
  verifies: boolean,
  verifier: Verifier | null,
  parent: Sequence,
  childDeterministic: boolean,
): number {
  if (!verifies) return Number.POSITIVE_INFINITY;
  return verifier?.forkableKvOf(parent, childDeterministic) ?? (childDeterministic ? 0 : Number.POSITIVE_INFINITY);
}
