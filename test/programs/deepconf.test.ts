// DeepConf: the threshold percentile, the offline filter and the confidence-weighted vote against hand-computed
// values; online and offline runs on the bundled tiny reasoner (warm-up sets the threshold, stopped traces do not
// vote, consensus ends the run, every page is freed).
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { bundledModelDir } from "../../ts/bundledModel.js";
import { weightedMajority } from "../../ts/certaindex/signals.js";
import { Engine } from "../../ts/engine/engine.js";
import type { ConfidenceReport } from "../../ts/engine/outputs.js";
import { loadModel, type Model } from "../../ts/model/model.js";
import { percentile } from "../../ts/probe/stats.js";
import { DeepConf, keepTop, measureOf, type DeepConfTrace } from "../../ts/programs/deepconf.js";
import { ProgramRuntime } from "../../ts/programs/runtime.js";
import { arithTask } from "../../ts/tasks/arith/task.js";

const conf = (lowestGroup: number, bottom10Group = lowestGroup, tail = lowestGroup): ConfidenceReport => ({
  mean: 0,
  lowestGroup,
  bottom10Group,
  tail,
  tokens: 10,
});
const trace = (index: number, answer: string, c: ConfidenceReport): DeepConfTrace => ({
  index,
  answer,
  tokens: 10,
  finishReason: "stop",
  confidence: c,
  warmup: false,
});

describe("DeepConf's rules", () => {
  it("keeps the top eta% by the chosen measure and weighs the vote by it", () => {
    const ts = [
      trace(0, "1", conf(1, 5, 9)),
      trace(1, "2", conf(2, 4, 8)),
      trace(2, "2", conf(3, 3, 7)),
      trace(3, "1", conf(4, 2, 6)),
      trace(4, "3", conf(5, 1, 5)),
    ];
    // 90th percentile of [1..5] = 4.6: the top 10% is the one trace above it.
    expect(keepTop(ts, "lowest", 10).map((t) => t.index)).toEqual([4]);
    expect(keepTop(ts, "bottom10", 10).map((t) => t.index)).toEqual([0]);
    // 10th percentile = 1.4: the top 90% drops the least confident.
    expect(keepTop(ts, "tail", 90).map((t) => t.index)).toEqual([0, 1, 2, 3]);
    expect(measureOf(conf(1, 2, 3), "tail")).toBe(3);
    // Weighted: "1" carries 1 + 4 = 5, "2" carries 2 + 3 = 5 (a tie: the first seen), "3" carries 5 (later).
    const v = weightedMajority(
      ts.map((t) => ({ answer: t.answer, weight: t.confidence!.lowestGroup })),
      arithTask.equivalent,
    );
    expect(v).toEqual({ answer: "1", weight: 5, total: 15 });
    expect(
      weightedMajority(
        [
          { answer: "7", weight: 0.2 },
          { answer: "07", weight: 0.5 },
          { answer: null, weight: 9 },
        ],
        arithTask.equivalent,
      ),
    ).toEqual({ answer: "7", weight: 0.7, total: 0.7 });
    expect(percentile([3, 1, 2, 4, 5], 90)).toBeCloseTo(4.6, 12);
  });

  it("refuses bad settings", () => {
    expect(() => new DeepConf({ prompt: [1], variant: "mid" as never })).toThrow(/variant/);
    expect(() => new DeepConf({ prompt: [1], consensus: 1.5 })).toThrow(/consensus/);
    expect(() => new DeepConf({ prompt: [1], window: 0 })).toThrow(/window/);
  });
});

describe("DeepConf on the tiny reasoner", () => {
  let model: Model;
  beforeAll(async () => {
    model = await loadModel(bundledModelDir, { kvPages: 1024, pageSize: 16 });
  });
  afterAll(() => model?.dispose());
  const prompt = (q: string): number[] =>
    model.tokenizer.encodeChat([{ role: "user", content: q }], { addGenerationPrompt: true });

  it("online: the warm-up sets the threshold at the (100 - eta)th percentile of its lowest group confidences; stopped traces do not vote", async () => {
    await using engine = new Engine({ models: { model }, kernelMode: "batch-invariant" });
    // A hard question (level 5) so the traces disagree and the run goes past the warm-up.
    const d = new DeepConf({
      prompt: prompt("What is 87*(56-19)+4523-968?"),
      variant: "low",
      budget: 16,
      warmup: 6,
      parallel: 4,
      seed: 2,
      task: arithTask,
      consensus: 1,
    });
    const r = await new ProgramRuntime(engine).run(d);
    const warm = d.state.traces.filter((t) => t.warmup);
    expect(warm).toHaveLength(6);
    expect(d.state.threshold).toBeCloseTo(
      percentile(
        warm.map((t) => t.confidence!.lowestGroup),
        90,
      ),
      12,
    );
    const online = d.state.traces.filter((t) => !t.warmup);
    expect(online.length).toBeGreaterThan(0);
    for (const t of online) {
      if (t.finishReason === "low_confidence") {
        expect(d.state.voters).not.toContain(t);
        expect(t.confidence!.lowestGroup).toBeLessThan(d.state.threshold!);
      }
    }
    // DeepConf-low's threshold is high: some online trace is stopped early (fewer tokens than it would have used).
    expect(online.some((t) => t.finishReason === "low_confidence")).toBe(true);
    expect(d.state.voters.filter((t) => !t.warmup).every((t) => t.finishReason !== "low_confidence")).toBe(true);
    expect(r.certaindex).toBeCloseTo(d.updateCertaindex(), 12);
    expect(r.tokensByPurpose.warmup).toBeGreaterThan(0);
    expect(engine.metrics().models[0].kvPagesUsed).toBe(0);
  });

  it("online stops at consensus; offline runs the whole budget and votes with the kept traces", async () => {
    await using engine = new Engine({ models: { model }, kernelMode: "batch-invariant" });
    const easy = new DeepConf({ prompt: prompt("What is 3+4?"), budget: 24, warmup: 4, seed: 1, task: arithTask });
    const r = await new ProgramRuntime(engine).run(easy);
    expect(easy.state.stop).toBe("consensus");
    expect(easy.state.traces.length).toBeLessThan(24);
    expect(r.answer).toBe("7");
    const off = new DeepConf({
      prompt: prompt("What is 3+4?"),
      mode: "offline",
      variant: "high",
      budget: 10,
      seed: 1,
      task: arithTask,
    });
    const o = await new ProgramRuntime(engine).run(off);
    expect(off.state.traces).toHaveLength(10);
    expect(off.state.voters.map((t) => t.index)).toEqual(keepTop(off.state.traces, "lowest", 90).map((t) => t.index));
    expect(off.state.voters.length).toBeGreaterThanOrEqual(9); // the top 90% (ties at the cut stay: identical easy traces)
    expect(o.answer).toBe("7");
    expect(engine.metrics().models[0].kvPagesUsed).toBe(0);
  });
});
