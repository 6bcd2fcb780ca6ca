// loadModel(dir, { quantize: "int4" }): the dense layers' linear weights quantized at load in symmetric groups along
// K (Q4_0's scheme, test/kernels/int4Reference.ts quantizeQ4Rows). Logits after prefill and at each decode step
// against the float64 reference of the dequantized model, greedy tokens, bitwise batch invariance under a fixed
// schedule, the resident format, and the option's errors. CPU only: CUDA has no grouped kernel in this build (the
// load refuses nothing, the first forward names it).
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { InvalidOptionError } from "../../ts/errors/index.js";
import { loadModel, type Model } from "../../ts/model/model.js";
import type { FixtureArch, FixtureDType, FixtureOptions } from "../../scripts/make-fixture.js";
import { fixtureDir } from "./fixtureCache.js";
import { PAGE } from "./forwardSuite.js";
import { MOE_EXTRA } from "./moeFixture.js";
import { ReferenceModel } from "./reference.js";
import { describeQuantizedBatch, quantizedModelChecks } from "./quantizeAtLoadSuite.js";

const device = "cpu";
// bf16 activations (the reference rounds them too), f32 sums of exact x * (128 + q) from -(128 + zero) * sum(x), one scaling per octet: as
// close as the dense bf16 CPU forward
const TOLERANCE = 1e-4;

const CASES: {
  arch: FixtureArch;
  dtype: FixtureDType;
  extra?: Partial<FixtureOptions>;
  group: number;
  what: string;
}[] = [
  { arch: "llama", dtype: "f32", group: 32, what: "llama f32, groups of 32" },
  { arch: "qwen2", dtype: "bf16", group: 64, what: "qwen2 bf16 (q/k/v bias), groups of 64" },
  { arch: "qwen3", dtype: "bf16", extra: { headDim: 32 }, group: 32, what: "qwen3 bf16 (qk-norm), groups of 32" },
  {
    arch: "llama",
    dtype: "f16",
    extra: { attentionBias: true, tieEmbeddings: true },
    group: 32,
    what: "llama f16 (o bias, tied), groups of 32",
  },
  { arch: "qwen3moe", dtype: "bf16", extra: MOE_EXTRA, group: 32, what: "qwen3moe bf16 (experts as stored)" },
];

for (const c of CASES)
  describe(`int4-quantized ${c.what} on ${device}`, () => {
    let model: Model;
    let ref: ReferenceModel;
    let dir: string;
    beforeAll(async () => {
      dir = await fixtureDir(c.arch, c.dtype, c.extra);
      model = await loadModel(dir, {
        device,
        kvPages: 256,
        pageSize: PAGE,
        quantize: "int4",
        quantizeGroupSize: c.group,
      });
      ref = await ReferenceModel.load(dir, { quantizeInt4Group: c.group });
    });
    afterAll(() => model?.dispose());

    quantizedModelChecks(() => ({ model, ref, dir }), {
      tolerance: TOLERANCE,
      movedAtLeast: 1e-3,
      closeTo: 0.3,
      // the resident format: groups of c.group
      checkFirst: (m) => expect(m.native.info.linearFormat).toBe(`int4 g${c.group}`),
    });
  });

describeQuantizedBatch("int4", device, (model) => {
  it("holds fewer weight bytes than the int8 model of the same checkpoint", async () => {
    const int8 = await loadModel(await fixtureDir("qwen2", "bf16"), {
      device,
      kvPages: 16,
      pageSize: PAGE,
      quantize: "int8",
    });
    try {
      expect(model().native.info.weightBytes).toBeLessThan(int8.native.info.weightBytes);
      expect(int8.native.info.linearFormat).toBe("int8");
    } finally {
      int8.dispose();
    }
  });
});

describe("loadModel quantize: int4 options", () => {
  it("refuses a bad group size or one without int4 by name, with a typed error", async () => {
    for (const [opts, msg] of [
      [{ quantize: "int4", quantizeGroupSize: 48 }, /quantizeGroupSize must be 32, 64 or 128, got 48/],
      [{ quantize: "int8", quantizeGroupSize: 32 }, /quantizeGroupSize is for quantize: "int4" only/],
      [{ quantizeGroupSize: 64 }, /quantizeGroupSize is for quantize: "int4" only/],
    ] as const) {
      const err = await loadModel("/nonexistent-model-dir", opts as never).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(InvalidOptionError);
      expect((err as InvalidOptionError).field).toBe("loadModel: quantizeGroupSize");
      expect((err as Error).message).toMatch(msg);
    }
  });

  it("refuses a group that does not divide a projection's input width, naming it", async () => {
    const dir = await fixtureDir("llama", "f32", { hidden: 96, heads: 3, kvHeads: 1 });
    const err = await loadModel(dir, { quantize: "int4", quantizeGroupSize: 64, kvPages: 16 }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(InvalidOptionError);
    expect((err as Error).message).toMatch(/quantizeGroupSize 64 does not divide hidden_size = 96/);
  });
});
