import { describe, expect, it } from "vitest";
import {
  answersEquivalent,
  completionOf,
  evaluate,
  extractAnswer,
  levels,
  levelSpecs,
  checkStep,
  parse,
  parenDepth,
  problemFromExpression,
  problemSet,
  partialProducts,
  partialSums,
  randomSteps,
  renderStep,
  verifyStepLine,
  verifyThought,
  render,
  sampleExpr,
  splitOf,
  steps,
} from "../../ts/tasks/arith/index.js";
import { Rng } from "../../ts/tasks/arith/rng.js";

describe("arith expressions", () => {
  it("evaluates with precedence and left associativity, one step per operation in post-order", () => {
    const e = parse("12*(7+5)-9");
    expect(evaluate(e)).toBe(135);
    expect(steps(e).map((s) => `${s.left}${s.op}${s.right}=${s.result}`)).toEqual(["7+5=12", "12*12=144", "144-9=135"]);
    expect(evaluate(parse("10-4-3"))).toBe(3);
    expect(evaluate(parse("10-(4-3)"))).toBe(9);
    expect(evaluate(parse("2+3*4"))).toBe(14);
  });

  it("renders canonically: parse(render(e)) renders back to the same text and value", () => {
    const rng = new Rng(5);
    for (let i = 0; i < 500; i++) {
      const e = sampleExpr(rng, levels[i % 5]);
      const text = render(e);
      expect(render(parse(text))).toBe(text);
      expect(evaluate(parse(text))).toBe(evaluate(e));
    }
  });

  it("rejects text outside the grammar", () => {
    expect(() => parse("1+")).toThrow(/cannot parse/);
    expect(() => parse("(1+2")).toThrow(/expected '\)'/);
    expect(() => parse("1 + 2")).toThrow(/unexpected character/);
  });

  it("writes a negative right operand in parentheses", () => {
    const p = problemSet({ split: "train", n: 2000, seed: 3 }).find((q) => q.steps.some((s) => s.right < 0))!;
    expect(completionOf(p)).toMatch(/[+*-]\(-\d+\)=/);
    expect(completionOf(p)).not.toMatch(/--/);
  });
});

describe("arith levels", () => {
  it("meets every level's constraints, with harder levels longer", () => {
    const meanSteps: number[] = [];
    for (const level of levels) {
      const spec = levelSpecs[level];
      const ps = problemSet({ split: "train", n: 200, seed: 1, levels: [level] });
      for (const p of ps) {
        const depth = parenDepth(p.expression);
        expect(depth).toBeGreaterThanOrEqual(spec.parenDepth[0]);
        expect(depth).toBeLessThanOrEqual(spec.parenDepth[1]);
        expect(p.steps.length + 1).toBeGreaterThanOrEqual(spec.numbers[0]);
        expect(p.steps.length + 1).toBeLessThanOrEqual(spec.numbers[1]);
        for (const s of p.steps) expect(Math.abs(s.result)).toBeLessThanOrEqual(spec.maxAbsValue);
        expect(String(evaluate(parse(p.expression)))).toBe(p.answer);
      }
      meanSteps.push(ps.reduce((s, p) => s + p.steps.length, 0) / ps.length);
    }
    for (let i = 1; i < meanSteps.length; i++) expect(meanSteps[i]).toBeGreaterThan(meanSteps[i - 1]);
  });

  it("is deterministic per seed and differs across seeds", () => {
    const a = problemSet({ split: "test", n: 50, seed: 7 }).map((p) => p.expression);
    expect(problemSet({ split: "test", n: 50, seed: 7 }).map((p) => p.expression)).toEqual(a);
    expect(problemSet({ split: "test", n: 50, seed: 8 }).map((p) => p.expression)).not.toEqual(a);
  });

  it("renders the chat completion: steps, a re-check of every step, the boxed answer", () => {
    const p = problemFromExpression("12*(7+5)-9", 3);
    expect(p.question).toBe("What is 12*(7+5)-9?");
    expect(completionOf(p)).toBe(
      "<think>7+5=12\n12*12=144\n144-9=135\ncheck: 135+9=144\ncheck: 12*12=144\ncheck: 12-5=7\n</think> \\boxed{135}",
    );
    for (const q of problemSet({ split: "test", n: 50, seed: 0 })) {
      const c = completionOf(q, new Rng(1));
      expect(c.endsWith(`</think> \\boxed{${q.answer}}`)).toBe(true);
      // Every operation once, plus two lines per product written as partial products and one per sum or
      // difference done in two parts, then one check line per step line.
      const products = q.steps.filter((s) => s.op === "*").length;
      const lines = c.split("\n").length - 1;
      const checks = (c.match(/\ncheck: /g) ?? []).length;
      expect(checks * 2).toBe(lines);
      expect(checks).toBeGreaterThanOrEqual(q.steps.length);
      expect(checks).toBeLessThanOrEqual(2 * q.steps.length + products);
      expect(completionOf(q, new Rng(1), { splitProducts: 0, splitSums: 0 }).split("\n").length - 1).toBe(
        2 * q.steps.length,
      );
      expect(verifyThought(c.slice(0, c.indexOf("</think>"))).every((v) => v === true)).toBe(true);
      // The last step before the check lines yields the answer.
      const body = c.slice("<think>".length, c.indexOf("</think>")).trim().split("\n");
      expect(body[body.length - 1 - checks].endsWith(`=${q.answer}`)).toBe(true);
    }
  });

  it("draws thoughts in random valid orders that all reach the answer", () => {
    const e = parse("(3+4)*(5+6)-(7*8)");
    const rng = new Rng(2);
    const orders = new Set<string>();
    for (let i = 0; i < 200; i++) {
      const ss = randomSteps(e, rng);
      expect(ss.length).toBe(5);
      expect(ss[ss.length - 1].result).toBe(evaluate(e));
      orders.add(ss.map(renderStep).join(" "));
    }
    // Independent groups in any order, products after their sums, and swapped + and * operands.
    expect(orders.size).toBeGreaterThan(20);
    // Products with a multi-digit right operand may be split over its leading place.
    const split = new Set<string>();
    for (let i = 0; i < 200; i++)
      split.add(randomSteps(parse("68*23"), rng, { splitProducts: 0.5 }).map(renderStep).join(" "));
    expect([...split].sort()).toEqual([
      "23*60=1380 23*8=184 1380+184=1564",
      "23*68=1564",
      "68*20=1360 68*3=204 1360+204=1564",
      "68*23=1564",
    ]);
    expect(partialProducts({ left: 7, op: "*", right: 345, result: 2415 }).map(renderStep)).toEqual([
      "7*300=2100",
      "7*45=315",
      "2100+315=2415",
    ]);
    expect(partialProducts({ left: 7, op: "*", right: 300, result: 2100 }).map(renderStep)).toEqual(["7*300=2100"]);
    expect(partialSums({ left: 17043, op: "-", right: 509, result: 16534 }).map(renderStep)).toEqual([
      "17043-500=16543",
      "16543-9=16534",
    ]);
    expect(partialSums({ left: -93, op: "+", right: 25, result: -68 }).map(renderStep)).toEqual([
      "-93+20=-73",
      "-73+5=-68",
    ]);
    expect(partialSums({ left: 82, op: "+", right: -1054, result: -972 }).map(renderStep)).toEqual(["82+(-1054)=-972"]);
    expect(partialSums({ left: 8, op: "-", right: 40, result: -32 }).map(renderStep)).toEqual(["8-40=-32"]);
    const sums = new Set<string>();
    for (let i = 0; i < 200; i++)
      sums.add(randomSteps(parse("755+34"), rng, { splitSums: 1 }).map(renderStep).join(" "));
    expect([...sums].sort()).toEqual(["34+700=734 734+55=789", "755+30=785 785+4=789"]);
    expect(partialProducts({ left: -7, op: "*", right: 12, result: -84 }).map(renderStep)).toEqual([
      "-7*10=-70",
      "-7*2=-14",
      "-70+(-14)=-84",
    ]);
    expect(checkStep({ left: 144, op: "-", right: 9, result: 135 })).toEqual({
      left: 135,
      op: "+",
      right: 9,
      result: 144,
    });
    expect(checkStep({ left: 7, op: "*", right: 3, result: 21 })).toEqual({ left: 3, op: "*", right: 7, result: 21 });
  });
});

describe("arith splits", () => {
  it("never puts a test or validation problem in train", () => {
    const train = new Set(problemSet({ split: "train", n: 20_000, seed: 1 }).map((p) => p.expression));
    const test = problemSet({ split: "test", n: 1000, seed: 0 });
    const validation = problemSet({ split: "validation", n: 1000, seed: 0 });
    for (const p of [...test, ...validation]) expect(train.has(p.expression)).toBe(false);
    for (const p of test) expect(splitOf(p.expression)).toBe("test");
    expect(new Set(test.map((p) => p.expression)).size).toBe(test.length);
    // The hash buckets split roughly 90 / 5 / 5.
    const counts = { train: 0, validation: 0, test: 0 };
    for (let i = 0; i < 10_000; i++) counts[splitOf(`${i}+${i % 97}`)]++;
    expect(counts.train).toBeGreaterThan(8800);
    expect(counts.test).toBeGreaterThan(400);
  });
});

describe("step verifier", () => {
  it("checks step lines exactly and ignores other text", () => {
    expect(verifyStepLine("7+5=12")).toBe(true);
    expect(verifyStepLine("7+5=13")).toBe(false);
    expect(verifyStepLine("check: 135+9=144")).toBe(true);
    expect(verifyStepLine("-16*3=-48")).toBe(true);
    expect(verifyStepLine("5-(-16)=21")).toBe(true);
    expect(verifyStepLine("hmm")).toBeNull();
    expect(verifyThought("<think>7+5=12\n12*12=145\n144-")).toEqual([true, false]);
  });
});

describe("answers", () => {
  it("extracts the last boxed answer, else the last number", () => {
    expect(extractAnswer("<think>7+5=12\n</think> \\boxed{135}")).toBe("135");
    expect(extractAnswer("\\boxed{1} then \\boxed{-42}")).toBe("-42");
    expect(extractAnswer("\\boxed{{7}}")).toBe("{7}");
    expect(extractAnswer("\\boxed{12")).toBe("12"); // cut off by the token limit
    expect(extractAnswer("so 3*4=12, answer 1,234")).toBe("1234");
    expect(extractAnswer("\\boxed{} and 5")).toBe("5");
    expect(extractAnswer("no digits here")).toBeNull();
  });

  it("compares numerically", () => {
    expect(answersEquivalent("135", "135")).toBe(true);
    expect(answersEquivalent("135.0", "135")).toBe(true);
    expect(answersEquivalent("(-16)", "-16")).toBe(true);
    expect(answersEquivalent("1,234", "1234")).toBe(true);
    expect(answersEquivalent("134", "135")).toBe(false);
    expect(answersEquivalent(null, "1")).toBe(false);
    expect(answersEquivalent("abc", "abc")).toBe(true);
  });
});
