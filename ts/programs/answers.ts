// The programs' default answer format, `\boxed{...}` (the convention of math reasoning models, and of the arithmetic
// task): reading an answer out of a completion, deciding whether two answers agree, and the CoT probe that asks for
// one. A task with another format is injected instead (the `task` option of every program, ts/programs/task.ts).
import type { ProgramTask } from "./task.js";

/** The content of the last `\boxed{...}` (braces balanced; an unclosed box yields what follows it, so a
 * completion cut off by the token limit still counts if the number was written), else the last number in the
 * text, else null. Whitespace is trimmed. */
export function extractAnswer(text: string): string | null {
  const start = text.lastIndexOf("\\boxed{");
  if (start >= 0) {
    let depth = 1;
    let i = start + "\\boxed{".length;
    const from = i;
    for (; i < text.length; i++) {
      if (text[i] === "{") depth++;
      else if (text[i] === "}" && --depth === 0) break;
    }
    const inner = text.slice(from, i).trim();
    if (inner.length > 0) return inner;
  }
  const numbers = text.match(/-?\d[\d,]*(?:\.\d+)?/g);
  return numbers ? numbers[numbers.length - 1].replace(/,/g, "") : null;
}

/** Parses `-1,234`, `+12`, `3.50`, `(-16)` as a number; null if the text is not one number. */
export function parseNumber(text: string): number | null {
  const t = text
    .trim()
    .replace(/^\((.*)\)$/, "$1")
    .replace(/,/g, "")
    .replace(/\s+/g, "");
  if (!/^[+-]?(\d+(\.\d*)?|\.\d+)$/.test(t)) return null;
  return Number(t);
}

/** Numeric equality when both sides are numbers (exact for integers; relative 1e-9 otherwise), else equality of
 * the trimmed texts. `null` (nothing extracted) never matches. */
export function answersEquivalent(a: string | null, b: string | null): boolean {
  if (a === null || b === null) return false;
  const x = parseNumber(a);
  const y = parseNumber(b);
  if (x !== null && y !== null) return x === y || Math.abs(x - y) <= 1e-9 * Math.max(1, Math.abs(y));
  return a.trim() === b.trim();
}

/** Default probe suffix for `<think>`-style models: close the thought, open the boxed answer. */
export function defaultProbeSuffix(thoughtSoFar: string): string {
  return `${thoughtSoFar.endsWith("\n") ? "" : "\n"}</think> \\boxed{`;
}

/** `\boxed{}` answers compared numerically (else as trimmed text), probed with `</think> \boxed{`; no step verifier. */
export const boxedAnswers: ProgramTask = {
  extractAnswer,
  equivalent: answersEquivalent,
  answerMarker: "\\boxed{",
  probeSuffix: defaultProbeSuffix,
};
