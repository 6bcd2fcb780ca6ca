// Integer expression trees over + - *: canonical rendering (only the parentheses the tree needs), exact
// evaluation, and the chain of thought (one operation per step, post-order: innermost groups first, left to right).
//
// Rendering is canonical: parsing the rendered text gives back the same tree, so the text identifies the problem
// (splits hash it) and fixes its chain of thought.

export type Op = "+" | "-" | "*";

export type Expr = { kind: "num"; value: number } | { kind: "bin"; op: Op; left: Expr; right: Expr };

/** One chain-of-thought step: `left op right = result`. */
export interface Step {
  left: number;
  op: Op;
  right: number;
  result: number;
}

const precedence: Record<Op, number> = { "+": 1, "-": 1, "*": 2 };

export function num(value: number): Expr {
  return { kind: "num", value };
}

export function bin(op: Op, left: Expr, right: Expr): Expr {
  return { kind: "bin", op, left, right };
}

export function applyOp(op: Op, a: number, b: number): number {
  return op === "+" ? a + b : op === "-" ? a - b : a * b;
}

/** The exact value (JS numbers are exact integers below 2^53; generators keep values far smaller). */
export function evaluate(e: Expr): number {
  return e.kind === "num" ? e.value : applyOp(e.op, evaluate(e.left), evaluate(e.right));
}

/** Left-associative precedence rules: a child needs parentheses if it binds looser than its parent, or as loosely
 * when it is the right operand (a-(b-c), a*(b*c) keep theirs so the text parses back to this tree). */
function needsParens(child: Expr, parent: Op, side: "left" | "right"): boolean {
  if (child.kind === "num") return false;
  const c = precedence[child.op];
  const p = precedence[parent];
  return c < p || (side === "right" && c === p);
}

export function render(e: Expr): string {
  if (e.kind === "num") return String(e.value);
  const l = render(e.left);
  const r = render(e.right);
  return (
    (needsParens(e.left, e.op, "left") ? `(${l})` : l) + e.op + (needsParens(e.right, e.op, "right") ? `(${r})` : r)
  );
}

/** Post-order evaluation steps: every operation once, operands before the operation that uses them. */
export function steps(e: Expr): Step[] {
  const out: Step[] = [];
  const walk = (x: Expr): number => {
    if (x.kind === "num") return x.value;
    const left = walk(x.left);
    const right = walk(x.right);
    const result = applyOp(x.op, left, right);
    out.push({ left, op: x.op, right, result });
    return result;
  };
  walk(e);
  return out;
}

/** b = hi + lo split over b's leading place (23 -> 20 + 3, 345 -> 300 + 45); null when there is nothing to split
 * (one digit, negative, or a round number like 20 or 300). */
function leadingPlaceParts(b: number): [number, number] | null {
  if (b < 10) return null;
  const place = 10 ** (String(b).length - 1);
  const hi = Math.floor(b / place) * place;
  return b === hi ? null : [hi, b - hi];
}

/** A product `a*b` with a right operand of two or more digits, written as partial products over b's leading
 * place: `68*23` becomes `68*20=1360`, `68*3=204`, `1360+204=1564`; `345*7`, swapped to `7*345`, becomes
 * `7*300=2100`, `7*45=315`, `2100+315=2415`. A right operand that is a round number (20, 300) or has one digit
 * is not split: the product is one step. */
export function partialProducts(s: Step): Step[] {
  const parts = s.op === "*" ? leadingPlaceParts(s.right) : null;
  if (!parts) return [s];
  const [hi, lo] = parts;
  const a = s.left;
  const x = a * hi;
  const y = a * lo;
  return [
    { left: a, op: "*", right: hi, result: x },
    { left: a, op: "*", right: lo, result: y },
    { left: x, op: "+", right: y, result: x + y },
  ];
}

/** A sum or difference with a right operand of two or more digits, added or subtracted in two parts over b's
 * leading place: `17043-509` becomes `17043-500=16543`, `16543-9=16534`; `755+34` becomes `755+30=785`,
 * `785+4=789`. A round or one-digit right operand is not split (nor a negative one: `82+(-1054)` is one step). */
export function partialSums(s: Step): Step[] {
  const parts = s.op !== "*" ? leadingPlaceParts(s.right) : null;
  if (!parts) return [s];
  const [hi, lo] = parts;
  const a = s.left;
  const x = applyOp(s.op, a, hi);
  return [
    { left: a, op: s.op, right: hi, result: x },
    { left: x, op: s.op, right: lo, result: s.result },
  ];
}

export interface RandomStepsOptions {
  /** Probability that a product with a multi-digit right operand is written as partial products (default 0). */
  splitProducts?: number;
  /** Probability that a sum or difference with a multi-digit right operand is done in two parts (default 0). */
  splitSums?: number;
}

/** Evaluation steps in a random valid order: at each step one of the operations whose operands are known is
 * chosen uniformly, and + and * operands are swapped with probability 1/2; with `splitProducts` / `splitSums`, an
 * operation may be written in parts (see partialProducts, partialSums). Many paths reach the same answer through different
 * intermediate computations, so sampled chains of thought differ and their mistakes are less correlated (what
 * self-consistency needs). */
export function randomSteps(e: Expr, rng: { next(): number }, opts: RandomStepsOptions = {}): Step[] {
  const splitProducts = opts.splitProducts ?? 0;
  const splitSums = opts.splitSums ?? 0;
  interface Node {
    op: Op;
    left: Node | number;
    right: Node | number;
    value: number | null;
  }
  const ops: Node[] = [];
  const build = (x: Expr): Node | number => {
    if (x.kind === "num") return x.value;
    const n: Node = { op: x.op, left: build(x.left), right: build(x.right), value: null };
    ops.push(n);
    return n;
  };
  build(e);
  const valueOf = (v: Node | number): number | null => (typeof v === "number" ? v : v.value);
  const out: Step[] = [];
  for (let done = 0; done < ops.length; done++) {
    const ready = ops.filter((n) => n.value === null && valueOf(n.left) !== null && valueOf(n.right) !== null);
    const n = ready[Math.floor(rng.next() * ready.length)];
    let left = valueOf(n.left)!;
    let right = valueOf(n.right)!;
    if (n.op !== "-" && rng.next() < 0.5) [left, right] = [right, left];
    n.value = applyOp(n.op, left, right);
    const step: Step = { left, op: n.op, right, result: n.value };
    // One draw per operation, split or not, so one rng stream gives one path whatever the operands.
    const product = n.op === "*";
    const splitThis = rng.next() < (product ? splitProducts : splitSums);
    out.push(...(!splitThis ? [step] : product ? partialProducts(step) : partialSums(step)));
  }
  return out;
}

/** The re-check of a step that follows the answer in every thought: undo it (r-b=a for a+b=r, r+b=a for a-b=r) or
 * recompute a product with its operands swapped. */
export function checkStep(last: Step): Step {
  if (last.op === "+") return { left: last.result, op: "-", right: last.right, result: last.left };
  if (last.op === "-") return { left: last.result, op: "+", right: last.right, result: last.left };
  return { left: last.right, op: "*", right: last.left, result: last.result };
}

/** A step as the model writes it, e.g. `7+5=12`, `14-30=-16`, `3*(-16)=-48` (a negative right operand is
 * parenthesised so `--` never appears). */
export function renderStep(s: Step): string {
  const right = s.right < 0 ? `(${s.right})` : String(s.right);
  return `${s.left}${s.op}${right}=${s.result}`;
}

/** Deepest nesting of parentheses in the rendered text. */
export function parenDepth(text: string): number {
  let depth = 0;
  let max = 0;
  for (const ch of text) {
    if (ch === "(") max = Math.max(max, ++depth);
    else if (ch === ")") depth--;
  }
  return max;
}

/** Parses the canonical grammar (non-negative integers, + - *, parentheses, no spaces) back into a tree;
 * throws on anything else. Used by tests to prove rendering is canonical. */
export function parse(text: string): Expr {
  let pos = 0;
  const fail = (why: string): never => {
    throw new Error(`cannot parse arithmetic expression ${JSON.stringify(text)} at ${pos}: ${why}`);
  };
  const atom = (): Expr => {
    if (text[pos] === "(") {
      pos++;
      const inner = sum();
      if (text[pos] !== ")") fail("expected ')'");
      pos++;
      return inner;
    }
    const start = pos;
    while (pos < text.length && text[pos] >= "0" && text[pos] <= "9") pos++;
    if (pos === start) fail("expected a number or '('");
    return num(Number(text.slice(start, pos)));
  };
  const product = (): Expr => {
    let e = atom();
    while (text[pos] === "*") {
      pos++;
      e = bin("*", e, atom());
    }
    return e;
  };
  const sum = (): Expr => {
    let e = product();
    while (text[pos] === "+" || text[pos] === "-") {
      const op = text[pos++] as Op;
      e = bin(op, e, product());
    }
    return e;
  };
  const e = sum();
  if (pos !== text.length) fail("unexpected character");
  return e;
}
