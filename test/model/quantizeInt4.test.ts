// loadModel(dir, { quantize: "int4" }): the dense layers' linear weights quantized at load in symmetric groups along
// K (Q4_0's scheme, test/kernels/int4Reference.ts quantizeQ4Rows). Logits after prefill and at each decode step
// against the float64 reference of the dequantized model, greedy tokens, bitwise batch invariance under a fixed
// schedule, the resident format, and the option's errors. CPU only: CUDA has no grouped kernel in this build (the
// load refuses nothing, the first forward names it).
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { InvalidOptionError } from "../../ts/errors/index.js";
import { loadModel, type Model } from "../../ts/model/model.js";
import type { NativeForwardResult, NativeForwardSequence } from "../../ts/native/addonTypes.js";
import type { FixtureArch, FixtureDType, FixtureOptions } from "../../scripts/make-fixture.js";
import { fixtureDir, randomTokens, relL2 } from "./fixtureCache.js";
import { FIXED, PAGE, runChunks } from "./forwardSuite.js";
import { MOE_EXTRA } from "./moeFixture.js";
import { ReferenceModel } from "./reference.js";

const device = "cpu";
// bf16 activations (the reference rounds them too), f32 sums of exact x * (q - zero), one scaling per octet: as
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

    it("gives the dequantized reference's logits after prefill and at every decode step", async () => {
      expect(model.native.info.linearFormat).toBe(`int4 g${c.group}`);
      const V = model.config.vocabSize;
      for (const len of [1, 9]) {
        const tokens = randomTokens(len + 3, V, len);
        const want = ref.logits(tokens);
        const got = await runChunks(model, tokens, [len, 1, 1, 1], 0);
        got.forEach((g, i) => expect(relL2(g, want[len - 1 + i]), `len ${len} step ${i}`).toBeLessThan(TOLERANCE));
        const split = await runChunks(model, tokens, [len, 1], 0, { gemmSplitK: 2, kvSplits: 2 });
        expect(relL2(split[1], want[len])).toBeLessThan(TOLERANCE);
      }
    });

    it("differs from the unquantized model by the quantization, not by a bug's margin", async () => {
      const tokens = randomTokens(9, model.config.vocabSize, 5);
      const exact = await ReferenceModel.load(dir);
      const [got] = await runChunks(model, tokens, [9], 0);
      const dense = exact.logits(tokens)[8];
      const quantized = ref.logits(tokens)[8];
      expect(relL2(quantized, dense)).toBeGreaterThan(1e-3);
      expect(relL2(got, dense)).toBeLessThan(0.3);
    });

    it("decodes the reference's greedy tokens", async () => {
      const prompt = randomTokens(7, model.config.vocabSize, 77);
      const want = ref.greedy(prompt, 6);
      const pages = Int32Array.from({ length: 8 }, (_, i) => 100 + i);
      let r = (
        await model.forward({
          ...FIXED,
          sequences: [{ tokens: Int32Array.from(prompt), startPos: 0, blockTable: pages }],
        })
      )[0];
      const got: number[] = [];
      for (let i = 0; i < 6; i++) {
        got.push(r.token);
        r = (
          await model.forward({
            ...FIXED,
            sequences: [{ tokens: Int32Array.of(r.token), startPos: prompt.length + i, blockTable: pages }],
          })
        )[0];
      }
      const agree = want.tokens.findIndex((t, i) => want.margins[i] < 1e-3 || t !== got[i]);
      const upTo = agree === -1 ? 6 : agree;
      expect(got.slice(0, upTo)).toEqual(want.tokens.slice(0, upTo));
      if (agree !== -1) expect(want.margins[agree]).toBeLessThan(1e-3);
    });
  });

describe(`int4-quantized batch on ${device}`, () => {
  let model: Model;
  beforeAll(async () => {
    model = await loadModel(await fixtureDir("qwen2", "bf16"), {
      device,
      kvPages: 256,
      pageSize: PAGE,
      quantize: "int4",
    });
  });
  afterAll(() => model?.dispose());

  it("gives each sequence bitwise the result it gets alone under the same fixed schedule", async () => {
    const V = model.config.vocabSize;
    const schedule = { gemmSplitK: 2, kvSplits: 2 };
    const prompts = [randomTokens(7, V, 41), randomTokens(18, V, 42), randomTokens(1, V, 43)];
    const table = (i: number) => Int32Array.from({ length: 8 }, (_, j) => i * 8 + j);
    const seq = (i: number): NativeForwardSequence => ({
      tokens: Int32Array.from(prompts[i]),
      startPos: 0,
      blockTable: table(i),
      captureHiddenLayer: 1,
    });
    const alone: NativeForwardResult[] = [];
    for (let i = 0; i < 3; i++)
      alone.push((await model.forward({ ...schedule, returnLogits: true, sequences: [seq(i)] }))[0]);
    const together = await model.forward({ ...schedule, returnLogits: true, sequences: [seq(2), seq(0), seq(1)] });
    [2, 0, 1].forEach((i, k) => {
      expect(together[k].token).toBe(alone[i].token);
      expect(Array.from(together[k].logits!)).toEqual(Array.from(alone[i].logits!));
      expect(Array.from(together[k].hidden!)).toEqual(Array.from(alone[i].hidden!));
    });
  });

  it("holds fewer weight bytes than the int8 model of the same checkpoint", async () => {
    const int8 = await loadModel(await fixtureDir("qwen2", "bf16"), {
      device,
      kvPages: 16,
      pageSize: PAGE,
      quantize: "int8",
    });
    try {
      expect(model.native.info.weightBytes).toBeLessThan(int8.native.info.weightBytes);
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
