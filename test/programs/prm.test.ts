// The bundled process reward model (models/tiny-prm): its prm.json convention, and its scores through the engine.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { bundledModelDir, bundledPrmDir } from "../../ts/bundledModel.js";
import { Engine } from "../../ts/engine/engine.js";
import { loadModel, type Model } from "../../ts/model/model.js";
import { readPrmConfig } from "../../ts/model/prmConfig.js";
import type { Program, ProgramContext } from "../../ts/programs/program.js";
import {
  cleanStep,
  modelProcessReward,
  prmReward,
  scoreAhead,
  taggedSteps,
  type RewardSource,
} from "../../ts/programs/rewards.js";
import { auroc } from "../../ts/probe/stats.js";
import { arithStepScore } from "../../ts/tasks/arith/stepScore.js";
import { ProgramRuntime } from "../../ts/programs/runtime.js";

let prm: Model;
let gen: Model;
beforeAll(async () => {
  prm = await loadModel(bundledPrmDir);
  gen = await loadModel(bundledModelDir);
});
afterAll(() => {
  prm?.dispose();
  gen?.dispose();
});

/** Runs `fn` inside a one-round program on an engine holding the generator and the PRM. */
async function withContext<T>(fn: (ctx: ProgramContext) => Promise<T>): Promise<T> {
  const engine = new Engine({
    models: [
      { name: "gen", model: gen },
      { name: "prm", model: prm },
    ],
    kernelMode: "batch-invariant",
  });
  let out: T | undefined;
  const program: Program = {
    name: "t",
    certaindex: 0,
    knob: { used: 0, max: 1 },
    tokenBudget: 0,
    get done() {
      return this.knob.used > 0;
    },
    async execute(ctx) {
      out = await fn(ctx);
      this.knob.used = 1;
    },
    updateCertaindex: () => 0,
    answer: () => null,
  };
  try {
    await new ProgramRuntime(engine).run(program);
  } finally {
    await engine.dispose();
  }
  return out as T;
}

const Q = "What is 12*(7+5)-9?";

describe("tiny-prm", () => {
  it("ships a prm.json that says how it scores", () => {
    expect(readPrmConfig(bundledPrmDir)).toEqual({
      format: "tagged-steps",
      prefix: "<|bos|>",
      stepTag: "#",
      goodTokens: ["+"],
      badTokens: ["-"],
    });
    expect(taggedSteps("<|bos|>", "#")({ question: Q, previous: ["<think>7+5=12"], step: "12*12=144" })).toBe(
      "<|bos|>What is 12*(7+5)-9?\n7+5=12#\n12*12=144",
    );
  });

  it("scores a known good step above a known bad one: a boxed answer that is the thought's result, or not", async () => {
    const reward = prmReward(readPrmConfig(bundledPrmDir)!, "prm");
    const pairs: Array<[string, string[], string, string]> = [
      [Q, ["7+5=12", "12*12=144", "144-9=135"], "</think> \\boxed{135}", "</think> \\boxed{136}"],
      ["What is 7*(8+5)-19?", ["8+5=13", "7*13=91", "91-19=72"], "</think> \\boxed{72}", "</think> \\boxed{91}"],
      ["What is 45-3*6?", ["3*6=18", "45-18=27"], "</think> \\boxed{27}", "</think> \\boxed{-27}"],
    ];
    const scores = await withContext((ctx) =>
      Promise.all(
        pairs.map(async ([question, previous, good, bad]) => [
          await reward.score(ctx, { question, previous, step: good }),
          await reward.score(ctx, { question, previous, step: bad }),
        ]),
      ),
    );
    for (const [good, bad] of scores) {
      expect(good).toBeGreaterThan(0.5);
      expect(bad).toBeLessThan(0.5);
    }
  }, 30_000);

  it("ranks the tiny reasoner's sampled steps: AUROC against the step checker's labels well above chance", async () => {
    const reward = prmReward(readPrmConfig(bundledPrmDir)!, "prm");
    const questions = [
      "What is 68*23-17?",
      "What is 12*(7+5)-9?",
      "What is 345+78*6?",
      "What is (56-19)*14?",
      "What is 9*87-654?",
      "What is 23*(45-17)+8?",
    ];
    const { scores, labels } = await withContext(async (ctx) => {
      const scores: number[] = [];
      const labels: number[] = [];
      for (const [i, question] of questions.entries()) {
        const out = await ctx.submit({
          model: "gen",
          prompt: gen.tokenizer.encodeChat([{ role: "user", content: question }]),
          n: 4,
          seed: 100 + i,
          temperature: 1,
          maxTokens: 300,
        }).result;
        for (const s of out.samples) {
          const steps = s.text
            .split("\n")
            .map(cleanStep)
            .filter((l) => l !== "");
          if (steps.length === 0) continue;
          scores.push(...(await scoreAhead(reward, ctx, { question, previous: [], step: steps[0] }, steps.slice(1))));
          labels.push(
            ...steps.map((step, j) => (arithStepScore({ question, previous: steps.slice(0, j), step }) >= 0.5 ? 1 : 0)),
          );
        }
      }
      return { scores, labels };
    });
    expect(labels.filter((l) => l === 0).length).toBeGreaterThan(5); // the sample has wrong steps to find
    expect(auroc(scores, labels)).toBeGreaterThan(0.75);
  }, 60_000);

  it("LookAhead: a step and its successor scored along one KV give what scoring each alone gives", async () => {
    const reward = prmReward(readPrmConfig(bundledPrmDir)!, "prm");
    const input = { question: Q, previous: ["<think>7+5=12"], step: "12*12=144" };
    const [ahead, alone] = await withContext(async (ctx) => [
      await scoreAhead(reward, ctx, input, ["144-9=135", "check: 135+9=144"]),
      [
        await reward.score(ctx, input),
        await reward.score(ctx, { question: Q, previous: ["<think>7+5=12", "12*12=144"], step: "144-9=135" }),
        await reward.score(ctx, {
          question: Q,
          previous: ["<think>7+5=12", "12*12=144", "144-9=135"],
          step: "check: 135+9=144",
        }),
      ],
    ]);
    expect(ahead).toEqual(alone);
  }, 30_000);

  it("a step tag or label that is not one token is a clear error", async () => {
    const tagged: RewardSource = modelProcessReward({
      model: "prm",
      goodTokens: ["+"],
      badTokens: ["-"],
      stepTag: "##",
      tagIsToken: true,
    });
    const label: RewardSource = modelProcessReward({ model: "prm", goodTokens: ["++"], badTokens: ["-"] });
    await expect(
      withContext((ctx) => tagged.score(ctx, { question: Q, previous: [], step: "7+5=12" })),
    ).rejects.toThrow(/the step tag "##" encodes to 2 tokens; pick one that is a single token/);
    await expect(withContext((ctx) => label.score(ctx, { question: Q, previous: [], step: "7+5=12" }))).rejects.toThrow(
      /the good\/bad token "\+\+" encodes to 2 tokens/,
    );
  });

  it("a broken prm.json names the field", () => {
    const dir = mkdtempSync(join(tmpdir(), "prm-"));
    writeFileSync(
      join(dir, "prm.json"),
      JSON.stringify({ format: "tagged-steps", prefix: "", stepTag: "", goodTokens: ["+"], badTokens: ["-"] }),
    );
    expect(() => readPrmConfig(dir)).toThrow(/prm\.json: stepTag must be a non-empty string/);
    writeFileSync(join(dir, "prm.json"), "{");
    expect(() => readPrmConfig(dir)).toThrow(/prm\.json is not valid JSON/);
    expect(readPrmConfig(tmpdir())).toBeNull();
  });
});
