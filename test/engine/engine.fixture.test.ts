// Engine over the real native forward on a tiny generated model (test/model/fixtureCache.ts). Exactness claims
// are made in batch-invariant mode, where every step runs on fixed reduction schedules, and are arranged so the
// compared runs compute every position through the same kernel path (prefill chunk vs single-token decode).
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Engine } from "../../ts/engine/engine.js";
import type { GenerationOutput } from "../../ts/engine/outputs.js";
import type { GenerateRequest } from "../../ts/engine/request.js";
import { loadModel, type Model } from "../../ts/model/model.js";
import { fixtureDir, randomTokens } from "../model/fixtureCache.js";

const PAGE = 16;
let model: Model;
let V: number;

beforeAll(async () => {
  model = await loadModel(await fixtureDir("llama", "f32", { layers: 2 }), { kvPages: 128, pageSize: PAGE });
  V = model.config.vocabSize;
});
afterAll(() => model?.dispose());

/** An engine on the shared model; each engine starts with an empty block manager (no prefix hits carried over). */
function engineWith(options: { maxBatchTokens?: number } = {}): Engine {
  return new Engine({ models: { model }, kernelMode: "batch-invariant", ...options });
}

const usedPages = (e: Engine): number => e.metrics().models[0].kvPagesUsed;

describe("Engine on a native fixture model (batch-invariant mode)", () => {
  it("modelMetrics gives one model's metrics as metrics() does, and names the loaded models for an unknown one", async () => {
    await using engine = engineWith();
    await engine.submit({ prompt: randomTokens(20, V, 3), maxTokens: 4, ignoreEos: true }).result;
    expect(engine.modelMetrics()).toEqual(engine.metrics().models[0]);
    expect(engine.modelMetrics("default")).toEqual(engine.metrics().models[0]);
    expect(() => engine.modelMetrics("nope")).toThrow(/model "nope" is not loaded; loaded: default/);
  });

  it("32 concurrent requests give exactly the tokens each gives alone, greedy and seeded", async () => {
    const reqs: GenerateRequest[] = Array.from({ length: 32 }, (_, i) => ({
      prompt: randomTokens(2 + ((i * 5) % 37), V, 100 + i),
      maxTokens: 6 + (i % 7),
      temperature: i % 3 === 0 ? 0.8 : 0,
      seed: 7 + i,
      ignoreEos: true,
      logprobs: 2,
    }));
    const alone: GenerationOutput[] = [];
    {
      await using engine = engineWith();
      for (const r of reqs) alone.push(await engine.submit(r).result);
    }
    await using engine = engineWith();
    const together = await Promise.all(reqs.map((r) => engine.submit(r).result));
    together.forEach((out, i) => {
      expect(out.tokens).toEqual(alone[i].tokens);
      expect(out.logprobs).toEqual(alone[i].logprobs);
    });
    expect(engine.metrics().steps).toBeLessThan(reqs.reduce((n, r) => n + r.maxTokens!, 0)); // they really were batched
  });

  it("counts prefix-cache hits and leaves outputs unchanged", async () => {
    // A 16-token budget makes the first run compute the prompt in page-sized chunks, so the second run (pages
    // 0-1 from the cache, position 32 computed) uses the same kernel path for every position.
    await using engine = engineWith({ maxBatchTokens: PAGE });
    const prompt = randomTokens(33, V, 5);
    const first = await engine.submit({ prompt, maxTokens: 8, ignoreEos: true }).result;
    const second = await engine.submit({ prompt, maxTokens: 8, ignoreEos: true }).result;
    expect(first.usage.cachedTokens).toBe(0);
    expect(second.usage.cachedTokens).toBe(32);
    expect(second.tokens).toEqual(first.tokens);
    expect(engine.metrics().prefixCacheHitRate).toBeGreaterThan(0);
  });

  it("fork of a running request shares its pages, and truncating the fork equals never having generated the rest", async () => {
    await using engine = engineWith();
    const prompt = randomTokens(20, V, 9);
    const parent = engine.submit({ prompt, maxTokens: 30, ignoreEos: true });
    let seen = 0;
    for await (const d of parent) if ((seen += d.tokens.length) >= 12) break;
    const before = usedPages(engine);
    const child = engine.fork(parent, { length: prompt.length + 5, maxTokens: 10 });
    expect(usedPages(engine)).toBe(before); // shared, nothing copied yet
    const [p, c] = await Promise.all([parent.result, child.result]);
    expect(c.usage.cachedTokens).toBe(prompt.length + 4);
    expect(c.tokens).toEqual(p.tokens.slice(5, 15));
    expect(usedPages(engine)).toBe(0);
  });

  it("n samples share the prompt's pages and reproduce their seeds", async () => {
    await using engine = engineWith();
    const prompt = randomTokens(40, V, 11); // 39 shared positions: pages 0, 1 full, page 2 partial
    const handle = engine.submit({ prompt, n: 4, maxTokens: 5, temperature: 1, seed: 3, ignoreEos: true });
    let pagesWhileRunning = -1;
    for await (const _ of handle) if (pagesWhileRunning < 0) pagesWhileRunning = usedPages(engine);
    const out = await handle.result;
    expect(pagesWhileRunning).toBe(3 + 3); // 3 shared + 3 copies of the partial page (the 4th writes in place)
    for (let i = 0; i < 4; i++) {
      const alone = await engine.submit({ prompt, maxTokens: 5, temperature: 1, seed: 3 + i, ignoreEos: true }).result;
      expect(out.samples[i].tokens).toEqual(alone.tokens);
    }
  });

  it("abort mid-stream frees the request's pages and leaves the others exact", async () => {
    const reference = await (async () => {
      await using engine = engineWith();
      return await engine.submit({ prompt: randomTokens(10, V, 2), maxTokens: 24, ignoreEos: true }).result; // before the engine is disposed
    })();
    await using engine = engineWith();
    const controller = new AbortController();
    const victim = engine.submit({
      prompt: randomTokens(10, V, 1),
      maxTokens: 200,
      ignoreEos: true,
      signal: controller.signal,
    });
    const other = engine.submit({ prompt: randomTokens(10, V, 2), maxTokens: 24, ignoreEos: true });
    let n = 0;
    for await (const d of victim) if ((n += d.tokens.length) === 4) controller.abort();
    expect((await victim.result).finishReason).toBe("aborted");
    expect((await other.result).tokens).toEqual(reference.tokens);
    expect(usedPages(engine)).toBe(0);
  });

  it("completes every request under a tiny KV budget by preempting, then frees everything", async () => {
    const small = await loadModel(await fixtureDir("llama", "f32", { layers: 2 }), { kvPages: 8, pageSize: PAGE });
    try {
      await using engine = new Engine({ models: { model: small }, kernelMode: "batch-invariant" });
      const reqs: GenerateRequest[] = Array.from({ length: 6 }, (_, i) => ({
        prompt: randomTokens(12 + i, V, 40 + i),
        maxTokens: 24,
        ignoreEos: true,
      }));
      const outs = await Promise.all(reqs.map((r) => engine.submit(r).result));
      expect(engine.metrics().preemptions).toBeGreaterThan(0);
      // Preempted requests recompute their KV (prefill kernel where they had decoded; the CPU's agree bitwise): each
      // must still give exactly the tokens it gives alone on a roomy pool.
      await using roomy = engineWith();
      for (const [i, r] of reqs.entries())
        expect(outs[i].tokens, `request ${i}`).toEqual((await roomy.submit(r).result).tokens);
      // No page leaked: the whole pool is free again (cached prefix pages count as free: a later hit revives them).
      const pool = engine.metrics().models[0];
      expect([pool.kvPagesUsed, pool.kvPagesFree, pool.kvPagesTotal]).toEqual([0, 8, 8]);
    } finally {
      small.dispose();
    }
  });

  it("reports logprobs of asked-for token ids consistent with the sampler's top logprobs", async () => {
    await using engine = engineWith();
    const prompt = randomTokens(8, V, 77);
    const ranked = await engine.submit({ prompt, maxTokens: 1, logprobs: 2 }).result;
    const top = ranked.logprobs![0].top;
    const asked = await engine.submit({ prompt, maxTokens: 1, tokenLogprobs: [top[1].token, top[0].token] }).result;
    const requested = asked.logprobs![0].requested!;
    expect(requested.map((r) => r.token)).toEqual([top[1].token, top[0].token]);
    expect(requested[0].logprob).toBeCloseTo(top[1].logprob, 4);
    expect(requested[1].logprob).toBeCloseTo(top[0].logprob, 4);
  });

  it("streams text from the model's tokenizer and stops on a stop string", async () => {
    await using engine = engineWith();
    const free = await engine.submit({ prompt: "The answer is", maxTokens: 20, ignoreEos: true }).result;
    expect(free.text.length).toBeGreaterThanOrEqual(4);
    const stop = free.text.slice(Math.floor(free.text.length / 2), Math.floor(free.text.length / 2) + 2);
    const handle = engine.submit({ prompt: "The answer is", maxTokens: 20, ignoreEos: true, stop });
    let streamed = "";
    for await (const d of handle) streamed += d.text;
    const out = await handle.result;
    expect(out.finishReason).toBe("stop");
    expect(out.text).toBe(free.text.slice(0, free.text.indexOf(stop)));
    expect(streamed).toBe(out.text);
  });
});
