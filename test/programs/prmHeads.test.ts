// The seeds' process reward models as `--prm DIR` (issue 46 item 3): a Skywork-o1-Open-PRM-style value head
// (Qwen2ForPrmModel) and a Qwen2.5-Math-PRM-style two-class head (Qwen2ForProcessRewardModel), random and small,
// f32 and bf16. The head type and the step layout come from config.json (and tokenizer_config.json) alone; the
// scores through the engine equal the float64 reference's (test/model/reference.ts: the model's head, then sigmoid
// or softmax[1]) at the step's end token; scoreAhead gives score()'s values; best-of-n, beam, DVTS, Rebase and MCTS
// run with each as --prm on the bundled tiny reasoner; a PRM as --model is refused.
import { execFile } from "node:child_process";
import { existsSync } from "node:fs";
import { promisify } from "node:util";
import { afterAll, describe, expect, it } from "vitest";
import { bundledModelDir } from "../../ts/bundledModel.js";
import { Engine } from "../../ts/engine/engine.js";
import { parseModelConfig } from "../../ts/model/config.js";
import { loadModel, type Model } from "../../ts/model/model.js";
import { QWEN_MATH_PRM_SYSTEM, readPrmConfig, type ScoreHeadPrm } from "../../ts/model/prmConfig.js";
import type { Program, ProgramContext } from "../../ts/programs/program.js";
import { prmReward, scoreAhead, type StepInput } from "../../ts/programs/rewards.js";
import { ProgramRuntime } from "../../ts/programs/runtime.js";
import type { FixtureDType } from "../../scripts/make-fixture.js";
import { cudaUnavailable } from "../kernels/cudaReference.js";
import { fixtureDir } from "../model/fixtureCache.js";
import { ReferenceModel, stepScore } from "../model/reference.js";

type Head = "value" | "twoClass";
/** Tied embeddings by default, as Skywork's 1.5B; untied as Qwen2.5-Math-PRM-7B (neither reads an lm_head). */
const prmDir = (head: Head, dtype: FixtureDType, tieEmbeddings = true) =>
  fixtureDir("qwen2", dtype, { prmHead: head, seed: 11, ...(tieEmbeddings ? {} : { tieEmbeddings }) });

const models: Model[] = [];
afterAll(() => models.forEach((m) => m.dispose()));

/** Runs `fn` inside a one-round program on an engine holding the PRM as "prm". */
async function withContext<T>(prm: Model, fn: (ctx: ProgramContext) => Promise<T>): Promise<T> {
  const engine = new Engine({ models: [{ name: "prm", model: prm }], kernelMode: "batch-invariant" });
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

const INPUT: StepInput = {
  question: "What is 12*(7+5)-9?",
  previous: ["<think>7+5=12", "12*12=144"],
  step: "144-9=135",
};
const AHEAD = ["so the answer is 135", "</think> \\boxed{135}"];

describe("score-head PRMs: config.json says the head", () => {
  const base = {
    hidden_size: 64,
    intermediate_size: 128,
    num_hidden_layers: 2,
    num_attention_heads: 4,
    vocab_size: 100,
    max_position_embeddings: 64,
  };
  it("Qwen2ForPrmModel is a value head, Qwen2ForProcessRewardModel a two-class head, both Qwen2 bodies", () => {
    const value = parseModelConfig({ ...base, architectures: ["Qwen2ForPrmModel"] }, "config.json");
    const twoClass = parseModelConfig({ ...base, architectures: ["Qwen2ForProcessRewardModel"] }, "config.json");
    expect([value.scoreHead, twoClass.scoreHead]).toEqual(["value", "twoClass"]);
    for (const c of [value, twoClass]) expect([c.qkvBias, c.oProjBias]).toEqual([true, false]);
    expect(parseModelConfig({ ...base, architectures: ["Qwen2ForCausalLM"] }, "config.json").scoreHead).toBeNull();
  });

  it("lays steps out as each model's inference code does", async () => {
    const value = readPrmConfig(await prmDir("value", "f32")) as ScoreHeadPrm;
    expect(value).toEqual({
      format: "score-head",
      head: "value",
      prefix: "<|endoftext|>",
      afterQuestion: "\n",
      stepEnd: "\n",
    });
    const twoClass = readPrmConfig(await prmDir("twoClass", "f32")) as ScoreHeadPrm;
    expect(twoClass).toEqual({
      format: "score-head",
      head: "twoClass",
      prefix: `<|im_start|>system\n${QWEN_MATH_PRM_SYSTEM}<|im_end|>\n<|im_start|>user\n`,
      afterQuestion: "<|im_end|>\n<|im_start|>assistant\n",
      stepEnd: "<extra_0>",
    });
  });
});

/** The text the PRM scores for `x` (the last step's end token last), as the reward lays it out. */
function scoredText(c: ScoreHeadPrm, x: StepInput): string {
  const clean = (s: string) => s.replace(/<\/?think>/g, "").trim();
  return c.prefix + x.question + c.afterQuestion + [...x.previous, x.step].map((s) => clean(s) + c.stepEnd).join("");
}

describe.each<[Head, FixtureDType, boolean]>([
  ["value", "f32", true],
  ["value", "bf16", true],
  ["twoClass", "f32", true],
  ["twoClass", "bf16", true],
  ["twoClass", "bf16", false],
  ["twoClass", "f32", false],
  ["value", "bf16", false],
])("%s head (%s, tied embeddings %s): scores against the float64 reference", (head, dtype, tied) => {
  // f32: 1e-5. bf16: the reference rounds each bf16 projection's float64 input to bf16 where the kernels round their
  // f32 one (test/model/reference.ts); a value within f32 error of a rounding midpoint lands one bf16 ulp apart, and
  // one such flip in a head's input moves a score by ~1e-5 (the untied two-class fixture: 2.1e-5 at one step; the
  // others within 1e-5), so 5e-5 there.
  const tolerance = dtype === "f32" ? 1e-5 : 5e-5;
  it(
    `every step's score equals the reference head's sigmoid / softmax[1] to ${tolerance}, score() and scoreAhead alike`,
    () => checkScores(head, dtype, "cpu", tolerance, tied),
    60_000,
  );
});

// On CUDA activations and KV are bf16 (test/model/forward.cuda.test.ts: logits within 2e-2 relative), so scores agree
// to about 1e-2 there; skipped, with the reason printed, where no GPU is usable.
describe.skipIf(cudaUnavailable !== undefined).each<Head>(["value", "twoClass"])("%s head on CUDA (bf16)", (head) => {
  it("scores within 1e-2 of the float64 reference", () => checkScores(head, "bf16", "cuda", 1e-2), 60_000);
});

async function checkScores(
  head: Head,
  dtype: FixtureDType,
  device: "cpu" | "cuda",
  tolerance: number,
  tied = true,
): Promise<void> {
  const dir = await prmDir(head, dtype, tied);
  const prm = await loadModel(dir, { device });
  models.push(prm);
  const config = readPrmConfig(dir) as ScoreHeadPrm;
  const reward = prmReward(config, "prm");
  const ref = await ReferenceModel.load(dir);
  const inputs: StepInput[] = [INPUT];
  for (const step of AHEAD) {
    const last = inputs[inputs.length - 1];
    inputs.push({ question: INPUT.question, previous: [...last.previous, last.step], step });
  }
  const { single, ahead, encoded } = await withContext(prm, async (ctx) => ({
    single: await Promise.all(inputs.map((x) => reward.score(ctx, x))),
    ahead: await scoreAhead(reward, ctx, INPUT, AHEAD),
    encoded: inputs.map((x) => ctx.encode(scoredText(config, x), { model: "prm" })),
  }));
  const stepEndId = prm.tokenizer.encode(config.stepEnd, { addSpecialTokens: false });
  expect(stepEndId).toHaveLength(1);
  for (const [i, ids] of encoded.entries()) {
    expect(ids.at(-1)).toBe(stepEndId[0]); // scored at the step's end token
    const out = ref.logits(ids).at(-1)!; // the head's outputs: [v], or the two classes' logits
    expect(out).toHaveLength(head === "value" ? 1 : 2);
    const want = stepScore(out);
    expect(Math.abs(single[i] - want), `step ${i}: ${single[i]} vs ${want}`).toBeLessThan(tolerance);
    expect(Math.abs(ahead[i] - want), `ahead ${i}`).toBeLessThan(tolerance);
  }
  // A random head's scores are informative enough to tell a broken head apart: not all equal, inside (0, 1).
  expect(new Set(single.map((s) => s.toFixed(6))).size).toBeGreaterThan(1);
  for (const s of single) expect(s > 0 && s < 1).toBe(true);
}

const run = promisify(execFile);
describe.skipIf(!existsSync(bundledModelDir))(
  "each step-scored program with each head as --prm on the tiny reasoner",
  () => {
    const programs = ["best-of-n", "beam", "dvts", "rebase", "mcts"];
    it.each<[string, Head]>(
      programs.flatMap((p) => [[p, "value"] as [string, Head], [p, "twoClass"] as [string, Head]]),
    )(
      "%s, %s head",
      async (program, head) => {
        const prm = await prmDir(head, "f32");
        const { stdout } = await run(
          "npx",
          [
            "tsx",
            "ts/cli/main.ts",
            "run",
            "What is 12*(7+5)-9?",
            "--program",
            program,
            "--prm",
            prm,
            "--cap",
            "4", // beam and dvts: a width of 4 divides it
            "--max-tokens",
            "60",
            "--json",
          ],
          { cwd: process.cwd(), timeout: 120_000 },
        );
        const r = JSON.parse(stdout) as { reward: string; tokensByPurpose: Record<string, number>; program: string };
        expect(r.program).toBe(program);
        expect(r.reward).toBe("prm:prm");
        expect(r.tokensByPurpose.reward).toBeGreaterThan(0); // the PRM scored the samples' steps
      },
      180_000,
    );

    it("refuses a score-head PRM as the generator, naming --prm", async () => {
      const prm = await prmDir("value", "f32");
      await expect(
        run("npx", ["tsx", "ts/cli/main.ts", "run", "What is 1+2?", "--model", prm, "--max-tokens", "4"], {
          cwd: process.cwd(),
          timeout: 120_000,
        }),
      ).rejects.toThrow(/a process reward model .* give it as --prm DIR/);
    }, 120_000);
  },
);
