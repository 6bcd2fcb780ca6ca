// Difficulty levels 1-5 and sampling of one expression at a level. Harder levels have more numbers, more digits,
// multiplications of larger operands (more carries) and deeper parentheses, so longer chains of thought.
import { bin, num, parenDepth, render, steps, type Expr, type Op } from "./expr.js";
import type { Rng } from "./rng.js";

export type Level = 1 | 2 | 3 | 4 | 5;
export const levels: readonly Level[] = [1, 2, 3, 4, 5];

export interface LevelSpec {
  /** How many numbers the expression has (inclusive range). */
  numbers: readonly [number, number];
  /** Digits per number (inclusive range); 1-digit numbers may be 0. */
  digits: readonly [number, number];
  ops: readonly Op[];
  /** Required nesting depth of parentheses in the text (inclusive range). */
  parenDepth: readonly [number, number];
  /** Every multiplication step must have digits(left) + digits(right) <= this (keeps products learnable). */
  maxMulDigits: number;
  /** Every intermediate and final |value| must be <= this. */
  maxAbsValue: number;
}

export const levelSpecs: Record<Level, LevelSpec> = {
  1: { numbers: [2, 2], digits: [1, 2], ops: ["+", "-"], parenDepth: [0, 0], maxMulDigits: 0, maxAbsValue: 999 },
  2: { numbers: [3, 3], digits: [1, 2], ops: ["+", "-", "*"], parenDepth: [0, 0], maxMulDigits: 3, maxAbsValue: 9999 },
  3: { numbers: [3, 4], digits: [1, 2], ops: ["+", "-", "*"], parenDepth: [1, 1], maxMulDigits: 3, maxAbsValue: 9999 },
  4: { numbers: [4, 5], digits: [1, 3], ops: ["+", "-", "*"], parenDepth: [1, 2], maxMulDigits: 4, maxAbsValue: 99999 },
  5: { numbers: [5, 6], digits: [2, 3], ops: ["+", "-", "*"], parenDepth: [2, 3], maxMulDigits: 4, maxAbsValue: 99999 },
};

export function isLevel(x: number): x is Level {
  return x === 1 || x === 2 || x === 3 || x === 4 || x === 5;
}

function digitsOf(n: number): number {
  return String(Math.abs(n)).length;
}

function randomNumber(rng: Rng, spec: LevelSpec): number {
  const d = rng.int(spec.digits[0], spec.digits[1]);
  return d === 1 ? rng.int(0, 9) : rng.int(10 ** (d - 1), 10 ** d - 1);
}

/** A uniformly random binary tree shape over `leaves` numbers (random split point at every node). */
function randomTree(rng: Rng, spec: LevelSpec, leaves: number): Expr {
  if (leaves === 1) return num(randomNumber(rng, spec));
  const k = rng.int(1, leaves - 1);
  return bin(rng.pick(spec.ops), randomTree(rng, spec, k), randomTree(rng, spec, leaves - k));
}

function satisfies(e: Expr, spec: LevelSpec): boolean {
  const depth = parenDepth(render(e));
  if (depth < spec.parenDepth[0] || depth > spec.parenDepth[1]) return false;
  for (const s of steps(e)) {
    if (Math.abs(s.result) > spec.maxAbsValue) return false;
    if (s.op === "*" && digitsOf(s.left) + digitsOf(s.right) > spec.maxMulDigits) return false;
  }
  return true;
}

/** Samples trees until one meets the level's constraints (rejection sampling; a few hundred tries at most in
 * practice, bounded so a bad spec fails loudly instead of spinning). */
export function sampleExpr(rng: Rng, level: Level): Expr {
  const spec = levelSpecs[level];
  for (let attempt = 0; attempt < 100_000; attempt++) {
    const e = randomTree(rng, spec, rng.int(spec.numbers[0], spec.numbers[1]));
    if (satisfies(e, spec)) return e;
  }
  throw new Error(
    `arith level ${level}: no expression met its constraints in 100000 tries; loosen levelSpecs[${level}]`,
  );
}
