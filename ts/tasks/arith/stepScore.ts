// The arithmetic task's programmatic step verifier for Rebase / MCTS (Task.stepVerifier).
import { verifierReward, type RewardSource, type StepInput } from "../../programs/rewards.js";
import { parseNumber } from "../../programs/answers.js";
import { evaluate, parse } from "./expr.js";
import { verifyStepLine } from "./verify.js";

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
