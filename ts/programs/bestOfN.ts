// Best-of-N weighted by a process reward model (Math-Shepherd / search-and-learn's baseline): N whole solutions
// sampled independently (one request, N samples sharing the prompt), every line of each scored by the reward source
// (a PRM scores a solution's steps along one KV: RewardSource.scoreAhead), a solution's score the aggregate of its
// steps' ("min" by default, "last", "prod"), and the answer the score-weighted vote. One round.
import { InvalidOptionError } from "../errors/index.js";
import type { StructuredOutput } from "../engine/index.js";
import { confidenceCertaindex, weightedMajority, type AnswerEquivalence } from "../certaindex/signals.js";
import type { PolicySpec } from "../certaindex/policies.js";
import { aggregateScore, type ScoreAggregate } from "./beam.js";
import type { Knob, Program, ProgramContext } from "./program.js";
import { cleanStep, scoreAhead, type RewardSource } from "./rewards.js";
import { answerTaskOf, answerText } from "./structuredAnswers.js";
import type { ProgramTask } from "./task.js";

export interface BestOfNOptions {
  prompt: string | readonly number[];
  question: string;
  reward?: RewardSource;
  task?: ProgramTask;
  /** Solutions (default 16). */
  n?: number;
  aggregate?: ScoreAggregate;
  /** Most tokens per solution (default 256). */
  maxTokens?: number;
  temperature?: number;
  seed?: number;
  model?: string;
  equivalent?: AnswerEquivalence;
  /** Constrain every solution's answer (BranchSampling.structured); the vote is then over equal values. */
  structured?: StructuredOutput;
}

export interface ScoredSolution {
  text: string;
  answer: string | null;
  steps: string[];
  stepScores: number[];
  score: number;
}

export class BestOfN implements Program {
  readonly name = "best-of-n";
  certaindex = 0;
  readonly knob: Knob = { used: 0, max: 1 };
  readonly tokenBudget: number;
  readonly defaultPolicy: PolicySpec = { kind: "baseline-even" };
  readonly solutions: ScoredSolution[] = [];
  private readonly n: number;
  private readonly reward: RewardSource;
  private readonly task: ProgramTask;
  private readonly eq: AnswerEquivalence;

  constructor(private readonly o: BestOfNOptions) {
    this.n = o.n ?? 16;
    if (!Number.isInteger(this.n) || this.n < 1)
      throw new InvalidOptionError(`best-of-n.n must be an integer ≥ 1, got ${this.n}`, { field: "best-of-n.n" });
    this.task = answerTaskOf(o);
    const reward = o.reward ?? this.task.stepVerifier;
    if (reward === undefined)
      throw new InvalidOptionError(
        "best-of-n scores steps: give a reward (prmReward, modelProcessReward, verifierReward) or a task with a stepVerifier (arithTask)",
        { field: "reward" },
      );
    this.reward = reward;
    this.eq = o.equivalent ?? ((a, b) => this.task.equivalent(a, b));
    this.tokenBudget = this.n * (o.maxTokens ?? 256);
  }

  get done(): boolean {
    return this.knob.used > 0;
  }

  /** Deterministic runs: every solution runs to its end and is scored (reward requests deterministic too) in sample
   *  order. */
  readonly deterministic = true;

  async execute(ctx: ProgramContext): Promise<void> {
    const out = await ctx.submit({
      prompt: this.o.prompt,
      model: this.o.model,
      n: this.n,
      seed: this.o.seed ?? 0,
      maxTokens: this.o.maxTokens ?? 256,
      temperature: this.o.temperature ?? 0.8,
      structured: this.o.structured,
    }).result;
    const how = this.o.aggregate ?? "min";
    const scored = await Promise.all(
      out.samples.map(async (s) => {
        const steps = s.text.split("\n").filter((l) => cleanStep(l) !== "");
        const stepScores =
          steps.length === 0
            ? []
            : await scoreAhead(
                this.reward,
                ctx,
                { question: this.o.question, previous: [], step: steps[0] },
                steps.slice(1),
              );
        const score = stepScores.reduce<number | null>((acc, x) => aggregateScore(acc, x, how), null) ?? 0;
        const text = answerText(ctx, s, this.o);
        return { text: s.text, answer: text === null ? null : this.task.extractAnswer(text), steps, stepScores, score };
      }),
    );
    this.solutions.push(...scored);
    this.knob.used = 1;
  }

  updateCertaindex(): number {
    this.certaindex = confidenceCertaindex(
      this.solutions.map((s) => ({ answer: s.answer, weight: s.score })),
      this.eq,
    );
    return this.certaindex;
  }

  answer(): string | null {
    if (this.solutions.length === 0) return null;
    return weightedMajority(
      this.solutions.map((s) => ({ answer: s.answer, weight: s.score })),
      this.eq,
    ).answer;
  }
}
