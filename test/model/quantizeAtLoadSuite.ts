// The checks quantizeInt8.test.ts and quantizeInt4.test.ts make on a model quantized at load (loadModel's quantize),
// written once; each test file keeps its fixtures, load options and bounds in view and passes them in.
// quantizedModelChecks: the logits against the float64 reference of the dequantized model, the distance from the
// dense model, the greedy tokens. describeQuantizedBatch: bitwise batch invariance under a fixed schedule.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { loadModel, type Model } from "../../ts/model/model.js";
import type { NativeForwardResult, NativeForwardSequence } from "../../ts/native/addonTypes.js";
import { fixtureDir, randomTokens, relL2 } from "./fixtureCache.js";
import { FIXED, PAGE, runChunks } from "./forwardSuite.js";
import { ReferenceModel } from "./reference.js";

/** The loaded quantized model, the reference of its dequantized weights, and the fixture's folder. */
export interface QuantizedUnderTest {
  model: Model;
  ref: ReferenceModel;
  dir: string;
}

/**
 * Three tests on the model `get()` returns (set in the caller's beforeAll):
 * - the logits after a prefill of 1 and of 9 tokens and at 3 decode steps each lie within `tolerance` (relL2) of the
 *   dequantized reference's, and so does a decode step under gemmSplitK 2 / kvSplits 2; `checkFirst` (when given)
 *   runs first in that test, for the file's own assertions on the loaded model;
 * - the quantized reference lies more than `movedAtLeast` from the dense model (the weights really were quantized) and
 *   the model's logits less than `closeTo` from the dense model's;
 * - greedy decoding gives the reference's tokens up to the first step whose top-2 margin is below 1e-3.
 */
export function quantizedModelChecks(
  get: () => QuantizedUnderTest,
  o: { tolerance: number; movedAtLeast: number; closeTo: number; checkFirst?: (model: Model) => void },
): void {
  it("gives the dequantized reference's logits after prefill and at every decode step", async () => {
    const { model, ref } = get();
    o.checkFirst?.(model);
    const V = model.config.vocabSize;
    for (const len of [1, 9]) {
      const tokens = randomTokens(len + 3, V, len);
      const want = ref.logits(tokens);
      const got = await runChunks(model, tokens, [len, 1, 1, 1], 0);
      got.forEach((g, i) => expect(relL2(g, want[len - 1 + i]), `len ${len} step ${i}`).toBeLessThan(o.tolerance));
      const split = await runChunks(model, tokens, [len, 1], 0, { gemmSplitK: 2, kvSplits: 2 });
      expect(relL2(split[1], want[len])).toBeLessThan(o.tolerance);
    }
  });

  it("differs from the unquantized model by the quantization, not by a bug's margin", async () => {
    const { model, ref, dir } = get();
    const tokens = randomTokens(9, model.config.vocabSize, 5);
    const exact = await ReferenceModel.load(dir);
    const [got] = await runChunks(model, tokens, [9], 0);
    const dense = exact.logits(tokens)[8];
    const quantized = ref.logits(tokens)[8];
    expect(relL2(quantized, dense)).toBeGreaterThan(o.movedAtLeast);
    expect(relL2(got, dense)).toBeLessThan(o.closeTo);
  });

  it("decodes the reference's greedy tokens", async () => {
    const { model, ref } = get();
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
}

/**
 * describe(`${quantize}-quantized batch on ${device}`): the qwen2 bf16 fixture loaded with `quantize`; three prompts
 * (7, 18 and 1 tokens) run alone and then together in another order under gemmSplitK 2 / kvSplits 2 must give each
 * sequence the same token and bitwise the same logits and layer-1 hidden state. `more` adds tests on the same model.
 */
export function describeQuantizedBatch(
  quantize: "int8" | "int4",
  device: "cpu" | "cuda",
  more?: (model: () => Model) => void,
): void {
  describe(`${quantize}-quantized batch on ${device}`, () => {
    let model: Model;
    beforeAll(async () => {
      model = await loadModel(await fixtureDir("qwen2", "bf16"), {
        device,
        kvPages: 256,
        pageSize: PAGE,
        quantize,
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

    more?.(() => model);
  });
}
