// Tasks are injected: a program reads, compares and probes for answers, and scores steps, the way the task it is
// given says, and falls back to the \boxed{} format (the arithmetic task's) when given none. A fake ProgramContext
// stands in for the engine: what is checked is what the programs ask of it and what they make of the replies.
import { describe, expect, it } from "vitest";
import type { RequestHandle } from "../../ts/engine/handle.js";
import type { ForkOptions, GenerateRequest } from "../../ts/engine/request.js";
import { boxedAnswers } from "../../ts/programs/answers.js";
import { CotProbe } from "../../ts/programs/cotProbe.js";
import type { ProgramContext } from "../../ts/programs/program.js";
import { Rebase } from "../../ts/programs/rebase.js";
import { verifierReward } from "../../ts/programs/rewards.js";
import { SelfConsistency } from "../../ts/programs/selfConsistency.js";
import { arithTask, gsm8kTask } from "../../ts/tasks/index.js";

/** Every submitted request's samples answer `texts` (one sample each, in order); forks answer `probe`. The main
 * branch of a CoT probe streams `thought` one character per token. */
function fakeContext(
  texts: string[],
  opts: { thought?: string; probe?: string } = {},
): ProgramContext & { forks: ForkOptions[]; requests: GenerateRequest[] } {
  const forks: ForkOptions[] = [];
  const requests: GenerateRequest[] = [];
  const handle = (out: object, stream: string[] = []): RequestHandle =>
    ({
      result: Promise.resolve(out),
      async *[Symbol.asyncIterator]() {
        for (const text of stream) yield { sample: 0, tokens: [1], text };
      },
    }) as unknown as RequestHandle;
  return {
    forks,
    requests,
    programId: "t",
    signal: new AbortController().signal,
    tokensUsed: 0,
    encode: (prompt) => (typeof prompt === "string" ? [1, 2, 3] : [...prompt]),
    submit(request) {
      requests.push(request);
      const n = request.n ?? 1;
      const samples = Array.from({ length: n }, (_, index) => ({
        index,
        text: texts[index % texts.length],
        tokens: [1, 2],
        finishReason: "stop",
        stoppedBy: "\n",
      }));
      const thought = opts.thought ?? "";
      return handle(
        { promptTokens: [1, 2, 3], samples, text: thought, finishReason: "length", usage: { generatedTokens: 2 * n } },
        [...thought],
      );
    },
    fork(_parent, options = {}) {
      forks.push(options);
      return handle({ text: opts.probe ?? "", finishReason: "stop", samples: [], usage: { generatedTokens: 1 } });
    },
  };
}

describe("programs take their task as an option", () => {
  it("self-consistency reads and votes with the task's answers (default: \\boxed{})", async () => {
    const texts = ["so \\boxed{3}\n#### 1,250", "\\boxed{4}\n#### $1250", "\\boxed{3}\n#### 7"];
    const gsm = new SelfConsistency({ prompt: [1], maxBranches: 3, branchesPerRound: 3, task: gsm8kTask });
    await gsm.execute(fakeContext(texts));
    expect(gsm.state.branches.map((b) => b.answer)).toEqual(["1250", "1250", "7"]);
    expect(gsm.answer()).toBe("1250");
    const boxed = new SelfConsistency({ prompt: [1], maxBranches: 3, branchesPerRound: 3 });
    await boxed.execute(fakeContext(texts));
    expect(boxed.answer()).toBe("3");
  });

  it("CoT probing appends the task's probe suffix and stops probing at its answer marker", async () => {
    const run = async (task: typeof gsm8kTask | undefined, thought: string) => {
      const ctx = fakeContext([], { thought, probe: "42" });
      const p = new CotProbe({ prompt: [1], interval: 4, maxTokens: 8, task });
      await p.execute(ctx);
      return { probes: p.state.probes, forks: ctx.forks };
    };
    const gsm = await run(gsm8kTask, "abcdefgh");
    expect(gsm.forks.map((f) => f.append)).toEqual(["\n</think>\n#### "]);
    expect(gsm.probes).toEqual(["42"]);
    expect((await run(undefined, "abcdefgh")).forks.map((f) => f.append)).toEqual(["\n</think> \\boxed{"]);
    // The main branch already wrote its answer by the probe point: no probe.
    expect((await run(gsm8kTask, "#### 12")).forks).toEqual([]);
    expect((await run(undefined, "#### 12")).forks).toHaveLength(1);
  });

  it("tree search ends a solution at the task's answer marker, reads it the task's way, and scores steps with the task's verifier", async () => {
    const always = verifierReward("always", () => 1);
    const gsm = new Rebase({ prompt: [1], question: "q", width: 2, task: gsm8kTask, reward: always });
    await gsm.execute(fakeContext(["#### 1,000", "#### 1000"]));
    expect(gsm.state.finished.map((n) => n.answer)).toEqual(["1000", "1000"]);
    expect(gsm.answer()).toBe("1000");
    const boxed = new Rebase({ prompt: [1], question: "q", width: 2, reward: always });
    await boxed.execute(fakeContext(["#### 1,000", "#### 1000"]));
    expect(boxed.state.finished).toEqual([]); // without \boxed{ the steps go on

    expect(() => new Rebase({ prompt: [1], question: "q", task: gsm8kTask })).toThrow(
      /give a reward .* or a task with a stepVerifier/,
    );
    expect(() => new Rebase({ prompt: [1], question: "q" })).toThrow(/give a reward/);
    const arith = new Rebase({ prompt: [1], question: "What is 2+3?", width: 2, task: arithTask });
    await arith.execute(fakeContext(["2+3=5", "2+3=6"]));
    expect(arith.state.frontier.map((n) => n.reward)).toEqual([1, 0]); // the arithmetic task's step checker
  });

  it("the default format is the arithmetic task's", () => {
    for (const k of ["extractAnswer", "equivalent", "answerMarker", "probeSuffix"] as const)
      expect(arithTask[k]).toBe(boxedAnswers[k]);
  });
});
