// The native forward's emitAll rows (what the decode-verify-rollback verifier runs): a token at every position,
// equal to what one-token-at-a-time decoding on the fixed schedule samples, and bitwise independent of the other
// rows of the pass (batch-invariance: f(a[:1]) == f(a)[:1]).
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { NativeForwardSequence } from "../../ts/native/addonTypes.js";
import { loadModel, type Model } from "../../ts/model/model.js";
import { fixtureDir, randomTokens } from "../model/fixtureCache.js";

const PAGE = 4;
const FIXED = { gemmSplitK: 1, kvSplits: 1 };
let model: Model;
let V: number;

beforeAll(async () => {
  model = await loadModel(await fixtureDir("llama", "f32", { layers: 2 }), { kvPages: 256, pageSize: PAGE });
  V = model.config.vocabSize;
});
afterAll(() => model?.dispose());

const pages = (first: number, n: number): Int32Array => Int32Array.from({ length: n }, (_, i) => first + i);
const sampling = { temperature: 0.9, topK: 0, topP: 1, seed: 42 };

/** Prefills `prompt` on fresh pages, then decodes `n` tokens one by one on the fixed schedule. */
async function decode(
  prompt: number[],
  n: number,
  firstPage: number,
): Promise<{ tokens: number[]; logprobs: number[] }> {
  const bt = pages(firstPage, 16);
  const [first] = await model.forward({
    ...FIXED,
    sequences: [{ tokens: Int32Array.from(prompt), startPos: 0, blockTable: bt, sampling }],
  });
  const tokens = [first.token];
  const logprobs = [first.logprob];
  for (let i = 1; i < n; i++) {
    const [r] = await model.forward({
      ...FIXED,
      sequences: [{ tokens: Int32Array.of(tokens[i - 1]), startPos: prompt.length + i - 1, blockTable: bt, sampling }],
    });
    tokens.push(r.token);
    logprobs.push(r.logprob);
  }
  return { tokens, logprobs };
}

describe("forward emitAll (verify rows)", () => {
  it("samples after every position exactly as token-by-token decoding does (seeded sampling, logprobs, top-k)", async () => {
    const prompt = randomTokens(9, V, 3);
    const want = await decode(prompt, 12, 0);
    // Replay [last prompt token, generated tokens but the last] from position 8 over the prompt's KV (pages 20..):
    // row j must sample generated token j.
    const bt = pages(20, 16);
    await model.forward({
      ...FIXED,
      sequences: [{ tokens: Int32Array.from(prompt.slice(0, 8)), startPos: 0, blockTable: bt, emitToken: false }],
    });
    const replay = [prompt[8], ...want.tokens.slice(0, 11)];
    const [r] = await model.forward({
      ...FIXED,
      sequences: [
        { tokens: Int32Array.from(replay), startPos: 8, blockTable: bt, sampling, emitAll: true, numTopLogprobs: 3 },
      ],
    });
    expect([...r.tokens!]).toEqual(want.tokens);
    expect([...r.logprobs!]).toEqual(want.logprobs.map((x) => Math.fround(x)));
    expect(r.token).toBe(want.tokens[11]);
    expect(r.topIds!.length).toBe(12 * 3);
    for (let j = 0; j < 12; j++) expect(r.topLogprobs![j * 3]).toBeGreaterThanOrEqual(r.logprobs![j]);
  });

  it("gives a row the same bits whatever other rows share the pass and wherever it sits", async () => {
    const row = (tokens: number[], firstPage: number): NativeForwardSequence => ({
      tokens: Int32Array.from(tokens),
      startPos: 0,
      blockTable: pages(firstPage, 4),
      sampling,
      emitAll: true,
    });
    const a = randomTokens(13, V, 11);
    const [alone] = await model.forward({ ...FIXED, returnLogits: true, sequences: [row(a, 100)] });
    const others = [randomTokens(13, V, 12), randomTokens(13, V, 13), randomTokens(5, V, 14)];
    const mixed = await model.forward({
      ...FIXED,
      returnLogits: true,
      sequences: [row(others[0], 110), row(others[1], 120), row(a, 130), { ...row(others[2], 140), emitAll: false }],
    });
    expect([...mixed[2].tokens!]).toEqual([...alone.tokens!]);
    expect(Buffer.from(mixed[2].logits!.buffer).equals(Buffer.from(alone.logits!.buffer))).toBe(true);
    expect(mixed[2].logits!.length).toBe(13 * V);
    expect(mixed[3].tokens).toBeUndefined();
    // Trailing pads (the GPU's fixed-shape verify rows) change nothing before them: the CPU verifier leaves them out.
    const [padded] = await model.forward({ ...FIXED, returnLogits: true, sequences: [row([...a, 0, 0, 0], 150)] });
    expect([...padded.tokens!.slice(0, 13)]).toEqual([...alone.tokens!]);
    expect(Buffer.from(padded.logits!.buffer, 0, 13 * V * 4).equals(Buffer.from(alone.logits!.buffer))).toBe(true);
  });

  it("rejects emitAll on a row that emits nothing", async () => {
    await expect(
      model.forward({
        ...FIXED,
        sequences: [
          { tokens: Int32Array.of(1, 2), startPos: 0, blockTable: pages(0, 1), emitToken: false, emitAll: true },
        ],
      }),
    ).rejects.toThrow(/emitAll needs emitToken/);
  });
});
