// One loaded model inside the engine: its KV pool's block manager, its scheduler, its runner and, while it has
// deterministic sequences, its verifier. Models never share pages, queues or forwards. `step()` is vLLM v1's
// EngineCore step for one model, in terms of sequences only: schedule, swap, run (the runner, or the verifier while
// deterministic sequences exist), commit KV, append tokens, check stop ids / eos / max tokens, and report per
// sequence what became final. It knows nothing of requests: the Stepper (the output processor) maps sequences to
// requests, turns tokens into text and deltas, and calls finish().
import { DisposedError, GrammarHostError, NativeError, UnsupportedError } from "../errors/index.js";
import { availableParallelism } from "node:os";
import { GrammarSet } from "../grammar/grammars.js";
import { loadAddon } from "../native/loadAddon.js";
import { BlockManager } from "./blockManager.js";
import type { KernelMode } from "./kernelSchedule.js";
import { ModelRunner, type SequenceSampling } from "./modelRunner.js";
import type { EngineModel, ForwardResult, SampledToken, TextCodec } from "./modelTypes.js";
import { StepTokenCounts, type ModelMetrics } from "./metrics.js";
import type { DeterminismStats, SequenceEnd } from "./outputs.js";
import { Scheduler, type ScheduledBatch, type SchedulerOptions } from "./scheduler.js";
import type { Sequence } from "./sequence.js";
import { forkableKv, Verifier, type ChunkKind, type Commit, type VerifyOptions } from "./verifier/verifier.js";

/** Several tokens a step made final for one sequence (a verify row commits up to a window), already appended. */
export interface SequenceOutput {
  seq: Sequence;
  tokens: SampledToken[];
  /** The last of `tokens` ended the sequence; tokens the step produced past it were dropped. */
  end: SequenceEnd | null;
  /**
   * Jump-forward's forced tokens, appended after the step's sampled token of the sequence (ModelSlot.jumpForward):
   * if that token ended the sample (a stop string in its text), the Stepper cuts them from the sequence.
   */
  forced?: boolean;
}

/**
 * The step's single final tokens (every plain decode, fixed prefill and exact decode), already appended: row i is
 * tokens[i] of seqs[i], ends[i] saying whether it ended the sequence. Parallel arrays, so a step of hundreds of rows
 * allocates no object per row on the host path between forwards (bench:host).
 */
export interface DecodedTokens {
  seqs: Sequence[];
  tokens: SampledToken[];
  ends: Array<SequenceEnd | null>;
}

/** What one step of one model did. */
export interface SlotStep {
  decoded: DecodedTokens;
  /** What verify rows committed, per sequence, after the step's forward. */
  committed: SequenceOutput[];
  /** Sequences whose request cannot go on (no room in the pool even alone, a failed forward or KV swap). */
  failed: Array<{ seq: Sequence; error: unknown }>;
  /**
   * Sequences that cannot go on past the step's tokens (jump-forward found that the format allows no token next, or
   * its host failed): failed once those tokens reached the request, unless one of them ended the sample (a stop
   * string), as the next step's prepare would with jump-forward off.
   */
  failedAfter: Array<{ seq: Sequence; error: unknown }>;
  /** Sequences whose shared prompt KV is now computed (computeLimit reached): their request forks its samples. */
  prefilled: Sequence[];
  /** Prompt tokens whose KV the step computed (throughput accounting). */
  promptTokens: number;
  /** Anything happened: tokens computed, sequences preempted, failed or prefilled, verify rows committed. */
  progressed: boolean;
}

/** What a step needs from the requests' side: each sequence's sampling settings. */
export type SamplingOf = (seq: Sequence) => SequenceSampling;

/**
 * Late masks (ModelSlot.run): on the plain path of a CPU model, the constrained rows whose masks the engine's thread
 * computes at once (SequenceConstraint.matchesHere) get them while the forward runs, which needs them only at the
 * sampler; the forward waits at most `waitMs` for them. "auto": only where the engine's thread has a core the native
 * pool does not use (spareCore), read at the model's first step with such rows: where the pool holds every core the
 * JS thread's masks take a core from the forward and its sampler then waits for the JS thread to be scheduled (the
 * tiny reasoner at batch 16 on a 2-core machine under load: 2.8x a free step, bench/RESULTS.md). Read at each step;
 * tests set true / false to compare both paths.
 */
// Off by default until measured where a core is spare and reviewed (the JS/native handoff); "auto" or true opt in.
export const lateMaskDefaults: { enabled: boolean | "auto"; waitMs: number } = { enabled: false, waitMs: 5000 };

/**
 * Jump-forward decoding of structured outputs (SGLang's, made exact): where a constrained sequence's next mask allows
 * exactly one token (a JSON key, a quote, the rest of an enum value: most of a strict schema's answer on a small
 * vocabulary), that token is appended at once, without a forward step or a sample, and the forced run goes through the
 * next step's forward as one chunk (its KV), which samples at its end. The tokens are those sampling would pick (the
 * constrained distribution puts all its mass on them; logprob 0), so only the steps change: fewer, each with a
 * longer row. Not for requests that read more of a row than its token (top logprobs, logits, confidence, hidden states,
 * probes) or verify it (deterministic), nor while the model holds a verifier. At most `maxTokens` a step. Tests and
 * benches set `enabled` false to compare.
 */
export const jumpForwardDefaults: { enabled: boolean; maxTokens: number } = { enabled: true, maxTokens: 64 };

/** Whether the process has a CPU the native thread pool does not use (its affinity mask and cgroup limit). */
function spareCore(): boolean {
  const cpu = loadAddon().listDevices().cpu;
  return Math.min(availableParallelism(), cpu.cgroupCpuLimit ?? Infinity) > cpu.threads;
}

export class ModelSlot {
  readonly blockManager: BlockManager;
  readonly scheduler: Scheduler;
  readonly runner: ModelRunner;
  readonly eosTokenIds: ReadonlySet<number>;
  /** Decode-verify-rollback of this model's deterministic sequences; null while it has none. */
  private verifier: Verifier | null = null;
  /** Fast mode: deterministic requests need a verifier (batch-invariant mode runs every step on the fixed schedule). */
  readonly verifies: boolean;
  private readonly verifyOptions: VerifyOptions;
  private readonly stepTokens = new StepTokenCounts();
  private grammarSet: GrammarSet | null = null;
  /** spareCore(), once the first step with late-mask rows asked (lateMaskDefaults "auto"). */
  private spareCore: boolean | null = null;

  constructor(
    readonly name: string,
    readonly model: EngineModel,
    readonly codec: TextCodec | null,
    kernelMode: KernelMode,
    schedulerOptions: SchedulerOptions,
    verifyOptions: VerifyOptions,
  ) {
    this.blockManager = new BlockManager(model.numPages, model.pageSize);
    this.scheduler = new Scheduler(this.blockManager, schedulerOptions);
    this.runner = new ModelRunner(model, kernelMode);
    this.verifies = kernelMode === "fast";
    this.verifyOptions = { ...verifyOptions, stepTokenBudget: schedulerOptions.maxBatchTokens };
    this.eosTokenIds = new Set(model.eosTokenIds);
  }

  get pageSize(): number {
    return this.model.pageSize;
  }

  /** Deterministic requests' verify rows replay this many masks behind a sequence's newest (structured outputs). */
  get maskWindow(): number {
    return this.verifies ? this.verifyOptions.verifyWindow : 0;
  }

  /** The model's compiled grammars (structured outputs); an UnsupportedError naming `field` if it has no tokenizer. */
  grammars(field: string): GrammarSet {
    if (this.isDisposed) throw new DisposedError(`${field}: model "${this.name}"'s engine is disposed`, { field });
    if (this.grammarSet !== null) return this.grammarSet;
    const vocab = this.codec?.grammarVocab?.();
    if (vocab === undefined)
      throw new UnsupportedError(
        `${field}: model "${this.name}" was loaded without a tokenizer that can list its vocabulary, which constrained decoding needs; load it with its tokenizer.json`,
        { field },
      );
    return (this.grammarSet = new GrammarSet(vocab, this.model.vocabSize, this.model.eosTokenIds));
  }

  /**
   * Frees what the slot holds outside the JS heap and the model: its compiled grammars, their compiler and tokenizer
   * info (XGrammar's wasm heap). The engine calls it once its loop has stopped and its sequences are finished.
   */
  dispose(): void {
    this.isDisposed = true;
    this.grammarSet?.dispose();
    this.grammarSet = null;
  }
  private isDisposed = false;

  /** Whether a step would do anything: sequences queued or running. */
  get hasWork(): boolean {
    return this.scheduler.hasWork;
  }

  /** Queues a sequence holding no pages (a new request, or a fork whose parent's pages are gone). */
  addWaiting(seq: Sequence): void {
    this.scheduler.addWaiting(seq);
  }

  /** A running fork of `parent` sharing its pages; given `keepKv`, cut to at most that many positions of its KV. */
  addFork(parent: Sequence, child: Sequence, keepKv?: number): void {
    this.blockManager.fork(parent, child);
    if (keepKv !== undefined) this.blockManager.truncate(child, keepKv);
    this.scheduler.addRunning(child);
  }

  /**
   * Hands new deterministic sequences to the verifier (created for the first; none in batch-invariant mode, where
   * every step is on the fixed schedule already). If the verifier cannot start (no scratch pages) the sequences are
   * finished and the error thrown.
   */
  trackDeterministic(seqs: readonly Sequence[], stats: DeterminismStats, probeEvery: number | null = null): void {
    if (!this.verifies) return;
    const verifier = (this.verifier ??= new Verifier(this.blockManager, this.runner, this.verifyOptions));
    try {
      for (const seq of seqs)
        verifier.track(seq, { maxTokens: seq.maxCompletionTokens, stopIds: seq.stopIds, stats, probeEvery });
    } catch (e) {
      for (const seq of seqs) this.finish(seq);
      throw e;
    }
  }

  /** Ends a sequence: the verifier forgets it (and goes, scratch pages back to the pool, with the last), its pages are
   *  freed, its constraint's matcher too. */
  finish(seq: Sequence): void {
    if (seq.status === "finished") return;
    seq.constraint?.dispose();
    if (this.verifier !== null) {
      this.verifier.forget(seq);
      if (this.verifier.idle) {
        this.verifier.dispose();
        this.verifier = null;
      }
    }
    this.scheduler.finish(seq);
  }

  /** Tokens of `seq` a caller may see and fork from (a deterministic sequence's candidates are not final). */
  visibleTokens(seq: Sequence): number {
    return this.verifier?.visibleTokens(seq) ?? seq.numTokens;
  }

  /** Positions of `parent`'s KV a fork may keep (verifier.ts forkableKv). */
  forkableKv(parent: Sequence, childDeterministic: boolean): number {
    return forkableKv(this.verifies, this.verifier, parent, childDeterministic);
  }

  /**
   * One step of this model: schedule, swap, one forward (a fused verifier's due rows ride in it), then, unfused,
   * the verify passes now due. `step` numbers the engine's steps (verify rows wait a bounded number of them).
   */
  async step(nowMs: number, step: number, samplingOf: SamplingOf): Promise<SlotStep> {
    const batch = this.scheduler.schedule(nowMs);
    const decoded: DecodedTokens = { seqs: [], tokens: [], ends: [] };
    const out: SlotStep = {
      decoded,
      committed: [],
      failed: batch.failed, // the swap adds its own below
      failedAfter: [],
      prefilled: [],
      promptTokens: 0,
      progressed: batch.seqs.length > 0 || batch.failed.length > 0 || batch.preempted.length > 0,
    };
    if (batch.swapOut.length > 0 || batch.swapIn.length > 0) await this.swap(batch, out);
    for (const seq of batch.preempted) this.verifier?.preempted(seq);
    // A request admitted with its shared prompt already cached forks its samples now, to run next step.
    this.collectPrefilled(out);
    // Structured outputs: the masks of the rows that sample this step (and of rows a verifier may replay), but for
    // the rows whose masks are computed while the forward runs (late).
    let late = this.lateRows(batch);
    await this.prepareConstraints(batch, out, late);
    if (late !== null && this.verifier !== null) {
      // A verifier was made while this step waited (a deterministic request came in): it runs the step, and every
      // row's mask is needed before its forward (those prepared already are not computed again).
      late = null;
      await this.prepareConstraints(batch, out, null);
    }
    // A fused verifier runs its due rows in the step's forward, even a step with nothing else scheduled.
    if (batch.seqs.length > 0 || this.verifier?.hasDueFusedRows) {
      try {
        const run = await this.run(batch, samplingOf, step, late, out);
        this.postprocess(batch, run.results, run.kinds, step, out);
        this.commitVerified(run.commits, out);
      } catch (error) {
        for (const { seq } of batch.seqs) out.failed.push({ seq, error });
        if (this.verifier?.fused) this.failHeld(error, out);
      }
    }
    // Not fused: deterministic sequences holding enough candidates are verified now, in passes of their own.
    const verifier = this.verifier;
    if (verifier !== null && !verifier.fused && verifier.hasPendingVerification) {
      try {
        this.commitVerified(await verifier.verify(step + 1, samplingOf), out);
      } catch (error) {
        this.failHeld(error, out);
      }
    }
    this.collectPrefilled(out);
    // Forced tokens first: a forced run that meets the budget on a value's last token ends "complete" too.
    await this.jumpForward(out, samplingOf);
    await this.completeFormats(out);
    // The step's tokens (vLLM's iteration_tokens_total): prompt tokens computed plus tokens made final. Not forced
    // tokens: they are rows of the next step's forward, which counts them among the tokens it computes.
    let tokens = out.promptTokens + decoded.seqs.length;
    for (const c of out.committed) if (c.forced !== true) tokens += c.tokens.length;
    this.stepTokens.record(tokens);
    return out;
  }

  /**
   * Folds each constrained sequence's new tokens into its constraint and computes the mask of its next position:
   * the scheduled rows that sample, and every running sequence a verifier holds (a verify row replays its masks). A
   * constraint that cannot go on (its grammar failed to compile, an appended token outside the format) fails its
   * request; the rest of the batch runs.
   */
  private async prepareConstraints(
    batch: ScheduledBatch,
    out: SlotStep,
    late: ReadonlyMap<Sequence, number> | null,
  ): Promise<void> {
    const failed = new Set<Sequence>();
    const fail = (seq: Sequence, error: unknown): void => {
      out.failed.push({ seq, error });
      failed.add(seq);
    };
    // Each row at once where it can be (a grammar matched on this thread, a small vocabulary: no promise a row, which
    // cost about as much as XGrammar's own work on the tiny reasoner); the rest all at once, since each grammar host
    // answers the step's calls in one batch (host.ts).
    let calls: Array<Promise<void>> | null = null;
    const prepare = (seq: Sequence): void => {
      const c = seq.constraint!;
      const tokens = seq.tokens;
      try {
        if (c.prepareNow(tokens, seq.takeCut())) return;
      } catch (error) {
        fail(seq, error);
        return;
      }
      // The tokens are folded (the cut taken): prepare() finishes, with no cut.
      (calls ??= []).push(c.prepare(tokens).catch((error: unknown) => fail(seq, error)));
    };
    for (const { seq, emitToken } of batch.seqs)
      if (emitToken && seq.constraint !== null && !(late?.has(seq) ?? false)) prepare(seq);
    if (this.verifier !== null)
      for (const seq of this.scheduler.running)
        if (seq.constraint !== null && seq.heldForVerify && !seq.constraint.ready(seq.numTokens)) prepare(seq);
    if (calls !== null) await Promise.all(calls);
    if (failed.size === 0) return;
    batch.seqs = batch.seqs.filter((s) => !failed.has(s.seq));
    out.progressed = true;
  }

  /**
   * A constrained sequence ended "length" by the token that completes its format (the value's last token was the
   * last its budget allowed) ends "complete": the value is whole, the sample's finish reason is "stop" and that
   * token's text is output (it is the value's, no stop token). endOfAt decides the length end before that token
   * reaches the grammar, so it is folded into the matcher here, after the forward (one host call per such sequence,
   * no extra forward). A grammar that still allows more than the end (a number that could go on) keeps "length".
   */
  private async completeFormats(out: SlotStep): Promise<void> {
    const whole = async (seq: Sequence): Promise<boolean> => {
      try {
        return await seq.constraint!.onlyEndAfter(seq.tokens, seq.takeCut());
      } catch {
        return false; // the format cannot go on, or its host is gone: not a whole value
      }
    };
    const calls: Array<Promise<void>> = [];
    const { seqs, ends } = out.decoded;
    for (let i = 0; i < seqs.length; i++)
      if (ends[i] === "length" && seqs[i].constraint !== null)
        calls.push(whole(seqs[i]).then((w) => void (w && (ends[i] = "complete"))));
    for (const c of out.committed)
      if (c.end === "length" && c.seq.constraint !== null)
        calls.push(whole(c.seq).then((w) => void (w && (c.end = "complete"))));
    await Promise.all(calls);
  }

  /**
   * Jump-forward (jumpForwardDefaults): each sequence that sampled this step and goes on, constrained, takes the tokens
   * its format forces next (computing the masks the next step would: each position's mask is kept for it), reported
   * as committed after its sampled token. A mask that cannot be computed fails the request after the step's tokens
   * (out.failedAfter), as the next step's prepare would.
   */
  private async jumpForward(out: SlotStep, samplingOf: SamplingOf): Promise<void> {
    const { enabled, maxTokens } = jumpForwardDefaults;
    if (!enabled || this.verifier !== null) return;
    const { seqs, ends } = out.decoded;
    // Sequences run side by side: where masks come from a grammar host thread, each round of their calls travels in
    // one message (host.ts), not a round trip per sequence and token. Results are reported in the rows' order.
    const runs = seqs.map(async (seq, i): Promise<SequenceOutput | null> => {
      const c = seq.constraint;
      if (c === null || ends[i] !== null || seq.status !== "running" || seq.cancelled) return null;
      if (!samplingOf(seq).jumpForward) return null;
      const forced: SampledToken[] = [];
      let end: SequenceEnd | null = null;
      try {
        while (end === null && forced.length < maxTokens) {
          const tokens = seq.tokens;
          if (!c.prepareNow(tokens, seq.takeCut())) await c.prepare(tokens);
          const p = tokens.length;
          const token = c.forcedAt(p);
          if (token === null) break;
          seq.appendToken(token);
          forced.push({ token, logprob: 0 });
          end = endOfAt(seq, p, token);
        }
      } catch (error) {
        // Not at once: the tokens so far may end the sample (a stop string), as they would with jump-forward off.
        out.failedAfter.push({ seq, error });
      }
      return forced.length > 0 ? { seq, tokens: forced, end, forced: true } : null;
    });
    for (const r of await Promise.all(runs)) if (r !== null) out.committed.push(r);
  }

  /**
   * The rows whose masks the step computes while its forward runs, each with its row of the forward's lateMasks:
   * the plain path only (a verifier's rows replay masks, computed before its forward), a CPU model, constraints
   * matched on this thread (lateMaskDefaults). Null when none.
   */
  private lateRows(batch: ScheduledBatch): Map<Sequence, number> | null {
    if (this.verifier !== null || this.model.device !== "cpu") return null;
    const enabled = lateMaskDefaults.enabled;
    if (enabled === false || (enabled === "auto" && !(this.spareCore ??= spareCore()))) return null;
    let late: Map<Sequence, number> | null = null;
    for (const { seq, emitToken } of batch.seqs)
      if (emitToken && seq.constraint !== null && seq.constraint.matchesHere) {
        late ??= new Map();
        late.set(seq, late.size);
      }
    return late;
  }

  /**
   * The step's one forward: the plain runner, or, while the model has deterministic sequences, its verifier. With
   * late rows, the forward starts first and their masks are computed while it runs (fillLateMasks); a late row whose
   * mask failed or came too late is dropped from the step and its request failed (out.failed), the rest go on.
   */
  private async run(
    batch: ScheduledBatch,
    samplingOf: SamplingOf,
    step: number,
    late: ReadonlyMap<Sequence, number> | null,
    out: SlotStep,
  ): Promise<{ results: ForwardResult[]; kinds: ChunkKind[] | null; commits: readonly Commit[] }> {
    if (this.verifier !== null) return this.verifier.run(batch, samplingOf, step);
    if (late === null) return { results: await this.runner.run(batch, samplingOf), kinds: null, commits: [] };
    const words = Math.ceil(this.model.vocabSize / 32);
    // Over a SharedArrayBuffer (the native forward refuses any other): the step reads it from another thread while
    // this one writes it, and only there is Atomics.store a release the native acquire load pairs with. A new one
    // each step, so that a mask written after its step gave up on it (the bound passed) lands in no later step's.
    const masks = new Int32Array(new SharedArrayBuffer(4 * late.size * (1 + words)));
    const waitMs = lateMaskDefaults.waitMs;
    const pending = this.runner.run(batch, samplingOf, undefined, { late: { rows: late, masks, waitMs } });
    const errors = this.fillLateMasks(late, masks, words);
    let results = await pending;
    const dropped = new Set<Sequence>();
    batch.seqs.forEach(({ seq }, i) => {
      if (!late.has(seq) || results[i].token !== -1) return;
      const field = seq.constraint!.options.field;
      const error =
        errors.get(seq) ??
        new GrammarHostError(
          `${field}: the token mask of position ${seq.numTokens} was not ready within ${waitMs} ms of its step (the engine's thread was held up); the request cannot go on, send it again`,
          { field },
        );
      out.failed.push({ seq, error });
      dropped.add(seq);
    });
    if (dropped.size > 0) {
      const keep = batch.seqs.map((s) => !dropped.has(s.seq));
      results = results.filter((_, i) => keep[i]);
      batch.seqs = batch.seqs.filter((_, i) => keep[i]);
      out.progressed = true;
    }
    return { results, kinds: null, commits: [] };
  }

  /**
   * Computes the late rows' masks while the forward runs and hands each over: its words into row k of `masks`, then
   * flag k (Atomics.store after the words: 1 ready, 2 failed). At once where the constraint can
   * (SequenceConstraint.prepareNow), else in the microtasks its prepare() takes (a matcher being made). Returns the
   * errors of the rows that failed (their requests' errors).
   */
  private fillLateMasks(late: ReadonlyMap<Sequence, number>, masks: Int32Array, words: number): Map<Sequence, unknown> {
    const errors = new Map<Sequence, unknown>();
    for (const [seq, k] of late) {
      const c = seq.constraint!;
      const tokens = seq.tokens;
      const position = tokens.length; // the row samples the token at this position
      const at = late.size + k * words;
      const fail = (error: unknown): void => {
        errors.set(seq, error);
        Atomics.store(masks, k, 2);
      };
      const hand = (): void => {
        try {
          const mask = c.maskAt(position);
          if (mask === undefined) throw new Error(`structured output: no mask for position ${position}`);
          if (mask === null)
            masks.fill(-1, at, at + words); // a free position
          else if (mask.length !== words)
            throw new Error(`structured output: a mask of ${mask.length} words, expected ${words}`);
          else masks.set(mask, at);
          Atomics.store(masks, k, 1);
        } catch (error) {
          fail(error);
        }
      };
      try {
        if (c.prepareNow(tokens, seq.takeCut())) hand();
        else c.prepare(tokens).then(hand, fail); // the tokens are folded: no cut
      } catch (error) {
        fail(error);
      }
    }
    return errors;
  }

  /** kinds: how each chunk ran, when the verifier ran the step (null: every chunk plain). */
  private postprocess(
    batch: ScheduledBatch,
    results: ForwardResult[],
    kinds: ChunkKind[] | null,
    step: number,
    out: SlotStep,
  ): void {
    batch.seqs.forEach(({ seq, numNewTokens, emitToken }, i) => {
      if (seq.status !== "running") return; // finished or failed while in flight
      const kind = kinds === null ? "plain" : kinds[i];
      // A deterministic candidate's KV (fast schedule) stays out of the prefix cache: the verifier rewrites it.
      this.blockManager.commitComputed(seq, seq.numComputedTokens + numNewTokens, kind !== "candidate");
      out.promptTokens += emitToken ? numNewTokens - 1 : numNewTokens;
      if (!emitToken || seq.cancelled) return;
      const r = results[i];
      if (kind === "plain") seq.appendToken(r.token);
      // A candidate: final once verified; it counts as ready from the next step (verify groups wait in steps).
      else if (!this.verifier!.accept(seq, kind, r.token, step + 1)) return;
      out.decoded.seqs.push(seq);
      out.decoded.tokens.push(r);
      out.decoded.ends.push(endOf(seq, r.token));
    });
  }

  /** What verify rows committed: final tokens up to the first that ends the sequence (the rest are dropped). */
  private commitVerified(commits: readonly Commit[], out: SlotStep): void {
    if (commits.length > 0) out.progressed = true;
    for (const { seq, tokens } of commits) {
      if (seq.status !== "running" || seq.cancelled) continue;
      const firstNew = seq.numTokens - tokens.length;
      let used = 0;
      let end: SequenceEnd | null = null;
      while (used < tokens.length && end === null) end = endOfAt(seq, firstNew + used, tokens[used++].token);
      if (used < tokens.length) seq.truncateTokens(firstNew + used); // committed past the end: not part of the output
      out.committed.push({ seq, tokens: tokens.slice(0, used), end });
    }
  }

  /** The sequences held for a verify pass that failed. */
  private failHeld(error: unknown, out: SlotStep): void {
    for (const seq of this.scheduler.running) if (seq.heldForVerify) out.failed.push({ seq, error });
  }

  /** Running sequences whose compute limit (the shared prompt of n samples) is reached: their samples fork now. */
  private collectPrefilled(out: SlotStep): void {
    for (const seq of this.scheduler.running) {
      if (seq.computeLimit === null || seq.numComputedTokens < seq.computeLimit) continue;
      seq.computeLimit = null;
      out.prefilled.push(seq);
      out.progressed = true;
    }
  }

  /**
   * Swap preemption's copies, before the step's forward: preempted sequences' KV to host memory (their pages are
   * free but not yet rewritten), readmitted ones' back into their new pages. A read that fails leaves the sequence
   * to recompute; a write that fails fails its request (its KV would be garbage).
   */
  private async swap(batch: ScheduledBatch, out: SlotStep): Promise<void> {
    const model = this.model;
    for (const { seq, pages } of batch.swapOut) {
      try {
        if (model.readKvPages === undefined) throw new Error("the model cannot copy KV to host memory");
        seq.swapped = { tokens: seq.swapped!.tokens, data: await model.readKvPages(Int32Array.from(pages)) };
      } catch {
        seq.swapped = null; // readmitted by recompute instead
      }
    }
    for (const { seq, pages, data } of batch.swapIn) {
      try {
        await model.writeKvPages!(Int32Array.from(pages), data);
      } catch (e) {
        batch.seqs = batch.seqs.filter((s) => s.seq !== seq);
        const message = `KV swap-in failed for sequence ${seq.id}: ${(e as Error).message}; the request cannot continue`;
        out.failed.push({ seq, error: new NativeError(message, { cause: e }) });
      }
    }
  }

  metrics(): ModelMetrics {
    const s = this.blockManager.stats();
    return {
      name: this.name,
      running: this.scheduler.running.length,
      waiting: this.scheduler.waiting.length,
      kvPagesUsed: s.usedPages,
      kvPagesFree: s.freePages,
      kvPagesTotal: s.numPages,
      kvPagesCached: s.cachedFreePages,
      prefixCacheHitRate: s.queriedTokens === 0 ? 0 : s.hitTokens / s.queriedTokens,
      prefixQueriedTokens: s.queriedTokens,
      prefixHitTokens: s.hitTokens,
      preemptions: this.scheduler.numPreemptions,
      kvSwapOuts: this.scheduler.numSwapOuts,
      kvSwapIns: this.scheduler.numSwapIns,
      verifyingSequences: this.verifier?.numTracked ?? 0,
      stepTokenBins: this.stepTokens.bins.slice(),
      stepTokensSum: this.stepTokens.sum,
    };
  }
}

/** Whether `token`, just appended as the sequence's newest, ends it. */
function endOf(seq: Sequence, token: number): SequenceEnd | null {
  return endOfAt(seq, seq.numTokens - 1, token);
}

/** Whether `token` at position `pos` of the sequence ends it: a stop id (or eos), its format's end, else its last
 *  allowed token. */
function endOfAt(seq: Sequence, pos: number, token: number): SequenceEnd | null {
  if (seq.stopIds.has(token)) return "stop";
  if (seq.constraint?.ends(token, pos)) return "stop"; // the format is complete (its stop token, even with ignoreEos)
  return pos + 1 - seq.numPromptTokens >= seq.maxCompletionTokens ? "length" : null;
}
