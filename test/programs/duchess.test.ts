// DUCHESS on the real engine with a generated fixture model and hand-made probes (an MLP whose output is fixed by
// its last bias, or a seeded random one): each action does what the paper says and leaves no page behind.
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Engine } from "../../ts/engine/engine.js";
import { loadModel, type Model } from "../../ts/model/model.js";
import { Mlp, type MlpShape } from "../../ts/probe/mlp.js";
import { loadProbe, saveProbe, PROBE_SUBDIR, type DuchessProbe, type ProbeMeta } from "../../ts/probe/probeFile.js";
import { Duchess, type DuchessBranch, type DuchessOptions } from "../../ts/programs/duchess.js";
import { ProgramRuntime } from "../../ts/programs/runtime.js";
import { fixtureDir, randomTokens } from "../model/fixtureCache.js";
import { fixedProbe } from "./probeFixture.js";
import { bundledModelDir } from "../../ts/bundledModel.js";
import { confidenceCertaindex, weightedMajority } from "../../ts/certaindex/signals.js";
import { modelHash } from "../../ts/model/modelHash.js";
import { arithTask } from "../../ts/tasks/arith/task.js";

let model: Model;
beforeAll(async () => {
  model = await loadModel(await fixtureDir("llama", "f32", { layers: 2 }), { kvPages: 512, pageSize: 16 });
});
afterAll(() => model?.dispose());

const C = (): number => model.config.hiddenSize;

/** A probe whose p is sigmoid(logit) whatever the activation (all weights 0), or a seeded random MLP. */
const probeOf = (logit: number | "random", over: Partial<ProbeMeta["correctness"]> = {}): DuchessProbe =>
  fixedProbe(model, logit, over);

const usedPages = (e: Engine): number => e.metrics().models[0].kvPagesUsed;
const engineOf = (): Engine => new Engine({ models: { model }, kernelMode: "batch-invariant" });

async function run(
  engine: Engine,
  o: Partial<DuchessOptions> & Pick<DuchessOptions, "probe">,
): Promise<{ d: Duchess; tokens: number; peak: number }> {
  const d = new Duchess({
    prompt: randomTokens(20, model.config.vocabSize, 3),
    branches: 3,
    maxTokens: 40,
    temperature: 0.9,
    seed: 5,
    probeMaxTokens: 4,
    ...o,
  });
  let peak = 0;
  const timer = setInterval(() => (peak = Math.max(peak, usedPages(engine))), 1);
  const r = await new ProgramRuntime(engine).run(d);
  clearInterval(timer);
  return { d, tokens: r.tokensUsed, peak };
}

describe("Duchess's vote", () => {
  const branch = (id: number, answer: string | null): DuchessBranch => ({
    id,
    parent: null,
    offset: 0,
    tokens: 10,
    predictions: [],
    end: "terminated",
    answer,
    cachedTokens: 0,
    confidence: null,
    voted: true,
  });
  it("breaks a tie in branch order, as SC does, not in the order answers arrived", () => {
    const d = new Duchess({ prompt: [1, 2, 3], probe: probeOf(0), branches: 4, task: arithTask });
    // Branch 1's answer (a short trace) arrived first; branches 0 and 1 tie: branch 0's answer wins, as in SC.
    d.state.branches.push(branch(0, "5"), branch(1, "7"), { ...branch(2, "9"), voted: false });
    d.state.answers.push("7", "5");
    expect(d.answer()).toBe("5");
    // Not a tie: the majority, whatever the order.
    d.state.branches.push(branch(3, "7"));
    d.state.answers.push("7");
    expect(d.answer()).toBe("7");
  });
});

describe("Duchess", () => {
  it("terminate: after S checks above tau a branch is CoT-probed and aborted; its pages are freed", async () => {
    await using engine = engineOf();
    const { d } = await run(engine, { probe: probeOf(5), branchOut: false, requestStop: false });
    expect(d.state.branches).toHaveLength(3);
    for (const b of d.state.branches) {
      expect(b.end).toBe("terminated");
      expect(b.predictions.length).toBe(2); // checks at 4 and 8 tokens: S = 2 in a row above tau
      expect(b.tokens).toBeLessThan(40);
    }
    expect(d.state.terminated).toBe(3);
    expect(d.state.answers).toHaveLength(3); // one CoT probe answer each (possibly empty text: counted, no vote)
    expect(d.state.stop).toBe("answers");
    expect(usedPages(engine)).toBe(0);
  });

  it("continue: below tau nothing is terminated and the branches run to their cap", async () => {
    await using engine = engineOf();
    const { d, tokens } = await run(engine, { probe: probeOf(-5), requestStop: false });
    expect(d.state.terminated).toBe(0);
    expect(d.state.forks).toBe(0); // no slot was freed before the end
    for (const b of d.state.branches) expect(b.end === "length" || b.end === "stop").toBe(true);
    expect(d.state.branches.every((b) => b.predictions.length >= 1 && b.predictions.every((p) => p < 0.01))).toBe(true);
    expect(tokens).toBeGreaterThanOrEqual(3 * 8);
    expect(usedPages(engine)).toBe(0);
  });

  it("branch out: each freed slot is filled by forking an active branch, which shares its pages", async () => {
    await using engine = engineOf();
    // Staggered terminations: tau between the random probe's predictions.
    const probe = probeOf(5, { consecutive: 2 });
    const { d } = await run(engine, { probe, branches: 2, requestStop: false, maxTokens: 40 });
    expect(d.state.forks).toBeGreaterThan(0);
    const forked = d.state.branches.filter((b) => b.parent !== null);
    expect(forked.length).toBe(d.state.forks);
    for (const b of forked) {
      const parent = d.state.branches[b.parent!];
      expect(b.offset).toBeGreaterThanOrEqual(parent.offset); // continues where the parent was
      // Every token before the fork point comes with the parent's pages, the partly filled last page included (a
      // fresh request would reuse full pages of the prefix cache only); the last token is fed again to sample on.
      expect(b.cachedTokens).toBe(20 + b.offset - 1);
    }
    expect(d.state.answers).toHaveLength(2); // without request stop: c answers
    expect(usedPages(engine)).toBe(0);
  });

  it("request stop: beta·c answers end the request; the other branches are aborted and every page freed", async () => {
    await using engine = engineOf();
    const without = await run(engine, { probe: probeOf(-5), branches: 4, requestStop: false, maxTokens: 48 });
    const { d, tokens } = await run(engine, { probe: probeOf(-5), branches: 4, alpha: 0.25, beta: 0.5, maxTokens: 48 });
    // Every branch ends in the same step here (same length, no termination), so two answers arrive together:
    // the stop comes at the first of them and the rest are aborted.
    expect(["consensus", "coverage"]).toContain(d.state.stop);
    expect(d.state.answers.length).toBeLessThan(4);
    expect(without.d.state.answers).toHaveLength(4);
    expect(tokens).toBeLessThanOrEqual(without.tokens);
    expect(usedPages(engine)).toBe(0);
  });

  it("classifies the prompt first when the probe has a difficulty classifier, and tags every request with the prediction", async () => {
    await using engine = new Engine({
      models: { model },
      kernelMode: "batch-invariant",
      schedulingPolicy: "gang+complexity",
    });
    const probe = probeOf(-5);
    const dShape: MlpShape = { input: C(), hidden: [8], output: 3, activation: "gelu", dropout: 0.15 };
    const difficulty = new Mlp(dShape, undefined, 3);
    for (const p of difficulty.parameters().slice(2)) p.fill(0); // uniform over the classes
    probe.difficulty = difficulty;
    probe.meta.difficulty = {
      layer: 1,
      classes: [1, 2, 3],
      meanTokens: [10, 20, 60],
      hidden: [8],
      dropout: 0.15,
      testAccuracy: 0,
      testSpearman: 0,
    };
    const d = new Duchess({
      prompt: randomTokens(20, model.config.vocabSize, 3),
      probe,
      branches: 2,
      maxTokens: 12,
      seed: 1,
      requestStop: false,
    });
    const seen: number[] = [];
    const submit = engine.submit.bind(engine);
    engine.submit = (r) => {
      seen.push(r.metadata?.predictedTokens ?? -1);
      return submit(r);
    };
    const r = await new ProgramRuntime(engine).run(d);
    expect(d.state.predictedTokens).toBeCloseTo(30, 9); // the mean of 10, 20, 60 under a uniform prediction
    expect(r.tokensByPurpose.classify).toBe(1);
    expect(seen).toEqual([0, 60, 60]); // the classification request first (0: served first), then c branches × 30
    expect(usedPages(engine)).toBe(0);
  });

  it("refuses bad settings", () => {
    const probe = probeOf(0);
    const prompt = [1, 2, 3];
    expect(() => new Duchess({ prompt, probe, alpha: 0.8, beta: 0.6 })).toThrow(/0 < alpha < beta/);
    expect(() => new Duchess({ prompt, probe, branches: 0 })).toThrow(/branches/);
    expect(() => new Duchess({ prompt, probe, lambda: 0 })).toThrow(/lambda/);
  });
});

describe("probe files", () => {
  it("round-trip bit for bit and are refused for another model, naming both sides", async () => {
    const dir = mkdtempSync(join(tmpdir(), "probe-"));
    const probe = probeOf("random");
    probe.meta.model.hash = "a".repeat(64);
    await saveProbe(dir, probe);
    const target = { hash: "a".repeat(64), hiddenSize: C(), numLayers: model.config.numLayers, name: "fixture" };
    const back = await loadProbe(dir, target);
    const x = Float32Array.from({ length: C() }, (_, i) => Math.sin(i));
    expect(back.correctness.forward(x)).toEqual(probe.correctness.forward(x));
    expect(back.meta).toEqual(probe.meta);
    await expect(loadProbe(dir, { ...target, hash: "b".repeat(64) })).rejects.toThrow(
      /trained on other weights \(model hash aaaaaaaaaaaa…\) than the model "fixture" \(bbbbbbbbbbbb…\).*deliberate probe train/,
    );
    await expect(loadProbe(dir, { ...target, hiddenSize: C() + 8 })).rejects.toThrow(
      new RegExp(`hidden states of size ${C()} but the model "fixture" has hidden size ${C() + 8}`),
    );
    await expect(loadProbe(dir, { ...target, numLayers: 0 })).rejects.toThrow(
      /reads block 0 but the model "fixture" has blocks 0..-1/,
    );
    await expect(loadProbe(join(dir, "none"), target)).rejects.toThrow(/no DUCHESS probe in .*deliberate probe train/);
  });
});

describe("DUCHESS with confidence (issue 28: compared with and without it)", () => {
  it("weighs each counted answer by its branch's lowest group confidence: answer and certaindex are the weighted vote's", async () => {
    const tiny = await loadModel(bundledModelDir);
    try {
      const probe = await loadProbe(join(bundledModelDir, PROBE_SUBDIR), {
        hash: await modelHash(bundledModelDir),
        hiddenSize: tiny.config.hiddenSize,
        numLayers: tiny.config.numLayers,
      });
      await using engine = new Engine({ models: { model: tiny } });
      const prompt = tiny.tokenizer.encodeChat([{ role: "user", content: "What is 68*23-509?" }]);
      const d = new Duchess({ prompt, probe, branches: 6, seed: 11, task: arithTask, confidence: { window: 16 } });
      const r = await new ProgramRuntime(engine).run(d);
      const voted = d.state.branches.filter((b) => b.voted);
      expect(voted.length).toBeGreaterThan(0);
      for (const b of voted) {
        expect(b.confidence, `branch ${b.id} has no confidence report`).not.toBeNull();
        expect(b.confidence!.tokens).toBeGreaterThan(0);
      }
      const votes = voted.map((b) => ({ answer: b.answer, weight: b.confidence!.lowestGroup }));
      expect(r.certaindex).toBeCloseTo(confidenceCertaindex(votes, arithTask.equivalent), 12);
      expect(r.answer).toBe(weightedMajority(votes, arithTask.equivalent).answer);
      expect(engine.metrics().models[0].kvPagesUsed).toBe(0);
    } finally {
      tiny.dispose();
    }
  });
});

describe("the bundled tiny reasoner's probes", () => {
  it("ships the settled-label probe as the default and the paper's-label probe beside it, both for this model", async () => {
    const target = { hash: await modelHash(bundledModelDir), hiddenSize: 128, numLayers: 4 };
    const settled = await loadProbe(join(bundledModelDir, PROBE_SUBDIR), target);
    const correct = await loadProbe(join(bundledModelDir, "probe-correct"), target);
    expect(settled.meta.correctness.label).toBe("settled");
    expect(correct.meta.correctness.label ?? "correct").toBe("correct");
    // Tuned on validation by bench:duchess --tune (the orchestration `--program duchess` runs with).
    expect(settled.meta.orchestration).toBeDefined();
    expect(Object.keys(settled.meta.correctness.tauByPercentile ?? {})).toEqual([
      "30",
      "40",
      "50",
      "60",
      "70",
      "80",
      "90",
    ]);
  });
});
