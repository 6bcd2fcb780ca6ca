// Oracle 2: llama.cpp (node-llama-cpp prebuilt CPU binary) runs the same weights exported to GGUF. It shares no
// code with our float64 reference, so agreement checks the reference, the GGUF export (RoPE row permutation,
// llama3 rope_freqs, tied embeddings, q/k/v biases) and the fixture layout at once. The native engine's own
// llama.cpp comparison lives in llamacpp.test.ts.
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { exportGguf, type GgufDType } from "../../scripts/gguf/export-gguf.js";
import type { FixtureOptions } from "../../scripts/make-fixture.js";
import { mulberry32 } from "../../scripts/fixture/random.js";
import { ModelTokenizer } from "../../ts/model/tokenizer.js";
import { cleanupFixtures, tempDir, tempFixture } from "./fixtures.js";
import { loadLlamaCpp, type LlamaCppOracle } from "./llamacpp.js";
import { ReferenceModel, top2 } from "./reference.js";

interface Case {
  name: string;
  fixture: Omit<FixtureOptions, "out">;
  gguf: GgufDType;
  /** |llama.cpp - reference| allowed per logit: llama.cpp keeps its KV cache in f16, and f16 exports round weights. */
  logitTol: number;
  /** Top-2 margins below this are "tiny" (about twice the worst logit error seen): either argmax is acceptable there. */
  minMargin: number;
}

const CASES: Case[] = [
  // Llama: untied lm_head, GQA 4/2, llama3 RoPE scaling over all three bands, bf16 weights (exact in f32).
  {
    name: "llama bf16 -> f32 gguf",
    fixture: { arch: "llama", dtype: "bf16", layers: 3, seed: 11 },
    gguf: "f32",
    logitTol: 1e-2,
    minMargin: 0.02,
  },
  // Qwen2: tied embeddings, q/k/v biases, NEOX RoPE; exported to f16, so weights are rounded for llama.cpp only.
  {
    name: "qwen2 f32 -> f16 gguf",
    fixture: { arch: "qwen2", dtype: "f32", layers: 2, seed: 12 },
    gguf: "f16",
    logitTol: 0.03,
    minMargin: 0.06,
  },
  // The benchmark path: bf16 weights kept as bf16 in the GGUF (llama.cpp then rounds activations to bf16 too).
  {
    name: "llama bf16 -> bf16 gguf",
    fixture: { arch: "llama", dtype: "bf16", layers: 2, seed: 14 },
    gguf: "keep",
    logitTol: 0.06,
    minMargin: 0.1,
  },
  // Llama with attention biases (q/k biases permuted like their rows) and MHA.
  {
    name: "llama attention_bias f32",
    fixture: { arch: "llama", dtype: "f32", layers: 2, heads: 4, kvHeads: 4, attentionBias: true, seed: 13 },
    gguf: "f32",
    logitTol: 1e-2,
    minMargin: 0.02,
  },
];

describe.each(CASES)("llama.cpp oracle: $name", (c) => {
  let ref: ReferenceModel;
  let cpp: LlamaCppOracle;
  let tokenizer: ModelTokenizer;

  beforeAll(async () => {
    const f = await tempFixture(c.fixture);
    const gguf = join(await tempDir(), "model.gguf");
    await exportGguf(f.dir, gguf, c.gguf);
    // Projection inputs unrounded: on the bf16 export llama.cpp's own noise (f16 KV cache) is ~0.03 per logit with
    // or without bf16-rounded inputs in the reference (measured 0.0295 / 0.0301), and the f32 export widens weights.
    ref = await ReferenceModel.load(f.dir, { bf16Inputs: false });
    tokenizer = await ModelTokenizer.load(f.dir, { config: f.config });
    cpp = await loadLlamaCpp(gguf, f.config.vocabSize);
  });
  afterAll(async () => {
    await cpp?.dispose();
    await cleanupFixtures();
  });

  it("gives the reference's logits at every position of a random sequence (teacher forcing)", async () => {
    const rand = mulberry32(c.fixture.seed ?? 1);
    const tokens = Array.from({ length: 40 }, () => Math.floor(rand() * ref.config.vocabSize));
    const expected = ref.logits(tokens);
    const got = await cpp.logits(tokens);
    let worst = 0;
    let agreed = 0;
    let compared = 0;
    expected.forEach((e, pos) => {
      for (let v = 0; v < e.length; v++) worst = Math.max(worst, Math.abs(e[v] - got[pos][v]));
      const { index, margin } = top2(e);
      if (margin >= c.minMargin) {
        compared++;
        if (top2(got[pos]).index === index) agreed++;
      }
    });
    expect(worst).toBeLessThan(c.logitTol);
    expect(compared).toBeGreaterThanOrEqual(30); // the check is not vacuous
    expect(agreed).toBe(compared);
  });

  it("continues prompts greedily token for token until the reference's top-2 margin gets tiny", async () => {
    let comparedTotal = 0;
    for (const text of [
      "Let's think step by step.",
      "12 + 7 =",
      "The answer is",
      "Hello! How are you today?",
      "Question: What is",
    ]) {
      const prompt = tokenizer.encode(text);
      const { tokens, margins } = ref.greedy(prompt, 16);
      const got = await cpp.greedy(prompt, 16);
      const firstTiny = margins.findIndex((m) => m < c.minMargin);
      const n = firstTiny < 0 ? tokens.length : firstTiny + 1; // at a tiny margin either choice is right, then they may part
      expect(got.slice(0, n), `prompt ${JSON.stringify(text)}`).toEqual(tokens.slice(0, n));
      comparedTotal += n;
    }
    expect(comparedTotal).toBeGreaterThanOrEqual(30); // the check is not vacuous
  });

  it("tokenizes like our tokenizer (GGUF vocabulary, merges and pre-tokenizer type)", () => {
    for (const text of ["Let's think step by step: 17 + 25 = 42.", "Hello world, how are you today?"]) {
      const ours = tokenizer.encode(text, { addSpecialTokens: false });
      expect(Array.from(cpp.model.tokenize(text))).toEqual(ours);
      expect(cpp.model.detokenize(ours as never)).toBe(text);
    }
  });
});
