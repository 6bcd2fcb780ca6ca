// generate / generateStream (on an Engine made for the call) for one sequence: greedy agreement with the float64 reference, seeded
// sampling, stop tokens and strings, streaming, abort, context limits, dispose.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { generate, generateStream } from "../../ts/engine/generate.js";
import { loadModel, type Model } from "../../ts/model/model.js";
import { fixtureDir, randomTokens } from "./fixtureCache.js";
import { ReferenceModel } from "./reference.js";

const device = (process.env.DELIBERATE_TEST_DEVICE ?? "cpu") as "cpu" | "cuda";
// Below this top-2 logit gap the two engines may legitimately pick different tokens (rounding).
const MIN_MARGIN = 1e-3;

/** Compares greedy continuations token by token up to the first step whose reference margin is tiny. */
function agreeingPrefix(
  got: number[],
  want: { tokens: number[]; margins: number[] },
): { compared: number; ok: boolean } {
  let compared = 0;
  for (let i = 0; i < want.tokens.length && i < got.length; i++) {
    if (want.margins[i] < MIN_MARGIN) break;
    if (got[i] !== want.tokens[i]) return { compared, ok: false };
    compared++;
  }
  return { compared, ok: true };
}

describe("generate", () => {
  let model: Model;
  let ref: ReferenceModel;
  beforeAll(async () => {
    const dir = await fixtureDir("llama", "bf16");
    model = await loadModel(dir, { device, kvPages: 64, pageSize: 4, prefillChunkTokens: 8 });
    ref = await ReferenceModel.load(dir);
  });
  afterAll(() => model?.dispose());

  it("greedy continuation equals the reference's argmax continuation", async () => {
    for (const seed of [1, 2, 3]) {
      const prompt = randomTokens(5 + 7 * seed, model.config.vocabSize, seed); // 12..26 tokens: 2-4 prefill chunks
      const r = await generate(model, { tokens: prompt }, { maxTokens: 16, temperature: 0, ignoreEos: true });
      expect(r.tokens.length).toBe(16);
      expect(r.finishReason).toBe("length");
      expect(r.usage).toEqual({ promptTokens: prompt.length, completionTokens: 16, totalTokens: prompt.length + 16 });
      const check = agreeingPrefix(r.tokens, ref.greedy(prompt, 16));
      expect(check.ok).toBe(true);
      expect(check.compared).toBeGreaterThan(4);
    }
  });

  it("samples reproducibly from a seed, and differently from another seed", async () => {
    const params = { maxTokens: 12, temperature: 1, ignoreEos: true };
    const a = await generate(model, "Hello there", { ...params, seed: 7 });
    const b = await generate(model, "Hello there", { ...params, seed: 7 });
    const c = await generate(model, "Hello there", { ...params, seed: 8n });
    expect(b.tokens).toEqual(a.tokens);
    expect(c.tokens).not.toEqual(a.tokens);
  });

  it("streams text deltas that concatenate to the result's text", async () => {
    const stream = generateStream(model, "The answer is", {
      maxTokens: 10,
      temperature: 0.8,
      seed: 3,
      ignoreEos: true,
    });
    let text = "";
    for (;;) {
      const r = await stream.next();
      if (r.done) {
        expect(r.value.text).toBe(text);
        expect(r.value.tokens.length).toBe(10);
        break;
      }
      expect(r.value.length).toBeGreaterThan(0);
      text += r.value;
    }
  });

  it("stops at a stop token id (kept in tokens) and at a stop string (cut from the text)", async () => {
    const prompt = { tokens: randomTokens(10, model.config.vocabSize, 5) };
    const free = await generate(model, prompt, { maxTokens: 12, temperature: 0, ignoreEos: true });
    const stopId = free.tokens[4];
    const first = free.tokens.indexOf(stopId);
    const byId = await generate(model, prompt, {
      maxTokens: 12,
      temperature: 0,
      ignoreEos: true,
      stopTokenIds: [stopId],
    });
    expect(byId.finishReason).toBe("stop");
    expect(byId.tokens).toEqual(free.tokens.slice(0, first + 1));

    const text = model.tokenizer.decode(free.tokens.slice(0, 6), { skipSpecialTokens: true });
    const stop = text.slice(-3);
    const byString = await generate(model, prompt, { maxTokens: 12, temperature: 0, ignoreEos: true, stop: [stop] });
    expect(byString.finishReason).toBe("stop");
    expect(byString.text).toBe(text.slice(0, text.indexOf(stop)));
    expect(byString.text.includes(stop)).toBe(false);
  });

  it("stops at the next step when aborted, with finishReason 'aborted', and frees its pages", async () => {
    const ac = new AbortController();
    const stream = generateStream(model, "abc", { maxTokens: 50, temperature: 0, ignoreEos: true, signal: ac.signal });
    let r = await stream.next();
    let n = 0;
    while (!r.done) {
      if (++n === 3) ac.abort();
      r = await stream.next();
    }
    expect(r.value.finishReason).toBe("aborted");
    expect(r.value.tokens.length).toBeLessThan(50);
    // Every page is back: a generation filling the whole pool (64 pages of 4 = the 256-token context) still fits.
    const all = await generate(
      model,
      { tokens: randomTokens(250, model.config.vocabSize, 4) },
      { maxTokens: 50, temperature: 0, ignoreEos: true },
    );
    expect(all.tokens.length).toBe(6);
    expect(all.finishReason).toBe("length");
  });

  it("rejects a prompt longer than the context, naming both lengths", async () => {
    const tooLong = { tokens: randomTokens(300, model.config.vocabSize, 1) };
    await expect(generate(model, tooLong)).rejects.toThrow(
      /the prompt is 300 tokens and model "default"'s context is 256 tokens/,
    );
    await expect(generate(model, { tokens: [model.config.vocabSize] })).rejects.toThrow(
      /prompt token 0 is \d+; expected an id in/,
    );
    await expect(generate(model, "x", { temperature: -1 })).rejects.toThrow(
      /request\.temperature is -1; expected a finite number >= 0/,
    );
  });

  it("renders chat messages with the model's template", async () => {
    const r = await generate(model, [{ role: "user", content: "hi" }], {
      maxTokens: 3,
      temperature: 0,
      ignoreEos: true,
    });
    expect(r.usage.promptTokens).toBe(model.tokenizer.encodeChat([{ role: "user", content: "hi" }]).length);
  });
});

describe("Model lifecycle", () => {
  it("disposes idempotently and refuses use afterwards", async () => {
    const model = await loadModel(await fixtureDir("qwen2", "f32"), { device, kvPages: 8 });
    expect(model.kv.numPages).toBe(8);
    await model[Symbol.asyncDispose]();
    model.dispose();
    expect(model.disposed).toBe(true);
    expect(() => generateStream(model, "hi")).toThrow(/Model is disposed/);
    await expect(generate(model, "hi")).rejects.toThrow(/Model is disposed/);
    expect(() => model.forward({ sequences: [], gemmSplitK: 1, kvSplits: 1 })).toThrow(/Model is disposed/);
  });

  it("sizes the KV pool from kvMemoryBytes and fails clearly when it cannot hold a page", async () => {
    const dir = await fixtureDir("qwen2", "f32");
    const model = await loadModel(dir, { device, kvMemoryBytes: 1 << 20, pageSize: 16 });
    expect(model.kv.numPages).toBe(Math.floor((1 << 20) / model.kv.bytesPerPage));
    model.dispose();
    await expect(loadModel(dir, { device, kvMemoryBytes: 10 })).rejects.toThrow(/holds no KV page/);
  });
});
