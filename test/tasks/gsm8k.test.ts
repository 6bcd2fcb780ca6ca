// The second task behind the Task interface: GSM8K-format answers (lm-evaluation-harness's strict `#### N` match,
// else its flexible last-number extraction), compared numerically.
import { describe, expect, it } from "vitest";
import { arithTask, getTask, gsm8kTask, parseVerifier } from "../../ts/index.js";

const extract = (text: string) => gsm8kTask.extractAnswer(text);

describe("gsm8k task", () => {
  it("reads the number after the last ####, with commas, currency and decimals normalized", () => {
    expect(extract("Natalia sold 48/2 = 24 clips in May.\n48+24 = 72\n#### 72")).toBe("72");
    expect(extract("so the total is 1,250 dollars\n#### $1,250")).toBe("1250");
    expect(extract("#### 3.50")).toBe("3.5");
    expect(extract("#### 72.\n\nQuestion: the next few-shot question has 9 apples")).toBe("72");
    expect(extract("first #### 4 then corrected #### -12")).toBe("-12");
  });
  it("falls back to the last number when there is no #### answer, and to null when there is none", () => {
    expect(extract("She has 5 apples and buys 7 more, so 12 apples.")).toBe("12");
    expect(extract("The answer is $18.")).toBe("18");
    expect(extract("It cost $1,234.50 in total")).toBe("1234.5");
    expect(extract("the temperature fell to -3 degrees")).toBe("-3");
    expect(extract("#### unknown, but 2 + 3 = 5")).toBe("5");
    expect(extract("no digits here")).toBeNull();
  });
  it("compares answers numerically, unlike the arithmetic task's \\boxed{} reading of the same text", () => {
    expect(gsm8kTask.equivalent(extract("#### 1,000"), "1000")).toBe(true);
    expect(gsm8kTask.equivalent(extract("#### 1,000"), "100")).toBe(false);
    expect(arithTask.extractAnswer("\\boxed{7} #### 9")).toBe("7");
    expect(extract("\\boxed{7} #### 9")).toBe("9");
  });
  it("probes with a #### line and marks answers with ####", () => {
    expect(gsm8kTask.probeSuffix("48+24 = 72")).toBe("\n</think>\n#### ");
    expect(gsm8kTask.probeSuffix("48+24 = 72\n")).toBe("</think>\n#### ");
    expect(gsm8kTask.answerMarker).toBe("####");
  });
  it("is found by name; it ships no problems and no step verifier, and says so", () => {
    expect(getTask("gsm8k")).toBe(gsm8kTask);
    expect(gsm8kTask.stepVerifier).toBeUndefined();
    expect(() => getTask("gsm8k", "test")).toThrow(/task gsm8k has no split 'test'; it ships no problems/);
    expect(() => getTask("nope")).toThrow(/unknown task 'nope'; known tasks: arith, gsm8k/);
    expect(() => parseVerifier("gsm8k")).toThrow(/verifier "gsm8k" is unknown; expected one of arith/);
  });
});
