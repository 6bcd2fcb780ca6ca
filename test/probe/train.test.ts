// Probe training: the MLP's gradients are right (finite differences), training lowers the loss and is reproducible
// bit for bit, the statistics are the textbook ones, and `trainProbe` on the bundled tiny reasoner writes a probe
// that loads back against that model (and only that model).
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { bundledModelDir } from "../../ts/bundledModel.js";
import { Engine } from "../../ts/engine/engine.js";
import { checkpointLabel, trainProbe } from "../../ts/eval/probeTrain.js";
import { loadModel } from "../../ts/model/model.js";
import { modelHash } from "../../ts/model/modelHash.js";
import { meanLoss, Mlp, Prng, trainMlp, type Example, type MlpShape } from "../../ts/probe/mlp.js";
import { loadProbe, saveProbe } from "../../ts/probe/probeFile.js";
import { auroc, percentile, spearman } from "../../ts/probe/stats.js";
import { arithTask } from "../../ts/tasks/arith/task.js";

function dataset(n: number, dim: number, seed: number, classes = 2): Example[] {
  const rng = new Prng(seed);
  return Array.from({ length: n }, () => {
    const x = Float32Array.from({ length: dim }, () => 2 * rng.next() - 1);
    // Separable up to a margin: the class is read from two coordinates.
    const s = x[0] + 0.5 * x[1];
    const y = classes === 2 ? (s > 0 ? 1 : 0) : Math.min(classes - 1, Math.floor(((s + 1.5) / 3) * classes));
    return { x, y };
  });
}

describe("the probe MLP", () => {
  for (const [activation, output] of [
    ["relu", 1],
    ["gelu", 3],
  ] as const) {
    it(`back-propagates exactly (${activation}, ${output} output${output > 1 ? "s" : ""}): gradients match finite differences`, () => {
      const shape: MlpShape = { input: 6, hidden: [5, 4], output, activation, dropout: 0 };
      const mlp = new Mlp(shape, undefined, 3);
      const data = dataset(5, 6, 4, output === 1 ? 2 : 3);
      const params = mlp.parameters();
      const grads = params.map((p) => new Float64Array(p.length));
      // Analytic: one pass through trainMlp's pieces via a batch of the whole set with lr 0 is awkward; instead
      // run the traced forward / backward directly.
      for (const e of data) {
        const t = mlp.run(e.x, null);
        const z = t.out;
        let g: Float64Array;
        if (output === 1) g = Float64Array.of(1 / (1 + Math.exp(-z[0])) - e.y);
        else {
          const m = Math.max(...z);
          const ex = Array.from(z, (v) => Math.exp(v - m));
          const s = ex.reduce((a, b) => a + b, 0);
          g = Float64Array.from(ex, (v, k) => v / s - (k === e.y ? 1 : 0));
        }
        mlp.backward(t, g, grads);
      }
      const loss = (): number => meanLoss(mlp, data) * data.length;
      for (const [pi, p] of params.entries()) {
        for (const i of [0, Math.floor(p.length / 2), p.length - 1]) {
          const old = p[i];
          const h = 1e-3;
          p[i] = old + h;
          const up = loss();
          p[i] = old - h;
          const down = loss();
          p[i] = old;
          const numeric = (up - down) / (2 * h);
          expect(Math.abs(numeric - grads[pi][i])).toBeLessThan(2e-3 + 2e-2 * Math.abs(numeric));
        }
      }
    });
  }

  it("training lowers the loss, keeps the best validation epoch, and is reproducible bit for bit", () => {
    const shape: MlpShape = { input: 16, hidden: [8, 4], output: 1, activation: "relu", dropout: 0.15 };
    const train = dataset(400, 16, 1);
    const val = dataset(100, 16, 2);
    const fit = (): { mlp: Mlp; r: ReturnType<typeof trainMlp> } => {
      const mlp = new Mlp(shape, undefined, 9);
      const r = trainMlp(
        mlp,
        train,
        { epochs: 12, batchSize: 32, lr: 1e-2, weightDecay: 0.1, stepSize: 5, gamma: 0.8, seed: 4 },
        (m) => -meanLoss(m, val),
      );
      return { mlp, r };
    };
    const before = meanLoss(new Mlp(shape, undefined, 9), val);
    const a = fit();
    const b = fit();
    expect(a.r.losses[a.r.losses.length - 1]).toBeLessThan(a.r.losses[0]);
    expect(meanLoss(a.mlp, val)).toBeLessThan(before * 0.6);
    const right = val.filter((e) => (a.mlp.forward(e.x)[0] > 0 ? 1 : 0) === e.y).length;
    expect(right / val.length).toBeGreaterThan(0.8); // the boundary is learnt (chance: 0.5)
    expect(-a.r.scores[a.r.bestEpoch]).toBeCloseTo(meanLoss(a.mlp, val), 12); // the kept weights are the best epoch's
    expect(a.mlp.parameters().map((p) => Array.from(p))).toEqual(b.mlp.parameters().map((p) => Array.from(p)));
  });
});

describe("probe statistics", () => {
  it("AUROC, percentile and Spearman are the textbook values", () => {
    expect(auroc([0.1, 0.4, 0.35, 0.8], [0, 0, 1, 1])).toBeCloseTo(0.75, 12);
    expect(auroc([0.5, 0.5], [0, 1])).toBe(0.5); // ties count half
    expect(auroc([1, 2], [1, 1])).toBeNaN();
    expect(percentile([1, 2, 3, 4, 5], 70)).toBeCloseTo(3.8, 12); // numpy.percentile([1..5], 70)
    expect(percentile([5], 30)).toBe(5);
    expect(spearman([1, 2, 3, 4], [10, 20, 30, 40])).toBeCloseTo(1, 12);
    expect(spearman([1, 2, 3, 4], [4, 3, 2, 1])).toBeCloseTo(-1, 12);
  });
});

describe("checkpoint labels", () => {
  // A branch whose probes read wrong, then its (wrong) final answer from the third checkpoint on, and one whose
  // probes reach the right answer at the second: the paper's label is about being right, "settled" about the branch's
  // vote no longer changing.
  const wrong = { correct: [false, false, false, false], settled: [false, false, true, true], finalCorrect: false };
  const right = { correct: [false, true, true, true], settled: [false, true, true, true], finalCorrect: true };
  it("correct (the paper's): the next 3 probes give the right answer; past the end, the final answer's rightness", () => {
    expect([0, 1, 2, 3].map((j) => checkpointLabel(wrong, j, 3, "correct"))).toEqual([0, 0, 0, 0]);
    expect([0, 1, 2, 3].map((j) => checkpointLabel(right, j, 3, "correct"))).toEqual([0, 1, 1, 1]);
    expect(checkpointLabel({ ...right, finalCorrect: false }, 3, 3, "correct")).toBe(0); // past the end: its answer was wrong
  });
  it("settled: the next 3 probes give the branch's own final answer, right or wrong", () => {
    expect([0, 1, 2, 3].map((j) => checkpointLabel(wrong, j, 3, "settled"))).toEqual([0, 0, 1, 1]);
    expect([0, 1, 2, 3].map((j) => checkpointLabel(right, j, 3, "settled"))).toEqual([0, 1, 1, 1]);
    expect([0, 1, 2, 3].map((j) => checkpointLabel(wrong, j, 1, "settled"))).toEqual([0, 0, 1, 1]);
  });
});

describe("trainProbe", () => {
  it("on the bundled tiny reasoner: sweeps the blocks, sets tau from validation, and writes a probe that loads for that model only", async () => {
    const model = await loadModel(bundledModelDir, { kvPages: 512, pageSize: 16 });
    try {
      await using engine = new Engine({ models: { model }, kernelMode: "batch-invariant" });
      const hash = await modelHash(bundledModelDir);
      const target = { hash, hiddenSize: model.config.hiddenSize, numLayers: model.config.numLayers };
      const r = await trainProbe({
        engine,
        encodeChat: (m) => model.tokenizer.encodeChat(m, { addGenerationPrompt: true }),
        encodeText: (t) => model.tokenizer.encode(t, { addSpecialTokens: false }),
        createDetokenizer: () => model.tokenizer.createDetokenizer(),
        model: target,
        task: arithTask,
        problems: { train: 12, validation: 6, test: 6 },
        branches: 2,
        layers: [1, 3],
        epochs: 2,
        maxTokens: 128,
        label: "settled",
      });
      const m = r.probe.meta;
      expect(r.layers.map((l) => l.layer)).toEqual([1, 3]);
      expect(Object.keys(m.correctness.aurocByLayer)).toEqual(["1", "3"]);
      expect([1, 3]).toContain(m.correctness.layer);
      expect(m.correctness.layer).toBe(
        r.layers.reduce((a, b) => (b.validationAuroc > a.validationAuroc ? b : a)).layer,
      );
      expect(m.correctness.interval).toBe(16);
      expect(r.examples.train).toBeGreaterThan(24);
      expect(r.positiveRate).toBeGreaterThan(0); // late checkpoints are positive
      expect(r.positiveRate).toBeLessThan(1); // early ones are not
      expect(m.correctness.label).toBe("settled");
      expect(m.difficulty!.classes).toEqual([1, 2, 3, 4, 5]);
      const dir = mkdtempSync(join(tmpdir(), "probe-train-"));
      await saveProbe(dir, r.probe);
      const back = await loadProbe(dir, target);
      const x = Float32Array.from({ length: model.config.hiddenSize }, (_, i) => Math.cos(i));
      expect(back.correctness.forward(x)).toEqual(r.probe.correctness.forward(x));
      expect(back.difficulty!.forward(x)).toEqual(r.probe.difficulty!.forward(x));
      await expect(loadProbe(dir, { ...target, hash: "0".repeat(64) })).rejects.toThrow(/other weights/);
    } finally {
      model.dispose();
    }
  });
});
