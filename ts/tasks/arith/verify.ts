// A programmatic verifier of thought lines: every step the model writes (`a op b=r`, or `check: a op b=r`) can be
// checked exactly, without knowing the problem (reward source for step-level search, issue 8).
import { applyOp, type Op } from "./expr.js";

const stepLine = /^(?:check: )?(-?\d+)([+*-])(\(-\d+\)|\d+)=(-?\d+)$/;

/** true / false for a well-formed step line, null for anything else (a partial line, free text). */
export function verifyStepLine(line: string): boolean | null {
  const m = stepLine.exec(line.trim());
  if (!m) return null;
  const right = Number(m[3].replace(/[()]/g, ""));
  return applyOp(m[2] as Op, Number(m[1]), right) === Number(m[4]);
}

/** Verdicts of every complete line of a thought (text between <think> and </think>, or a prefix of it). */
export function verifyThought(thought: string): (boolean | null)[] {
  const lines = thought.replace(/<\/?think>/g, "").split("\n");
  lines.pop(); // the last piece is not a finished line (empty when the text ends with "\n")
  return lines.filter((l) => l.trim() !== "").map(verifyStepLine);
}
