// Whether a line of a solution keeps it on track, exact on the arithmetic task (no rollouts): an equation `a op b=c`
// whose arithmetic is right and whose result is a value the question's own solution computes (a sub-expression's
// value, or a partial product / partial sum of one, either operand order), a `check:` line whose arithmetic is
// right, a `\boxed{x}` with the right answer, or a line with no equation (no evidence either way). A line that is
// right arithmetic on the wrong sub-expression (`12*7=84` in 12*(7+5)-9) is off track: the mistakes the tiny
// reasoner mostly makes, which the step checker (stepScore.ts: is the arithmetic right, are the operands at hand)
// cannot see. Used by the search oracle (scripts/bench/ttsOracle.ts) and as step labels for a PRM
// (scripts/train-prm, `--labels on-track`).
import { parseNumber } from "./answer.js";
import { applyOp, parse, partialProducts, partialSums, steps, type Op, type Step } from "./expr.js";

const EQUATION = /^(check:\s*)?(-?\d+)\s*([+\-*])\s*\(?(-?\d+)\)?\s*=\s*(-?\d+)\s*$/i;
const BOXED = /\\boxed\{([^}]*)\}?/;

/** The values a right solution of `expression` may compute on its way (every step's result and its parts). */
export function legitimateValues(expression: string): Set<number> {
  const out = new Set<number>();
  for (const s of steps(parse(expression))) {
    const swapped: Step = { ...s, left: s.right, right: s.left };
    for (const v of [s, ...(s.op === "-" ? [] : [swapped])])
      for (const p of [...partialProducts(v), ...partialSums(v)]) out.add(p.result);
  }
  return out;
}

/** The legitimate values of a task question (`What is <expression>?`); none for a question of another shape. */
export function legitimateValuesOf(question: string): Set<number> {
  const expr = /What is (.+)\?/.exec(question)?.[1];
  return expr === undefined ? new Set<number>() : legitimateValues(expr.replace(/\s+/g, ""));
}

/** Whether the line is the solution's answer (`\boxed{...}`). */
export const isAnswerLine = (line: string): boolean => BOXED.test(line);

/** Whether one line keeps a solution of the question on track (see the file's comment). */
export function lineOnTrack(line: string, legit: ReadonlySet<number>, answer: string): boolean {
  const text = line.replace(/<\/?think>/g, "").trim();
  const boxed = BOXED.exec(text);
  if (boxed) return parseNumber(boxed[1]) === parseNumber(answer);
  const m = EQUATION.exec(text);
  if (!m) return true;
  const [a, b, c] = [Number(m[2]), Number(m[4]), Number(m[5])];
  if (applyOp(m[3] as Op, a, b) !== c) return false;
  return m[1] !== undefined || legit.has(c);
}

/** Whether every step of a path is on track (a right prefix). */
export function pathOnTrack(path: readonly string[], legit: ReadonlySet<number>, answer: string): boolean {
  return path.every((l) => lineOnTrack(l, legit, answer));
}

/**
 * Step labels for a process reward model: step i is good when the prefix through it is on track (every line so
 * far), as Math-Shepherd's "can this prefix still reach the answer", made exact; the answer line is good when the
 * answer is right, whatever came before (a detour that still lands on the answer is a right solution).
 */
export function onTrackLabels(
  stepsOfSolution: readonly string[],
  legit: ReadonlySet<number>,
  answer: string,
): boolean[] {
  let on = true;
  return stepsOfSolution.map((s) => {
    const here = lineOnTrack(s, legit, answer);
    if (isAnswerLine(s)) return here;
    on &&= here;
    return on;
  });
}
