// A grammar that takes seconds to compile stalls no step: on a 32k-token fixture vocabulary (realistic byte-level token
// strings) a schema of maxLength strings compiles for seconds in XGrammar, one synchronous wasm call; the engine runs
// it on a grammar host thread (ts/grammar/host.ts), the request (a fresh submit, or a fork given a new format) waits
// without sampling, and the rest of the batch goes on. Counted in tokens, not timed: the free sequence must advance
// many steps between the format's arrival and its compile's end (before, it advanced none: the compile ran on the
// engine's thread).
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Engine } from "../../ts/engine/engine.js";
import type { StructuredOutput } from "../../ts/grammar/types.js";
import { loadModel, type Model } from "../../ts/model/model.js";
import { fixtureDir } from "../model/fixtureCache.js";

let model: Model;
let engine: Engine;

beforeAll(async () => {
  const dir = await fixtureDir("qwen2", "f32", {
    layers: 1,
    hidden: 64,
    heads: 2,
    kvHeads: 1,
    intermediate: 128,
    vocab: 32768,
    filler: "words",
    tieEmbeddings: true,
    maxPositions: 4096,
  });
  model = await loadModel(dir, { kvPages: 512 });
  engine = new Engine({ models: { model } });
}, 120_000);
afterAll(async () => {
  await engine?.dispose();
  model?.dispose();
});

/** A schema XGrammar compiles slowly on a large vocabulary (every string length bound is a chain of states). */
const slow = (salt: number): StructuredOutput => ({
  type: "json_schema",
  thought: "none",
  schema: {
    type: "object",
    properties: {
      a: { type: "string", maxLength: 30 + salt },
      b: { type: "string", minLength: 2, maxLength: 20 },
    },
    required: ["a", "b"],
    additionalProperties: false,
  },
});

describe("a slow grammar compile", () => {
  it("runs beside the batch: a free sequence advances while a fresh submit's and a fork's formats compile", async () => {
    const prompt = model.tokenizer.encode("The answer is", { addSpecialTokens: false });
    /** A long free request, running, and a count of the tokens it has streamed. */
    const running = async (seed: number) => {
      const handle = engine.submit({ prompt, maxTokens: 3500, ignoreEos: true, temperature: 1, seed });
      const state = { handle, tokens: 0, done: null as Promise<void> | null };
      state.done = (async () => {
        for await (const d of handle) state.tokens += d.tokens.length;
      })();
      while (state.tokens < 5) await new Promise((r) => setTimeout(r, 5));
      return state;
    };

    // A fresh request with a new format: it waits for its grammar; the free sequence does not.
    const a = await running(7);
    const fresh = slow(1);
    const submitted = engine.submit({ prompt, maxTokens: 12, structured: fresh });
    let at = a.tokens;
    await engine.prepareStructured(fresh); // the same cache entry: settles when the grammar has compiled
    const duringSubmit = a.tokens - at;
    a.handle.abort();
    await a.done;

    // A fork of a running free sequence with a new format (it shares the parent's pages; it samples nothing until its
    // grammar compiles).
    const b = await running(8);
    const forkFormat = slow(2);
    const forked = engine.fork(b.handle, { structured: forkFormat, maxTokens: 12 });
    at = b.tokens;
    await engine.prepareStructured(forkFormat);
    const duringFork = b.tokens - at;
    b.handle.abort();
    await b.done;

    expect(duringSubmit, "tokens the free sequence made while a fresh submit's grammar compiled").toBeGreaterThan(20);
    expect(duringFork, "tokens the free sequence made while a fork's grammar compiled").toBeGreaterThan(20);
    for (const out of [await submitted.result, await forked.result]) {
      const text = model.tokenizer.decode(out.samples[0].tokens, { skipSpecialTokens: true });
      expect(text.startsWith('{"a": "'), text).toBe(true); // constrained from its first token
    }
  }, 300_000);
});
