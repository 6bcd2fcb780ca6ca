// Reward sources for step-level search (Rebase, MCTS): a score in [0, 1] for a reasoning step given what came
// before. Two kinds: a programmatic verifier (the task checks its own steps) and a model-scored process reward
// (Math-Shepherd style: the probability of designated "good" tokens after a step-end tag, from a second model
// loaded on the same engine; its tokens count towards the program's, under purpose "reward").
import { parse, evaluate } from "../tasks/arith/expr.js";
import { parseNumber } from "../tasks/arith/answer.js";
import { verifyStepLine } from "../tasks/arith/verify.js";
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

const EQUATION = /(-?\d+)\s*([+\-*])\s*(\(?-?\d+\)?)\s*=\s*(-?\d+)/;
const THINK_MARKERS = /<\/?think>/g;
const CHECK_LINE = /^check:/i;

/** A number's place-value parts (`23` → 20 and 3, `345` → 300 and 45): the operands of a product written as
 * partial products (`68*20=1360`, `68*3=204`, `1360+204=1564`). */
function placeParts(n: number): number[] {
  const a = Math.abs(n);
  if (a < 10) return [];
  const place = 10 ** (String(a).length - 1);
  const hi = Math.floor(a / place) * place;
  return hi === a ? [] : [hi, a - hi];
}

/** Results of the equation lines before a step, in order; `check:` lines verify, they produce nothing. */
function resultsOf(previous: readonly string[]): number[] {
  const out: number[] = [];
  for (const raw of previous) {
    const line = raw.replace(THINK_MARKERS, "").trim();
    if (CHECK_LINE.test(line)) continue;
    const m = EQUATION.exec(line);
    if (m) out.push(Number(m[4]));
  }
  return out;
}

/**
 * The arithmetic task's own step check. A step `a op b=c` (or `check: a op b=c`) scores 0 when its arithmetic is
 * wrong (the task's verifyStepLine decides for its own line format, a looser pattern for anything else), 1 when
 * right and both operands are available (numbers of the question, earlier results, or place-value parts of those,
 * as partial products use), 0.5 when right but an operand came from nowhere. A final step `\boxed{x}` scores 1
 * when x is the last result (check lines aside) or, with no steps, the question's value; else 0. Anything else
 * (an empty or unreadable line) scores 0.25: no evidence either way. `<think>` markers are ignored.
 */
export function arithStepScore({ question, previous, step }: StepInput): number {
  const boxed = /\\boxed\{([^}]*)\}?/.exec(step);
  const results = resultsOf(previous);
  if (boxed) {
    const x = parseNumber(boxed[1]);
    if (x === null) return 0;
    if (results.length > 0) return x === results[results.length - 1] ? 1 : 0;
    const expr = /What is (.+)\?/.exec(question)?.[1];
    try {
      return expr !== undefined && evaluate(parse(expr.replace(/\s+/g, ""))) === x ? 1 : 0;
    } catch {
      return 0;
    }
  }
  const line = step.replace(THINK_MARKERS, "").trim();
  const verdict = verifyStepLine(line);
  if (verdict === false) return 0;
  const m = EQUATION.exec(line);
  if (!m) return verdict === true ? 1 : 0.25;
  const a = Number(m[1]);
  const b = Number(m[3].replace(/[()]/g, ""));
  const c = Number(m[4]);
  const right = m[2] === "+" ? a + b : m[2] === "-" ? a - b : a * b;
  if (right !== c) return 0;
  const known = [...(question.match(/\d+/g) ?? []).map(Number), ...results];
  const available = new Set([...known, ...known.flatMap(placeParts)].map(Math.abs));
  return available.has(Math.abs(a)) && available.has(Math.abs(b)) ? 1 : 0.5;
}

export const arithVerifier: RewardSource = verifierReward("arith-verifier", arithStepScore);

/** The programmatic verifiers by name (CLI `--verifier`). */
export const VERIFIERS: Readonly<Record<string, RewardSource>> = { arith: arithVerifier };
export const VERIFIER_NAMES: readonly string[] = Object.keys(VERIFIERS);

export function parseVerifier(name: string): RewardSource {
  const v = VERIFIERS[name];
  if (v === undefined) throw new Error(`verifier "${name}" is unknown; expected one of ${VERIFIER_NAMES.join(", ")} (or --prm DIR for a process reward model)`);
  return v;
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
