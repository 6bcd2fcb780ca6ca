// The Program abstraction (Dynasor): a reasoning program holds how sure it is (`certaindex`, in [0, 1]), how much
// compute it has spent and may spend (`knob`: branches, probe intervals, tree iterations...) and its own `state`.
// It runs one round per `execute(ctx)`, recomputes its certaindex with `updateCertaindex()`, then asks the runtime
// for the next round; the runtime's intra-program policy (ts/certaindex/policies.ts) grants or denies it.
// Programs reach the engine only through their ProgramContext, which tags every request with the program's
// scheduling metadata (gang / SJF), its AbortSignal, and counts the tokens it generates.
import type { ForkOptions, GenerateRequest } from "../engine/request.js";
import type { RequestHandle } from "../engine/handle.js";
import type { DeterminismStats } from "../engine/outputs.js";
import type { PolicySpec } from "../certaindex/policies.js";
import type { ProgramUsage } from "./usage.js";

/** A program's compute: `used` units spent so far, `max` the cap (a round may spend several units). */
export interface Knob {
  used: number;
  max: number;
}

/** What a request is for, in the per-purpose token accounting ("generate", "probe", "reward", ...). */
export type TokenPurpose = string;

/** The engine as one program sees it. */
export interface ProgramContext {
  /** Unique per run; every request carries it as metadata.programId (gang scheduling). */
  readonly programId: string;
  /** Aborted when the caller aborts the run; passed to every request. */
  readonly signal: AbortSignal;
  /** engine.submit with the program's metadata and signal; generated tokens count towards tokensUsed. */
  submit(request: GenerateRequest, purpose?: TokenPurpose): RequestHandle;
  /** engine.fork likewise (KV shared with the parent while it is alive). */
  fork(parent: RequestHandle, options?: ForkOptions, purpose?: TokenPurpose): RequestHandle;
  /** A prompt's token ids exactly as submit() tokenizes it (text: special tokens added unless told otherwise). */
  encode(prompt: string | readonly number[], options?: { model?: string; addSpecialTokens?: boolean }): number[];
  /** Generated tokens of this program's finished requests so far. */
  readonly tokensUsed: number;
  /**
   * A model's KV state on the engine (default: the first model): what a program that adds optional work
   * (speculation) checks so that the work yields to memory pressure. Optional: contexts without an engine omit it.
   */
  kvState?(model?: string): KvState;
  /** A model's `<think>` / `</think>` token ids (null: it has no thought tokens): where a structured answer starts.
   * Optional: contexts without an engine omit it (structured answers are then read from the text as it is). */
  thinkTokens?(model?: string): { start: number; end: number } | null;
  /** Token ids as text, special tokens left out (as the engine's output text is). Optional, as thinkTokens. */
  decode?(ids: readonly number[], options?: { model?: string }): string;
  /**
   * The run is deterministic (RunOptions.deterministic): every request and fork decodes with decode-verify-rollback,
   * so its streamed tokens and their signals are final, but when they arrive still depends on what else runs. A
   * program then orders its decisions by positions and indices, never by arrival. Optional: absent = false.
   */
  readonly deterministic?: boolean;
  /**
   * Deterministic runs: the request's samples count at most `generatedTokens` tokens each towards tokensUsed, from
   * now on and after it settles (the position a decision of the program cut it at: what the engine generated past it
   * before the abort landed depends on timing). While it runs it counts exactly that many, so a program sets it only
   * once every sample has streamed at least that many tokens. Each call replaces the last; Infinity lifts it.
   * No effect on other runs (they count what was generated).
   */
  countUpTo?(handle: RequestHandle, generatedTokens: number): void;
}

/** See ProgramContext.kvState. */
export interface KvState {
  freePages: number;
  totalPages: number;
  /** Sequences preempted since the engine started. */
  preemptions: number;
}

export interface Program {
  /** Short name for reports ("sc", "cot-probe", ...). */
  readonly name: string;
  certaindex: number;
  readonly knob: Knob;
  /** True once the program cannot or need not run another round (e.g. the chain of thought ended). */
  readonly done: boolean;
  /** One round. Must advance knob.used (or set done), so the run terminates. */
  execute(ctx: ProgramContext): Promise<void>;
  /** Recomputes (and stores) certaindex from the state after a round. */
  updateCertaindex(): number;
  /** The program's current best answer (null: none yet). */
  answer(): string | null;
  /** Most tokens the program may generate if it runs to its cap (reported as the budget). */
  readonly tokenBudget: number;
  /** The intra-program policy used when the caller gives none. */
  readonly defaultPolicy?: PolicySpec;
  /** For baseline-length: 1 − mean tokens per unit / token cap per unit (short outputs = easy query). */
  lengthSignal?(): number;
  /**
   * Whether the program runs under RunOptions.deterministic: true when every decision it takes reads only its
   * requests' streamed (verified) tokens and their signals, in an order of its own (indices, positions), never
   * arrival order, wall clock or engine load; a string says why not (the runtime refuses the run with it). Absent:
   * not declared, refused.
   */
  readonly deterministic?: true | string;
}

/** The state after one round. */
export interface RoundRecord {
  round: number;
  certaindex: number;
  knobUsed: number;
  tokensUsed: number;
  answer: string | null;
  lengthSignal?: number;
}

/** Why a run ended: the policy saw enough certainty ("certain"/"curve"), the knob cap, the program ended on its
 * own ("done"), or the caller aborted. */
export type StopReason = "certain" | "curve" | "cap" | "done" | "aborted";

export interface ProgramResult {
  programId: string;
  program: string;
  answer: string | null;
  certaindex: number;
  rounds: number;
  knob: Knob;
  /** Every token the program's requests generated (probes and reward-model calls included). */
  tokensUsed: number;
  tokensByPurpose: Record<TokenPurpose, number>;
  tokenBudget: number;
  history: RoundRecord[];
  stopReason: StopReason;
  policy: PolicySpec;
  elapsedMs: number;
  /** Deterministic runs (RunOptions.deterministic): what it cost. These figures depend on the load, unlike the rest. */
  determinism?: ProgramDeterminism;
  /** Reasoning tokens, the estimated saving of an early exit, branches started and pruned (ts/programs/usage.ts). */
  usage: ProgramUsage;
}

/** The cost of a deterministic run, summed over its requests (each request's GenerationOutput.determinism). */
export interface ProgramDeterminism extends DeterminismStats {
  /**
   * Tokens the engine generated past the points where the program's decisions cut its requests
   * (ProgramContext.countUpTo): how many depends on timing, so tokensUsed leaves them out.
   */
  tokensPastCuts: number;
  /** ProgramUsage.branchesPruned of a deterministic run: whether a branch ended before the exit stopped it depends on
   * timing. */
  branchesPruned: number;
}

/** `{...defaults, ...options}` where options' undefined fields keep the default (`{maxTokens: undefined}` too). */
export function withDefaults<D extends object, O extends object>(defaults: D, options: O): D & O {
  const out: Record<string, unknown> = { ...(defaults as Record<string, unknown>) };
  for (const [k, v] of Object.entries(options)) if (v !== undefined) out[k] = v;
  return out as D & O;
}
