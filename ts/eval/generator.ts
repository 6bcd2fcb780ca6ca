// What the harness needs from an inference backend: encode a chat, and run a reasoning program to its end. The
// default backend is the project's Engine under a ProgramRuntime (continuous batching; a program's samples share
// the prompt's KV).
import { Engine } from "../engine/engine.js";
import type { ChatMessage } from "../model/chatTemplate.js";
import { readModelConfig } from "../model/config.js";
import { loadModel } from "../model/model.js";
import type { Model } from "../model/model.js";
import type { Program, ProgramResult } from "../programs/program.js";
import { ProgramRuntime, type RunOptions } from "../programs/runtime.js";

export interface EvalGenerator {
  encodeChat(messages: ChatMessage[]): number[];
  /** Runs `program` round by round until its policy stops it (ProgramRuntime.run). */
  run(program: Program, options?: RunOptions): Promise<ProgramResult>;
  /** Most tokens (prompt + generated) one sequence may hold. */
  readonly contextTokens: number;
  dispose(): Promise<void>;
}

export interface EngineGeneratorOptions {
  device?: Model["device"];
  /** Sequences the KV pool must hold at once (sizes the pool: this many full contexts). */
  maxConcurrentSequences: number;
  /** loadModel's quantize and quantizeGroupSize (default: as stored). */
  quantize?: "int8" | "int4" | "fp8";
  quantizeGroupSize?: number;
}

export async function engineGenerator(dir: string, opts: EngineGeneratorOptions): Promise<EvalGenerator> {
  const config = await readModelConfig(dir);
  const pageSize = 16;
  const fullContext = Math.ceil(Math.min(config.maxPositionEmbeddings, config.slidingWindow ?? Infinity) / pageSize);
  const kvPages = fullContext * Math.max(1, opts.maxConcurrentSequences);
  const model = await loadModel(dir, {
    device: opts.device ?? "cpu",
    kvPages,
    pageSize,
    quantize: opts.quantize,
    quantizeGroupSize: opts.quantizeGroupSize,
  });
  const engine = new Engine({ models: { model } });
  const runtime = new ProgramRuntime(engine);
  return {
    contextTokens: model.contextLength,
    encodeChat: (messages) => model.tokenizer.encodeChat(messages, { addGenerationPrompt: true }),
    run: (program, options) => runtime.run(program, options),
    async dispose() {
      await engine.dispose();
      model.dispose();
    },
  };
}
