// DUCHESS's τ follows reasoning_effort (issue 49 review), as DeepConf's kept percentile does: low takes the τ 20
// percentile points below the tuned τ's among the probe's validation percentiles (branches terminated sooner), high
// 20 above, medium the tuned τ; the calibration's effort.<level>.settings.duchessTau wins when given. On the real
// engine with a generated fixture model and a hand-made probe whose p is 0.5 whatever the activation.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Engine } from "../../ts/engine/engine.js";
import { loadModel, type Model } from "../../ts/model/model.js";
import type { DuchessProbe } from "../../ts/probe/probeFile.js";
import type { Duchess } from "../../ts/programs/duchess.js";
import { buildProgram, duchessTauFor } from "../../ts/programs/registry.js";
import { ProgramRuntime } from "../../ts/programs/runtime.js";
import { fixtureDir, randomTokens } from "../model/fixtureCache.js";
import { fixedProbe } from "./probeFixture.js";

let model: Model;
beforeAll(async () => {
  model = await loadModel(await fixtureDir("llama", "f32", { layers: 2 }), { kvPages: 512, pageSize: 16 });
});
afterAll(() => model?.dispose());

const PERCENTILES = { "30": 0.3, "40": 0.38, "50": 0.45, "60": 0.52, "70": 0.6, "80": 0.7, "90": 0.8 };

/** A probe whose p is sigmoid(logit) (all weights 0), tuned at the 70th percentile (τ 0.6). */
const probeOf = (logit: number, withPercentiles = true): DuchessProbe =>
  fixedProbe(model, logit, { tau: 0.6, ...(withPercentiles ? { tauByPercentile: PERCENTILES } : {}) });

describe("duchessTauFor", () => {
  it("low / high move 20 percentile points from the tuned τ's; medium and unset keep it", () => {
    const p = probeOf(0);
    expect(duchessTauFor("low", p)).toBe(0.45);
    expect(duchessTauFor("high", p)).toBe(0.8);
    expect(duchessTauFor("medium", p)).toBeUndefined();
    expect(duchessTauFor(undefined, p)).toBeUndefined();
    // Clamped to the percentiles there are; the trainer's own tuned percentile is where it starts.
    const tuned = {
      ...p,
      meta: {
        ...p.meta,
        orchestration: { branches: 4, alpha: 0.6, beta: 0.8, lambda: 1, tau: 0.38, tauPercentile: 40 },
      },
    };
    expect(duchessTauFor("low", tuned)).toBe(0.3);
    expect(duchessTauFor("high", tuned)).toBe(0.52);
    // A probe file without percentiles: 0.8 τ and halfway to 1.
    expect(duchessTauFor("low", probeOf(0, false))).toBeCloseTo(0.48);
    expect(duchessTauFor("high", probeOf(0, false))).toBeCloseTo(0.8);
  });
});

describe("buildProgram duchess at an effort level", () => {
  async function terminated(o: { duchessEffort?: "low" | "medium" | "high"; duchessTau?: number }): Promise<number> {
    await using engine = new Engine({ models: { model }, kernelMode: "batch-invariant" });
    const d = buildProgram("duchess", {
      question: "unused",
      prompt: randomTokens(20, model.config.vocabSize, 3),
      cap: 3,
      maxTokens: 40,
      temperature: 0.9,
      seed: 5,
      probe: probeOf(0), // p = 0.5 at every check
      ...o,
    }) as Duchess;
    await new ProgramRuntime(engine).run(d);
    return d.state.terminated;
  }

  it("low terminates branches whose p (0.5) is under the tuned τ (0.6); medium and high do not", async () => {
    expect(await terminated({ duchessEffort: "low" })).toBeGreaterThan(0);
    expect(await terminated({ duchessEffort: "medium" })).toBe(0);
    expect(await terminated({ duchessEffort: "high" })).toBe(0);
    expect(await terminated({})).toBe(0);
  });

  it("the calibration's τ wins over the rule, and must be in (0, 1)", async () => {
    expect(await terminated({ duchessEffort: "high", duchessTau: 0.4 })).toBeGreaterThan(0);
    await expect(terminated({ duchessEffort: "low", duchessTau: 1.5 })).rejects.toThrow(
      /duchessTau must be a number in \(0, 1\)/,
    );
  });
});
