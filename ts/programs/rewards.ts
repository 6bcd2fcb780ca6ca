// Reward sources for step-level search (Rebase, MCTS): a score in [0, 1] for a reasoning step given what came
// before. Two kinds: a programmatic verifier (a task checks its own steps: ProgramTask.stepVerifier, e.g. the
// arithmetic task's in ts/tasks/arith/stepScore.ts) and a model-scored process reward (Math-Shepherd style: the
// probability of designated "good" tokens after a step-end tag, from a second model loaded on the same engine; its
// tokens count towards the program's, under purpose "reward").
import type { ProgramContext } from "./program.js";

export interface StepInput {
  /** The question as asked (e.g. "What is 12*(7+5)-9?"). */
  question: string;
  /** Steps before this one, as generated (one line each). */
  previous: readonly string[];
  step: string;
}

export interface RewardSource {
  readonly name: string;
  /** A score in [0, 1]: higher means the step is more likely on a correct path. */
  score(ctx: ProgramContext, input: StepInput): Promise<number>;
}

/** A programmatic verifier: any synchronous check of a step. */
export function verifierReward(name: string, check: (input: StepInput) => number): RewardSource {
  return {
    name,
    score: async (_ctx, input) => {
      const v = check(input);
      if (!(v >= 0 && v <= 1)) throw new RangeError(`verifier ${name} returned ${v}; scores must be in [0, 1]`);
      return v;
    },
  };
}

export interface ModelRewardOptions {
  /** The reward model's name on the engine (Engine models[i].name). */
  model: string;
  /** Tokens whose probability means "this step is good" (e.g. ["+"]). */
  goodTokens: readonly string[];
  /** Tokens meaning "bad" (e.g. ["-"]); when given, reward = P(good) / (P(good) + P(bad)). */
  badTokens?: readonly string[];
  /** Appended after the step, where the reward model predicts its tag (Math-Shepherd: " ки"). Default "\n". */
  stepTag?: string;
  /** How the scored text is laid out (default: question, newline, the steps one per line). */
  format?: (input: StepInput) => string;
  /** Top alternatives inspected (≤ 64, default 64): a good token outside them counts as probability 0. */
  topLogprobs?: number;
}

/** Process reward from a second model: one 1-token request per scored step (prefixes hit its prefix cache). */
export function modelProcessReward(o: ModelRewardOptions): RewardSource {
  let ids: { good: Set<number>; bad: Set<number> } | null = null;
  const format = o.format ?? ((x: StepInput) => [x.question, ...x.previous, x.step].join("\n"));
  return {
    name: `prm:${o.model}`,
    async score(ctx, input) {
      ids ??= {
        good: new Set(o.goodTokens.map((t) => singleToken(ctx, o.model, t))),
        bad: new Set((o.badTokens ?? []).map((t) => singleToken(ctx, o.model, t))),
      };
      const prompt = format(input) + (o.stepTag ?? "\n");
      const out = await ctx.submit({ model: o.model, prompt, maxTokens: 1, temperature: 0, logprobs: o.topLogprobs ?? 64 }, "reward").result;
      const top = out.logprobs?.[0]?.top ?? [];
      let good = 0;
      let bad = 0;
      for (const t of top) {
        if (ids.good.has(t.token)) good += Math.exp(t.logprob);
        if (ids.bad.has(t.token)) bad += Math.exp(t.logprob);
      }
      if (ids.bad.size === 0) return Math.min(1, good);
      return good + bad > 0 ? good / (good + bad) : 0.5;
    },
  };
}

function singleToken(ctx: ProgramContext, model: string, text: string): number {
  const ids = ctx.encode(text, { model, addSpecialTokens: false });
  if (ids.length !== 1) throw new Error(`reward model ${model}: "${text}" encodes to ${ids.length} tokens; pick single-token good/bad tokens`);
  return ids[0];
}
