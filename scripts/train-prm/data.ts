// Step-labelled solutions for the tiny process reward model: solutions sampled from the tiny reasoner (the
// branches beam search would explore: correct and wrong ones), each line a step, labelled by the arithmetic
// task's own step checker (good = its arithmetic is right, arithStepScore >= 0.5), laid out Math-Shepherd style
// (ts/programs/rewards.ts taggedSteps) and written as a TRD2 set: the loss is on the tag positions only, towards
// the good or bad token. Monte-Carlo labels (mcLabels.ts) fill `soft` too, and a TRD3 set trains towards it.
import { writeFileSync } from "node:fs";
import { cleanStep, taggedSteps } from "../../ts/programs/rewards.js";
import type { TaggedStepsPrm as PrmConfig } from "../../ts/model/prmConfig.js";
import { legitimateValuesOf, onTrackLabels } from "../../ts/tasks/arith/onTrack.js";
import { arithStepScore } from "../../ts/tasks/arith/stepScore.js";
import type { ChatTokenizer } from "../train-reasoner/chatTokenizer.js";

export interface LabelledSolution {
  question: string;
  steps: string[];
  /** Per step: true = good. */
  labels: boolean[];
  /**
   * Per step, Monte-Carlo labels only: the fraction of rollouts from the step's prefix that reach the right answer
   * (the last step: 1 or 0, its own answer's correctness). labels[i] is then soft[i] > 0.
   */
  soft?: number[];
}

/** A sampled completion's steps: its lines, `<think>` markers and the end of turn dropped, empty lines skipped. */
export function stepsOf(completion: string): string[] {
  return completion
    .replace(/<\|eos\|>/g, "")
    .split("\n")
    .map(cleanStep)
    .filter((l) => l !== "");
}

/**
 * How a solution's steps are labelled: "checker" = the task's step checker (is each line's arithmetic right, its
 * operands at hand); "on-track" = the prefix through the step is on track (ts/tasks/arith/onTrack.ts: right arithmetic
 * on a value the question's own solution computes), the answer line by the answer: exact process labels, as
 * annotators give PRM800K's, where the checker cannot see a right line on the wrong sub-expression.
 */
export type StepLabels = { kind: "checker" } | { kind: "on-track"; answer: string };

export function stepLabels(
  question: string,
  steps: readonly string[],
  how: StepLabels = { kind: "checker" },
): boolean[] {
  if (how.kind === "on-track") return onTrackLabels(steps, legitimateValuesOf(question), how.answer);
  return steps.map((step, i) => arithStepScore({ question, previous: steps.slice(0, i), step }) >= 0.5);
}

export function labelSolution(question: string, completion: string, how?: StepLabels): LabelledSolution {
  const steps = stepsOf(completion);
  return { question, steps, labels: stepLabels(question, steps, how) };
}

/** A plausible wrong value near `x` (off by one, two or ten, or one digit changed), never `x`. */
function nearMiss(x: number, r: () => number): number {
  const digits = String(Math.abs(x));
  const options = [x + 1, x - 1, x + 2, x - 2, x + 10, x - 10];
  const i = Math.floor(r() * digits.length);
  const d = (Number(digits[i]) + 1 + Math.floor(r() * 9)) % 10;
  const changed = Number(digits.slice(0, i) + d + digits.slice(i + 1)) * Math.sign(x || 1);
  if (changed !== x && !(i === 0 && d === 0 && digits.length > 1)) options.push(changed, changed);
  return options[Math.floor(r() * options.length)];
}

/**
 * The solution with one step's result replaced by a near miss (`a op b=c` → `a op b=c'`, or the boxed answer),
 * relabelled as the solution was (`how`): the corrupted step is bad, later steps as they now check (on track: bad
 * too, but a right answer line). The sampled solutions' own errors cluster on the steps the generator finds hard, so a PRM trained on them alone learns which steps
 * are hard rather than whether a step is right (it scored `7+5=13` as high as `7+5=12`); a corrupted copy of a
 * solution puts the same step right and wrong side by side. null when no step has a result to corrupt.
 */
export function corruptSolution(s: LabelledSolution, r: () => number, how?: StepLabels): LabelledSolution | null {
  const c = corruptStep(s.steps, r);
  if (c === null) return null;
  const steps = [...s.steps.slice(0, c.at), c.wrong, ...s.steps.slice(c.at + 1)];
  return { question: s.question, steps, labels: stepLabels(s.question, steps, how) };
}

/**
 * corruptSolution's choice, unlabelled: which step (`at`) gets a near-miss result and its new text (`wrong`). The
 * random draws are corruptSolution's, in its order, so the checker-label recipe's data is unchanged.
 */
export function corruptStep(steps: readonly string[], r: () => number): { at: number; wrong: string } | null {
  const at = steps
    .map((step, i) => ({ step, i }))
    .filter(({ step }) => /=\s*-?\d+\s*$/.test(step) || /\\boxed\{-?\d+\}/.test(step));
  if (at.length === 0) return null;
  const { step, i } = at[Math.floor(r() * at.length)];
  const swap = (_m: string, head: string, v: string, tail: string) => `${head}${nearMiss(Number(v), r)}${tail}`;
  const wrong = /\\boxed\{/.test(step)
    ? step.replace(/(\\boxed\{)(-?\d+)(\})/, swap)
    : step.replace(/(=\s*)(-?\d+)(\s*)$/, swap);
  return { at: i, wrong };
}

/** The PRM's text for a whole solution: every step followed by its tag (what scoring the last step sees). */
export function solutionText(prm: PrmConfig, s: LabelledSolution): string {
  return (
    taggedSteps(
      prm.prefix,
      prm.stepTag,
    )({ question: s.question, previous: s.steps.slice(0, -1), step: s.steps.at(-1) ?? "" }) + prm.stepTag
  );
}

export interface WrittenSet {
  path: string;
  sequences: number;
  steps: number;
  goodSteps: number;
  tokens: number;
  maxLength: number;
}

/**
 * Writes `solutions` with the loss only at each step tag. "hard" (TRD2): towards the good or the bad token.
 * "soft" (TRD3, Monte-Carlo labels): cross-entropy against the distribution {good: soft[i], bad: 1 - soft[i]}; each
 * tag's entry carries both tokens and the bad token's mass in 1/65535ths (the trainer's data.h).
 */
export function writePrmSet(
  tok: ChatTokenizer,
  prm: PrmConfig,
  solutions: readonly LabelledSolution[],
  maxPos: number,
  path: string,
  target: "hard" | "soft" = "hard",
): WrittenSet {
  const tag = tok.tokenId(prm.stepTag);
  const good = tok.tokenId(prm.goodTokens[0]);
  const bad = tok.tokenId(prm.badTokens[0]);
  const chunks: Buffer[] = [];
  const header = Buffer.alloc(8);
  header.write(target === "soft" ? "TRD3" : "TRD2", 0, "ascii");
  chunks.push(header);
  let steps = 0,
    goodSteps = 0,
    tokens = 0,
    maxLength = 0,
    sequences = 0;
  for (const s of solutions) {
    if (s.steps.length === 0) continue;
    const ids = tok.encode(solutionText(prm, s));
    if (ids.length > maxPos) continue; // a runaway sample: nothing a search would keep
    const tagAt = ids.flatMap((id, i) => (id === tag ? [i] : []));
    if (tagAt.length !== s.steps.length)
      throw new Error(
        `step tag ${JSON.stringify(prm.stepTag)} appears inside a step of "${s.question}"; pick a tag the steps never contain`,
      );
    const soft = target === "soft" ? s.soft : undefined;
    if (target === "soft" && (soft === undefined || soft.length !== s.steps.length))
      throw new Error(`soft targets need every step's Monte-Carlo label; "${s.question}" has none`);
    const entry = soft ? 8 : 4;
    const rec = Buffer.alloc(4 + 2 * ids.length + 2 + entry * tagAt.length);
    rec.writeUInt16LE(ids.length, 0);
    rec.writeUInt16LE(ids.length, 2); // no contiguous loss
    ids.forEach((id, i) => rec.writeUInt16LE(id, 4 + 2 * i));
    let o = 4 + 2 * ids.length;
    rec.writeUInt16LE(tagAt.length, o);
    o += 2;
    tagAt.forEach((pos, k) => {
      rec.writeUInt16LE(pos, o);
      if (soft) {
        rec.writeUInt16LE(good, o + 2);
        rec.writeUInt16LE(bad, o + 4);
        rec.writeUInt16LE(Math.round((1 - soft[k]) * 65535), o + 6);
      } else rec.writeUInt16LE(s.labels[k] ? good : bad, o + 2);
      o += entry;
    });
    chunks.push(rec);
    sequences++;
    steps += tagAt.length;
    goodSteps += s.labels.filter(Boolean).length;
    tokens += ids.length;
    maxLength = Math.max(maxLength, ids.length);
  }
  header.writeUInt32LE(sequences, 4);
  writeFileSync(path, Buffer.concat(chunks));
  return { path, sequences, steps, goodSteps, tokens, maxLength };
}
