import { describe, expect, it } from "vitest";
import { computeInvFreq, parseModelConfig } from "../../ts/model/config.js";
import { parseGenerationConfig } from "../../ts/model/generationConfig.js";
import { llama3RopeFactors } from "../../scripts/gguf/export-gguf.js";

const base = {
  architectures: ["LlamaForCausalLM"],
  hidden_size: 64,
  intermediate_size: 128,
  num_hidden_layers: 2,
  num_attention_heads: 8,
  vocab_size: 100,
  max_position_embeddings: 256,
  rms_norm_eps: 1e-5,
  rope_theta: 10000,
};

describe("parseModelConfig", () => {
  it("fills defaults as transformers does", () => {
    const c = parseModelConfig(base, "m/config.json");
    expect(c.numKvHeads).toBe(8); // default: multi-head attention
    expect(c.headDim).toBe(8); // hidden / heads
    expect(c.tieWordEmbeddings).toBe(false);
    expect(c.qkvBias).toBe(false);
    expect(c.oProjBias).toBe(false);
    expect(c.ropeScaling).toBeNull();
    expect(c.eosTokenIds).toEqual([]);
  });

  it("reads GQA, explicit head_dim, eos lists and Llama attention_bias", () => {
    const c = parseModelConfig(
      {
        ...base,
        num_key_value_heads: 2,
        head_dim: 16,
        eos_token_id: [5, 7],
        bos_token_id: 1,
        attention_bias: true,
        torch_dtype: "bfloat16",
      },
      "m/config.json",
    );
    expect([c.numKvHeads, c.headDim, c.bosTokenId, c.torchDtype]).toEqual([2, 16, 1, "bfloat16"]);
    expect(c.eosTokenIds).toEqual([5, 7]);
    expect([c.qkvBias, c.oProjBias]).toEqual([true, true]);
  });

  it("gives Qwen2 q/k/v biases (no o_proj bias) and ignores an unused sliding window", () => {
    const c = parseModelConfig(
      {
        ...base,
        architectures: ["Qwen2ForCausalLM"],
        use_sliding_window: false,
        sliding_window: 4096,
        tie_word_embeddings: true,
      },
      "m/config.json",
    );
    expect([c.qkvBias, c.oProjBias, c.slidingWindow, c.tieWordEmbeddings]).toEqual([true, false, null, true]);
    const mistral = parseModelConfig(
      { ...base, architectures: ["MistralForCausalLM"], sliding_window: 128 },
      "m/config.json",
    );
    expect(mistral.slidingWindow).toBe(128);
  });

  it("reads Qwen3 as transformers builds it: q/k norms, head_dim apart from hidden, biases only with attention_bias", () => {
    // Qwen3-8B's attention shape: 32 heads x 128 = 4096 = hidden, but Qwen3-0.6B's 16 x 128 = 2048 against 1024.
    const qwen3 = {
      ...base,
      architectures: ["Qwen3ForCausalLM"],
      hidden_size: 64,
      num_attention_heads: 4,
      head_dim: 32,
    };
    const c = parseModelConfig({ ...qwen3, attention_bias: false, tie_word_embeddings: true }, "m/config.json");
    expect([c.architecture, c.qkNorm, c.headDim, c.qkvBias, c.oProjBias]).toEqual([
      "Qwen3ForCausalLM",
      true,
      32,
      false,
      false,
    ]);
    expect(parseModelConfig({ ...qwen3, attention_bias: true }, "m/config.json").qkvBias).toBe(true);
    expect(parseModelConfig(base, "m/config.json").qkNorm).toBe(false);
    expect(
      parseModelConfig(
        { ...qwen3, use_sliding_window: true, sliding_window: 64, max_window_layers: 0 },
        "m/config.json",
      ).slidingWindow,
    ).toBe(64);
  });

  it("reads YaRN rope_scaling: defaults as vLLM's (beta 32 / 1, original context), the attention factor", () => {
    const yarn = (rs: Record<string, unknown>) =>
      parseModelConfig({ ...base, architectures: ["Qwen3ForCausalLM"], rope_scaling: rs }, "m/config.json").ropeScaling;
    expect(yarn({ rope_type: "yarn", factor: 4, original_max_position_embeddings: 32768 })).toEqual({
      type: "yarn",
      factor: 4,
      originalMaxPositionEmbeddings: 32768,
      betaFast: 32,
      betaSlow: 1,
      attentionFactor: 0.1 * Math.log(4) + 1,
    });
    expect(yarn({ type: "yarn", factor: 2 })).toMatchObject({ originalMaxPositionEmbeddings: 256 }); // max_position_embeddings
    expect(yarn({ rope_type: "yarn", factor: 4, attention_factor: 1.5 })).toMatchObject({ attentionFactor: 1.5 });
    expect(yarn({ rope_type: "yarn", factor: 4, mscale: 1, mscale_all_dim: 1 })).toMatchObject({ attentionFactor: 1 });
    expect(() => yarn({ rope_type: "yarn" })).toThrow(/rope_scaling\.factor/);
    expect(() => yarn({ rope_type: "longrope", factor: 2 })).toThrow(/'llama3' and 'yarn'/);
  });

  it("computes YaRN's inverse frequencies as transformers' _compute_yarn_parameters does", () => {
    const headDim = 32;
    const theta = 1e6;
    const s = {
      type: "yarn" as const,
      factor: 4,
      originalMaxPositionEmbeddings: 64,
      betaFast: 32,
      betaSlow: 1,
      attentionFactor: 1,
    };
    const got = computeInvFreq({ headDim, ropeTheta: theta, ropeScaling: s });
    // transformers, transcribed: find_correction_range (truncate), linear_ramp_factor, the blend.
    const dim = (rot: number) => (headDim * Math.log(64 / (rot * 2 * Math.PI))) / (2 * Math.log(theta));
    const low = Math.max(Math.floor(dim(32)), 0);
    const high = Math.min(Math.ceil(dim(1)), headDim - 1);
    expect([low, high]).toEqual([0, 3]); // a ramp over pairs 0..3 for this config: both ends and its middle occur
    const want = Array.from({ length: headDim / 2 }, (_, i) => {
      const posFreq = Math.pow(theta, (2 * i) / headDim);
      const extrapolationFactor = 1 - Math.min(1, Math.max(0, (i - low) / (high - low)));
      return (1 / (4 * posFreq)) * (1 - extrapolationFactor) + (1 / posFreq) * extrapolationFactor;
    });
    expect(Array.from(got)).toEqual(Array.from(Float32Array.from(want)));
    expect(got[0]).toBe(Math.fround(1)); // the fastest pair extrapolates (unscaled)
    expect(got[15]).toBe(Math.fround(1 / (4 * Math.pow(theta, 30 / 32)))); // the slowest interpolates (/ factor)
  });

  it("follows transformers' Qwen2 max_window_layers: a window on every layer, on none, or an Error for some", () => {
    const qwen = (extra: object) =>
      parseModelConfig(
        { ...base, architectures: ["Qwen2ForCausalLM"], use_sliding_window: true, sliding_window: 64, ...extra },
        "m/config.json",
      );
    expect(qwen({ max_window_layers: 0 }).slidingWindow).toBe(64);
    expect(qwen({ max_window_layers: base.num_hidden_layers }).slidingWindow).toBeNull();
    expect(() => qwen({ max_window_layers: 1 })).toThrow(
      /'max_window_layers' is 1; a sliding window on layers 1\.\.\d+ only is not supported/,
    );
  });

  it.each([
    [{ architectures: ["GPT2LMHeadModel"] }, /architectures.*unsupported architecture.*LlamaForCausalLM/],
    [{ hidden_size: undefined }, /'hidden_size' is missing/],
    [{ num_key_value_heads: 3 }, /'num_key_value_heads' is 3; must divide num_attention_heads \(8\)/],
    [
      { rope_scaling: { rope_type: "longrope", factor: 4 } },
      /'rope_scaling.rope_type' is "longrope"; only 'llama3' and 'yarn'/,
    ],
    [{ rope_scaling: { rope_type: "llama3", factor: 8 } }, /'rope_scaling.low_freq_factor' is missing/],
    [{ hidden_act: "gelu" }, /'hidden_act' is "gelu"/],
    [{ torch_dtype: "float8" }, /'torch_dtype' is "float8"/],
  ])("rejects %j with an error naming file, field and value", (patch, message) => {
    expect(() => parseModelConfig({ ...base, ...patch }, "m/config.json")).toThrow(/^m\/config\.json: /);
    expect(() => parseModelConfig({ ...base, ...patch }, "m/config.json")).toThrow(message);
  });
});

describe("computeInvFreq", () => {
  it("is 1 / theta^(2i/d) without scaling", () => {
    const f = computeInvFreq({ headDim: 8, ropeTheta: 10000, ropeScaling: null });
    expect(Array.from(f)).toEqual([1, 0.1, 0.01, 0.001].map(Math.fround));
  });

  it("applies llama3 scaling band by band (hand-computed)", () => {
    // original ctx 64: wavelengths 2pi/f = 6.28 (< 64/4: kept), 62.8 (between: smoothed), 628 and 6283 (> 64/1: /8).
    const f = computeInvFreq({
      headDim: 8,
      ropeTheta: 10000,
      ropeScaling: {
        type: "llama3",
        factor: 8,
        lowFreqFactor: 1,
        highFreqFactor: 4,
        originalMaxPositionEmbeddings: 64,
      },
    });
    // smooth = (64 / (2pi / 0.1) - 1) / 3 = 0.0061972119; f = 0.1 * ((1 - smooth) / 8 + smooth)
    const expected = [1, 0.013042256043820461, 0.00125, 0.000125];
    expected.forEach((e, i) => expect(f[i]).toBeCloseTo(e, 9));
    expect(f[1]).toBe(Math.fround(expected[1]));
  });

  it("agrees with llama.cpp's rope_freqs divisors (an independent formulation)", () => {
    const config = {
      headDim: 128,
      ropeTheta: 500000,
      ropeScaling: {
        type: "llama3" as const,
        factor: 8,
        lowFreqFactor: 1,
        highFreqFactor: 4,
        originalMaxPositionEmbeddings: 8192,
      },
    };
    const scaled = computeInvFreq(config);
    const factors = llama3RopeFactors(config as never);
    const plain = computeInvFreq({ ...config, ropeScaling: null });
    for (let i = 0; i < 64; i++) expect(scaled[i] / (plain[i] / factors[i])).toBeCloseTo(1, 6);
    expect(new Set(factors.map((x) => (x === 1 ? "kept" : x === 8 ? "scaled" : "smoothed")))).toEqual(
      new Set(["kept", "scaled", "smoothed"]),
    );
  });
});

describe("parseGenerationConfig", () => {
  it("reads sampling defaults and eos lists", () => {
    const g = parseGenerationConfig(
      { do_sample: true, temperature: 0.6, top_p: 0.9, top_k: 20, eos_token_id: [1, 2], max_new_tokens: 64 },
      "g.json",
    );
    expect(g).toEqual({ doSample: true, temperature: 0.6, topP: 0.9, topK: 20, eosTokenIds: [1, 2], maxNewTokens: 64 });
    expect(parseGenerationConfig({ eos_token_id: 7 }, "g.json").eosTokenIds).toEqual([7]);
  });

  it("rejects out-of-range values naming the field", () => {
    expect(() => parseGenerationConfig({ top_p: 1.5 }, "g.json")).toThrow(/g\.json: field 'top_p' is 1\.5/);
  });
});
