// ProgramRuntime: runs reasoning programs on an Engine. Each round: execute → updateCertaindex → ask the policy
// for the next round. Every request a program makes carries the program's scheduling metadata (programId and
// programArrivalMs for gang scheduling; remainingKnob and meanTokensPerRound for SJF), refreshed on the program's
// live requests after every round, so the engine's inter-program policy orders whole programs.
import { setMaxListeners } from "node:events";
import type { Engine } from "../engine/engine.js";
import type { RequestHandle } from "../engine/handle.js";
import type { ForkOptions, GenerateRequest } from "../engine/request.js";
import type { SchedMetadata } from "../engine/sequence.js";
import { decide, validatePolicy, type PolicySpec } from "../certaindex/policies.js";
import { InvalidOptionError } from "../errors/index.js";
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
}

let nextProgram = 1;

/** Tracks one run's requests: metadata, signal, token accounting. */
class RunContext implements ProgramContext {
  readonly signal: AbortSignal;
  tokensUsed = 0;
  readonly tokensByPurpose: Record<TokenPurpose, number> = {};
  private readonly live = new Set<RequestHandle>();
  private readonly settled = new Set<Promise<unknown>>();
  private readonly controller = new AbortController();
  private readonly arrivalMs = Date.now();

  constructor(
    private readonly engine: Engine,
    readonly programId: string,
    private readonly program: Program,
    private readonly priority: number | undefined,
    outer: AbortSignal | undefined,
  ) {
    this.signal = outer ? AbortSignal.any([outer, this.controller.signal]) : this.controller.signal;
    // Every request of the program listens on it (DUCHESS keeps dozens alive): not a leak.
    setMaxListeners(0, this.signal);
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
        metadata: { ...this.metadata(), ...request.metadata },
        signal: this.signal,
      }),
      purpose,
    );
  }

  fork(parent: RequestHandle, options: ForkOptions = {}, purpose: TokenPurpose = "generate"): RequestHandle {
    return this.track(
      this.engine.fork(parent, {
        eagerDeltas: true,
        ...options,
        metadata: { ...this.metadata(), ...options.metadata },
        signal: this.signal,
      }),
      purpose,
    );
  }

  /** After a round: live requests see the new remaining knob and mean tokens per round. */
  refreshMetadata(): void {
    const m = this.metadata();
    for (const h of this.live) h.updateMetadata(m);
  }

  /** Aborts every request still running (the policy stopped the program) and waits for their accounting. */
  async finish(): Promise<void> {
    this.controller.abort();
    await Promise.all(this.settled);
  }

  private track(handle: RequestHandle, purpose: TokenPurpose): RequestHandle {
    this.live.add(handle);
    const p = handle.result.then(
      (out) => {
        this.tokensUsed += out.usage.generatedTokens;
        this.tokensByPurpose[purpose] = (this.tokensByPurpose[purpose] ?? 0) + out.usage.generatedTokens;
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
    const programId = options.programId ?? `p${nextProgram++}`;
    const ctx = new RunContext(this.engine, programId, program, options.priority, options.signal);
    const started = Date.now();
    const history: RoundRecord[] = [];
    let stopReason: StopReason;
    try {
      for (;;) {
        if (ctx.signal.aborted) {
          stopReason = "aborted";
          break;
        }
        const usedBefore = program.knob.used;
        await program.execute(ctx);
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
    };
  }
}
