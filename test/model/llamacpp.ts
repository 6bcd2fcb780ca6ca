// llama.cpp (through node-llama-cpp's prebuilt CPU binary) as an oracle: raw logits per position and greedy
// continuations for a GGUF exported from a fixture. Never builds or downloads anything.
import { getLlama, LlamaLogLevel, type Llama, type LlamaModel } from "node-llama-cpp";

let llamaPromise: Promise<Llama> | null = null;

/** The shared CPU-only llama.cpp instance (prebuilt binary only: build "never", skipDownload). */
export function cpuLlama(): Promise<Llama> {
  llamaPromise ??= getLlama({
    gpu: false,
    build: "never",
    skipDownload: true,
    logLevel: LlamaLogLevel.error,
    maxThreads: 2,
  });
  return llamaPromise;
}

export interface LlamaCppOracle {
  model: LlamaModel;
  /** Raw next-token logits after each of `tokens` (teacher forcing from position 0), each a dense vocab array. */
  logits(tokens: number[]): Promise<Float64Array[]>;
  /** Greedy (temperature 0) continuation of `prompt`, `n` tokens. */
  greedy(prompt: number[], n: number): Promise<number[]>;
  dispose(): Promise<void>;
}

export async function loadLlamaCpp(ggufPath: string, vocabSize: number, contextSize = 256): Promise<LlamaCppOracle> {
  const llama = await cpuLlama();
  const model = await llama.loadModel({ modelPath: ggufPath, gpuLayers: 0 });
  return {
    model,
    async logits(tokens) {
      const ctx = await model.createContext({ contextSize, batchSize: contextSize, sequences: 1, threads: 1 });
      try {
        const seq = ctx.getSequence();
        const input = tokens.map(
          (t) => [t, { generateNext: { logits: true } }] as [number, { generateNext: { logits: true } }],
        );
        const out = await seq.controlledEvaluate(input as never);
        return out.map((o, i) => {
          const dense = new Float64Array(vocabSize);
          const map = o?.next.logits;
          if (!map) throw new Error(`llama.cpp returned no logits at position ${i}`);
          for (const [tok, v] of map) dense[tok as number] = v;
          return dense;
        });
      } finally {
        await ctx.dispose();
      }
    },
    async greedy(prompt, n) {
      const ctx = await model.createContext({ contextSize, batchSize: contextSize, sequences: 1, threads: 1 });
      try {
        // Step by step with controlledEvaluate: one batch per token, temperature 0 (greedy) sampling.
        const seq = ctx.getSequence();
        const next = { generateNext: { token: true, options: { temperature: 0 } } };
        const out: number[] = [];
        let input: unknown[] = [...prompt.slice(0, -1), [prompt.at(-1), next]];
        while (out.length < n) {
          const res = await seq.controlledEvaluate(input as never);
          const t = res.at(-1)?.next.token;
          if (t == null) throw new Error("llama.cpp generated no token");
          out.push(t as number);
          input = [[t, next]];
        }
        return out;
      } finally {
        await ctx.dispose();
      }
    },
    async dispose() {
      await model.dispose();
    },
  };
}
