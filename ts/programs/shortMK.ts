// Short-m@k (Hassid et al. 2025, "Don't Overthink it. Preferring Shorter Thinking Chains for Improved LLM
// Reasoning"): start k branches at once, stop everything as soon as the first m of them finish, and answer by
// majority vote over those m; a tie goes to the answer of the shortest branch among the tied. Shorter chains are
// more often right, and the k − m longest are never paid for in full. The k branches are one request with n = k
// samples (they share the prompt's KV); its stream says when each sample ends, and once m have ended the request is
// aborted, which stops the rest at the next engine step and frees their pages. One execute() runs the whole
// program; certaindex is the answer entropy H̃ of the m answers (reported; no policy acts on it, there is no next
// round). Branch i uses seed + i, as in SelfConsistency.
import { InvalidOptionError } from "../errors/index.js";
import { entropyCertaindex, majorityVote, type AnswerEquivalence } from "../certaindex/signals.js";
import type { PolicySpec } from "../certaindex/policies.js";
import type { RequestHandle } from "../engine/handle.js";
import type { FinishReason, GenerationOutput } from "../engine/outputs.js";
import { withDefaults, type Knob, type Program, type ProgramContext } from "./program.js";
import { answerTaskOf, answerText } from "./structuredAnswers.js";
import type { BranchSampling } from "./task.js";

/** Short-m@k's knobs. A branch cut by maxTokens counts as finished (it ended). */
export interface ShortMKOptions extends BranchSampling {
  /** Branches started (default 8). */
  k?: number;
  /** Finished branches that end the program and vote (default 3, at most k). */
  m?: number;
}

/** A branch among the first m to finish. */
export interface ShortBranch {
  /** The sample index (branch i used seed + i). */
  index: number;
  text: string;
  answer: string | null;
  tokens: number;
  finishReason: FinishReason;
}

export class ShortMK implements Program {
  readonly name = "short-m@k";
  certaindex = 0;
  /** Branches: all k are started by the one round. */
  readonly knob: Knob;
  readonly state: {
    /** The first m branches to finish, in finishing order (the vote's input). */
    finished: ShortBranch[];
    /** Sample indices in the order their end was streamed (every branch that ended before the abort landed);
     *  deterministic runs: the m chosen, shortest first. */
    finishOrder: number[];
    /** Branches stopped by the abort once m had finished. */
    aborted: number;
  } = { finished: [], finishOrder: [], aborted: 0 };
  readonly tokenBudget: number;
  /** One round does everything: no policy decision is left to make. */
  readonly defaultPolicy: PolicySpec = { kind: "baseline-even" };
  private readonly k: number;
  private readonly m: number;
  private readonly o: Required<Pick<ShortMKOptions, "maxTokens" | "temperature" | "seed">> & ShortMKOptions;
  private readonly extract: (text: string | null) => string | null;
  private readonly eq: AnswerEquivalence;
  private ran = false;

  constructor(options: ShortMKOptions) {
    this.k = options.k ?? 8;
    if (!Number.isInteger(this.k) || this.k < 1)
      throw new InvalidOptionError(`short-m@k.k must be an integer ≥ 1, got ${this.k}`, { field: "short-m@k.k" });
    this.m = options.m ?? Math.min(3, this.k);
    if (!Number.isInteger(this.m) || this.m < 1 || this.m > this.k)
      throw new InvalidOptionError(`short-m@k.m must be an integer in [1, k = ${this.k}], got ${this.m}`, {
        field: "short-m@k.m",
      });
    this.o = withDefaults({ maxTokens: 256, temperature: 0.8, seed: 0 }, options);
    if (!Number.isInteger(this.o.maxTokens) || this.o.maxTokens < 1)
      throw new InvalidOptionError(`short-m@k.maxTokens must be an integer ≥ 1, got ${this.o.maxTokens}`, {
        field: "short-m@k.maxTokens",
      });
    const task = answerTaskOf(options);
    this.extract = (text) => (text === null ? null : task.extractAnswer(text));
    this.eq = (a, b) => task.equivalent(a, b);
    this.knob = { used: 0, max: this.k };
    this.tokenBudget = this.k * this.o.maxTokens;
  }

  get done(): boolean {
    return this.ran;
  }

  /** Deterministic runs: the first m are the m shortest (ties by index), decided once no running branch could
   *  still be shorter (see executeByLength). */
  readonly deterministic = true;

  async execute(ctx: ProgramContext): Promise<void> {
    const o = this.o;
    const handle = ctx.submit({
      prompt: o.prompt,
      n: this.k,
      maxTokens: o.maxTokens,
      temperature: o.temperature,
      topP: o.topP,
      seed: o.seed,
      model: o.model,
      structured: o.structured,
    });
    this.knob.used = this.k;
    this.ran = true;
    if (ctx.deterministic) return this.executeByLength(ctx, handle);
    const order = this.state.finishOrder;
    // Watch the samples end as the engine streams them; the m-th end aborts the request (the others stop at the next
    // step). A caller's abort ends the stream with every open sample "aborted": those are not finishes.
    for await (const d of handle) {
      if (d.finishReason === undefined || d.finishReason === "aborted") continue;
      order.push(d.sample);
      if (order.length === this.m) {
        handle.abort();
        break;
      }
    }
    const out = await handle.result;
    // Finishing order is length order (all k started together); ties (same step) keep the stream's order.
    this.state.finished = order.slice(0, this.m).map((i) => this.branchOf(ctx, out, i));
    this.state.aborted = out.samples.filter((s) => s.finishReason === "aborted").length;
  }

  /**
   * Deterministic runs: verified tokens arrive in chunks whose timing depends on the engine's load, so "first to
   * finish" is taken as what it means when all k decode in lockstep: the m shortest branches, ties to the lower
   * index. They are known once m branches have ended and every branch still running has streamed at least as many
   * tokens as the m-th shortest (it can only end longer). The rest are then aborted, and each branch counts at
   * most that many tokens (what lockstep decoding would have spent); `aborted` is k - m.
   */
  private async executeByLength(ctx: ProgramContext, handle: RequestHandle): Promise<void> {
    const streamed = new Array<number>(this.k).fill(0);
    const ended = new Map<number, number>(); // sample -> its length
    let chosen: number[] | null = null;
    for await (const d of handle) {
      streamed[d.sample] += d.tokens.length;
      if (d.finishReason === "aborted") continue; // the caller aborted the run
      if (d.finishReason !== undefined) ended.set(d.sample, streamed[d.sample]);
      if (ended.size < this.m) continue;
      const byLength = [...ended].sort((a, b) => a[1] - b[1] || a[0] - b[0]);
      const mth = byLength[this.m - 1][1];
      if (streamed.some((n, i) => !ended.has(i) && n < mth)) continue;
      chosen = byLength.slice(0, this.m).map(([i]) => i);
      ctx.countUpTo?.(handle, mth);
      handle.abort();
      break;
    }
    const out = await handle.result;
    if (chosen === null) return; // aborted by the caller before m branches ended
    this.state.finishOrder = chosen.slice();
    this.state.finished = chosen.map((i) => this.branchOf(ctx, out, i));
    this.state.aborted = this.k - this.m;
  }

  private branchOf(ctx: ProgramContext, out: GenerationOutput, i: number): ShortBranch {
    const s = out.samples[i];
    return {
      index: i,
      text: s.text,
      answer: this.extract(answerText(ctx, s, this.o)),
      tokens: s.tokens.length,
      finishReason: s.finishReason,
    };
  }

  updateCertaindex(): number {
    this.certaindex = entropyCertaindex(this.answers(), this.eq);
    return this.certaindex;
  }

  /** Majority vote of the first m answers; a tie goes to the answer of the shortest branch among the tied. */
  answer(): string | null {
    return majorityVote(this.answers(), this.eq).answer;
  }

  /** The m answers, shortest branch first (majorityVote breaks a tie by first seen: the shortest branch's answer). */
  private answers(): Array<string | null> {
    const byLength = this.state.finished.map((b, i) => ({ b, i })).sort((x, y) => x.b.tokens - y.b.tokens || x.i - y.i);
    return byLength.map(({ b }) => b.answer);
  }
}
