// The programs' default answer format, `\boxed{...}` (the convention of math reasoning models): reading an answer
// out of a completion and deciding whether two answers agree. A task with another format injects its own
// (extractAnswer / equivalent options, ts/tasks/task.ts); the arithmetic task uses this one.

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
  const t = text.trim().replace(/^\((.*)\)$/, "$1").replace(/,/g, "").replace(/\s+/g, "");
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
