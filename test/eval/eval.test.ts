import { describe, expect, it } from "vitest";
import type { CompletionRequest, EvalGenerator } from "../../ts/eval/generator.js";
import { parseProgram } from "../../ts/eval/program.js";
import { buildReport, formatReport } from "../../ts/eval/report.js";
import { runEval } from "../../ts/eval/runEval.js";
import { arithTask, getTask } from "../../ts/eval/task.js";
import { majorityVote } from "../../ts/certaindex/signals.js";

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

// A fake backend: answers correctly for level-1 problems, and for others with 3 of 4 samples correct.
function fakeGenerator(): EvalGenerator & { requests: CompletionRequest[] } {
  const requests: CompletionRequest[] = [];
  const answers = new Map<string, { answer: string; level: number }>();
  for (const p of arithTask.problems({ split: "test", n: 10, seed: 0 })) answers.set(String(p.messages[0].content), p);
  let lastQuestion = "";
  return {
    requests,
    contextTokens: 256,
    encodeChat(messages) {
      lastQuestion = messages[0].content;
      return [1, 2, 3];
    },
    async complete(req) {
      requests.push(req);
      const p = answers.get(lastQuestion)!;
      const texts = Array.from({ length: req.n }, (_, i) =>
        p.level === 1 || (req.n > 1 && i % 4 !== 3) ? `<think>x</think> \\boxed{${p.answer}}` : "<think>no idea</think> \\boxed{-1}",
      );
      return { texts, generatedTokens: 10 * req.n };
    },
    async dispose() {},
  };
}

describe("runEval", () => {
  it("scores greedy and majority-vote programs per level", async () => {
    const problems = arithTask.problems({ split: "test", n: 10, seed: 0 });
    const gen = fakeGenerator();
    const greedy = await runEval({ generator: gen, task: arithTask, problems, program: parseProgram("greedy"), seed: 5, maxTokens: 100, concurrency: 1 });
    const report = buildReport("arith", "test", "greedy", greedy, 1);
    expect(report.byLevel["1"].accuracy).toBe(1);
    expect(report.byLevel["2"].accuracy).toBe(0);
    expect(report.accuracy).toBeCloseTo(0.2);
    expect(report.tokensPerProblem).toBe(10);
    expect(report.extractable).toBe(1);
    expect(formatReport(report)).toMatch(/all\s+10\s+20\.0%/);

    const sc = await runEval({ generator: gen, task: arithTask, problems, program: parseProgram("sc:4"), seed: 5, maxTokens: 100, concurrency: 1 });
    expect(buildReport("arith", "test", "sc", sc, 1).accuracy).toBe(1);
    // Every sample of every problem gets its own seed.
    const seeds = gen.requests.filter((r) => r.n === 4).flatMap((r) => [0, 1, 2, 3].map((i) => r.seed + i));
    expect(new Set(seeds).size).toBe(seeds.length);
  });
});
