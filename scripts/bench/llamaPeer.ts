// The llama.cpp side of the benches that compare against it (bench:decode, bench:throughput): a preset's seeded random
// checkpoint with its GGUF export on the same weights, both cached in the temp dir, and node-llama-cpp's prebuilt CPU
// library loaded on that GGUF with a fixed thread count.
import { existsSync, mkdirSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { getLlama, type Llama, type LlamaModel, type Token } from "node-llama-cpp";
import { exportGguf } from "../gguf/export-gguf.js";
import { makeFixture, PRESETS } from "../make-fixture.js";
import { cpuSecondsNow, type TokenTimes } from "./tokenTimes.js";

/** What --quantize asks of our side; the peer gets the same weights with the linear matrices as Q8_0 / Q4_0 (fp8:
 * Q8_0, the llama.cpp format of about the same bytes; llama.cpp has no FP8). */
export type PeerQuantize = "int8" | "int4" | "fp8" | undefined;

/** The GGUF's file name for a quantization: llama.cpp's block formats nearest ours (int8 rows, int4 groups of 32). */
function ggufName(quantize: PeerQuantize): string {
  return quantize === "int4" ? "model-q4_0.gguf" : quantize ? "model-q8_0.gguf" : "model.gguf";
}

/** "Q8_0 linear, rest as stored" / "Q4_0 ..." / "as stored": what a result row says the peer ran. */
export function peerWeightsLabel(quantize: PeerQuantize): string {
  return quantize ? `${quantize === "int4" ? "Q4_0" : "Q8_0"} linear, rest as stored` : "as stored";
}

/** Writes `gguf` from the checkpoint in `dir` (dtypes kept; the linear matrices as Q8_0 / Q4_0 when quantized). */
async function writeGguf(dir: string, gguf: string, quantize: PeerQuantize): Promise<void> {
  await exportGguf(dir, gguf, "keep", quantize ? { linear: quantize === "int4" ? "q4_0" : "q8_0" } : {});
}

/**
 * The preset's seeded random checkpoint (seed 1) in `$TMPDIR/deliberate-bench-<preset>`, written on first use, and the
 * path of its GGUF export for `quantize`, written on first use when `withGguf`. bench:decode and bench:throughput share
 * the directory, so both compare against llama.cpp on the same file.
 */
export async function presetCheckpoint(
  presetName: string,
  quantize: PeerQuantize,
  withGguf: boolean,
  log: (m: string) => void,
): Promise<{ dir: string; gguf: string }> {
  const preset = PRESETS[presetName];
  if (!preset) throw new Error(`--preset must be one of ${Object.keys(PRESETS).join(", ")}`);
  const dir = join(tmpdir(), `deliberate-bench-${presetName}`);
  const gguf = join(dir, ggufName(quantize));
  if (!existsSync(join(dir, "model.safetensors")) && !existsSync(join(dir, "model.safetensors.index.json"))) {
    log(`writing a random ${presetName} model to ${dir} ...`);
    await makeFixture({ ...preset, out: dir });
  }
  if (withGguf && !existsSync(gguf)) {
    log("exporting GGUF for llama.cpp ...");
    await writeGguf(dir, gguf, quantize);
  }
  return { dir, gguf };
}

/**
 * The GGUF export of a checkpoint on disk (--model DIR): kept in `$TMPDIR/deliberate-bench-gguf/<the directory's
 * absolute path, flattened>/`, not in the model's own directory, and written again when the checkpoint's config or
 * weights are newer than it.
 */
export async function checkpointGguf(dir: string, quantize: PeerQuantize, log: (m: string) => void): Promise<string> {
  const cache = join(tmpdir(), "deliberate-bench-gguf", resolve(dir).replace(/[^A-Za-z0-9._-]+/g, "_"));
  const gguf = join(cache, ggufName(quantize));
  const newest = ["config.json", "model.safetensors", "model.safetensors.index.json"]
    .map((f) => join(dir, f))
    .filter((f) => existsSync(f))
    .reduce((t, f) => Math.max(t, statSync(f).mtimeMs), 0);
  if (!existsSync(gguf) || statSync(gguf).mtimeMs < newest) {
    log(`exporting GGUF of ${dir} for llama.cpp to ${gguf} ...`);
    mkdirSync(cache, { recursive: true });
    await writeGguf(dir, gguf, quantize);
  }
  return gguf;
}

/** node-llama-cpp's CPU build (prebuilt binaries only: never a source build) with the GGUF loaded. */
export interface PeerModel {
  llama: Llama;
  model: LlamaModel;
  dispose(): Promise<void>;
}

/** Loads `gguf` into llama.cpp on the CPU with at most `threads` compute threads (contexts pass the same count). */
export async function loadPeerModel(gguf: string, threads: number): Promise<PeerModel> {
  const llama = await getLlama({ gpu: false, build: "never", logLevel: "error" as never, maxThreads: threads });
  const model = await llama.loadModel({ modelPath: gguf });
  return {
    llama,
    model,
    async dispose() {
      await model.dispose();
      await llama.dispose();
    },
  };
}

/** llama.cpp's batched decoding: one context of `sequences` sequences whose evaluations share each llama_decode. */
export interface BatchedPeer {
  /**
   * Clears every sequence, then evaluates prompts[i] on sequence i and generates `maxTokens` greedy tokens on each,
   * all concurrently (eos and other end-of-generation tokens are fed back like any other: every sequence gets
   * exactly `maxTokens`).
   */
  run(prompts: readonly number[][], maxTokens: number): Promise<TokenTimes>;
  dispose(): Promise<void>;
}

/**
 * A context with `sequences` sequences of `contextSize` tokens each (node-llama-cpp gives each its own KV cells: its
 * addon sets kv_unified = false) and a batch that holds every prompt at once, so that all prompts prefill in one
 * llama_decode and every step after it decodes one token of each sequence in one llama_decode (node-llama-cpp
 * gathers the sequences' pending tokens on the next event-loop cycle, most sequences first).
 */
export async function openBatchedPeer(
  peer: PeerModel,
  sequences: number,
  opts: { contextSize: number; batchSize: number; threads: number },
): Promise<BatchedPeer> {
  const context = await peer.model.createContext({
    sequences,
    contextSize: opts.contextSize,
    batchSize: opts.batchSize,
    threads: opts.threads,
  });
  const seqs = Array.from({ length: sequences }, () => context.getSequence());
  return {
    async run(prompts, maxTokens) {
      if (prompts.length !== sequences) throw new Error(`BatchedPeer.run: ${prompts.length} prompts for ${sequences}`);
      await Promise.all(seqs.map((s) => s.clearHistory()));
      const firstAt: number[] = [];
      const firstCpuSeconds: number[] = [];
      const tokenAt: number[] = [];
      await Promise.all(
        seqs.map(async (seq, i) => {
          const it = seq
            .evaluate(prompts[i] as Token[], { temperature: 0, yieldEogToken: true })
            [Symbol.asyncIterator]();
          try {
            // the generator evaluates the previous token only when asked for the next: maxTokens next() calls are a
            // prefill and maxTokens - 1 decode steps, as on our side
            for (let n = 0; n < maxTokens; n++) {
              if ((await it.next()).done) throw new Error(`llama.cpp sequence ${i} ended after ${n} tokens`);
              const t = performance.now();
              if (n === 0) {
                firstAt.push(t);
                firstCpuSeconds.push(cpuSecondsNow());
              }
              tokenAt.push(t);
            }
          } finally {
            await it.return();
          }
        }),
      );
      return { firstAt, firstCpuSeconds, tokenAt };
    },
    async dispose() {
      await context.dispose();
    },
  };
}
