// ProgramRuntime: runs reasoning programs on an Engine. Each round: execute → updateCertaindex → ask the policy
// for the next round. Every request a program makes carries the program's scheduling metadata (programId and
// programArrivalMs for gang scheduling; remainingKnob and meanTokensPerRound for SJF), refreshed on the program's
// live requests after every round, so the engine's inter-program policy orders whole programs.
import { setMaxListeners } from "node:events";
import type { Engine } from "../engine/engine.js";
import type { RequestHandle } from "../engine/handle.js";
import type { DeterminismStats } from "../engine/outputs.js";
import type { ForkOptions, GenerateRequest } from "../engine/request.js";
import type { SchedMetadata } from "../engine/sequence.js";
import { decide, validatePolicy, type PolicySpec } from "../certaindex/policies.js";
import { InvalidOptionError, UnsupportedError } from "../errors/index.js";
import { NON_BRANCH_PURPOSES, programUsage } from "./usage.js";
import type {
  KvState,
  Program,
  ProgramContext,
  ProgramResult,
  RoundRecord,
  StopReason,
  TokenPurpose,
} from "./program.js";

export interface RunOptions {
  /** Intra-program policy; default: the program's defaultPolicy, else baseline-even (run to the cap). */
  policy?: PolicySpec;
  /** Aborting stops the program's requests at the next engine step; the run resolves with stopReason "aborted". */
  signal?: AbortSignal;
  /** Scheduling priority of every request of the program (higher first). */
  priority?: number;
  /** Called after every round (progress display). */
  onRound?: (record: RoundRecord, program: Program) => void;
  /** Program id (default: "p<counter>"); must be unique among concurrently running programs. */
  programId?: string;
  /**
   * The same answer, certaindex trace, votes, rounds and token counts whatever else the engine runs: every request
   * and fork of the program is `deterministic` (decode-verify-rollback: only verified tokens, logprobs, confidences
   * are streamed), and the program orders its decisions by positions and indices (Program.deterministic). A program
   * that cannot is refused (UnsupportedError, field "deterministic"). Default false.
   */
  deterministic?: boolean;
  /** Snapshot and restore (ts/programs/snapshot.ts): not for callers, who use runWithHandoff / restoreProgram there. */
  hooks?: RunHooks;
}

/** What snapshot.ts hooks into a run: the context the program sees, and the rounds a restored run has done. */
export interface RunHooks {
  /** Returns the context the program sees instead of the run's (snapshot.ts records and replays requests there). */
  context?(ctx: ProgramContext): ProgramContext;
  /** A restored run: the rounds done before (their records are these, recomputed but not reported again through
   *  onRound nor granted again) and the tokens counted before, by purpose. */
  restored?: { history: readonly RoundRecord[]; tokensByPurpose: Record<TokenPurpose, number>; elapsedMs: number };
  /** A replayed round's recomputed record differs from the one restored (the snapshot is not this program's). */
  onReplayMismatch?(restored: RoundRecord, recomputed: RoundRecord): never;
}

/** Throws the typed refusal when `program` cannot run deterministically (Program.deterministic). */
export function checkDeterministic(program: Program): void {
  const d = program.deterministic;
  if (d === true) return;
  const why = d ?? "it does not declare that its decisions are independent of timing (Program.deterministic)";
  throw new UnsupportedError(
    `program ${program.name} does not support deterministic: true: ${why}; drop deterministic`,
    {
      field: "deterministic",
    },
  );
}

let nextProgram = 1;

/** One request of a run, for its token accounting. */
interface Tracked {
  purpose: TokenPurpose;
  /** Samples of the request (n). */
  samples: number;
  /** Deterministic runs: most generated tokens counted per sample (countUpTo); Infinity: all. */
  limit: number;
  /** Deterministic runs: each sample's generated tokens once the request has settled (null before). */
  generated: number[] | null;
}

/** Tracks one run's requests: metadata, signal, token accounting. */
class RunContext implements ProgramContext {
  readonly signal: AbortSignal;
  /** Tokens of settled requests (other runs; a deterministic run's are counted from `counted`). */
  private settledTokens = 0;
  private readonly settledByPurpose: Record<TokenPurpose, number> = {};
  /** Deterministic runs: every request, settled ones too (a limit may still move after a request settles). */
  private readonly counted = new Map<RequestHandle, Tracked>();
  /** Deterministic runs: what verification cost, summed over the requests (ProgramResult.determinism). */
  readonly determinism: DeterminismStats = { verifyPasses: 0, rollbacks: 0, recomputedTokens: 0, exactTokens: 0 };
  /** Branch samples started and pruned (ProgramResult.usage). */
  readonly branches = { started: 0, pruned: 0 };
  private readonly live = new Map<RequestHandle, Tracked>();
  private readonly settled = new Set<Promise<unknown>>();
  private readonly controller = new AbortController();
  private readonly arrivalMs = Date.now();

  constructor(
    private readonly engine: Engine,
    readonly programId: string,
    private readonly program: Program,
    private readonly priority: number | undefined,
    outer: AbortSignal | undefined,
    readonly deterministic: boolean,
  ) {
    this.signal = outer ? AbortSignal.any([outer, this.controller.signal]) : this.controller.signal;
    // Every request of the program listens on it (DUCHESS keeps dozens alive): not a leak.
    setMaxListeners(0, this.signal);
  }

  /**
   * Generated tokens of the program so far: settled requests', plus, in a deterministic run, a live request's
   * limit (countUpTo: the program knows each of its samples has streamed that many), so that a round's count never
   * depends on whether a request happened to settle before the round ended.
   */
  get tokensUsed(): number {
    let n = this.settledTokens;
    for (const t of this.counted.values()) n += countOf(t);
    return n;
  }

  get tokensByPurpose(): Record<TokenPurpose, number> {
    const out = { ...this.settledByPurpose };
    for (const t of this.counted.values()) out[t.purpose] = (out[t.purpose] ?? 0) + countOf(t);
    return out;
  }

  /** Deterministic runs: tokens generated past the limits (ProgramDeterminism.tokensPastCuts). */
  get tokensPastCuts(): number {
    let n = 0;
    for (const t of this.counted.values())
      if (t.generated !== null) n += t.generated.reduce((a, b) => a + b, 0) - countOf(t);
    return n;
  }

  /** A restored run: counts the tokens its earlier part generated (RunHooks.restored). */
  countBefore(byPurpose: Record<TokenPurpose, number>): void {
    for (const [purpose, n] of Object.entries(byPurpose)) {
      this.settledTokens += n;
      this.settledByPurpose[purpose] = (this.settledByPurpose[purpose] ?? 0) + n;
    }
  }

  countUpTo(handle: RequestHandle, generatedTokens: number): void {
    const t = this.counted.get(handle);
    if (t !== undefined) t.limit = generatedTokens;
  }

  metadata(): SchedMetadata {
    const { used, max } = this.program.knob;
    const m: SchedMetadata = {
      programId: this.programId,
      programArrivalMs: this.arrivalMs,
      remainingKnob: Math.max(0, max - used),
      // Before the first round there is no measurement: assume a round costs its share of the budget.
      meanTokensPerRound: used > 0 ? this.tokensUsed / used : this.program.tokenBudget / Math.max(1, max),
    };
    if (this.priority !== undefined) m.priority = this.priority;
    return m;
  }

  encode(prompt: string | readonly number[], options: { model?: string; addSpecialTokens?: boolean } = {}): number[] {
    if (typeof prompt !== "string") return [...prompt];
    const codec = this.engine.tokenizer(options.model);
    if (!codec)
      throw new InvalidOptionError(
        `program ${this.program.name}: the prompt is text but the model has no tokenizer; pass token ids`,
        { field: "prompt" },
      );
    return codec.encode(prompt, { addSpecialTokens: options.addSpecialTokens ?? true });
  }

  thinkTokens(model?: string): { start: number; end: number } | null {
    // The vocabulary XGrammar reads (built once per tokenizer, kept): its think tokens are the ones the engine's
    // structured constraint treats as the thought's.
    return this.engine.tokenizer(model)?.grammarVocab?.().think ?? null;
  }

  decode(ids: readonly number[], options: { model?: string } = {}): string {
    const codec = this.engine.tokenizer(options.model);
    if (!codec)
      throw new InvalidOptionError(`program ${this.program.name}: the model has no tokenizer to decode with`, {
        field: "model",
      });
    const d = codec.createDetokenizer();
    let text = "";
    for (const id of ids) text += d.push(id);
    return text + d.flush();
  }

  kvState(model?: string): KvState {
    const m = this.engine.modelMetrics(model);
    return { freePages: m.kvPagesFree, totalPages: m.kvPagesTotal, preemptions: m.preemptions };
  }

  submit(request: GenerateRequest, purpose: TokenPurpose = "generate"): RequestHandle {
    // Programs steer their requests from deltas (probe verdicts fork and abort): they see each step's deltas before
    // the next step is scheduled.
    return this.track(
      this.engine.submit({
        eagerDeltas: true,
        ...request,
        ...(this.deterministic ? { deterministic: true } : {}),
        metadata: { ...this.metadata(), ...request.metadata },
        signal: this.signal,
      }),
      purpose,
      request.n ?? 1,
    );
  }

  fork(parent: RequestHandle, options: ForkOptions = {}, purpose: TokenPurpose = "generate"): RequestHandle {
    // A fork inherits its parent's deterministic; set anyway, so that no option of the program can turn it off.
    return this.track(
      this.engine.fork(parent, {
        eagerDeltas: true,
        ...options,
        ...(this.deterministic ? { deterministic: true } : {}),
        metadata: { ...this.metadata(), ...options.metadata },
        signal: this.signal,
      }),
      purpose,
      1,
    );
  }

  /** After a round: live requests see the new remaining knob and mean tokens per round. */
  refreshMetadata(): void {
    const m = this.metadata();
    for (const h of this.live.keys()) h.updateMetadata(m);
  }

  /** Aborts every request still running (the policy stopped the program) and waits for their accounting. */
  async finish(): Promise<void> {
    this.controller.abort();
    await Promise.all(this.settled);
  }

  private track(handle: RequestHandle, purpose: TokenPurpose, samples: number): RequestHandle {
    const t: Tracked = { purpose, samples, limit: Number.POSITIVE_INFINITY, generated: null };
    this.live.set(handle, t);
    // Branches for ProgramResult.usage: every sample of a request that is not a probe or a reward call.
    const branch = !NON_BRANCH_PURPOSES.includes(purpose);
    if (branch) this.branches.started += samples;
    if (this.deterministic) this.counted.set(handle, t);
    const p = handle.result.then(
      (out) => {
        if (branch)
          for (const s of out.samples)
            if (s.finishReason === "aborted" || s.finishReason === "low_confidence") this.branches.pruned++;
        if (this.deterministic) {
          t.generated = out.samples.map((s) => s.tokens.length);
          const d = this.determinism;
          if (out.determinism) {
            d.verifyPasses += out.determinism.verifyPasses;
            d.rollbacks += out.determinism.rollbacks;
            d.recomputedTokens += out.determinism.recomputedTokens;
            d.exactTokens += out.determinism.exactTokens;
          }
          return;
        }
        this.settledTokens += out.usage.generatedTokens;
        this.settledByPurpose[purpose] = (this.settledByPurpose[purpose] ?? 0) + out.usage.generatedTokens;
      },
      () => undefined,
    );
    this.settled.add(p);
    void p.finally(() => {
      this.live.delete(handle);
      this.settled.delete(p);
    });
    return handle;
  }
}

/**
 * A deterministic run's count of one request: settled, each sample's tokens up to the limit; running, the limit
 * per sample when one is set (the program knows each sample has streamed that many), else nothing yet.
 */
function countOf(t: Tracked): number {
  if (t.generated === null) return Number.isFinite(t.limit) ? t.limit * t.samples : 0;
  return t.generated.reduce((n, g) => n + Math.min(g, t.limit), 0);
}

export class ProgramRuntime {
  constructor(readonly engine: Engine) {}

  /** Whether `program` may run another round under `policy` (the intra-program decision). */
  grant(program: Program, policy: PolicySpec, tokensUsed: number): { grant: boolean; reason: StopReason | "continue" } {
    if (program.done) return { grant: false, reason: "done" };
    const lengthSignal = program.lengthSignal?.();
    return decide(policy, {
      certaindex: program.certaindex,
      used: program.knob.used,
      max: program.knob.max,
      tokensUsed,
      lengthSignal,
    });
  }

  /** Runs `program` round by round until the policy denies a round, the program ends, or the signal aborts. */
  async run(program: Program, options: RunOptions = {}): Promise<ProgramResult> {
    const policy = validatePolicy(options.policy ?? program.defaultPolicy ?? { kind: "baseline-even" });
    const deterministic = options.deterministic ?? false;
    if (deterministic) checkDeterministic(program);
    const programId = options.programId ?? `p${nextProgram++}`;
    const ctx = new RunContext(this.engine, programId, program, options.priority, options.signal, deterministic);
    const hooks = options.hooks;
    if (hooks?.restored) ctx.countBefore(hooks.restored.tokensByPurpose);
    const seen = hooks?.context?.(ctx) ?? ctx;
    const replay = hooks?.restored?.history ?? [];
    const started = Date.now() - (hooks?.restored?.elapsedMs ?? 0);
    const history: RoundRecord[] = [];
    let stopReason: StopReason;
    try {
      for (;;) {
        if (ctx.signal.aborted) {
          stopReason = "aborted";
          break;
        }
        const usedBefore = program.knob.used;
        await program.execute(seen);
        if (ctx.signal.aborted) {
          stopReason = "aborted";
          break;
        }
        if (program.knob.used <= usedBefore && !program.done) {
          throw new Error(
            `program ${program.name}: execute() neither advanced knob.used (${usedBefore}) nor set done; it would never end`,
          );
        }
        const certaindex = program.updateCertaindex();
        const record: RoundRecord = {
          round: history.length + 1,
          certaindex,
          knobUsed: program.knob.used,
          tokensUsed: ctx.tokensUsed,
          answer: program.answer(),
        };
        const lengthSignal = program.lengthSignal?.();
        if (lengthSignal !== undefined) record.lengthSignal = lengthSignal;
        const restored = replay[history.length];
        if (restored !== undefined) {
          // A replayed round: its decisions were taken before the snapshot; the record is the one reported then.
          if (restored.certaindex !== record.certaindex || restored.answer !== record.answer)
            hooks!.onReplayMismatch?.(restored, record);
          // Granted then too: a snapshot is taken only of a run that went on past its last round.
          history.push({ ...restored });
          ctx.refreshMetadata();
          continue;
        }
        history.push(record);
        options.onRound?.(record, program);
        const d = this.grant(program, policy, ctx.tokensUsed);
        if (!d.grant) {
          stopReason = d.reason === "continue" ? "cap" : d.reason;
          break;
        }
        ctx.refreshMetadata();
      }
    } finally {
      await ctx.finish();
    }
    return {
      programId,
      program: program.name,
      answer: program.answer(),
      certaindex: program.certaindex,
      rounds: history.length,
      knob: { ...program.knob },
      tokensUsed: ctx.tokensUsed,
      tokensByPurpose: { ...ctx.tokensByPurpose },
      tokenBudget: program.tokenBudget,
      history,
      stopReason,
      policy,
      elapsedMs: Date.now() - started,
      ...(deterministic
        ? {
            determinism: {
              ...ctx.determinism,
              tokensPastCuts: ctx.tokensPastCuts,
              branchesPruned: ctx.branches.pruned,
            },
          }
        : {}),
      usage: programUsage(
        { stopReason, knob: program.knob, tokensUsed: ctx.tokensUsed, certaindex: program.certaindex },
        // A deterministic run reports its pruned branches under determinism (they depend on timing).
        deterministic ? { started: ctx.branches.started } : ctx.branches,
      ),
    };
  }
}
