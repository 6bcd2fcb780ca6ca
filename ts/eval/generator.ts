// What the harness needs from an inference backend: encode a chat, and complete a prompt n times. The default
// backend is the project's Engine (continuous batching, n samples sharing the prompt's KV).
import { Engine } from "../engine/engine.js";
import type { ChatMessage } from "../model/chatTemplate.js";
import { readModelConfig } from "../model/config.js";
import { loadModel } from "../model/model.js";
import type { Model } from "../model/model.js";

export interface CompletionRequest {
  prompt: number[];
  n: number;
  /** 0 = greedy. */
  temperature: number;
  seed: number;
  maxTokens: number;
}

export interface Completion {
  /** One generated text per sample. */
  texts: string[];
  /** Generated tokens over all samples. */
  generatedTokens: number;
}

export interface EvalGenerator {
  encodeChat(messages: ChatMessage[]): number[];
  complete(req: CompletionRequest): Promise<Completion>;
  /** Most tokens (prompt + generated) one sequence may hold. */
  readonly contextTokens: number;
  dispose(): Promise<void>;
}

export interface EngineGeneratorOptions {
  device?: Model["device"];
  /** Sequences the KV pool must hold at once (sizes the pool: this many full contexts). */
  maxConcurrentSequences: number;
}

export async function engineGenerator(dir: string, opts: EngineGeneratorOptions): Promise<EvalGenerator> {
  const config = await readModelConfig(dir);
  const pageSize = 16;
  const fullContext = Math.ceil(Math.min(config.maxPositionEmbeddings, config.slidingWindow ?? Infinity) / pageSize);
  const kvPages = fullContext * Math.max(1, opts.maxConcurrentSequences);
  const model = await loadModel(dir, { device: opts.device ?? "cpu", kvPages, pageSize });
  const contextTokens = model.contextLength;
  const engine = new Engine({ models: { model } });
  return {
    contextTokens,
    encodeChat: (messages) => model.tokenizer.encodeChat(messages, { addGenerationPrompt: true }),
    async complete(req) {
      const out = await engine.submit({ prompt: req.prompt, n: req.n, temperature: req.temperature, seed: req.seed, maxTokens: req.maxTokens }).result;
      return { texts: out.samples.map((s) => s.text), generatedTokens: out.usage.generatedTokens };
    },
    async dispose() {
      await engine.dispose();
      model.dispose();
    },
  };
}
