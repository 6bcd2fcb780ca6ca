// Reward sources for step-level search (Rebase, MCTS): a score in [0, 1] for a reasoning step given what came
// before. Two kinds: a programmatic verifier (a task checks its own steps: ProgramTask.stepVerifier, e.g. the
// arithmetic task's in ts/tasks/arith/stepScore.ts) and a model-scored process reward from a second model loaded on
// the same engine (its tokens count towards the program's, under purpose "reward"): Math-Shepherd style, the
// probability of designated "good" tokens after a step-end tag, or a score head's (Skywork-o1-Open-PRM,
// Qwen2.5-Math-PRM: the model's 2 logits at the step's last token, score = the softmax's second).
import type { GenerationOutput } from "../engine/outputs.js";
import { InvalidOptionError } from "../errors/index.js";
import type { PrmConfig, ScoreHeadPrm } from "../model/prmConfig.js";
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
  /**
   * LookAhead verification (FlashTTS): scores `input`'s step and then each step of `ahead` (steps continuing it, in
   * order) in one pass over one KV: [score(step), score(ahead[0]), ...], each what score() would give. Sources
   * without it are scored one step at a time (scoreAhead below).
   */
  scoreAhead?(ctx: ProgramContext, input: StepInput, ahead: readonly string[]): Promise<number[]>;
}

/** `source.scoreAhead` where it has one, else one score() per step. */
export async function scoreAhead(
  source: RewardSource,
  ctx: ProgramContext,
  input: StepInput,
  ahead: readonly string[],
): Promise<number[]> {
  if (source.scoreAhead) return source.scoreAhead(ctx, input, ahead);
  const inputs = [input];
  for (const step of ahead) {
    const last = inputs[inputs.length - 1];
    inputs.push({ question: input.question, previous: [...last.previous, last.step], step });
  }
  return Promise.all(inputs.map((x) => source.score(ctx, x)));
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
  goodTokens?: readonly string[];
  /** Tokens meaning "bad" (e.g. ["-"]); when given, reward = P(good) / (P(good) + P(bad)). */
  badTokens?: readonly string[];
  /** Appended after the step, where the reward model predicts its tag (Math-Shepherd: " ки"). Default "\n". */
  stepTag?: string;
  /** How the scored text is laid out (default: question, newline, the steps one per line). */
  format?: (input: StepInput) => string;
  /** Top alternatives inspected (≤ 64, default 64): a good token outside them counts as probability 0. */
  topLogprobs?: number;
  /** The step tag must be one token of the reward model (it predicts the label at the tag; default false). */
  tagIsToken?: boolean;
  /**
   * The labels as output ids, in place of goodTokens / badTokens: a score-head PRM's rows have 2 logits, id 1 the
   * step's score and id 0 its complement (ts/native/addonTypes.ts scoreHead).
   */
  labelIds?: { good: readonly number[]; bad: readonly number[] };
}

/** A step as a reward model sees it: `<think>` markers dropped, trimmed. */
export function cleanStep(step: string): string {
  return step.replace(/<\/?think>/g, "").trim();
}

/**
 * Math-Shepherd's layout: `prefix`, the question, a newline, then every step followed by the step tag, one step a
 * line; the last step's tag is ModelRewardOptions.stepTag (appended after this). The reward model reads the
 * good / bad token's probability after each tag; the tags of earlier steps carry no label.
 */
export function taggedSteps(prefix: string, tag: string): (input: StepInput) => string {
  return (x) =>
    prefix + x.question + "\n" + x.previous.map((s) => cleanStep(s) + tag + "\n").join("") + cleanStep(x.step);
}

/** Process reward from a second model: one 1-token request per scored step (prefixes hit its prefix cache). */
export function modelProcessReward(o: ModelRewardOptions): RewardSource {
  let ids: { good: Set<number>; bad: Set<number> } | null = null;
  const format = o.format ?? ((x: StepInput) => [x.question, ...x.previous, x.step].join("\n"));
  const tag = o.stepTag ?? "\n";
  const sampling = { maxTokens: 1, temperature: 0, logprobs: o.topLogprobs ?? 64 };
  const request = { model: o.model, ...sampling };
  // Checked before the first request: a multi-token tag or label is a configuration error, not a low score.
  const labels = (ctx: ProgramContext): { good: Set<number>; bad: Set<number> } => {
    if (ids === null && o.tagIsToken) singleToken(ctx, o.model, tag, "step tag");
    ids ??= o.labelIds
      ? { good: new Set(o.labelIds.good), bad: new Set(o.labelIds.bad) }
      : {
          good: new Set((o.goodTokens ?? []).map((t) => singleToken(ctx, o.model, t))),
          bad: new Set((o.badTokens ?? []).map((t) => singleToken(ctx, o.model, t))),
        };
    if (ids.good.size === 0)
      throw new InvalidOptionError(`reward model ${o.model}: give goodTokens (the tokens meaning a good step)`);
    return ids;
  };
  const read = (ctx: ProgramContext, out: GenerationOutput): number => {
    const ids = labels(ctx);
    const top = out.logprobs?.[0]?.top ?? [];
    let good = 0;
    let bad = 0;
    for (const t of top) {
      if (ids.good.has(t.token)) good += Math.exp(t.logprob);
      if (ids.bad.has(t.token)) bad += Math.exp(t.logprob);
    }
    if (ids.bad.size === 0) return Math.min(1, good);
    return good + bad > 0 ? good / (good + bad) : 0.5;
  };
  const source: RewardSource = {
    name: `prm:${o.model}`,
    async score(ctx, input) {
      labels(ctx);
      return read(ctx, await ctx.submit({ ...request, prompt: format(input) + tag }, "reward").result);
    },
    async scoreAhead(ctx, input, ahead) {
      // Each look-ahead step's text continues the previous one's (the format lays steps out in order): fork the
      // previous scoring request, cut to its prompt, with the new step appended, so its KV is reused.
      labels(ctx);
      let text = format(input) + tag;
      const h0 = ctx.submit({ ...request, prompt: text }, "reward");
      const scores = [read(ctx, await h0.result)];
      let handle = h0;
      let ids = ctx.encode(text, { model: o.model });
      let prev: StepInput = input;
      for (const step of ahead) {
        const next: StepInput = { question: input.question, previous: [...prev.previous, prev.step], step };
        const full = format(next) + tag;
        const nextIds = ctx.encode(full, { model: o.model });
        const append = nextIds.slice(ids.length);
        const continues = full.startsWith(text) && ids.every((t, i) => nextIds[i] === t);
        handle = continues
          ? ctx.fork(handle, { ...sampling, length: ids.length, append }, "reward")
          : ctx.submit({ ...request, prompt: full }, "reward");
        scores.push(read(ctx, await handle.result));
        text = full;
        ids = nextIds;
        prev = next;
      }
      return scores;
    },
  };
  return source;
}

function singleToken(ctx: ProgramContext, model: string, text: string, what = "good/bad token"): number {
  const ids = ctx.encode(text, { model, addSpecialTokens: false });
  if (ids.length !== 1)
    throw new InvalidOptionError(
      `reward model ${model}: the ${what} ${JSON.stringify(text)} encodes to ${ids.length} tokens; pick one that is a single token of its tokenizer`,
    );
  return ids[0];
}

/** The reward source of a process reward model folder's prm.json (ts/model/prmConfig.ts), loaded on the engine as
 * `model`. */
export function prmReward(config: PrmConfig, model: string): RewardSource {
  if (config.format === "score-head") return scoreHeadReward(config, model);
  return modelProcessReward({
    model,
    goodTokens: config.goodTokens,
    badTokens: config.badTokens,
    stepTag: config.stepTag,
    tagIsToken: true,
    format: taggedSteps(config.prefix, config.stepTag),
  });
}

/**
 * A score-head PRM (Skywork's value head, Qwen2.5-Math-PRM's two-class head): the request's prompt ends at the
 * scored step's end token, where the model's 2 logits give the score as P(id 1) (sigmoid(v) for a value head).
 */
function scoreHeadReward(config: ScoreHeadPrm, model: string): RewardSource {
  return modelProcessReward({
    model,
    labelIds: { good: [1], bad: [0] },
    topLogprobs: 2,
    stepTag: config.stepEnd,
    tagIsToken: true,
    format: (x) =>
      config.prefix +
      x.question +
      config.afterQuestion +
      x.previous.map((s) => cleanStep(s) + config.stepEnd).join("") +
      cleanStep(x.step),
  });
}
