import { describe, expect, it } from "vitest";
import type { Engine } from "../../ts/engine/engine.js";
import type { GenerateRequest } from "../../ts/engine/request.js";
import type { EvalGenerator } from "../../ts/eval/generator.js";
import { parseProgram } from "../../ts/eval/program.js";
import { buildReport, formatReport } from "../../ts/eval/report.js";
import { runEval } from "../../ts/eval/runEval.js";
import { majorityVote } from "../../ts/certaindex/signals.js";
import { ProgramRuntime } from "../../ts/programs/runtime.js";
import { arithTask, getTask, gsm8kTask, type TaskProblem } from "../../ts/tasks/index.js";

const eq = (a: string, b: string) => arithTask.equivalent(a, b);

describe("majorityVote", () => {
  it("picks the largest equivalence cluster, ties to the first seen, nulls abstain", () => {
    expect(majorityVote(["3", "4", "3.0", null, "4", "4"], eq)).toMatchObject({ answer: "4", votes: 3 });
    expect(majorityVote(["3", "4"], eq).answer).toBe("3");
    expect(majorityVote([null, null], eq)).toEqual({ answer: null, votes: 0, clusters: [] });
    expect(majorityVote(["-16", "(-16)"], eq).votes).toBe(2);
  });
});

describe("parseProgram / getTask", () => {
  it("accepts greedy and sc:K and names the fix otherwise", () => {
    expect(parseProgram("greedy")).toEqual({ kind: "greedy", samples: 1, temperature: 0 });
    expect(parseProgram("sc:16")).toEqual({ kind: "sc", samples: 16, temperature: 0.8 });
    expect(() => parseProgram("beam:4")).toThrow(/greedy or sc:K/);
    expect(() => parseProgram("sc:0")).toThrow(/1\.\.1024/);
    expect(() => getTask("math500")).toThrow(/known tasks: arith, gsm8k/);
    expect(() => getTask("arith", "dev")).toThrow(/train, validation, test/);
  });
});

/**
 * A fake backend under the real ProgramRuntime: prompt [i] is problem i; sample j of a request answers
 * `texts(problem, n)[j]`, 10 tokens each. It records every request the programs make.
 */
function fakeGenerator(
  problems: readonly TaskProblem[],
  texts: (p: TaskProblem, n: number) => string[],
): EvalGenerator & { requests: GenerateRequest[] } {
  const requests: GenerateRequest[] = [];
  const engine = {
    submit(req: GenerateRequest) {
      requests.push(req);
      const n = req.n ?? 1;
      const samples = texts(problems[(req.prompt as number[])[0]], n).map((text, index) => ({
        index,
        text,
        tokens: new Array<number>(10).fill(7),
        finishReason: "stop" as const,
      }));
      const result = Promise.resolve({
        promptTokens: [...(req.prompt as number[])],
        samples,
        usage: { promptTokens: 1, generatedTokens: 10 * n, cachedTokens: 0 },
      });
      return { result, updateMetadata() {} };
    },
  };
  const runtime = new ProgramRuntime(engine as unknown as Engine);
  return {
    requests,
    contextTokens: 256,
    encodeChat: (messages) => [problems.findIndex((p) => p.messages[0].content === messages[0].content)],
    run: (program, options) => runtime.run(program, options),
    async dispose() {},
  };
}

describe("runEval", () => {
  it("scores greedy and majority-vote programs per level", async () => {
    const problems = arithTask.problems({ split: "test", n: 10, seed: 0 });
    // Level-1 problems are answered right; the others by 3 of 4 samples (and wrongly when greedy).
    const gen = fakeGenerator(problems, (p, n) =>
      Array.from({ length: n }, (_, i) =>
        p.level === 1 || (n > 1 && i % 4 !== 3)
          ? `<think>x</think> \\boxed{${p.answer}}`
          : "<think>no idea</think> \\boxed{-1}",
      ),
    );
    const greedy = await runEval({
      generator: gen,
      task: arithTask,
      problems,
      program: parseProgram("greedy"),
      seed: 5,
      maxTokens: 100,
      concurrency: 1,
    });
    const report = buildReport("arith", "test", "greedy", greedy, 1);
    expect(report.byLevel["1"].accuracy).toBe(1);
    expect(report.byLevel["2"].accuracy).toBe(0);
    expect(report.accuracy).toBeCloseTo(0.2);
    expect(report.tokensPerProblem).toBe(10);
    expect(report.extractable).toBe(1);
    expect(formatReport(report)).toMatch(/all\s+10\s+20\.0%/);
    // Greedy is one branch at temperature 0, one request per problem.
    expect(gen.requests.map((r) => [r.n, r.temperature])).toEqual(problems.map(() => [1, 0]));

    gen.requests.length = 0;
    const sc = await runEval({
      generator: gen,
      task: arithTask,
      problems,
      program: parseProgram("sc:4"),
      seed: 5,
      maxTokens: 100,
      concurrency: 3,
    });
    expect(buildReport("arith", "test", "sc", sc, 1).accuracy).toBe(1);
    expect(sc.every((r) => r.samples === 4 && r.extracted === 4 && r.generatedTokens === 40)).toBe(true);
    // sc:K is SelfConsistency run to its cap in one round: one request of K samples per problem, and every sample of
    // every problem has its own seed.
    expect(gen.requests.every((r) => r.n === 4 && r.temperature === 0.8)).toBe(true);
    const seeds = gen.requests.flatMap((r) => [0, 1, 2, 3].map((i) => r.seed! + i));
    expect(seeds.length).toBe(40);
    expect(new Set(seeds).size).toBe(seeds.length);
  });

  it("reads and compares answers with the task it is given", async () => {
    const problems: TaskProblem[] = [
      {
        id: "a",
        level: 1,
        messages: [{ role: "user", content: "Tom has $1,000 and earns 250 more. How much?" }],
        answer: "1250",
      },
      { id: "b", level: 1, messages: [{ role: "user", content: "Half of 18?" }], answer: "9" },
    ];
    // GSM8K-style completions whose last \boxed{} disagrees with their #### line.
    const texts = (p: TaskProblem, n: number) =>
      Array.from({ length: n }, () =>
        p.id === "a" ? "1,000 + 250 = 1,250 \\boxed{3}\n#### $1,250" : "18/2 = 9\n#### 9.",
      );
    const run = (task: typeof arithTask) =>
      runEval({
        generator: fakeGenerator(problems, texts),
        task,
        problems,
        program: parseProgram("sc:2"),
        seed: 0,
        maxTokens: 50,
        concurrency: 1,
      });
    expect((await run(gsm8kTask)).map((r) => [r.predicted, r.correct])).toEqual([
      ["1250", true],
      ["9", true],
    ]);
    expect((await run(arithTask)).map((r) => r.correct)).toEqual([false, true]);
  });
});
