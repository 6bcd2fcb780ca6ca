// Hand-made DUCHESS probes for the fixture models: an MLP whose output is fixed by its last bias (every weight past
// the input layer zero, so p = sigmoid(logit) whatever the activation), or a seeded random one, with the probe file's
// metadata filled for the model's shape. The tests that need a probe with a known verdict share this one builder.
import type { Model } from "../../ts/model/model.js";
import { Mlp } from "../../ts/probe/mlp.js";
import { PROBE_FILE_VERSION, type DuchessProbe, type ProbeMeta } from "../../ts/probe/probeFile.js";

/** The probe file's metadata for `model`: layer 0 every 4 tokens, τ 0.5 (its 70th percentile), `over` on top. */
export function probeMetaFor(model: Model, over: Partial<ProbeMeta["correctness"]> = {}): ProbeMeta {
  return {
    version: PROBE_FILE_VERSION,
    model: { hash: "h", hiddenSize: model.config.hiddenSize, numLayers: model.config.numLayers },
    task: "arith",
    correctness: {
      layer: 0,
      interval: 4,
      tau: 0.5,
      tauPercentile: 70,
      consecutive: 2,
      hidden: [8, 4],
      dropout: 0.15,
      aurocByLayer: {},
      testAuroc: 0,
      positiveRate: 0,
      ...over,
    },
    training: {},
  };
}

/** A probe whose p is sigmoid(logit) at every check, or a seeded random MLP ("random"). */
export function fixedProbe(
  model: Model,
  logit: number | "random",
  over: Partial<ProbeMeta["correctness"]> = {},
): DuchessProbe {
  const meta = probeMetaFor(model, over);
  const { hidden, dropout } = meta.correctness;
  const mlp = new Mlp({ input: model.config.hiddenSize, hidden, output: 1, activation: "relu", dropout }, undefined, 7);
  if (logit !== "random") {
    for (const p of mlp.parameters().slice(2)) p.fill(0);
    mlp.layers[mlp.layers.length - 1].bias[0] = logit;
  }
  return { meta, correctness: mlp, difficulty: null };
}
