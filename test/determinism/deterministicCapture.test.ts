// Hidden-state capture with `deterministic: true` (issue 49): a probe's activations and captureHidden's hidden states
// are read from fixed-schedule rows of verified tokens only (the row that reads a captured position runs as an exact
// decode; a verify row stops before a candidate there), so the captures, like the tokens, are bitwise the same alone,
// beside a few plain requests (the fast path splits K and flips this near-tie model's tokens) or beside many, with
// the verify rows fused or in passes of their own, and equal batch-invariant mode's (on the CPU the decode and prefill
// attention kernels agree bitwise).
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Engine } from "../../ts/engine/engine.js";
import type { GenerationOutput } from "../../ts/engine/outputs.js";
import type { GenerateRequest } from "../../ts/engine/request.js";
import { loadModel, type Model } from "../../ts/model/model.js";
import { randomTokens } from "../model/fixtureCache.js";
import { nearTieModelDir } from "./nearTieModel.js";

let model: Model;
let refModel: Model;
let V: number;
let requests: GenerateRequest[];
let reference: GenerationOutput[];

const bytes = (a: Float32Array | undefined): string =>
  a === undefined ? "" : Buffer.from(a.buffer, a.byteOffset, a.byteLength).toString("hex");
/** Tokens and every capture, as bytes. */
const replay = (o: GenerationOutput): string =>
  JSON.stringify({
    tokens: o.tokens,
    probes: (o.probes ?? []).map((p) => [p.tokens, bytes(p.hidden)]),
  });

beforeAll(async () => {
  model = await loadModel(await nearTieModelDir(4), { kvPages: 512, pageSize: 4 });
  refModel = await loadModel(await nearTieModelDir(4), { kvPages: 512, pageSize: 4 });
  V = model.config.vocabSize;
  requests = Array.from({ length: 4 }, (_, i) => ({
    prompt: randomTokens(5 + 3 * i, V, 40 + i),
    maxTokens: 30,
    ignoreEos: true,
    temperature: i % 2 ? 0.8 : 0,
    seed: 7 + i,
    probe: { layer: i % 2 ? [0, -1] : -1, every: 3 + i },
  }));
  // The right answer: batch-invariant mode, each request alone.
  await using bi = new Engine({ models: { model: refModel }, kernelMode: "batch-invariant" });
  reference = [];
  for (const r of requests) reference.push(await bi.submit(r).result);
});
afterAll(() => {
  model?.dispose();
  refModel?.dispose();
});

const companions = (n: number, seed: number): GenerateRequest[] =>
  Array.from({ length: n }, (_, i) => ({
    prompt: randomTokens(3 + ((i * 7) % 13), V, seed + i),
    maxTokens: 6 + (i % 11),
    ignoreEos: true,
    temperature: i % 2 ? 0.7 : 0,
    seed: i,
  }));

describe.each([{ fuseVerify: true }, { fuseVerify: false }])("deterministic probe captures (%o)", ({ fuseVerify }) => {
  it.each([0, 3, 32])(
    "are the batch-invariant captures beside %i plain requests",
    async (n) => {
      await using engine = new Engine({ models: { model }, verifyWindow: 8, verifyGroup: 4, fuseVerify });
      for (const [i, r] of requests.entries()) {
        const [out] = await Promise.all([
          engine.submit({ ...r, deterministic: true }).result,
          ...companions(n, 100 * i).map((c) => engine.submit(c).result),
        ]);
        expect(out.probes!.length).toBe(reference[i].probes!.length);
        expect(out.probes!.map((p) => p.tokens)).toEqual(reference[i].probes!.map((p) => p.tokens));
        expect(replay(out)).toBe(replay(reference[i]));
      }
    },
    60_000,
  );
});

describe("deterministic captureHidden", () => {
  /** Every delta's hidden state, as bytes, in order. */
  async function streamed(engine: Engine, r: GenerateRequest): Promise<{ tokens: number[]; hidden: string[] }> {
    const h = engine.submit(r);
    const hidden: string[] = [];
    for await (const d of h) if (d.hidden) hidden.push(bytes(d.hidden));
    return { tokens: (await h.result).tokens, hidden };
  }

  it("captures every step from fixed rows: the batch-invariant hidden states beside plain requests", async () => {
    const r: GenerateRequest = {
      prompt: randomTokens(9, V, 3),
      maxTokens: 16,
      ignoreEos: true,
      captureHidden: { layer: 2 },
    };
    await using bi = new Engine({ models: { model: refModel }, kernelMode: "batch-invariant" });
    const want = await streamed(bi, r);
    await using engine = new Engine({ models: { model }, verifyWindow: 8 });
    const [out] = await Promise.all([
      streamed(engine, { ...r, deterministic: true }),
      ...companions(3, 900).map((c) => engine.submit(c).result),
    ]);
    expect(out.tokens).toEqual(want.tokens);
    expect(out.hidden.length).toBe(16);
    expect(out.hidden).toEqual(want.hidden);
  });
});
