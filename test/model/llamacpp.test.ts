// Second, independent oracle: llama.cpp (node-llama-cpp, CPU prebuilt) on the same weights exported to GGUF.
// Greedy continuations must agree token for token wherever the float64 reference's top-2 margin is not tiny.
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { getLlama, type Llama, type Token } from "node-llama-cpp";
import { exportGguf } from "../../scripts/gguf/export-gguf.js";
import { generate } from "../../ts/engine/generate.js";
import { loadModel } from "../../ts/model/model.js";
import { fixtureDir, randomTokens } from "./fixtureCache.js";
import { ReferenceModel } from "./reference.js";

const MIN_MARGIN = 1e-2; // llama.cpp rounds differently (its own kernels); stay clear of near-ties
const STEPS = 12;

let llama: Llama;
beforeAll(async () => {
  llama = await getLlama({ gpu: false, build: "never", logLevel: "error" as never });
});
afterAll(async () => {
  await llama?.dispose();
});

async function llamaCppGreedy(gguf: string, prompt: number[], n: number): Promise<number[]> {
  const model = await llama.loadModel({ modelPath: gguf });
  try {
    const context = await model.createContext({ contextSize: 256, threads: 2 });
    const out: number[] = [];
    for await (const t of context.getSequence().evaluate(prompt as Token[], { temperature: 0 })) {
      out.push(t as number);
      if (out.length >= n) break;
    }
    await context.dispose();
    return out;
  } finally {
    await model.dispose();
  }
}

// qwen3 with head_dim 32 of hidden 64: its q/k norms and a head_dim apart from hidden / heads; qwen3moe its router
// and experts.
for (const [arch, extra] of [
  ["llama", {}],
  ["qwen2", {}],
  ["qwen3", { headDim: 32 }],
  // qwen3moe: every layer a mixture (llama.cpp's qwen3moe has no dense layers), 8 experts, 2 per token, renormalised.
  ["qwen3moe", { moe: { mlpOnlyLayers: [] } }],
] as const) {
  describe(`${arch} greedy continuations agree with llama.cpp`, () => {
    it("token for token up to the first near-tie", async () => {
      const dir = await fixtureDir(arch, "bf16", extra);
      const gguf = join(dir, "model.gguf");
      await exportGguf(dir, gguf, "keep");
      const model = await loadModel(dir, { kvPages: 64 });
      const ref = await ReferenceModel.load(dir);
      try {
        let compared = 0;
        for (const seed of [1, 2]) {
          const prompt = randomTokens(9 + seed, model.config.vocabSize, seed + 40);
          const ours = (
            await generate(model, { tokens: prompt }, { maxTokens: STEPS, temperature: 0, ignoreEos: true })
          ).tokens;
          const theirs = await llamaCppGreedy(gguf, prompt, STEPS);
          const want = ref.greedy(prompt, STEPS);
          const tie = want.margins.findIndex((m) => m < MIN_MARGIN);
          const n = tie < 0 ? STEPS : tie;
          expect(ours.slice(0, n)).toEqual(want.tokens.slice(0, n));
          expect(theirs.slice(0, n)).toEqual(ours.slice(0, n));
          compared += n;
        }
        expect(compared).toBeGreaterThan(6);
      } finally {
        model.dispose();
      }
    });
  });
}
