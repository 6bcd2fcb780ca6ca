// loadModel(dir, { quantize: "int8" }): the dense layers' linear weights quantized per output row at load. Logits
// after prefill and at each decode step against the float64 reference of the dequantized model (the same q and
// scales, test/kernels/int8Reference.ts), greedy tokens, bitwise batch invariance under a fixed schedule, and the
// option's errors. DELIBERATE_TEST_DEVICE=cuda runs it on the GPU (bf16 activations: a looser bound).
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { InvalidOptionError } from "../../ts/errors/index.js";
import { loadModel, type Model } from "../../ts/model/model.js";
import type { FixtureArch, FixtureDType, FixtureOptions } from "../../scripts/make-fixture.js";
import { fixtureDir } from "./fixtureCache.js";
import { PAGE } from "./forwardSuite.js";
import { MOE_EXTRA } from "./moeFixture.js";
import { ReferenceModel } from "./reference.js";
import { describeQuantizedBatch, quantizedModelChecks } from "./quantizeAtLoadSuite.js";

const device = (process.env.DELIBERATE_TEST_DEVICE ?? "cpu") as "cpu" | "cuda";
// CPU: f32 activations, f32 accumulation of exact products x * q (1e-4 as the dense CPU forward); CUDA: bf16 activations.
const TOLERANCE = device === "cpu" ? 1e-4 : 2e-2;

const CASES: { arch: FixtureArch; dtype: FixtureDType; extra?: Partial<FixtureOptions>; what: string }[] = [
  { arch: "llama", dtype: "f32", what: "llama f32" },
  { arch: "qwen2", dtype: "bf16", what: "qwen2 bf16 (q/k/v bias)" },
  { arch: "qwen3", dtype: "bf16", extra: { headDim: 32 }, what: "qwen3 bf16 (qk-norm)" },
  {
    arch: "llama",
    dtype: "f16",
    extra: { attentionBias: true, tieEmbeddings: true },
    what: "llama f16 (o bias, tied)",
  },
  // experts stay as stored; the attention projections and layer 0's dense MLP are quantized
  { arch: "qwen3moe", dtype: "bf16", extra: MOE_EXTRA, what: "qwen3moe bf16 (experts as stored)" },
];

for (const c of CASES)
  describe(`int8-quantized ${c.what} on ${device}`, () => {
    let model: Model;
    let ref: ReferenceModel;
    let dir: string;
    beforeAll(async () => {
      dir = await fixtureDir(c.arch, c.dtype, c.extra);
      model = await loadModel(dir, { device, kvPages: 256, pageSize: PAGE, quantize: "int8" });
      ref = await ReferenceModel.load(dir, { quantizeInt8: true });
    });
    afterAll(() => model?.dispose());

    // int8 moves the logits (so the weights really were quantized) but stays close to the dense model
    quantizedModelChecks(() => ({ model, ref, dir }), { tolerance: TOLERANCE, movedAtLeast: 1e-4, closeTo: 5e-2 });
  });

describeQuantizedBatch("int8", device);

describe("loadModel quantize option", () => {
  it("refuses anything but int8 / int4 / fp8 by name, with a typed error, before reading the folder", async () => {
    for (const [value, msg] of [
      ["int2", /loadModel: quantize must be "int8", "int4" or "fp8".*got "int2"/],
      ["fp4", /loadModel: quantize must be "int8", "int4" or "fp8".*got "fp4"$/],
      [8, /got 8/],
    ] as const) {
      const err = await loadModel("/nonexistent-model-dir", { quantize: value as never }).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(InvalidOptionError);
      expect((err as InvalidOptionError).field).toBe("loadModel: quantize");
      expect((err as Error).message).toMatch(msg);
    }
  });
});
