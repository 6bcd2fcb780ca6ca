// Self-consistency (Wang et al.) with certaindex (Dynasor): each round samples `branchesPerRound` more branches of
// one prompt, all sharing the prompt's KV (one request with n samples; later rounds hit the prefix cache), and the
// answer is the majority vote. Certaindex is the normalised answer entropy H̃ over the answer clusters, so a policy
// can stop once the branches agree. Branch i always uses seed + i, so a run capped at k branches sees exactly the
// first k branches of a longer run: traces of one long run replay every cap (calibration, benchmarks). With
// `structured`, every branch's answer is the format's and the vote is over equal values (certaindex unchanged).
import { InvalidOptionError } from "../errors/index.js";
import { entropyCertaindex, majorityVote, type AnswerEquivalence } from "../certaindex/signals.js";
import type { PolicySpec } from "../certaindex/policies.js";
import { withDefaults, type Knob, type Program, type ProgramContext } from "./program.js";
import { answerTaskOf, answerText } from "./structuredAnswers.js";
import type { BranchSampling } from "./task.js";

export interface SelfConsistencyOptions extends BranchSampling {
  /** Branch cap (default 16). */
  maxBranches?: number;
  /** Branches sampled per round (default 4, at most maxBranches). */
  branchesPerRound?: number;
  topK?: number;
  stop?: string[];
  /** Reads a branch's answer from its text (default: the task's). */
  extractAnswer?: (text: string) => string | null;
  /** When two answers are the same answer (default: the task's). */
  equivalent?: AnswerEquivalence;
}

export interface Branch {
  text: string;
  answer: string | null;
  tokens: number;
  finishReason: string;
}

export class SelfConsistency implements Program {
  readonly name = "sc";
  certaindex = 0;
  readonly knob: Knob;
  readonly state: { branches: Branch[] } = { branches: [] };
  readonly tokenBudget: number;
  readonly defaultPolicy: PolicySpec;
  private readonly opts: Required<
    Omit<SelfConsistencyOptions, "model" | "topP" | "topK" | "stop" | "task" | "structured">
  > &
    SelfConsistencyOptions;
  private promptIds: readonly number[] | null = null;

  constructor(options: SelfConsistencyOptions) {
    const maxBranches = options.maxBranches ?? 16;
    if (!Number.isInteger(maxBranches) || maxBranches < 1)
      throw new InvalidOptionError(`sc.maxBranches must be an integer ≥ 1, got ${maxBranches}`, {
        field: "sc.maxBranches",
      });
    const branchesPerRound = Math.min(options.branchesPerRound ?? 4, maxBranches);
    if (!Number.isInteger(branchesPerRound) || branchesPerRound < 1)
      throw new InvalidOptionError(`sc.branchesPerRound must be an integer ≥ 1, got ${branchesPerRound}`, {
        field: "sc.branchesPerRound",
      });
    const task = answerTaskOf(options);
    this.opts = {
      ...withDefaults(
        {
          maxTokens: 256,
          temperature: 0.8,
          seed: 0,
          extractAnswer: (t: string) => task.extractAnswer(t),
          equivalent: (a: string, b: string) => task.equivalent(a, b),
        },
        options,
      ),
      maxBranches,
      branchesPerRound,
    };
    this.knob = { used: 0, max: maxBranches };
    this.tokenBudget = maxBranches * this.opts.maxTokens;
    // Stop once the branches agree (H̃ ≥ 0.6), checked from the first round on; `calibrate` finds better values.
    this.defaultPolicy = { kind: "threshold", threshold: 0.6, detectAt: branchesPerRound };
  }

  /** SC never ends on its own: the policy (at the latest the branch cap) stops it. */
  readonly done = false;
  /** Deterministic runs: a round awaits all its branches and votes in sample order, so nothing depends on timing. */
  readonly deterministic = true;

  async execute(ctx: ProgramContext): Promise<void> {
    const n = Math.min(this.opts.branchesPerRound, this.knob.max - this.knob.used);
    const o = this.opts;
    const handle = ctx.submit({
      prompt: this.promptIds ?? o.prompt,
      n,
      maxTokens: o.maxTokens,
      temperature: o.temperature,
      topP: o.topP,
      topK: o.topK,
      stop: o.stop,
      seed: o.seed + this.knob.used,
      model: o.model,
      structured: o.structured,
    });
    const out = await handle.result;
    this.promptIds ??= out.promptTokens; // later rounds reuse the ids (and hit the prefix cache)
    for (const s of out.samples) {
      if (s.finishReason === "aborted") continue; // cut short by the caller's signal: not a vote
      const text = answerText(ctx, s, o);
      this.state.branches.push({
        text: s.text,
        answer: text === null ? null : o.extractAnswer(text),
        tokens: s.tokens.length,
        finishReason: s.finishReason,
      });
    }
    this.knob.used += n;
  }

  updateCertaindex(): number {
    this.certaindex = entropyCertaindex(this.answers(), this.opts.equivalent);
    return this.certaindex;
  }

  answer(): string | null {
    return majorityVote(this.answers(), this.opts.equivalent).answer;
  }

  lengthSignal(): number {
    const b = this.state.branches;
    if (b.length === 0) return 0;
    return 1 - b.reduce((s, x) => s + x.tokens, 0) / b.length / this.opts.maxTokens;
  }

  private answers(): Array<string | null> {
    return this.state.branches.map((b) => b.answer);
  }
}
