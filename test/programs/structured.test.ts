// Structured answers in the reasoning programs (issue 44): SC, DUCHESS, DeepConf (and short-m@k) pass `structured` on
// every branch, so each branch's answer after its free thought is the format's; they vote over equal values (a JSON
// answer by its canonical JSON), and the programs whose early exit reads an answer anchor refuse the option by name.
// Every branch answer of the runs on the bundled tiny reasoner is checked by a validator nobody here wrote (ajv).
import { Ajv } from "ajv";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { bundledModelDir } from "../../ts/bundledModel.js";
import { entropyCertaindex, majorityVote } from "../../ts/certaindex/signals.js";
import type { RequestHandle } from "../../ts/engine/handle.js";
import type { FinishReason } from "../../ts/engine/outputs.js";
import { Engine } from "../../ts/engine/engine.js";
import type { GenerateRequest } from "../../ts/engine/request.js";
import { UnsupportedError } from "../../ts/errors/index.js";
import type { StructuredOutput } from "../../ts/grammar/types.js";
import { loadModel, type Model } from "../../ts/model/model.js";
import { fixedProbe } from "./probeFixture.js";
import type { DuchessProbe } from "../../ts/probe/probeFile.js";
import { boxedAnswers } from "../../ts/programs/answers.js";
import { DeepConf } from "../../ts/programs/deepconf.js";
import { Duchess } from "../../ts/programs/duchess.js";
import type { ProgramContext } from "../../ts/programs/program.js";
import { buildProgram, PROGRAM_KINDS, STRUCTURED_PROGRAMS } from "../../ts/programs/registry.js";
import { ProgramRuntime } from "../../ts/programs/runtime.js";
import { SelfConsistency } from "../../ts/programs/selfConsistency.js";
import { ShortMK } from "../../ts/programs/shortMK.js";
import { BestOfN } from "../../ts/programs/bestOfN.js";
import { answerTaskOf, canonicalJson, structuredAnswers } from "../../ts/programs/structuredAnswers.js";
import { arithTask } from "../../ts/tasks/index.js";

const SCHEMA = {
  type: "object",
  properties: {
    answer: { type: "integer", minimum: 0, maximum: 999 }, // the tiny model would write digits to the budget
    unit: { type: "string", enum: ["apples", "pears"] },
    note: { type: "string", maxLength: 4 },
  },
  required: ["answer", "unit", "note"],
  additionalProperties: false,
} as const;
const JSON_FORMAT: StructuredOutput = { type: "json_schema", schema: SCHEMA };
/** The tiny reasoner spells one character a token: the longest answer (`{"answer": 999, ...}`) is ~50 tokens. */
const LIVE_FORMAT: StructuredOutput = { ...JSON_FORMAT, answerTokens: 56 };
const validate = new Ajv().compile(SCHEMA);

/** Every submitted request's samples are `samples` (text and finish reason), in order; no thought tokens. */
function fakeContext(samples: Array<{ text: string; finishReason?: FinishReason }>): ProgramContext & {
  requests: GenerateRequest[];
} {
  const requests: GenerateRequest[] = [];
  return {
    requests,
    programId: "t",
    signal: new AbortController().signal,
    tokensUsed: 0,
    encode: (prompt) => (typeof prompt === "string" ? [1, 2, 3] : [...prompt]),
    submit(request) {
      requests.push(request);
      const out = samples.slice(0, request.n ?? 1).map((s, index) => ({
        index,
        text: s.text,
        tokens: [1, 2],
        finishReason: s.finishReason ?? "stop",
      }));
      return {
        result: Promise.resolve({ promptTokens: [1, 2, 3], samples: out, ...out[0], usage: { generatedTokens: 2 } }),
      } as unknown as RequestHandle;
    },
    fork: () => {
      throw new Error("no forks here");
    },
  };
}

describe("structured answers: reading and comparing", () => {
  it("a JSON answer is its canonical JSON: keys sorted at every depth, no whitespace; equal values are one vote", () => {
    const task = structuredAnswers(JSON_FORMAT);
    const a = task.extractAnswer('thinking {"x": 1} about it\n</think>{"unit": "pears", "answer": 7, "note": "ok"}');
    const b = task.extractAnswer('{ "answer":7,\n  "note":"ok", "unit":"pears" }');
    expect(a).toBe('{"answer":7,"note":"ok","unit":"pears"}');
    expect(b).toBe(a);
    expect(task.equivalent(a, b)).toBe(true);
    expect(task.equivalent(a, task.extractAnswer('{"answer":8,"note":"ok","unit":"pears"}'))).toBe(false);
    expect(canonicalJson(JSON.parse('{"b":[{"d":1,"c":[2,{"f":null,"e":"x"}]}],"a":true}'))).toBe(
      '{"a":true,"b":[{"c":[2,{"e":"x","f":null}],"d":1}]}',
    );
    // What does not parse (a thought that never closed, a cut object) is no answer, and never matches.
    expect(task.extractAnswer("8+5=13\n13*7=91")).toBeNull();
    expect(task.extractAnswer('</think>{"answer": 7, "un')).toBeNull();
    expect(task.equivalent(null, null)).toBe(false);
    const votes = majorityVote(
      [
        '{"answer":8,"note":"","unit":"apples"}',
        '</think>{"note":"ok","unit":"pears","answer":7}',
        '{"answer": 7, "note": "ok", "unit": "pears"}',
      ].map((t) => task.extractAnswer(t)),
      (x, y) => task.equivalent(x, y),
    );
    expect(votes).toMatchObject({ answer: a, votes: 2 });
  });

  it("regex, choice and grammar answers are the trimmed text after the thought", () => {
    for (const format of [
      { type: "regex", pattern: "[0-9]+" },
      { type: "choice", choices: ["seven", "eight"] },
      { type: "grammar", grammar: 'root ::= "x"' },
    ] as StructuredOutput[]) {
      const task = structuredAnswers(format);
      expect(task.extractAnswer("a thought 12</think> seven \n")).toBe("seven");
      expect(task.extractAnswer("  42 ")).toBe("42");
      expect(task.extractAnswer("</think>  ")).toBeNull();
      expect(task.equivalent("42", "042")).toBe(false); // no numeric equality: the format's text is the answer
    }
  });

  it("one rule picks the task: the caller's, else the format's when structured, else \\boxed{}", () => {
    expect(answerTaskOf({})).toBe(boxedAnswers);
    expect(answerTaskOf({ task: arithTask, structured: JSON_FORMAT })).toBe(arithTask);
    expect(answerTaskOf({ structured: JSON_FORMAT }).extractAnswer('{"b":1,"a":2}')).toBe('{"a":2,"b":1}');
  });

  it("SC with structured and no task asks every branch for the format and votes over canonical JSON", async () => {
    const ctx = fakeContext([
      { text: 'x</think>{"unit":"pears","answer":7,"note":"a"}' },
      { text: '{"answer":8,"note":"a","unit":"pears"}' },
      { text: '</think>{ "answer": 7, "note": "a", "unit": "pears" }' },
      { text: '{"answer":8,"note":"a","unit":"pe', finishReason: "length" }, // cut: no answer
    ]);
    const sc = new SelfConsistency({ prompt: "q", maxBranches: 4, branchesPerRound: 4, structured: JSON_FORMAT });
    await sc.execute(ctx);
    expect(ctx.requests[0].structured).toEqual(JSON_FORMAT);
    expect(sc.state.branches.map((b) => b.answer)).toEqual([
      '{"answer":7,"note":"a","unit":"pears"}',
      '{"answer":8,"note":"a","unit":"pears"}',
      '{"answer":7,"note":"a","unit":"pears"}',
      null,
    ]);
    expect(sc.answer()).toBe('{"answer":7,"note":"a","unit":"pears"}');
    // A cut regex answer would read as a shorter match: a branch the budget ended has no answer, whatever the format.
    const regex: StructuredOutput = { type: "regex", pattern: "[0-9]{2}" };
    const sc2 = new SelfConsistency({ prompt: "q", maxBranches: 2, branchesPerRound: 2, structured: regex });
    await sc2.execute(fakeContext([{ text: "1", finishReason: "length" }, { text: "12" }]));
    expect(sc2.state.branches.map((b) => b.answer)).toEqual([null, "12"]);
  });
});

describe("programs that cannot take a structured answer refuse it by name", () => {
  it("cot-probe and the step searches throw UnsupportedError naming structured and what to use", () => {
    const o = { question: "q", prompt: "q", structured: JSON_FORMAT };
    const refused = PROGRAM_KINDS.filter((k) => !STRUCTURED_PROGRAMS.includes(k));
    expect(refused).toEqual(["cot-probe", "rebase", "mcts", "beam", "dvts"]);
    for (const kind of refused) {
      let error: unknown;
      try {
        buildProgram(kind, { ...o, reward: arithTask.stepVerifier });
      } catch (e) {
        error = e;
      }
      expect(error, kind).toBeInstanceOf(UnsupportedError);
      expect(error).toMatchObject({
        field: "structured",
        message: expect.stringMatching(
          new RegExp(`^program ${kind} does not take structured answers: .*use program sc, duchess`),
        ),
      });
    }
    expect(() => buildProgram("cot-probe", o)).toThrow(/answer anchor \(`<\/think> \\boxed\{`/);
    expect(() => buildProgram("beam", { ...o, reward: arithTask.stepVerifier })).toThrow(/answer marker/);
    // Without structured they build as before.
    expect(buildProgram("cot-probe", { question: "q", prompt: "q" }).name).toBe("cot-probe");
  });
});

describe("structured answers on the bundled tiny reasoner (ajv-validated)", () => {
  let model: Model;
  let engine: Engine;
  beforeAll(async () => {
    model = await loadModel(bundledModelDir, { kvPages: 512, pageSize: 16 });
    engine = new Engine({ models: { model } });
  });
  afterAll(async () => {
    await engine?.dispose();
    model?.dispose();
  });
  const prompt = (q: string): number[] => model.tokenizer.encodeChat([{ role: "user", content: q }]);
  /** A branch answer is schema-valid JSON (canonical form parsed back). */
  const valid = (answer: string | null): boolean => answer !== null && validate(JSON.parse(answer));

  /** A probe that always says "settled" (p = sigmoid(5) > tau): a branch is cut at its second check (16 tokens). */
  const settledProbe = (): DuchessProbe => fixedProbe(model, 5, { interval: 8, dropout: 0 });

  it("SC: every branch's answer validates, the vote is one of them, certaindex is over the answers", async () => {
    const sc = new SelfConsistency({
      prompt: prompt("What is 7*(8+5)-19?"),
      maxBranches: 4,
      branchesPerRound: 4,
      maxTokens: 112,
      temperature: 1,
      seed: 3,
      structured: LIVE_FORMAT,
    });
    const r = await new ProgramRuntime(engine).run(sc, { policy: { kind: "baseline-even" } });
    expect(sc.state.branches).toHaveLength(4);
    for (const b of sc.state.branches) {
      expect(b.finishReason).toBe("stop");
      expect(valid(b.answer), `${b.answer} from ${JSON.stringify(b.text)}`).toBe(true);
    }
    const answers = sc.state.branches.map((b) => b.answer);
    expect(answers).toContain(r.answer);
    expect(r.certaindex).toBeCloseTo(
      entropyCertaindex(answers, (a, b) => a === b),
      12,
    );
    expect(engine.metrics().models[0].kvPagesUsed).toBe(0);
  });

  it("DUCHESS: a terminated branch's probe closes the thought and the format writes a valid answer", async () => {
    // Every branch is cut at 16 tokens, inside its thought, and answered by the fork its CoT probe makes.
    const d = new Duchess({
      prompt: prompt("What is 7*(8+5)-19?"),
      probe: settledProbe(),
      branches: 3,
      maxTokens: 112,
      seed: 2,
      branchOut: false,
      requestStop: false,
      structured: LIVE_FORMAT,
    });
    const r = await new ProgramRuntime(engine).run(d);
    expect(d.state.terminated).toBe(3);
    for (const b of d.state.branches) {
      expect(b.end).toBe("terminated");
      expect(valid(b.answer), `branch ${b.id}: ${b.answer}`).toBe(true);
    }
    expect(d.state.branches.map((b) => b.answer)).toContain(r.answer);
    expect(engine.metrics().models[0].kvPagesUsed).toBe(0);
  });

  it("DUCHESS does not cut a branch that is writing its constrained answer (thought none: the answer from token one)", async () => {
    const d = new Duchess({
      prompt: prompt("What is 7*(8+5)-19?"),
      probe: settledProbe(),
      branches: 2,
      maxTokens: 64,
      seed: 2,
      branchOut: false,
      requestStop: false,
      structured: { ...JSON_FORMAT, thought: "none" },
    });
    await new ProgramRuntime(engine).run(d);
    expect(d.state.terminated).toBe(0);
    for (const b of d.state.branches) {
      expect(b.end).toBe("stop");
      expect(valid(b.answer), `branch ${b.id}: ${b.answer}`).toBe(true);
    }
  });

  it("short-m@k and best-of-n vote over valid answers too", async () => {
    const mk = new ShortMK({ prompt: prompt("What is 3+4?"), k: 3, m: 2, maxTokens: 112, structured: LIVE_FORMAT });
    const r = await new ProgramRuntime(engine).run(mk);
    expect(mk.state.finished).toHaveLength(2);
    for (const b of mk.state.finished) expect(valid(b.answer), `${b.answer}`).toBe(true);
    expect(mk.state.finished.map((b) => b.answer)).toContain(r.answer);
    const bon = new BestOfN({
      prompt: prompt("What is 3+4?"),
      question: "What is 3+4?",
      reward: arithTask.stepVerifier,
      n: 2,
      maxTokens: 112,
      structured: LIVE_FORMAT,
    });
    const rb = await new ProgramRuntime(engine).run(bon);
    for (const s of bon.solutions) expect(valid(s.answer), `${s.answer}`).toBe(true);
    expect(bon.solutions.map((s) => s.answer)).toContain(rb.answer);
    expect(engine.metrics().models[0].kvPagesUsed).toBe(0);
  });

  it("DeepConf online: every voting trace's answer validates and the weighted vote is one of them", async () => {
    const dc = new DeepConf({
      prompt: prompt("What is 3+4?"),
      budget: 4,
      warmup: 2,
      parallel: 2,
      maxTokens: 112,
      seed: 1,
      consensus: 1,
      structured: LIVE_FORMAT,
    });
    const r = await new ProgramRuntime(engine).run(dc);
    expect(dc.state.voters.length).toBeGreaterThanOrEqual(2);
    for (const t of dc.state.voters) expect(valid(t.answer), `trace ${t.index}: ${t.answer}`).toBe(true);
    expect(dc.state.voters.map((t) => t.answer)).toContain(r.answer);
    expect(engine.metrics().models[0].kvPagesUsed).toBe(0);
  });
});
