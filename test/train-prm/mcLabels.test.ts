// Monte-Carlo step labels for the process reward model (scripts/train-prm/mcLabels.ts) on a tiny slice of the
// tiny reasoner's own solutions, and the soft-target loss path of the trainer (TRD3).
import { execFile } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { buildTrainerAsync } from "../../scripts/train-reasoner/buildTrainer.js";
import { loadChatTokenizer } from "../../scripts/train-reasoner/chatTokenizer.js";
import { modelFlags, recipeOfConfig } from "../../scripts/train-reasoner/trainerCli.js";
import { stepsOf, writePrmSet, type LabelledSolution } from "../../scripts/train-prm/data.js";
import { cachedLabels, mcLabelSolutions, sampleTraces, stepLines } from "../../scripts/train-prm/mcLabels.js";
import { TINY_PRM } from "../../scripts/train-prm/train.js";
import { bundledModelDir } from "../../ts/bundledModel.js";
import { Rng } from "../../ts/tasks/arith/rng.js";

const run = promisify(execFile);
const tok = loadChatTokenizer(bundledModelDir);
let bin = "";
const dir = mkdtempSync(join(tmpdir(), "mc-labels-"));

beforeAll(async () => {
  bin = await buildTrainerAsync("test-f32");
}, 600_000);
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const o = { samples: 2, temperature: 1, seed: 3, threads: 2, maxNew: 448, rollouts: 4, corrupt: true };

describe("Monte-Carlo step labels", () => {
  it("are seeded, in [0, 1], hard = some rollout reached the answer, and the last step's is the answer's correctness", async () => {
    const traces = await sampleTraces(bin, bundledModelDir, tok, "train", 3, o);
    for (const t of traces) {
      // The rollout prefixes are the generator's own text: re-encoding them gives the ids it generated.
      expect(tok.decode(tok.encode(t.text))).toBe(t.text);
      expect(stepLines(t.text).steps).toEqual(stepsOf(t.text));
    }
    const label = () => mcLabelSolutions(bin, bundledModelDir, tok, traces, o, new Rng(1).fork("c"));
    const a = await label();
    expect(await label()).toEqual(a);
    // Each solution, then its corrupted copy (one step differs).
    expect(a.length).toBeGreaterThan(traces.length);
    let i = 0;
    for (const t of traces) {
      const s = a[i++];
      expect(s.steps).toEqual(stepsOf(t.text));
      expect(s.soft!.at(-1)).toBe(t.correct ? 1 : 0);
      for (const [j, v] of s.soft!.entries()) {
        expect(v).toBeGreaterThanOrEqual(0);
        expect(v).toBeLessThanOrEqual(1);
        expect(Number.isInteger(v * o.rollouts)).toBe(true);
        expect(s.labels[j]).toBe(v > 0);
      }
      const copy = a[i];
      if (copy && copy.question === s.question && copy.steps.length === s.steps.length) {
        const at = copy.steps.findIndex((x, j) => x !== s.steps[j]);
        if (at >= 0) {
          i++;
          expect(copy.steps.filter((x, j) => x !== s.steps[j])).toHaveLength(1);
          // Steps before the corruption share the original's prefix, so its labels.
          expect(copy.soft!.slice(0, at)).toEqual(s.soft!.slice(0, at));
        }
      }
    }
    // The cache hands back what it stored without calling make again.
    const key = { test: 1 };
    await cachedLabels(dir, key, async () => a);
    const again = await cachedLabels(dir, key, () => Promise.reject(new Error("regenerated")));
    expect(again.cached).toBe(true);
    expect(again.solutions).toEqual(a);
  }, 120_000);
});

describe("soft step targets (TRD3)", () => {
  const m = recipeOfConfig(bundledModelDir);
  const solutions: LabelledSolution[] = [
    { question: "What is 2+3*4?", steps: ["3*4=12", "2+12=14", "\\boxed{14}"], labels: [true, true, true] },
    { question: "What is 9-5*2?", steps: ["5*2=10", "9-10=-2", "\\boxed{-1}"], labels: [true, true, false] },
  ];
  const train = async (name: string, target: "hard" | "soft", soft?: number[][]) => {
    const data = join(dir, `${name}.bin`);
    writePrmSet(
      tok,
      TINY_PRM,
      solutions.map((s, i) => ({ ...s, soft: soft?.[i] })),
      m.maxPos,
      data,
      target,
    );
    const out = join(dir, `${name}.safetensors`);
    const { stdout } = await run(bin, [
      "train",
      ...["--data", data, "--val", data, "--out", out, "--init", join(bundledModelDir, "model.safetensors")],
      ...modelFlags(m),
      ...["--steps", "3", "--batch", "2", "--lr", "1e-3", "--warmup", "1", "--seed", "1", "--threads", "2"],
      ...["--val-seqs", "2", "--eval-every", "1", "--log-every", "1"],
    ]);
    return { weights: readFileSync(out), stdout };
  };

  it("a soft target at 0 or 1 trains exactly as the hard one; between them it trains differently", async () => {
    const hard = await train("hard", "hard");
    const hardSoft = await train("hard-as-soft", "soft", [
      [1, 1, 1],
      [1, 1, 0],
    ]);
    expect(hardSoft.weights.equals(hard.weights)).toBe(true);
    const soft = await train("soft", "soft", [
      [0.75, 0.5, 1],
      [0.25, 0.125, 0],
    ]);
    expect(soft.weights.equals(hard.weights)).toBe(false);
    expect(soft.stdout).toMatch(/step +3 +loss \d/);
  }, 120_000);

  it("a TRD3 set without soft labels is refused by name", () => {
    expect(() => writePrmSet(tok, TINY_PRM, solutions, m.maxPos, join(dir, "x.bin"), "soft")).toThrow(
      /soft targets need every step's Monte-Carlo label/,
    );
  });
});
