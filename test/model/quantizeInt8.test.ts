// loadModel(dir, { quantize: "int8" }): the dense layers' linear weights quantized per output row at load. Logits
// after prefill and at each decode step against the float64 reference of the dequantized model (the same q and
// scales, test/kernels/int8Reference.ts), greedy tokens, bitwise batch invariance under a fixed schedule, and the
// option's errors. DELIBERATE_TEST_DEVICE=cuda runs it on the GPU (bf16 activations: a looser bound).
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { InvalidOptionError } from "../../ts/errors/index.js";
import { loadModel, type Model } from "../../ts/model/model.js";
import type { NativeForwardResult, NativeForwardSequence } from "../../ts/native/addonTypes.js";
import type { FixtureArch, FixtureDType, FixtureOptions } from "../../scripts/make-fixture.js";
import { fixtureDir, randomTokens, relL2 } from "./fixtureCache.js";
import { FIXED, PAGE, runChunks } from "./forwardSuite.js";
import { MOE_EXTRA } from "./moeFixture.js";
import { ReferenceModel } from "./reference.js";

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

    it("gives the dequantized reference's logits after prefill and at every decode step", async () => {
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
      // int8 moves the logits (so the weights really were quantized) but stays close to the dense model
      expect(relL2(quantized, dense)).toBeGreaterThan(1e-4);
      expect(relL2(got, dense)).toBeLessThan(5e-2);
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
      // compared up to the first step whose reference top-2 margin is below rounding
      const agree = want.tokens.findIndex((t, i) => want.margins[i] < 1e-3 || t !== got[i]);
      const upTo = agree === -1 ? 6 : agree;
      expect(got.slice(0, upTo)).toEqual(want.tokens.slice(0, upTo));
      if (agree !== -1) expect(want.margins[agree]).toBeLessThan(1e-3);
    });
  });

describe(`int8-quantized batch on ${device}`, () => {
  let model: Model;
  beforeAll(async () => {
    model = await loadModel(await fixtureDir("qwen2", "bf16"), {
      device,
      kvPages: 256,
      pageSize: PAGE,
      quantize: "int8",
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
});

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
