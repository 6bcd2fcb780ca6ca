// The native model forward on CUDA (bf16 weights, bf16 activations and KV, f32 logits) against the float64
// reference: logits after prefill and after decode steps, chunked prefill, batch invariance under a fixed
// schedule, CUDA-graph replay of repeated steps, greedy generate, and the engine on top. Skipped, with the
// reason printed, where no GPU is usable.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Engine } from "../../ts/engine/engine.js";
import type { GenerationOutput } from "../../ts/engine/outputs.js";
import type { GenerateRequest } from "../../ts/engine/request.js";
import type { NativeForwardBatch, NativeForwardResult, NativeForwardSequence } from "../../ts/native/addonTypes.js";
import { generate } from "../../ts/engine/generate.js";
import { loadModel, type Model } from "../../ts/model/model.js";
import type { FixtureOptions } from "../../scripts/make-fixture.js";
import { cudaUnavailable } from "../kernels/cudaReference.js";
import { fixtureDir, randomTokens, relL2 } from "./fixtureCache.js";
import { ReferenceModel } from "./reference.js";

const PAGE = 4; // small pages: every prompt spans several, with partial last pages
const FIXED = { gemmSplitK: 1, kvSplits: 1 };
// bf16 weights are exact in the reference; the error is bf16 activations (rounded at every op boundary) and KV.
const TOL = 2e-2;

/** Runs `tokens` in chunks of the given sizes on fresh pages; returns the logits after each chunk. */
async function runChunks(model: Model, tokens: number[], chunks: number[], firstPage: number, schedule = FIXED): Promise<Float32Array[]> {
  const pages = Int32Array.from({ length: Math.ceil(tokens.length / PAGE) }, (_, i) => firstPage + i);
  const out: Float32Array[] = [];
  let pos = 0;
  for (const n of chunks) {
    const [r] = await model.forward({
      ...schedule,
      returnLogits: true,
      sequences: [{ tokens: Int32Array.from(tokens.slice(pos, pos + n)), startPos: pos, blockTable: pages }],
    });
    out.push(r.logits!);
    pos += n;
  }
  return out;
}

// Default fixtures (head dim 16: the generic attention kernels), and head dims 64 and 128 (the fast decode path
// and tensor-core GEMMs with K = 256 / 512).
const CASES: Array<{ arch: "llama" | "qwen2"; extra: Partial<FixtureOptions>; what: string }> = [
  { arch: "llama", extra: {}, what: "default" },
  { arch: "qwen2", extra: {}, what: "default" },
  { arch: "llama", extra: { hidden: 256, heads: 4, kvHeads: 2 }, what: "head dim 64, GQA 2" },
  { arch: "qwen2", extra: { hidden: 512, heads: 4, kvHeads: 1 }, what: "head dim 128, GQA 4" },
];

for (const { arch, extra, what } of CASES) {
  describe.skipIf(!!cudaUnavailable)(`${arch} bf16 (${what}) forward on cuda vs float64 reference`, () => {
    let model: Model;
    let ref: ReferenceModel;
    beforeAll(async () => {
      const dir = await fixtureDir(arch, "bf16", extra);
      model = await loadModel(dir, { device: "cuda", kvPages: 256, pageSize: PAGE });
      ref = await ReferenceModel.load(dir);
    });
    afterAll(() => model?.dispose());

    it("gives the reference logits after prefill and at every decode step", async () => {
      const V = model.config.vocabSize;
      for (const [len, seed] of [[1, 1], [6, 2], [23, 3], [70, 4]] as const) {
        const tokens = randomTokens(len + 3, V, seed);
        const want = ref.logits(tokens);
        const got = await runChunks(model, tokens, [len, 1, 1, 1], 0);
        got.forEach((g, i) => {
          expect(g.length).toBe(V);
          expect(relL2(g, want[len - 1 + i])).toBeLessThan(TOL);
        });
        // kvSplits 2 and split-K GEMMs compute the same function (other bits, same tolerance).
        const split = await runChunks(model, tokens, [len, 1], 0, { gemmSplitK: 2, kvSplits: 2 });
        expect(relL2(split[1], want[len])).toBeLessThan(TOL);
      }
    });

    it("gives the same logits for a prompt prefilled in chunks as in one step", async () => {
      const tokens = randomTokens(29, model.config.vocabSize, 7);
      const [whole] = await runChunks(model, tokens, [29], 0);
      const chunked = await runChunks(model, tokens, [10, 12, 7], 16);
      // bf16 KV of the earlier chunks is what the one-step prefill reads too: only the packing differs.
      expect(relL2(chunked[2], whole)).toBeLessThan(1e-2);
      const want = ref.logits(tokens);
      expect(relL2(chunked[0], want[9])).toBeLessThan(TOL);
      expect(relL2(chunked[1], want[21])).toBeLessThan(TOL);
    });
  });
}

describe.skipIf(!!cudaUnavailable)("batched forward on cuda", () => {
  let model: Model;
  beforeAll(async () => {
    model = await loadModel(await fixtureDir("qwen2", "bf16", { hidden: 256, heads: 4, kvHeads: 2 }), { device: "cuda", kvPages: 256, pageSize: PAGE });
  });
  afterAll(() => model?.dispose());

  it("gives each sequence bitwise the result it gets alone under the same fixed schedule", async () => {
    const V = model.config.vocabSize;
    const schedule = { gemmSplitK: 2, kvSplits: 2 };
    const prompts = [randomTokens(7, V, 21), randomTokens(18, V, 22), randomTokens(1, V, 23), randomTokens(12, V, 24)];
    // Sequences 2 and 3 decode one token after a cached prefix; 0 and 1 are prefill chunks.
    const prefixes = [[], [], randomTokens(9, V, 25), randomTokens(30, V, 26)];
    const table = (i: number) => Int32Array.from({ length: 12 }, (_, j) => i * 12 + j);
    const setup = async () => {
      for (const i of [2, 3]) {
        await model.forward({ ...schedule, sequences: [{ tokens: Int32Array.from(prefixes[i]), startPos: 0, blockTable: table(i), emitToken: false }] });
      }
    };
    const seq = (i: number): NativeForwardSequence => ({
      tokens: Int32Array.from(prompts[i]),
      startPos: prefixes[i].length,
      blockTable: table(i),
      sampling: { temperature: 0.9, seed: 1000 + i, topK: 50, topP: 0.9 },
      numTopLogprobs: 3,
      // Odd sequences capture several layers, the final norm's output (numLayers) and input (numLayers + 1) included.
      captureHiddenLayers: Int32Array.from(i % 2 === 0 ? [1] : [0, 1, model.config.numLayers, model.config.numLayers + 1]),
    });
    await setup();
    const alone: NativeForwardResult[] = [];
    for (let i = 0; i < 4; i++) alone.push((await model.forward({ ...schedule, returnLogits: true, sequences: [seq(i)] }))[0]);
    await setup();
    const batch: NativeForwardBatch = { ...schedule, returnLogits: true, sequences: [seq(3), seq(0), seq(2), seq(1)] };
    const together = await model.forward(batch);
    [3, 0, 2, 1].forEach((i, k) => {
      expect(together[k].token).toBe(alone[i].token);
      expect(together[k].logprob).toBe(alone[i].logprob);
      expect(Array.from(together[k].logits!)).toEqual(Array.from(alone[i].logits!));
      expect(Array.from(together[k].hidden!)).toEqual(Array.from(alone[i].hidden!));
      expect(Array.from(together[k].topIds!)).toEqual(Array.from(alone[i].topIds!));
    });
  });

  it("copies pages (copy-on-write) so a forked sequence continues from the same state", async () => {
    const V = model.config.vocabSize;
    const prefix = randomTokens(6, V, 31);
    const next = randomTokens(1, V, 32);
    await model.forward({ ...FIXED, sequences: [{ tokens: Int32Array.from(prefix), startPos: 0, blockTable: Int32Array.from([100, 101]), emitToken: false }] });
    await model.copyPages(Int32Array.from([101]), Int32Array.from([102]));
    const run = (last: number) =>
      model.forward({ ...FIXED, returnLogits: true, sequences: [{ tokens: Int32Array.from(next), startPos: 6, blockTable: Int32Array.from([100, last]) }] });
    const [a] = await run(101);
    const [b] = await run(102);
    expect(Array.from(b.logits!)).toEqual(Array.from(a.logits!));
  });
});

describe.skipIf(!!cudaUnavailable)("generate and the engine on cuda", () => {
  let model: Model;
  let ref: ReferenceModel;
  beforeAll(async () => {
    const dir = await fixtureDir("llama", "bf16", { hidden: 256, heads: 4, kvHeads: 2 });
    model = await loadModel(dir, { device: "cuda", kvPages: 256, pageSize: 16, prefillChunkTokens: 8 });
    ref = await ReferenceModel.load(dir);
  });
  afterAll(() => model?.dispose());

  it("greedy generate follows the reference argmax wherever the reference's top-2 gap is clear", async () => {
    let compared = 0;
    for (const seed of [1, 2, 3]) {
      const prompt = randomTokens(5 + 7 * seed, model.config.vocabSize, seed); // 12..26 tokens: 2-4 prefill chunks
      const r = await generate(model, { tokens: prompt }, { maxTokens: 12, temperature: 0, ignoreEos: true });
      expect(r.tokens.length).toBe(12);
      expect(r.finishReason).toBe("length");
      const want = ref.greedy(prompt, 12);
      // bf16 activations move logits by ~1% of their scale: compare up to the first near-tie.
      for (let i = 0; i < 12 && want.margins[i] >= 0.05; i++, compared++) expect(r.tokens[i]).toBe(want.tokens[i]);
    }
    expect(compared).toBeGreaterThan(3);
  });

  it("replays repeated steps from a CUDA graph with the eager steps' bits (DL_CUDA_GRAPHS=0 turns graphs off)", async () => {
    const V = model.config.vocabSize;
    const prompt = randomTokens(20, V, 41);
    const table = Int32Array.from([200, 201]);
    const step = async () =>
      (await model.forward({ gemmSplitK: 4, kvSplits: 2, returnLogits: true, sequences: [{ tokens: Int32Array.of(prompt[19]), startPos: 19, blockTable: table, numTopLogprobs: 2 }] }))[0];
    await model.forward({ ...FIXED, sequences: [{ tokens: Int32Array.from(prompt.slice(0, 19)), startPos: 0, blockTable: table, emitToken: false }] });
    let eager: NativeForwardResult;
    process.env.DL_CUDA_GRAPHS = "0";
    try {
      eager = await step();
    } finally {
      delete process.env.DL_CUDA_GRAPHS;
    }
    // First sighting of this layout runs eagerly, the second is captured, the third replays the captured graph.
    for (let i = 0; i < 3; i++) {
      const r = await step();
      expect(r.token).toBe(eager.token);
      expect(Array.from(r.logits!)).toEqual(Array.from(eager.logits!));
      expect(Array.from(r.topLogprobs!)).toEqual(Array.from(eager.topLogprobs!));
    }
    // A long greedy generation (graphs re-captured as the page count grows) equals the all-eager one.
    const gen = () => generate(model, { tokens: prompt }, { maxTokens: 40, temperature: 0, ignoreEos: true });
    const withGraphs = await gen();
    process.env.DL_CUDA_GRAPHS = "0";
    try {
      expect((await gen()).tokens).toEqual(withGraphs.tokens);
    } finally {
      delete process.env.DL_CUDA_GRAPHS;
    }
  });

  it("replays step graphs across page-boundary crossings of a staggered batch with the eager steps' bits", async () => {
    // Six sequences at different lengths cross page boundaries on different steps; the page table's room is
    // rounded up (model_forward.cc pageTableCapacity), so most of these steps replay one graph while the page ids
    // and counts under it change.
    const V = model.config.vocabSize, B = 6, steps = 24;
    const prompts = Array.from({ length: B }, (_, b) => randomTokens(3 + 5 * b, V, 300 + b));
    const tables = prompts.map((_, b) => Int32Array.from({ length: 4 }, (_, i) => 100 + 4 * b + i)); // 16-token pages
    const run = async (): Promise<number[][]> => {
      await model.forward({ ...FIXED, sequences: prompts.map((p, b) => ({ tokens: Int32Array.from(p), startPos: 0, blockTable: tables[b], emitToken: false })) });
      let next = prompts.map((p) => p[p.length - 1]);
      const out: number[][] = [];
      for (let s = 0; s < steps; s++) {
        const rs = await model.forward({
          gemmSplitK: 4,
          kvSplits: 2,
          returnLogits: s % 8 === 0,
          sequences: prompts.map((p, b) => ({ tokens: Int32Array.of(next[b]), startPos: p.length + s, blockTable: tables[b] })),
        });
        next = rs.map((r) => r.token);
        out.push(rs.flatMap((r) => [r.token, ...(r.logits ? Array.from(r.logits.subarray(0, 64)) : [])]));
      }
      return out;
    };
    const withGraphs = await run();
    process.env.DL_CUDA_GRAPHS = "0";
    try {
      expect(await run()).toEqual(withGraphs);
    } finally {
      delete process.env.DL_CUDA_GRAPHS;
    }
  });

  it("engine: concurrent requests in batch-invariant mode give exactly what each gives alone", async () => {
    const V = model.config.vocabSize;
    const reqs: GenerateRequest[] = Array.from({ length: 8 }, (_, i) => ({
      prompt: randomTokens(2 + ((i * 5) % 37), V, 100 + i),
      maxTokens: 5 + (i % 4),
      temperature: i % 3 === 0 ? 0.8 : 0,
      seed: 7 + i,
      ignoreEos: true,
      logprobs: 2,
    }));
    const alone: GenerationOutput[] = [];
    {
      await using engine = new Engine({ models: { model }, kernelMode: "batch-invariant" });
      for (const r of reqs) alone.push(await engine.submit(r).result);
    }
    await using engine = new Engine({ models: { model }, kernelMode: "batch-invariant" });
    const together = await Promise.all(reqs.map((r) => engine.submit(r).result));
    together.forEach((out, i) => {
      expect(out.tokens.length).toBe(reqs[i].maxTokens);
      expect(out.tokens).toEqual(alone[i].tokens);
      expect(out.logprobs).toEqual(alone[i].logprobs);
    });
    expect(engine.metrics().steps).toBeLessThan(reqs.reduce((n, r) => n + r.maxTokens!, 0)); // really batched
  });
});
