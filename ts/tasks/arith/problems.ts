// Arithmetic problems with exact answers and their worked chain of thought, drawn deterministically per split.
//
// Splits never overlap: a problem's split is a pure function of its canonical text (hash into 100 buckets:
// 0-89 train, 90-94 validation, 95-99 test), so a test problem can never be drawn for training, whatever the seed.
import {
  checkStep,
  evaluate,
  parse,
  randomSteps,
  render,
  renderStep,
  steps,
  type RandomStepsOptions,
  type Step,
} from "./expr.js";
import { isLevel, levels, sampleExpr, type Level } from "./levels.js";
import { fnv1a32, Rng } from "./rng.js";

export type Split = "train" | "validation" | "test";
export const splits: readonly Split[] = ["train", "validation", "test"];

export interface ArithProblem {
  level: Level;
  /** Canonical expression text, e.g. `12*(7+5)-9`. */
  expression: string;
  /** The user's message, e.g. `What is 12*(7+5)-9?`. */
  question: string;
  /** The exact answer as the model should write it, e.g. `135`. */
  answer: string;
  steps: Step[];
}

export function splitOf(expression: string): Split {
  const bucket = fnv1a32(`arith:${expression}`) % 100;
  return bucket < 90 ? "train" : bucket < 95 ? "validation" : "test";
}

/** Builds a problem from canonical expression text (throws if the text is not in the task's grammar). */
export function problemFromExpression(expression: string, level: Level): ArithProblem {
  const tree = parse(expression);
  return { level, expression, question: `What is ${expression}?`, answer: String(evaluate(tree)), steps: steps(tree) };
}

/** The assistant's whole turn: one operation per line, then a re-check of every line (last first), then the boxed
 * answer. `<think>7+5=12\n12*12=144\n144-9=135\ncheck: 135+9=144\ncheck: 12*12=144\ncheck: 12-5=7\n</think> \boxed{135}`
 * With `rng`, the steps come in a random valid order with random operand order for + and *, and half the
 * products and multi-digit sums and differences written in parts (training data: `opts` sets those shares);
 * without, in the canonical post-order of `p.steps`. The answer first appears at the end of the steps, about
 * halfway through the thought; the re-checks after it are the "overthinking" of a reasoning model that has its
 * answer and keeps verifying: the tail a probe-based early exit (`</think> \boxed{`) can save. */
export function completionOf(
  p: ArithProblem,
  rng?: { next(): number },
  opts: RandomStepsOptions = { splitProducts: 0.5, splitSums: 0.5 },
): string {
  return renderCompletion(thoughtLines(p, rng, opts), p.answer);
}

/** The assistant's turn for given thought lines (see thoughtLines). */
export function renderCompletion(lines: { steps: string[]; checks: string[] }, answer: string): string {
  return `${renderThought(lines)}</think> \\boxed{${answer}}`;
}

/** The open thought: `<think>` and every line with its newline (no `</think>`). */
export function renderThought(lines: { steps: string[]; checks: string[] }): string {
  return `<think>${[...lines.steps, ...lines.checks].map((l) => `${l}\n`).join("")}`;
}

/** The lines of a thought (see completionOf): the steps, and the check lines that follow the answer. */
export function thoughtLines(
  p: ArithProblem,
  rng?: { next(): number },
  opts: RandomStepsOptions = { splitProducts: 0.5, splitSums: 0.5 },
): { steps: string[]; checks: string[] } {
  const ss = rng ? randomSteps(parse(p.expression), rng, opts) : p.steps;
  return {
    steps: ss.map(renderStep),
    checks: ss
      .slice()
      .reverse()
      .map((s) => `check: ${renderStep(checkStep(s))}`),
  };
}

export interface ProblemSetOptions {
  split: Split;
  n: number;
  /** Stream seed: the same (split, seed, n, levels) always gives the same list. */
  seed?: number;
  /** Levels to cycle through (problem i has levels[i % levels.length]); default 1..5, balanced. */
  levels?: readonly Level[];
  /** Reject repeats within the set (default: true except for train, whose level-1 space is small). */
  unique?: boolean;
}

/** Draws `n` problems of one split. */
export function problemSet(opts: ProblemSetOptions): ArithProblem[] {
  const { split, n, seed = 0 } = opts;
  const lv = opts.levels ?? levels;
  const unique = opts.unique ?? split !== "train";
  if (!Number.isInteger(n) || n < 0) throw new Error(`problemSet: n must be a non-negative integer, got ${n}`);
  if (lv.length === 0 || !lv.every((l) => isLevel(l)))
    throw new Error(`problemSet: levels must be in 1..5, got ${JSON.stringify(lv)}`);
  const rng = new Rng(seed).fork(`arith/${split}`);
  const seen = new Set<string>();
  const out: ArithProblem[] = [];
  for (let i = 0; i < n; i++) {
    const level = lv[i % lv.length];
    for (let attempt = 0; ; attempt++) {
      if (attempt > 1_000_000)
        throw new Error(`problemSet: level ${level} of split ${split} ran out of distinct problems at ${i} of ${n}`);
      const expression = render(sampleExpr(rng, level));
      if (splitOf(expression) !== split || (unique && seen.has(expression))) continue;
      seen.add(expression);
      out.push(problemFromExpression(expression, level));
      break;
    }
  }
  return out;
}
