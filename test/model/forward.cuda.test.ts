// The native model forward on CUDA (bf16 weights, bf16 activations and KV, f32 logits) against the float64
// reference: the suite both backends run (forwardSuite.ts: logits after prefill and decode steps, chunked prefill,
// batch invariance under a fixed schedule, copy-on-write pages, boundary errors), then what only CUDA has: CUDA-graph
// replay of repeated steps, greedy generate, and the engine on top. Skipped, with the reason printed, where no GPU
// is usable.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Engine } from "../../ts/engine/engine.js";
import type { GenerationOutput } from "../../ts/engine/outputs.js";
import type { GenerateRequest } from "../../ts/engine/request.js";
import type { NativeForwardResult } from "../../ts/native/addonTypes.js";
import { generate } from "../../ts/engine/generate.js";
import { loadModel, type Model } from "../../ts/model/model.js";
import { cudaUnavailable } from "../kernels/cudaReference.js";
import { fixtureDir, randomTokens } from "./fixtureCache.js";
import { FIXED, forwardSuite, type ForwardBackend } from "./forwardSuite.js";
import { ReferenceModel } from "./reference.js";

const CUDA: ForwardBackend = {
  device: "cuda",
  // Default fixtures (head dim 16: the generic attention kernels), and head dims 64 and 128 (the fast decode path
  // and tensor-core GEMMs with K = 256 / 512).
  cases: [
    { arch: "llama", dtype: "bf16", what: "default" },
    { arch: "qwen2", dtype: "bf16", what: "default" },
    { arch: "llama", dtype: "bf16", extra: { hidden: 256, heads: 4, kvHeads: 2 }, what: "head dim 64, GQA 2" },
    { arch: "qwen2", dtype: "bf16", extra: { hidden: 512, heads: 4, kvHeads: 1 }, what: "head dim 128, GQA 4" },
    // Qwen3: q_norm / k_norm per head, head_dim 64 apart from hidden 128 / 4 heads.
    {
      arch: "qwen3",
      dtype: "bf16",
      extra: { hidden: 128, heads: 4, kvHeads: 2, headDim: 64 },
      what: "head_dim 64, q/k norm",
    },
  ],
  // bf16 weights are exact in the reference; the error is bf16 activations (rounded at every op boundary) and KV.
  tolerance: () => 2e-2,
  // bf16 KV of the earlier chunks is what the one-step prefill reads too: only the packing differs.
  chunkedTolerance: 1e-2,
  prefillLengths: [1, 6, 23, 70],
  batchFixture: { arch: "qwen2", dtype: "bf16", extra: { hidden: 256, heads: 4, kvHeads: 2 }, what: "head dim 64" },
};

const skipReason = cudaUnavailable;
if (skipReason) describe("forward on cuda vs float64 reference", () => it.skip(skipReason, () => {}));
else forwardSuite(CUDA);

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
      (
        await model.forward({
          gemmSplitK: 4,
          kvSplits: 2,
          returnLogits: true,
          sequences: [{ tokens: Int32Array.of(prompt[19]), startPos: 19, blockTable: table, numTopLogprobs: 2 }],
        })
      )[0];
    await model.forward({
      ...FIXED,
      sequences: [{ tokens: Int32Array.from(prompt.slice(0, 19)), startPos: 0, blockTable: table, emitToken: false }],
    });
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
    const V = model.config.vocabSize,
      B = 6,
      steps = 24;
    const prompts = Array.from({ length: B }, (_, b) => randomTokens(3 + 5 * b, V, 300 + b));
    const tables = prompts.map((_, b) => Int32Array.from({ length: 4 }, (_, i) => 100 + 4 * b + i)); // 16-token pages
    const run = async (): Promise<number[][]> => {
      await model.forward({
        ...FIXED,
        sequences: prompts.map((p, b) => ({
          tokens: Int32Array.from(p),
          startPos: 0,
          blockTable: tables[b],
          emitToken: false,
        })),
      });
      let next = prompts.map((p) => p[p.length - 1]);
      const out: number[][] = [];
      for (let s = 0; s < steps; s++) {
        const rs = await model.forward({
          gemmSplitK: 4,
          kvSplits: 2,
          returnLogits: s % 8 === 0,
          sequences: prompts.map((p, b) => ({
            tokens: Int32Array.of(next[b]),
            startPos: p.length + s,
            blockTable: tables[b],
          })),
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
