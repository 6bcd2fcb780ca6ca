// Model.forward on the CPU (or DELIBERATE_TEST_DEVICE) against the float64 reference: the suite both backends run
// (forwardSuite.ts) over f32, bf16 and f16 fixtures and a Mistral sliding window, plus what this file alone checks:
// hidden states captured against the reference, the window's masking and chat template, a bf16 KV cache.
import { describe, expect, it } from "vitest";
import type { NativeForwardSequence } from "../../ts/native/addonTypes.js";
import { loadModel } from "../../ts/model/model.js";
import { fixtureDir, randomTokens, relL2 } from "./fixtureCache.js";
import { FIXED, forwardSuite, PAGE, runChunks, type FixtureCase, type LoadedCase } from "./forwardSuite.js";
import { ReferenceModel } from "./reference.js";
import { referenceHiddenStates } from "./referenceHidden.js";

const device = (process.env.DELIBERATE_TEST_DEVICE ?? "cpu") as "cpu" | "cuda";

const CASES: FixtureCase[] = [
  { arch: "llama", dtype: "f32" },
  { arch: "llama", dtype: "bf16" },
  { arch: "qwen2", dtype: "f32" },
  { arch: "qwen2", dtype: "bf16" },
  // Qwen3: q_norm / k_norm per head before RoPE, and head_dim as its own field (heads x head_dim = 128, hidden 64).
  { arch: "qwen3", dtype: "f32", extra: { headDim: 32 }, what: "head_dim 32 of hidden 64" },
  { arch: "qwen3", dtype: "bf16", extra: { headDim: 32 }, what: "head_dim 32 of hidden 64" },
  // YaRN: blended inverse frequencies and cos / sin scaled by its attention factor (folded into the softmax scale).
  {
    arch: "qwen3",
    dtype: "f32",
    extra: { ropeScalingJson: { rope_type: "yarn", factor: 4, original_max_position_embeddings: 64 } },
    what: "yarn x4",
  },
  // f16 weights, o_proj bias (Llama attention_bias), plain multi-head attention, tied embeddings.
  {
    arch: "llama",
    dtype: "f16",
    extra: { attentionBias: true, kvHeads: 4, tieEmbeddings: true },
    what: "attention_bias MHA tied",
  },
  // Mistral: a sliding window of 5 keys, shorter than most prompts below (the CUDA kernels refuse a window).
  ...(device === "cpu"
    ? [{ arch: "llama" as const, dtype: "f32" as const, extra: { slidingWindow: 5 }, what: "Mistral sliding_window 5" }]
    : []),
];
if (device !== "cpu")
  console.warn(
    "[forward tests] the Mistral sliding-window case runs on the CPU only: the CUDA attention kernels do not mask a window yet",
  );

/** Hidden states captured at the last position against the reference's, on each case's model. */
function hiddenStateTests(loaded: () => LoadedCase): void {
  it("captures the reference hidden state of a chosen layer at the last position", async () => {
    const { model, ref, tolerance } = loaded();
    const tokens = randomTokens(9, model.config.vocabSize, 11);
    const hs = referenceHiddenStates(ref, tokens);
    for (let layer = 0; layer <= model.config.numLayers; layer++) {
      const [r] = await model.forward({
        ...FIXED,
        sequences: [
          {
            tokens: Int32Array.from(tokens),
            startPos: 0,
            blockTable: Int32Array.from([40, 41, 42]),
            captureHiddenLayer: layer,
          },
        ],
      });
      expect(r.hidden!.length).toBe(model.config.hiddenSize);
      expect(relL2(r.hidden!, hs[layer][8])).toBeLessThan(tolerance);
    }
  });

  it("captures several layers at once, the final norm's input included, each as it would alone", async () => {
    const { model, ref, tolerance } = loaded();
    const tokens = randomTokens(9, model.config.vocabSize, 12);
    const hs = referenceHiddenStates(ref, tokens);
    const L = model.config.numLayers;
    const C = model.config.hiddenSize;
    const layers = [0, 1, L, L + 1];
    const run = (capture: Partial<NativeForwardSequence>) =>
      model.forward({
        ...FIXED,
        sequences: [
          { tokens: Int32Array.from(tokens), startPos: 0, blockTable: Int32Array.from([40, 41, 42]), ...capture },
        ],
      });
    const [all] = await run({ captureHiddenLayers: Int32Array.from(layers) });
    expect(all.hidden!.length).toBe(layers.length * C);
    for (const [k, layer] of layers.entries()) {
      const got = all.hidden!.subarray(k * C, (k + 1) * C);
      expect(relL2(got, hs[layer][8])).toBeLessThan(tolerance);
      if (layer <= L)
        expect(Array.from(got)).toEqual(Array.from((await run({ captureHiddenLayer: layer }))[0].hidden!));
    }
    // The final norm's input is not the normed output.
    expect(relL2(all.hidden!.subarray(3 * C), hs[L][8])).toBeGreaterThan(0.01);
    await expect(run({ captureHiddenLayers: Int32Array.from([2, 1]) })).rejects.toThrow(/ascending/);
    await expect(run({ captureHiddenLayers: Int32Array.from([L + 2]) })).rejects.toThrow(/final norm's input/);
  });
}

forwardSuite({
  device,
  cases: CASES,
  // Activations are f32 on the CPU whatever the weight dtype, and a bf16 projection rounds its input to bf16 (so
  // does the reference). That rounding is a step function: where an activation lies within f32 noise of a bf16
  // halfway point, the reference (float64) and the kernels (f32, any splitK or compiler's contraction) round it to
  // neighbouring bf16 values, one bf16 ulp (2^-8) apart, and the logits move by up to ~4e-3 (llama bf16, 24 random
  // tokens at seeds 3-4: 2.7e-4 to 3.6e-3 on some prefixes at every splitK, splitK 1 included; the ASan build's -O1
  // flipped another one). Hence 1e-2 for bf16 weights on the CPU; f16 weights (converted exactly, activations not
  // rounded) and f32 keep 1e-4. Bit-level agreement between paths is checked apart (batch invariance, kernels).
  tolerance: (dtype) =>
    dtype === "f32" || (device === "cpu" && dtype !== "bf16") ? 1e-4 : device === "cpu" ? 1e-2 : 2e-2,
  chunkedTolerance: 1e-5,
  // Up to 23 tokens: a 70-token prompt over bf16 weights ends ~2.5e-4 from the reference, past the 1e-4 above.
  prefillLengths: [1, 6, 23],
  batchFixture: { arch: "qwen2", dtype: "f32" },
  caseTests: hiddenStateTests,
});

describe("Mistral sliding window", () => {
  it("renders Mistral's chat template and its special tokens", async () => {
    const model = await loadModel(await fixtureDir("llama", "f32", { slidingWindow: 5 }), {
      kvPages: 16,
      pageSize: PAGE,
    });
    try {
      const tok = model.tokenizer;
      const ids = tok.encodeChat([{ role: "user", content: "What is 2+2?" }]);
      expect(tok.decode(ids, { skipSpecialTokens: false })).toBe("<s>[INST] What is 2+2? [/INST]");
      expect(model.config.architecture).toBe("MistralForCausalLM");
      const turns = tok.encodeChat([
        { role: "user", content: "hi" },
        { role: "assistant", content: "4" },
        { role: "user", content: "why?" },
      ]);
      expect(tok.decode(turns, { skipSpecialTokens: false })).toBe("<s>[INST] hi [/INST]4</s> [INST] why? [/INST]");
      expect(() => tok.encodeChat([{ role: "assistant", content: "x" }])).toThrow(/alternate user\/assistant/);
    } finally {
      model.dispose();
    }
  });

  it("masks keys older than the window (the logits differ from full attention over the same weights)", async () => {
    if (device !== "cpu") return;
    const dir = await fixtureDir("llama", "f32", { slidingWindow: 5 });
    const windowed = await loadModel(dir, { kvPages: 64, pageSize: PAGE });
    const full = await ReferenceModel.load(dir);
    (full.config as { slidingWindow: number | null }).slidingWindow = null; // the same weights, full attention
    try {
      expect(windowed.config.slidingWindow).toBe(5);
      expect(windowed.contextLength).toBe(windowed.config.maxPositionEmbeddings); // masked, not clamped
      await expect(loadModel(dir, { device: "cuda" })).rejects.toThrow(
        /sliding window of 5 tokens, which the CUDA attention kernels do not mask yet; load it with device: "cpu"/,
      );
      const tokens = randomTokens(12, windowed.config.vocabSize, 5);
      const [last] = await runChunks(windowed, tokens, [12], 0);
      const want = full.logits(tokens);
      expect(relL2(last, want[11])).toBeGreaterThan(1e-3); // position 11 sees 5 of 12 keys
      const [short] = await runChunks(windowed, tokens.slice(0, 5), [5], 20);
      expect(relL2(short, want[4])).toBeLessThan(1e-4); // within the window: the same as full attention
    } finally {
      windowed.dispose();
    }
  });
});

describe("bf16 KV cache", () => {
  it("stays close to the reference with half the KV memory", async () => {
    const dir = await fixtureDir("llama", "f32");
    const model = await loadModel(dir, { device, kvPages: 32, pageSize: PAGE, kvDtype: "bf16" });
    const f32 = await loadModel(dir, { device, kvPages: 32, pageSize: PAGE });
    try {
      expect(model.kv.bytesPerPage * 2).toBe(f32.kv.bytesPerPage);
      expect([model.kv.dtype, f32.kv.dtype]).toEqual(["bf16", "f32"]); // the CPU default, as the model reports it
      const tokens = randomTokens(20, model.config.vocabSize, 5);
      const want = (await ReferenceModel.load(dir)).logits(tokens);
      const got = await runChunks(model, tokens, [17, 1, 1, 1], 0);
      got.forEach((g, i) => expect(relL2(g, want[16 + i])).toBeLessThan(2e-2));
    } finally {
      model.dispose();
      f32.dispose();
    }
  });
});
