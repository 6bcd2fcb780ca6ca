// generate(model, input) / generateStream(model, input): one prompt, one completion, for direct use — on an Engine
// made for the call, so there is one generation path (the engine's scheduler, sampler, stop handling and streaming
// that never splits a character) and one set of defaults (the model's generation_config.json, as
// Model.samplingDefaults() reads it; the HTTP server uses the same). The engine owns the model's KV pages while the
// call runs: do not run it beside another Engine on the same model (submit to that engine instead).
import { InvalidOptionError } from "../errors/index.js";
import type { GenerateParams, GenerateResult } from "../model/generate.js";
import type { GenerateInput, Model } from "../model/model.js";
import { Engine } from "./engine.js";

/** Generates one completion. */
export async function generate(
  model: Model,
  input: GenerateInput,
  params: GenerateParams = {},
): Promise<GenerateResult> {
  const it = generateStream(model, input, params);
  for (;;) {
    const r = await it.next();
    if (r.done) return r.value;
  }
}

/**
 * Streams the completion's text deltas; the generator's return value is the result. Throws at once (not at the
 * first next()) on a disposed model, a bad prompt or bad parameters.
 */
export function generateStream(
  model: Model,
  input: GenerateInput,
  params: GenerateParams = {},
): AsyncGenerator<string, GenerateResult> {
  void model.native; // the disposed guard, before any work
  const prompt = model.encode(input);
  const d = model.samplingDefaults();
  const engine = new Engine({ models: { model }, maxBatchTokens: model.prefillChunkTokens });
  let handle;
  try {
    handle = engine.submit({
      prompt,
      // As asked (else the model's default), capped by the context the prompt leaves (the engine names a prompt that
      // leaves none).
      maxTokens: Math.max(1, Math.min(params.maxTokens ?? d.maxTokens, contextOf(model) - prompt.length)),
      temperature: params.temperature ?? d.temperature,
      topK: params.topK ?? d.topK,
      topP: params.topP ?? d.topP,
      seed: params.seed === undefined ? undefined : seedOf(params.seed),
      stop: params.stop,
      stopTokenIds: params.stopTokenIds,
      ignoreEos: params.ignoreEos,
      signal: params.signal,
    });
  } catch (e) {
    void engine.dispose();
    throw e;
  }
  return run(engine, handle);
}

async function* run(engine: Engine, handle: ReturnType<Engine["submit"]>): AsyncGenerator<string, GenerateResult> {
  try {
    for await (const delta of handle) if (delta.text !== "") yield delta.text;
    const o = await handle.result;
    return {
      tokens: o.tokens,
      text: o.text,
      finishReason: o.finishReason,
      usage: {
        promptTokens: o.usage.promptTokens,
        completionTokens: o.tokens.length,
        totalTokens: o.usage.promptTokens + o.tokens.length,
      },
    };
  } finally {
    await engine.dispose();
  }
}

/** Tokens one sequence may hold: the model's context, or its whole KV pool if that is smaller. */
function contextOf(model: Model): number {
  return Math.min(model.contextLength, model.kv.numPages * model.kv.pageSize);
}

function seedOf(seed: number | bigint): number {
  if (typeof seed === "bigint") {
    if (seed < 0n || seed > BigInt(Number.MAX_SAFE_INTEGER))
      throw new InvalidOptionError(
        `generate: seed is ${seed}; expected an integer in [0, ${Number.MAX_SAFE_INTEGER}]`,
        { field: "generate: seed" },
      );
    return Number(seed);
  }
  return seed;
}
