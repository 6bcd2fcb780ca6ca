// Decode-verify-rollback for `deterministic: true` requests (DESIGN.md "Determinism", after LLM-42), one per
// model. A deterministic sequence decodes on the fast path like any other, but its sampled tokens are only
// candidates: once it holds verifyWindow - 1 of them (or a stop token, or enough to reach maxTokens) it is held
// out of scheduling and a fixed-shape verify pass (verifyPass.ts) replays [last committed token, candidates…].
// The verifier's token after every position decides: matching candidates are committed plus the verifier's own
// next token; the first mismatch drops the rest (tokens and KV truncated) and decoding resumes from there. The
// verifier's KV replaces the fast path's at every committed position, so the KV of committed positions (and the
// pages the prefix cache keeps for them, in a namespace of their own) always comes from the fixed schedule.
// Deterministic prefill chunks run on the fixed schedule in forward calls of their own.
//
// Why the result is deterministic: every fixed-schedule kernel computes a row from its own sequence's tokens and
// KV only, so the verifier's token at position p is a function of the committed tokens before p, whatever the
// batch, the window alignment, the prefill chunking, a prefix-cache hit or a preemption. The committed stream is
// thus exactly what batch-invariant mode would produce, and non-deterministic requests never wait for it.
import { FIXED_SCHEDULE, type KernelMode } from "./kernelSchedule.js";
import type { BlockManager } from "./blockManager.js";
import type { ForwardResult } from "./modelTypes.js";
import type { ModelRunner, SequenceSampling } from "./modelRunner.js";
import type { DeterminismStats } from "./outputs.js";
import type { SampledToken } from "./sampleTracker.js";
import type { ScheduledBatch } from "./scheduler.js";
import { Sequence } from "./sequence.js";
import { acceptedCandidates, buildVerifyBatch, scratchPagesPerRow, type VerifyGeometry, type VerifyRow } from "./verifyPass.js";

export const DEFAULT_VERIFY_WINDOW = 32;
export const DEFAULT_VERIFY_GROUP = 8;
/** Prefix-cache namespace of deterministic sequences (pages holding fixed-schedule KV only). */
export const DETERMINISTIC_KV_NAMESPACE = 1;

export interface VerifyOptions {
  /** Tokens per verify row: the last committed token + up to verifyWindow - 1 candidates. */
  verifyWindow: number;
  /** Rows per verify pass (padded with dummy rows). */
  verifyGroup: number;
}

/** What a deterministic sequence's readiness depends on, and where its counters go. */
export interface DeterministicLimits {
  maxTokens: number;
  /** Token ids that end generation (stop ids, plus eos unless ignoreEos). */
  stopIds: ReadonlySet<number>;
  stats: DeterminismStats;
}

/** How a scheduled chunk runs: plain (not deterministic), a fixed prefill of committed tokens, or a candidate decode. */
export type ChunkKind = "plain" | "fixedPrefill" | "candidate";

export interface StepRun {
  results: ForwardResult[];
  kinds: ChunkKind[];
}

/** Tokens a verify pass committed to one sequence (already appended to it), to stream in order. */
export interface Commit {
  seq: Sequence;
  tokens: SampledToken[];
}

interface Tracked extends DeterministicLimits {
  seq: Sequence;
  /** Tokens (prompt included) that are final; seq.tokens past them are candidates. KV of [0, numCommitted - 1) is fixed. */
  numCommitted: number;
  /** Engine step at which the sequence became ready for verification. */
  readySince: number;
}

export class DeterministicDecoder {
  /** Off in batch-invariant mode, where every step already runs on the fixed schedule. */
  readonly enabled: boolean;
  private readonly tracked = new Map<number, Tracked>();
  private readonly geometry: VerifyGeometry;
  /** A partial group waits at most this many steps for more ready rows while others still decode. */
  private readonly maxWaitSteps: number;
  private scratch: number[][] | null = null;

  constructor(
    private readonly blockManager: BlockManager,
    private readonly runner: ModelRunner,
    kernelMode: KernelMode,
    options: VerifyOptions,
  ) {
    this.enabled = kernelMode === "fast";
    this.geometry = { window: options.verifyWindow, group: options.verifyGroup, pageSize: blockManager.pageSize };
    this.maxWaitSteps = Math.max(1, options.verifyWindow >> 2);
  }

  isTracked(seq: Sequence): boolean {
    return this.tracked.has(seq.id);
  }

  /** Starts verifying a new deterministic sequence whose tokens are all committed. Throws if no scratch fits. */
  track(seq: Sequence, limits: DeterministicLimits): void {
    if (!this.enabled) return;
    this.reserveScratch();
    seq.kvNamespace = DETERMINISTIC_KV_NAMESPACE;
    this.tracked.set(seq.id, { ...limits, seq, numCommitted: seq.numTokens, readySince: -1 });
  }

  forget(seq: Sequence): void {
    this.tracked.delete(seq.id);
    seq.holdForVerify = false;
  }

  /** Tokens of `seq` a caller may see and fork from (a deterministic sequence's candidates are not final). */
  visibleTokens(seq: Sequence): number {
    return this.tracked.get(seq.id)?.numCommitted ?? seq.numTokens;
  }

  /** Positions of `parent`'s KV a fork may keep: only fixed-schedule KV for a deterministic child, and a
   *  non-deterministic child must not chain its fast KV into the deterministic prefix-cache namespace. */
  forkableKv(parent: Sequence, childDeterministic: boolean): number {
    if (!this.enabled) return Number.POSITIVE_INFINITY;
    const t = this.tracked.get(parent.id);
    if (t === undefined) return childDeterministic ? 0 : Number.POSITIVE_INFINITY;
    return childDeterministic ? t.numCommitted - 1 : 0;
  }

  kindOf(seq: Sequence): ChunkKind {
    const t = this.tracked.get(seq.id);
    if (t === undefined) return "plain";
    return seq.numComputedTokens < t.numCommitted - 1 ? "fixedPrefill" : "candidate";
  }

  /**
   * Runs a scheduled step: everything but deterministic prefill chunks in one forward on the step's (fast)
   * schedule, each deterministic prefill chunk in a forward of its own on the fixed schedule. Results align with
   * batch.seqs. A step without deterministic prefill is exactly the runner's one forward.
   */
  async run(batch: ScheduledBatch, samplingOf: (seq: Sequence) => SequenceSampling): Promise<StepRun> {
    const kinds = batch.seqs.map(({ seq }) => this.kindOf(seq));
    if (!kinds.includes("fixedPrefill")) return { results: await this.runner.run(batch, samplingOf), kinds };
    const results = new Array<ForwardResult>(batch.seqs.length);
    const fast = batch.seqs.filter((_, i) => kinds[i] !== "fixedPrefill");
    let pageCopies = batch.pageCopies; // copy-on-write copies go with whichever forward runs first
    if (fast.length > 0) {
      const out = await this.runner.run({ ...batch, seqs: fast, pageCopies }, samplingOf);
      pageCopies = [];
      let k = 0;
      kinds.forEach((kind, i) => {
        if (kind !== "fixedPrefill") results[i] = out[k++];
      });
    }
    for (let i = 0; i < kinds.length; i++) {
      if (kinds[i] !== "fixedPrefill") continue;
      [results[i]] = await this.runner.run({ ...batch, seqs: [batch.seqs[i]], pageCopies }, samplingOf, FIXED_SCHEDULE);
      pageCopies = [];
    }
    return { results, kinds };
  }

  /** A fixed prefill chunk emitted a token (already appended to seq.tokens): it is final. */
  committedByPrefill(seq: Sequence): void {
    const t = this.tracked.get(seq.id);
    if (t) t.numCommitted = seq.numTokens;
  }

  /** A fast-path token: appended as a candidate; the sequence is held once it is worth verifying. */
  addCandidate(seq: Sequence, token: number, step: number): void {
    const t = this.tracked.get(seq.id)!;
    seq.tokens.push(token);
    const candidates = seq.numTokens - t.numCommitted;
    const committedGenerated = t.numCommitted - seq.numPromptTokens;
    if (candidates >= this.geometry.window - 1 || t.stopIds.has(token) || committedGenerated + candidates + 1 >= t.maxTokens) {
      seq.holdForVerify = true;
      t.readySince = step;
    }
  }

  /** Preemption dropped the sequence's KV: its candidates go too (recompute resumes from the committed tokens). */
  preempted(seq: Sequence): void {
    const t = this.tracked.get(seq.id);
    if (t === undefined) return;
    seq.tokens.length = t.numCommitted;
    seq.holdForVerify = false;
  }

  /**
   * Runs the verify passes due after step `step`: every full group of ready sequences, and a partial one when no
   * other deterministic sequence is decoding (nothing more will become ready) or its oldest row waited
   * maxWaitSteps. Returns the commits, in pass order.
   */
  async verify(step: number, samplingOf: (seq: Sequence) => SequenceSampling): Promise<Commit[]> {
    const all = [...this.tracked.values()].filter((t) => t.seq.status === "running");
    const ready = all.filter((t) => t.seq.holdForVerify).sort((a, b) => a.readySince - b.readySince || a.seq.id - b.seq.id);
    if (ready.length === 0) return [];
    const decoding = all.some((t) => !t.seq.holdForVerify);
    const commits: Commit[] = [];
    for (let i = 0; i < ready.length; i += this.geometry.group) {
      const group = ready.slice(i, i + this.geometry.group);
      if (group.length < this.geometry.group && decoding && step - group[0].readySince < this.maxWaitSteps) break;
      commits.push(...(await this.pass(group, samplingOf)));
    }
    return commits;
  }

  /** Whether some sequence waits for a verify pass (the engine keeps stepping while one does). */
  get hasPendingVerification(): boolean {
    for (const t of this.tracked.values()) if (t.seq.holdForVerify && t.seq.status === "running") return true;
    return false;
  }

  private async pass(group: Tracked[], samplingOf: (seq: Sequence) => SequenceSampling): Promise<Commit[]> {
    const rows: VerifyRow[] = [];
    const members: Array<{ t: Tracked; candidates: number[] }> = [];
    let needsLogits = false;
    const src: number[] = [];
    const dst: number[] = [];
    for (const t of group) {
      const seq = t.seq;
      const start = t.numCommitted - 1; // the last committed token's position: its KV is rewritten too
      this.blockManager.truncate(seq, start);
      let n = seq.numTokens - start;
      while (n > 0 && !this.blockManager.canAppend(seq, n)) n--; // a full pool verifies fewer candidates
      if (n === 0) continue;
      for (const c of this.blockManager.appendSlots(seq, n)) src.push(c.src), dst.push(c.dst);
      seq.tokens.length = start + n;
      const s = samplingOf(seq);
      needsLogits ||= s.needsLogits;
      rows.push({ tokens: seq.tokens.slice(start), startPos: start, blockTable: seq.blockTable, sampling: s.sampling, numTopLogprobs: s.numTopLogprobs });
      members.push({ t, candidates: seq.tokens.slice(start + 1) });
    }
    if (rows.length === 0) return [];
    // The fixed shape only where kernels depend on the pass's shape (the GPU; verifyPass.ts).
    const fixedShape = this.runner.model.device !== "cpu";
    const batch = buildVerifyBatch(this.geometry, rows, this.scratch!, { src: Int32Array.from(src), dst: Int32Array.from(dst) }, fixedShape);
    if (needsLogits) batch.returnLogits = true; // tokenLogprobs: the logits rows of every committed position
    const results = await this.runner.model.forward(batch);
    const commits: Commit[] = [];
    members.forEach(({ t, candidates }, r) => {
      const seq = t.seq;
      if (seq.status !== "running" || this.tracked.get(seq.id) !== t) return; // finished or aborted meanwhile
      const res = results[r];
      const verified = res.tokens!;
      const accepted = acceptedCandidates(candidates, verified);
      const c = t.numCommitted;
      t.stats.verifyPasses++;
      if (accepted < candidates.length) {
        t.stats.rollbacks++;
        t.stats.recomputedTokens += candidates.length - accepted;
      }
      seq.tokens.length = c + accepted;
      seq.tokens.push(verified[accepted]);
      this.blockManager.commitComputed(seq, c + accepted); // positions [c - 1, c + accepted) now hold the verifier's KV
      this.blockManager.truncate(seq, c + accepted); // pages of rejected candidates go back
      t.numCommitted = c + accepted + 1;
      seq.holdForVerify = false;
      const k = rows[r].numTopLogprobs;
      const tokens: SampledToken[] = [];
      for (let j = 0; j <= accepted; j++) {
        const tok: SampledToken = { token: verified[j], logprob: res.logprobs![j] };
        if (k > 0) {
          tok.topIds = res.topIds!.slice(j * k, (j + 1) * k);
          tok.topLogprobs = res.topLogprobs!.slice(j * k, (j + 1) * k);
        }
        if (res.logits) {
          const V = res.logits.length / batch.sequences[r].tokens.length;
          tok.logits = res.logits.subarray(j * V, (j + 1) * V);
        }
        tokens.push(tok);
      }
      commits.push({ seq, tokens });
    });
    return commits;
  }

  /** Scratch pages for pads and dummy rows, taken from the pool once, for the engine's lifetime. */
  private reserveScratch(): void {
    if (this.scratch) return;
    const g = this.geometry;
    const perRow = scratchPagesPerRow(g);
    const total = perRow * g.group;
    const holder = new Sequence(-1, [], 0, g.pageSize, 0);
    if (!this.blockManager.canAppend(holder, total * g.pageSize)) {
      throw new Error(
        `deterministic: the verifier needs ${total} scratch KV pages (verifyGroup ${g.group} × ${perRow} for a window of ` +
          `${g.window}); ${this.blockManager.numFreePages} of ${this.blockManager.numPages} pages are free now; raise kvMemory or lower verifyGroup / verifyWindow`,
      );
    }
    this.blockManager.appendSlots(holder, total * g.pageSize);
    this.scratch = Array.from({ length: g.group }, (_, r) => holder.blockTable.slice(r * perRow, (r + 1) * perRow));
  }
}
