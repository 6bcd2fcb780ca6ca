// The committed models/tiny-reasoner through the project's engine: it loads like any HF checkpoint, stays within
// the size budget, and solves easy problems (the full quality table is in models/tiny-reasoner/README.md).
import { statSync } from "node:fs";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { bundledModelDir } from "../../ts/bundledModel.js";
import { engineGenerator, type EvalGenerator } from "../../ts/eval/generator.js";
import { parseProgram } from "../../ts/eval/program.js";
import { runEval } from "../../ts/eval/runEval.js";
import { SelfConsistency } from "../../ts/programs/selfConsistency.js";
import { arithTask } from "../../ts/tasks/index.js";
import { verifyThought } from "../../ts/tasks/arith/index.js";

let generator: EvalGenerator;
beforeAll(async () => {
  generator = await engineGenerator(bundledModelDir, { maxConcurrentSequences: 16 });
});
afterAll(async () => {
  await generator?.dispose();
});

describe("models/tiny-reasoner", () => {
  it("is at most 20 MB", () => {
    expect(statSync(join(bundledModelDir, "model.safetensors")).size).toBeLessThanOrEqual(20 * 2 ** 20);
  });

  it("thinks step by step and boxes the answer", async () => {
    const prompt = generator.encodeChat([{ role: "user", content: "What is 12+7?" }]);
    const greedy = new SelfConsistency({ prompt, maxBranches: 1, temperature: 0, maxTokens: 96 });
    await generator.run(greedy);
    // The engine's text skips special tokens (<think>, </think>); \boxed{ is an ordinary token.
    // Operands of + may come in either order and a multi-digit addend may be added in two parts (the model was
    // trained on all of these paths), then a re-check of each line; every line is correct arithmetic.
    const text = greedy.state.branches[0].text.replace(/<\/?think>/g, "");
    expect(text).toMatch(/^(12\+7=19|7\+12=19|7\+10=17\n17\+2=19)\n(check: [^\n]+\n)+ \\boxed\{19\}$/);
    expect(verifyThought(text.slice(0, text.indexOf(" \\boxed"))).every((v) => v === true)).toBe(true);
  });

  it("solves most level-1 test problems greedily", async () => {
    const problems = arithTask.problems({ split: "test", n: 20, seed: 0 }).filter((p) => p.level === 1);
    const results = await runEval({
      generator,
      task: arithTask,
      problems,
      program: parseProgram("greedy"),
      seed: 0,
      maxTokens: 96,
      concurrency: 4,
    });
    expect(results.filter((r) => r.correct).length).toBeGreaterThanOrEqual(3);
    expect(results.every((r) => r.extracted === 1)).toBe(true);
  });
});
