// Step labels for the process reward model (scripts/train-prm/data.ts): the step checker's (is each line's
// arithmetic right) and the exact on-track labels (ts/tasks/arith/onTrack.ts: the prefix still on the question's own
// solution, the answer line by the answer), on a solution and on its corrupted copy.
import { describe, expect, it } from "vitest";
import { corruptSolution, labelSolution } from "../../scripts/train-prm/data.js";

const question = "What is 12*(7+5)-9?";
const onTrack = { kind: "on-track", answer: "135" } as const;

describe("PRM step labels", () => {
  it("on track: a right line on the wrong sub-expression is bad, and every step after it, but a right answer", () => {
    const detour = "<think>12*7=84\n7+5=12\n12*12=144\n144-9=135\n</think> \\boxed{135}<|eos|>";
    const s = labelSolution(question, detour, onTrack);
    expect(s.steps).toEqual(["12*7=84", "7+5=12", "12*12=144", "144-9=135", "\\boxed{135}"]);
    expect(s.labels).toEqual([false, false, false, false, true]);
    // the step checker sees only right arithmetic on operands at hand
    expect(labelSolution(question, detour).labels).toEqual([true, true, true, true, true]);
  });
  it("on track: a right solution is good throughout; a wrong answer is bad", () => {
    const right = "<think>7+5=12\n12*12=144\n144-9=135\ncheck: 135+9=144\n</think> \\boxed{135}<|eos|>";
    expect(labelSolution(question, right, onTrack).labels).toEqual([true, true, true, true, true]);
    const wrongEnd = "<think>7+5=12\n12*12=144\n144-9=135\n</think> \\boxed{136}<|eos|>";
    expect(labelSolution(question, wrongEnd, onTrack).labels).toEqual([true, true, true, false]);
  });
  it("a corrupted copy is relabelled the same way: bad from the corrupted step on", () => {
    const right = "<think>7+5=12\n12*12=144\n144-9=135\n</think> \\boxed{135}<|eos|>";
    const s = labelSolution(question, right, onTrack);
    for (let seed = 0; seed < 20; seed++) {
      let x = seed + 1;
      const r = () => (x = (x * 1103515245 + 12345) % 2 ** 31) / 2 ** 31;
      const c = corruptSolution(s, r, onTrack)!;
      const at = c.steps.findIndex((step, i) => step !== s.steps[i]);
      expect(at).toBeGreaterThanOrEqual(0);
      const answerRight = c.steps.at(-1) === "\\boxed{135}";
      expect(c.labels).toEqual(c.steps.map((_, i) => (i === c.steps.length - 1 ? answerRight : i < at)));
    }
  });
});
