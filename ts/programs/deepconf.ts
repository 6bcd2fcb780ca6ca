// DeepConf (Fu et al., "Deep Think with Confidence", ICLR 2026): parallel thinking filtered by the model's own token
// confidence. Every trace asks the engine for its confidence (request.confidence: token confidence = -mean of the
// top-20 logprobs, group confidence = the mean over a sliding window; ts/engine/confidence.ts).
//   online   (the paper's Algorithm 2) warm-up: `warmup` traces run to the end; the stop threshold s is the
//            (100 - eta)-th percentile of their lowest group confidences (DeepConf-low keeps the top eta = 10%,
//            DeepConf-high the top 90%). Then traces run `parallel` at a time with the engine's stop rule at s (a
//            trace whose window mean falls below s ends "low_confidence" and does not vote); after every trace the
//            confidence-weighted majority's share is checked, and the program stops once it reaches `consensus`
//            (tau = 0.95) or the `budget` of traces is spent. The answer is the confidence-weighted vote (weight =
//            a trace's lowest group confidence) over the warm-up and the surviving traces.
//   offline  every trace of the budget runs to the end; the top eta% by the chosen measure (lowest group,
//            bottom-10% groups or tail) vote, weighted by that measure.
// certaindex = the weighted majority's share (the paper's consensus beta), so it reports what the other programs do.
// With `structured`, every trace's answer is the format's (the confidence of its constrained tokens is over the
// allowed ones, the engine's masked top-k) and the vote is over equal values.
import { InvalidOptionError } from "../errors/index.js";
import { confidenceCertaindex, measureOf, weightedMajority, type ConfidenceMeasure } from "../certaindex/signals.js";
import type { RequestHandle } from "../engine/handle.js";
import type { ConfidenceReport, FinishReason } from "../engine/outputs.js";
import { percentile } from "../probe/stats.js";
import type { Knob, Program, ProgramContext } from "./program.js";
import { answerTaskOf, answerText } from "./structuredAnswers.js";
import type { BranchSampling, ProgramTask } from "./task.js";

export type DeepConfVariant = "low" | "high";
export type { ConfidenceMeasure } from "../certaindex/signals.js";
export { measureOf } from "../certaindex/signals.js";

export interface DeepConfOptions extends BranchSampling {
  /** "low" keeps the top 10% (aggressive), "high" the top 90% (default "low"). */
  variant?: DeepConfVariant;
  mode?: "online" | "offline";
  /** Most traces (default 32; the paper's 512 scaled to this engine's batch). */
  budget?: number;
  /** Warm-up traces that set the threshold (default 16, the paper's N_init). */
  warmup?: number;
  /** Online: stop once the weighted majority holds this share of the weight (default 0.95). */
  consensus?: number;
  /** Tokens per confidence group (default 16: the paper's 2048 is for traces of thousands of tokens). */
  window?: number;
  /** Top logprobs per token confidence (default 20, the paper's). */
  topK?: number;
  /** Online: traces in flight at once after the warm-up (default 8). */
  parallel?: number;
  /** Offline: which confidence filters and weighs (default "lowest"). */
  measure?: ConfidenceMeasure;
}

export interface DeepConfTrace {
  index: number;
  answer: string | null;
  tokens: number;
  finishReason: FinishReason;
  confidence: ConfidenceReport | null;
  warmup: boolean;
}

export class DeepConf implements Program {
  readonly name: string;
  certaindex = 0;
  readonly knob: Knob;
  readonly tokenBudget: number;
  readonly state = {
    traces: [] as DeepConfTrace[],
    /** Online: the stop threshold set by the warm-up (null before it, or offline). */
    threshold: null as number | null,
    /** The traces that voted (online: warm-up and survivors; offline: the kept top eta%). */
    voters: [] as DeepConfTrace[],
    stop: null as "consensus" | "budget" | null,
  };
  private readonly o: Required<Omit<DeepConfOptions, "model" | "topP" | "task" | "structured">> &
    Pick<DeepConfOptions, "model" | "topP" | "structured">;
  private readonly task: ProgramTask;
  private done_ = false;

  constructor(options: DeepConfOptions) {
    const variant = options.variant ?? "low";
    if (variant !== "low" && variant !== "high")
      throw new InvalidOptionError(`deepconf.variant must be "low" or "high", got ${String(variant)}`, {
        field: "deepconf.variant",
      });
    const mode = options.mode ?? "online";
    if (mode !== "online" && mode !== "offline")
      throw new InvalidOptionError(`deepconf.mode must be "online" or "offline", got ${String(mode)}`, {
        field: "deepconf.mode",
      });
    const budget = options.budget ?? 32;
    const warmup = Math.min(options.warmup ?? 16, budget);
    for (const [k, v, lo] of [
      ["budget", budget, 1],
      ["warmup", warmup, 1],
      ["window", options.window ?? 16, 1],
      ["parallel", options.parallel ?? 8, 1],
    ] as const) {
      if (!Number.isInteger(v) || v < lo)
        throw new InvalidOptionError(`deepconf.${k} must be an integer ≥ ${lo}, got ${v}`, { field: `deepconf.${k}` });
    }
    const consensus = options.consensus ?? 0.95;
    if (!(consensus > 0 && consensus <= 1))
      throw new InvalidOptionError(`deepconf.consensus must be in (0, 1], got ${consensus}`, {
        field: "deepconf.consensus",
      });
    this.task = answerTaskOf(options);
    this.o = {
      prompt: options.prompt,
      variant,
      mode,
      budget,
      warmup,
      consensus,
      window: options.window ?? 16,
      topK: options.topK ?? 20,
      parallel: options.parallel ?? 8,
      measure: options.measure ?? "lowest",
      maxTokens: options.maxTokens ?? 256,
      temperature: options.temperature ?? 0.8,
      topP: options.topP,
      seed: options.seed ?? 0,
      model: options.model,
      structured: options.structured,
    };
    this.name = `deepconf-${variant}${mode === "offline" ? "-offline" : ""}`;
    this.knob = { used: 0, max: budget };
    this.tokenBudget = budget * this.o.maxTokens;
  }

  get done(): boolean {
    return this.done_;
  }

  /** Top share kept: 10% (low) or 90% (high). */
  private get eta(): number {
    return this.o.variant === "low" ? 10 : 90;
  }

  async execute(ctx: ProgramContext): Promise<void> {
    const prompt = ctx.encode(this.o.prompt, { model: this.o.model });
    if (this.o.mode === "offline") {
      const all = await Promise.all(
        Array.from({ length: this.o.budget }, (_, i) => this.trace(ctx, prompt, i, null, false).result),
      );
      this.state.traces.push(...all.filter((t): t is DeepConfTrace => t !== null));
      this.state.voters = keepTop(this.state.traces, this.o.measure, this.eta);
      this.state.stop = "budget";
    } else {
      await this.online(ctx, prompt);
    }
    this.knob.used = this.state.traces.length;
    this.done_ = true;
  }

  private async online(ctx: ProgramContext, prompt: number[]): Promise<void> {
    const warm = await Promise.all(
      Array.from({ length: this.o.warmup }, (_, i) => this.trace(ctx, prompt, i, null, true).result),
    );
    const finished = warm.filter((t): t is DeepConfTrace => t !== null);
    this.state.traces.push(...finished);
    const lows = finished.filter((t) => t.confidence !== null).map((t) => t.confidence!.lowestGroup);
    this.state.threshold = lows.length > 0 ? percentile(lows, 100 - this.eta) : null;
    this.state.voters = finished.filter((t) => t.finishReason !== "aborted");
    if (this.reachedConsensus() || this.o.warmup >= this.o.budget) {
      this.state.stop = this.reachedConsensus() ? "consensus" : "budget";
      return;
    }
    if (ctx.deterministic) return this.onlineInWaves(ctx, prompt);
    let next = this.o.warmup;
    const live = new Set<RequestHandle>();
    await new Promise<void>((resolve, reject) => {
      const launch = (): void => {
        while (this.state.stop === null && live.size < this.o.parallel && next < this.o.budget && !ctx.signal.aborted) {
          const { handle, result } = this.trace(ctx, prompt, next++, this.state.threshold, false);
          live.add(handle);
          result.then((t) => {
            live.delete(handle);
            if (t !== null && this.state.stop === null) {
              this.state.traces.push(t);
              // Traces the stop rule ended do not vote (the paper discards them).
              if (t.finishReason !== "low_confidence" && t.finishReason !== "aborted") this.state.voters.push(t);
              if (this.reachedConsensus()) this.state.stop = "consensus";
            }
            if (this.state.stop === null && next >= this.o.budget && live.size === 0) this.state.stop = "budget";
            if (this.state.stop !== null || ctx.signal.aborted) {
              for (const h of live) h.abort();
              if (live.size === 0) resolve();
              return;
            }
            launch();
          }, reject);
        }
        if (live.size === 0) resolve();
      };
      launch();
    });
  }

  /**
   * Deterministic runs: which trace finishes first depends on the engine's load, so the traces after the warm-up run
   * in waves of `parallel` (indices in order), each wave to its end, and are taken in index order: each one joins
   * the traces (and votes, unless the stop rule ended it) and the consensus is checked after it, as the paper's
   * one-at-a-time loop does. Traces of the wave after the one that reached consensus ran to their end (their tokens
   * count) but are not taken.
   */
  private async onlineInWaves(ctx: ProgramContext, prompt: number[]): Promise<void> {
    for (let next = this.o.warmup; next < this.o.budget && !ctx.signal.aborted;) {
      const size = Math.min(this.o.parallel, this.o.budget - next);
      const wave = await Promise.all(
        Array.from({ length: size }, (_, i) => this.trace(ctx, prompt, next + i, this.state.threshold, false).result),
      );
      next += size;
      for (const t of wave) {
        if (t === null) continue; // aborted by the caller
        this.state.traces.push(t);
        if (t.finishReason !== "low_confidence" && t.finishReason !== "aborted") this.state.voters.push(t);
        if (this.reachedConsensus()) {
          this.state.stop = "consensus";
          return;
        }
      }
    }
    if (!ctx.signal.aborted) this.state.stop = "budget";
  }

  /** Deterministic runs: every trace's tokens and confidences are verified ones, and onlineInWaves takes the traces
   *  in index order. */
  readonly deterministic = true;

  /** One trace; resolves null when it was aborted before finishing (the program stopped). */
  private trace(
    ctx: ProgramContext,
    prompt: number[],
    index: number,
    threshold: number | null,
    warmup: boolean,
  ): { handle: RequestHandle; result: Promise<DeepConfTrace | null> } {
    const o = this.o;
    const confidence = { window: o.window, topK: o.topK, tail: o.window, ...(threshold === null ? {} : { threshold }) };
    const handle = ctx.submit(
      {
        prompt,
        maxTokens: o.maxTokens,
        temperature: o.temperature,
        topP: o.topP,
        seed: o.seed + index,
        model: o.model,
        confidence,
        structured: o.structured,
      },
      warmup ? "warmup" : "generate",
    );
    const result = handle.result.then((out): DeepConfTrace | null => {
      if (out.finishReason === "aborted") return null;
      const text = answerText(ctx, out, o);
      return {
        index,
        answer: text === null ? null : this.task.extractAnswer(text),
        tokens: out.tokens.length,
        finishReason: out.finishReason,
        confidence: out.confidence ?? null,
        warmup,
      };
    });
    return { handle, result };
  }

  private votes(): Array<{ answer: string | null; weight: number }> {
    const measure = this.o.mode === "offline" ? this.o.measure : "lowest";
    return this.state.voters.map((t) => ({
      answer: t.answer,
      weight: t.confidence === null ? 0 : measureOf(t.confidence, measure),
    }));
  }

  private reachedConsensus(): boolean {
    return confidenceCertaindex(this.votes(), (a, b) => this.task.equivalent(a, b)) >= this.o.consensus;
  }

  /** The confidence-weighted consensus (certaindex's confidence signal, signals.ts confidenceCertaindex). */
  updateCertaindex(): number {
    this.certaindex = confidenceCertaindex(this.votes(), (a, b) => this.task.equivalent(a, b));
    return this.certaindex;
  }

  answer(): string | null {
    return weightedMajority(this.votes(), (a, b) => this.task.equivalent(a, b)).answer;
  }
}

/** Offline filtering: the top `eta`% of the traces by `measure` (at least one; ties at the cut are kept). */
export function keepTop(traces: readonly DeepConfTrace[], measure: ConfidenceMeasure, eta: number): DeepConfTrace[] {
  const scored = traces.filter((t) => t.confidence !== null);
  if (scored.length === 0) return [];
  const cut = percentile(
    scored.map((t) => measureOf(t.confidence!, measure)),
    100 - eta,
  );
  return scored.filter((t) => measureOf(t.confidence!, measure) >= cut);
}
