// Activation probes (request.probe): the engine copies the residual stream after the asked blocks out of the step
// that already computes it, every `every` generated tokens. Each capture must be, bit for bit on the CPU, what a
// separate full forward over the same tokens computes there.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Engine } from "../../ts/engine/engine.js";
import { probeCaptureIndex } from "../../ts/engine/request.js";
import { FIXED_SCHEDULE } from "../../ts/engine/kernelSchedule.js";
import { loadModel, type Model } from "../../ts/model/model.js";
import { fixtureDir, randomTokens } from "../model/fixtureCache.js";

let model: Model;
beforeAll(async () => {
  model = await loadModel(await fixtureDir("llama", "f32", { layers: 3 }), { kvPages: 128, pageSize: 16 });
});
afterAll(() => model?.dispose());

/** The stream after `blocks` at the last of `tokens`, from one prefill of them all. */
async function fullForward(tokens: number[], blocks: number[]): Promise<Float32Array> {
  const L = model.config.numLayers;
  const pages = Math.ceil(tokens.length / 16);
  const [r] = await model.forward({
    ...FIXED_SCHEDULE,
    sequences: [
      {
        tokens: Int32Array.from(tokens),
        startPos: 0,
        blockTable: Int32Array.from({ length: pages }, (_, i) => 100 + i),
        captureHiddenLayers: Int32Array.from(blocks.map((b) => probeCaptureIndex(b, L))),
      },
    ],
  });
  return r.hidden!;
}

const bytes = (a: Float32Array): Buffer => Buffer.from(a.buffer, a.byteOffset, a.byteLength);

describe("request.probe", () => {
  it("captures every `every` generated tokens, bitwise the hidden state of a full forward over the same tokens", async () => {
    await using engine = new Engine({ models: { model }, kernelMode: "batch-invariant" });
    const prompt = randomTokens(21, model.config.vocabSize, 5);
    const blocks = [0, 1, 2];
    const C = model.config.hiddenSize;
    // Two samples and a second request beside them: captures are per sequence, whatever else is in the step.
    const other = engine.submit({
      prompt: randomTokens(9, model.config.vocabSize, 6),
      maxTokens: 30,
      ignoreEos: true,
      temperature: 1,
      seed: 3,
    });
    const h = engine.submit({
      prompt,
      n: 2,
      maxTokens: 23,
      ignoreEos: true,
      temperature: 0.9,
      seed: 11,
      probe: { layer: blocks, every: 5 },
    });
    const streamed: Array<{ sample: number; tokens: number }> = [];
    for await (const d of h) if (d.probe) streamed.push({ sample: d.sample, tokens: d.probe.tokens });
    const out = await h.result;
    await other.result;
    for (const s of out.samples) {
      expect(s.probes!.map((p) => p.tokens)).toEqual([0, 5, 10, 15, 20]);
      expect(streamed.filter((x) => x.sample === s.index).map((x) => x.tokens)).toEqual([0, 5, 10, 15, 20]);
      for (const p of s.probes!) {
        expect(p.hidden.length).toBe(blocks.length * C);
        const want = await fullForward([...prompt, ...s.tokens.slice(0, p.tokens)], blocks);
        expect(bytes(p.hidden).equals(bytes(want))).toBe(true);
      }
    }
    expect(out.samples[0].probes![4].hidden).not.toEqual(out.samples[1].probes![4].hidden);
  });

  it("layer -1 is the last block's output (the final norm's input); a fork counts its own generated tokens", async () => {
    await using engine = new Engine({ models: { model }, kernelMode: "batch-invariant" });
    const prompt = randomTokens(12, model.config.vocabSize, 8);
    const parent = engine.submit({ prompt, maxTokens: 8, ignoreEos: true, temperature: 0 });
    const out = await parent.result;
    const child = engine.fork(parent, { maxTokens: 7, probe: { layer: -1, every: 3 } });
    const c = await child.result;
    expect(c.probes!.map((p) => p.tokens)).toEqual([0, 3, 6]);
    const want = await fullForward([...prompt, ...out.tokens, ...c.tokens.slice(0, 3)], [2]);
    expect(bytes(c.probes![1].hidden).equals(bytes(want))).toBe(true);
  });

  it("refuses bad probe options with the field and the fix", async () => {
    await using engine = new Engine({ models: { model } });
    const L = model.config.numLayers;
    expect(() => engine.submit({ prompt: [1, 2], probe: { layer: L, every: 4 } })).toThrow(
      new RegExp(`probe.layer .*\\[-1, ${L - 1}\\]`),
    );
    expect(() => engine.submit({ prompt: [1, 2], probe: { layer: [1, 0], every: 4 } })).toThrow(/ascending/);
    expect(() => engine.submit({ prompt: [1, 2], probe: { layer: 0, every: 0 } })).toThrow(/probe.every/);
    expect(() => engine.submit({ prompt: [1, 2], probe: { layer: 0, every: 2 }, captureHidden: { layer: 1 } })).toThrow(
      /probe or captureHidden/,
    );
  });
});
