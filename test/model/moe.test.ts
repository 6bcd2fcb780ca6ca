// Qwen3-MoE (Qwen3MoeForCausalLM) on the CPU against the float64 reference: the forward suite both backends run
// (logits after prefill and every decode step, chunked prefill, a sequence bitwise the same alone and in a mixed batch
// under a fixed schedule, copy-on-write, boundary errors) over f32 and bf16 fixtures of 8 experts, 2 per token, one
// dense layer (mlp_only_layers [0]) before two mixtures; then greedy tokens against the reference's, and the routing
// itself (a forward that ignores the router, or routes to the wrong experts, is caught).
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { join } from "node:path";
import { exportGguf } from "../../scripts/gguf/export-gguf.js";
import { parseModelConfig } from "../../ts/model/config.js";
import { loadModel, type Model } from "../../ts/model/model.js";
import { weightNames } from "../../ts/model/weights.js";
import { fixtureDir, randomTokens, relL2 } from "./fixtureCache.js";
import { FIXED, forwardSuite, PAGE, runChunks, type FixtureCase } from "./forwardSuite.js";
import { MOE_EXTRA } from "./moeFixture.js";
import { ReferenceModel } from "./reference.js";

const CASES: FixtureCase[] = [
  { arch: "qwen3moe", dtype: "f32", extra: MOE_EXTRA, what: "8 experts top-2, layer 0 dense" },
  { arch: "qwen3moe", dtype: "bf16", extra: MOE_EXTRA, what: "8 experts top-2, layer 0 dense" },
];

forwardSuite({
  device: "cpu",
  cases: CASES,
  // f32 weights agree to ~3e-7. bf16: the reference rounds each projection's float64 input to bf16 where the kernels
  // round their f32 one; where the two land on either side of a rounding boundary the value moves by one bf16 ulp.
  // The 23-token prompt meets one such flip at position 3 (its routing margins there are >= 5e-3 in probability, so
  // the same experts run): 4e-8 before it, 1.9e-3 from it on, through the KV cache, in this 64-wide model.
  tolerance: (dtype) => (dtype === "f32" ? 1e-5 : 5e-3),
  chunkedTolerance: 1e-5,
  prefillLengths: [1, 6, 23],
  batchFixture: CASES[0],
});

describe("Qwen3-MoE config", () => {
  const base = {
    architectures: ["Qwen3MoeForCausalLM"],
    hidden_size: 64,
    intermediate_size: 128,
    num_hidden_layers: 6,
    num_attention_heads: 4,
    vocab_size: 100,
    max_position_embeddings: 64,
  };
  it("reads the MoE fields with transformers' defaults and its rule for which layers are sparse", () => {
    const c = parseModelConfig(base, "config.json");
    expect(c.qkNorm).toBe(true);
    expect(c.moe).toEqual({
      numExperts: 128,
      expertsPerToken: 8,
      intermediateSize: 768,
      normTopKProb: false,
      layers: [0, 1, 2, 3, 4, 5],
    });
    const sparse = parseModelConfig(
      { ...base, decoder_sparse_step: 2, mlp_only_layers: [3], num_experts: 4, num_experts_per_tok: 1 },
      "config.json",
    );
    expect(sparse.moe!.layers).toEqual([1, 5]); // (l + 1) % 2 == 0 and not in mlp_only_layers
    expect(parseModelConfig({ ...base, num_experts: 0 }, "config.json").moe).toBeNull();
    expect(() => parseModelConfig({ ...base, num_experts: 4, num_experts_per_tok: 5 }, "config.json")).toThrow(
      /num_experts_per_tok/,
    );
    expect(() => parseModelConfig({ ...base, num_experts: 2048 }, "config.json")).toThrow(/num_experts.*1024/);
    const names = weightNames(sparse).layers;
    expect(names[0].moe).toBeNull();
    expect(names[0].gateProj).toBe("model.layers.0.mlp.gate_proj.weight");
    expect(names[1].gateProj).toBeNull();
    expect(names[1].moe!.router).toBe("model.layers.1.mlp.gate.weight");
    expect(names[1].moe!.experts[3].downProj).toBe("model.layers.1.mlp.experts.3.down_proj.weight");
  });
});

describe("Qwen3-MoE routing on cpu", () => {
  let model: Model;
  let ref: ReferenceModel;
  let dir: string;
  beforeAll(async () => {
    dir = await fixtureDir("qwen3moe", "bf16", MOE_EXTRA);
    model = await loadModel(dir, { kvPages: 64, pageSize: PAGE });
    ref = await ReferenceModel.load(dir);
  });
  afterAll(() => model?.dispose());

  it("greedy-decodes the reference's tokens", async () => {
    const prompt = randomTokens(9, model.config.vocabSize, 3);
    const want = ref.greedy(prompt, 12);
    const pages = Int32Array.from({ length: 8 }, (_, i) => i);
    const got: number[] = [];
    let tokens = prompt;
    let pos = 0;
    for (let i = 0; i < 12; i++) {
      const [r] = await model.forward({
        ...FIXED,
        sequences: [{ tokens: Int32Array.from(tokens), startPos: pos, blockTable: pages }],
      });
      got.push(r.token);
      pos += tokens.length;
      tokens = [r.token];
    }
    expect(Math.min(...want.margins)).toBeGreaterThan(1e-3); // a clear argmax at every step: the comparison is exact
    expect(got).toEqual(want.tokens);
  });

  it("differs from a forward whose router is flipped (the router decides which experts run)", async () => {
    const tokens = randomTokens(7, model.config.vocabSize, 4);
    const [base] = await runChunks(model, tokens, [7], 10);
    const names = weightNames(model.config).layers[1].moe!;
    const flipped = await loadModel(dir, { kvPages: 16, pageSize: PAGE });
    try {
      const ckptRouter = ref.weight(names.router);
      // Negating the router sends every token to its k least likely experts.
      const neg = Float32Array.from(ckptRouter, (v) => -v);
      flipped.native.setWeight(
        names.router,
        "f32",
        [model.config.moe!.numExperts, model.config.hiddenSize],
        new Uint8Array(neg.buffer),
      );
      const [other] = await runChunks(flipped, tokens, [7], 0);
      expect(relL2(other, base)).toBeGreaterThan(1e-2);
    } finally {
      flipped.dispose();
    }
  });
});

describe("Qwen3-MoE GGUF export", () => {
  it("refuses what llama.cpp's qwen3moe cannot hold: dense layers, norm_topk_prob false", async () => {
    const dense = await fixtureDir("qwen3moe", "f32", MOE_EXTRA); // layer 0 dense
    await expect(exportGguf(dense, join(dense, "x.gguf"))).rejects.toThrow(/dense MLP layers/);
    const raw = await fixtureDir("qwen3moe", "f32", { moe: { mlpOnlyLayers: [], normTopKProb: false } });
    await expect(exportGguf(raw, join(raw, "x.gguf"))).rejects.toThrow(/norm_topk_prob false/);
  });
});
