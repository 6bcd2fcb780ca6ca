// The second task behind the Task interface: GSM8K-format answers (lm-evaluation-harness's strict `#### N` match,
// else its flexible last-number extraction), compared numerically.
import { describe, expect, it } from "vitest";
import { arithTask, extractGsm8kAnswer, getTask, gsm8kTask, parseVerifier } from "../../ts/index.js";

describe("gsm8k task", () => {
  it("reads the number after the last ####, with commas, currency and decimals normalized", () => {
    expect(extractGsm8kAnswer("Natalia sold 48/2 = 24 clips in May.\n48+24 = 72\n#### 72")).toBe("72");
    expect(extractGsm8kAnswer("so the total is 1,250 dollars\n#### $1,250")).toBe("1250");
    expect(extractGsm8kAnswer("#### 3.50")).toBe("3.5");
    expect(extractGsm8kAnswer("first #### 4 then corrected #### -12")).toBe("-12");
  });
  it("falls back to the last number when there is no #### line, and to null when there is none", () => {
    expect(extractGsm8kAnswer("She has 5 apples and buys 7 more, so 12 apples.")).toBe("12");
    expect(extractGsm8kAnswer("The answer is $18.")).toBe("18");
    expect(extractGsm8kAnswer("no digits here")).toBeNull();
  });
  it("compares answers numerically, unlike the arithmetic task's \\boxed{} reading of the same text", () => {
    expect(gsm8kTask.equivalent(gsm8kTask.extractAnswer("#### 1,000"), "1000")).toBe(true);
    expect(arithTask.extractAnswer("\\boxed{7} #### 9")).toBe("7");
    expect(gsm8kTask.extractAnswer("\\boxed{7} #### 9")).toBe("9");
  });
  it("is found by name; it ships no problems and no step verifier, and says so", () => {
    expect(getTask("gsm8k")).toBe(gsm8kTask);
    expect(() => getTask("gsm8k", "test")).toThrow(/task gsm8k has no split 'test'; it ships no problems/);
    expect(() => getTask("nope")).toThrow(/unknown task 'nope'; known tasks: arith, gsm8k/);
    expect(() => parseVerifier("gsm8k")).toThrow(/verifier "gsm8k" is unknown; expected one of arith/);
  });
});
