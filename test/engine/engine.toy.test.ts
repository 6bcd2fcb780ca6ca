// Engine behaviour on the paged reference model (test/helpers/pagedToyModel.ts): no native build needed, and
// every output is checked against a direct, unpaged computation of the same model.
import { describe, expect, it } from "vitest";
import { Engine, type EngineOptions } from "../../ts/engine/engine.js";
import type { GenerateRequest } from "../../ts/engine/request.js";
import { makeRng } from "../helpers/prng.js";
import { PagedToyModel, TOY_EOS, toyCodec, toyLogits, toyReference, toyText } from "../helpers/pagedToyModel.js";

function makeEngine(
  numPages: number,
  options: Partial<EngineOptions> = {},
  pageSize = 4,
): { engine: Engine; model: PagedToyModel } {
  const model = new PagedToyModel(numPages, pageSize);
  return { engine: new Engine({ models: { model, tokenizer: toyCodec }, ...options }), model };
}

function randomPrompt(seed: number, length: number): number[] {
  const rng = makeRng(seed);
  return Array.from({ length }, () => rng.int(1, 63));
}

const usedPages = (e: Engine): number => e.metrics().models[0].kvPagesUsed;

describe("Engine on the paged reference model", () => {
  it("generates exactly the unpaged reference, greedy and seeded, alone and with 32 concurrent requests", async () => {
    await using engine = makeEngine(512).engine;
    const reqs: GenerateRequest[] = Array.from({ length: 32 }, (_, i) => ({
      prompt: randomPrompt(i, 3 + ((i * 7) % 29)),
      maxTokens: 12 + (i % 9),
      temperature: i % 2 === 0 ? 0 : 0.8,
      seed: 1000 + i,
    }));
    const alone = await engine.submit(reqs[5]).result;
    const outs = await Promise.all(reqs.map((r) => engine.submit(r).result));
    outs.forEach((out, i) => {
      const r = reqs[i];
      expect(out.tokens).toEqual(
        toyReference(r.prompt as number[], r.maxTokens!, { temperature: r.temperature!, seed: r.seed! }),
      );
    });
    expect(outs[5].tokens).toEqual(alone.tokens);
  });

  it("chunks long prompts under a small token budget without changing outputs", async () => {
    const { engine, model } = makeEngine(256, { maxBatchTokens: 8 });
    await using _ = engine;
    const prompts = [randomPrompt(1, 30), randomPrompt(2, 19), randomPrompt(3, 5)];
    const outs = await Promise.all(prompts.map((prompt) => engine.submit({ prompt, maxTokens: 10 }).result));
    outs.forEach((o, i) => expect(o.tokens).toEqual(toyReference(prompts[i], 10, { temperature: 0, seed: 0 })));
    for (const call of model.calls)
      expect(call.sequences.reduce((n, s) => n + s.tokens.length, 0)).toBeLessThanOrEqual(8);
  });

  it("streams deltas that add up to the output, text included", async () => {
    await using engine = makeEngine(64).engine;
    const handle = engine.submit({ prompt: "hello world", maxTokens: 15, ignoreEos: true });
    const tokens: number[] = [];
    let text = "";
    for await (const d of handle) {
      tokens.push(...d.tokens);
      text += d.text;
    }
    const out = await handle.result;
    expect(tokens).toEqual(out.tokens);
    expect(text).toBe(out.text);
    expect(out.text).toBe(toyText(out.tokens));
    expect(out.finishReason).toBe("length");
    expect(out.usage).toEqual({ promptTokens: 11, generatedTokens: 15, cachedTokens: 0 });
  });

  it("reuses cached prefix pages across requests and reports them", async () => {
    await using engine = makeEngine(64).engine;
    const prompt = randomPrompt(9, 23);
    const first = await engine.submit({ prompt, maxTokens: 6 }).result;
    const second = await engine.submit({ prompt, maxTokens: 6 }).result;
    expect(second.tokens).toEqual(first.tokens);
    expect(first.usage.cachedTokens).toBe(0);
    expect(second.usage.cachedTokens).toBe(20); // 5 full pages of 4; the last prompt token is recomputed
    expect(engine.metrics().prefixCacheHitRate).toBeCloseTo(20 / 46);
  });

  it("fork shares pages, grows only by divergent pages, and continues like the parent would", async () => {
    const { engine } = makeEngine(64);
    await using _ = engine;
    const prompt = randomPrompt(4, 18);
    const parent = engine.submit({ prompt, maxTokens: 40, ignoreEos: true });
    let seen = 0;
    for await (const d of parent) if ((seen += d.tokens.length) >= 5) break;
    const before = usedPages(engine);
    const child = engine.fork(parent, { maxTokens: 1 });
    expect(usedPages(engine)).toBe(before); // pure sharing until the child writes
    const childOut = await child.result;
    const parentOut = await parent.result;
    expect(childOut.usage.cachedTokens).toBeGreaterThanOrEqual(18);
    // the child continued from the fork point; greedy, so it agrees with the parent's own continuation
    const forkAt = childOut.promptTokens.length - prompt.length;
    expect(childOut.tokens).toEqual(parentOut.tokens.slice(forkAt, forkAt + 1));
  });

  it("fork with length continues as if the dropped tokens were never generated", async () => {
    await using engine = makeEngine(64).engine;
    const prompt = randomPrompt(5, 10);
    const parent = engine.submit({ prompt, maxTokens: 20, temperature: 0.9, seed: 3, ignoreEos: true });
    const parentOut = await parent.result;
    const child = await engine.fork(parent, { length: prompt.length + 7, maxTokens: 13, seed: 3 }).result;
    expect(child.tokens).toEqual(parentOut.tokens.slice(7));
    // the same on a running parent, whose pages the child shares and truncates
    const running = engine.submit({ prompt, maxTokens: 20, temperature: 0.9, seed: 3, ignoreEos: true });
    let seen = 0;
    for await (const d of running) if ((seen += d.tokens.length) >= 9) break;
    const shared = await engine.fork(running, { length: prompt.length + 2, maxTokens: 18, seed: 3 }).result;
    expect(shared.usage.cachedTokens).toBe(prompt.length + 1); // the last kept token is fed again for its logits
    expect(shared.tokens).toEqual(parentOut.tokens.slice(2));
    const probe = await engine.fork(parent, {
      length: prompt.length + 4,
      append: [1, 2, 3],
      maxTokens: 5,
      temperature: 0,
    }).result;
    expect(probe.tokens).toEqual(
      toyReference([...prompt, ...parentOut.tokens.slice(0, 4), 1, 2, 3], 5, { temperature: 0, seed: 0 }),
    );
  });

  it("n samples share the prompt's pages and differ by seed", async () => {
    const { engine, model } = makeEngine(64);
    await using _ = engine;
    const prompt = randomPrompt(6, 22); // 21 tokens before the fork: 5 full pages + 1 partial
    const out = await engine.submit({ prompt, n: 4, maxTokens: 3, temperature: 1, seed: 50, ignoreEos: true }).result;
    expect(out.samples).toHaveLength(4);
    out.samples.forEach((s, i) => expect(s.tokens).toEqual(toyReference(prompt, 3, { temperature: 1, seed: 50 + i })));
    // Prompt positions 0..20 are computed once; position 21 (the last prompt token) once per sample.
    const promptTokens = model.calls.reduce(
      (n, c) => n + c.sequences.reduce((m, s) => m + (s.startPos <= 21 ? s.tokens.length : 0), 0),
      0,
    );
    expect(promptTokens).toBe(21 + 4);
    // The shared partial page holding position 20 is copied for 3 samples; the 4th writes it in place.
    expect(model.calls.reduce((n, c) => n + (c.pageCopies?.src.length ?? 0), 0)).toBe(3);
    expect(out.usage.generatedTokens).toBe(12);
  });

  it("n samples also start when the shared prompt is one token or already cached", async () => {
    await using engine = makeEngine(64).engine;
    const one = await engine.submit({ prompt: [9], n: 3, maxTokens: 4, temperature: 1, seed: 8, ignoreEos: true })
      .result;
    one.samples.forEach((s, i) => expect(s.tokens).toEqual(toyReference([9], 4, { temperature: 1, seed: 8 + i })));
    const prompt = randomPrompt(3, 9); // 8 shared tokens = 2 full pages
    await engine.submit({ prompt, maxTokens: 1 }).result;
    const cached = await engine.submit({ prompt, n: 2, maxTokens: 4, temperature: 1, seed: 1, ignoreEos: true }).result;
    expect(cached.usage.cachedTokens).toBe(8);
    cached.samples.forEach((s, i) =>
      expect(s.tokens).toEqual(toyReference(prompt, 4, { temperature: 1, seed: 1 + i })),
    );
  });

  it("abort mid-stream stops the request, frees its pages and leaves others alone", async () => {
    await using engine = makeEngine(64).engine;
    const controller = new AbortController();
    const other = engine.submit({ prompt: randomPrompt(8, 9), maxTokens: 30, ignoreEos: true });
    const victim = engine.submit({
      prompt: randomPrompt(7, 9),
      maxTokens: 1000,
      ignoreEos: true,
      signal: controller.signal,
    });
    let n = 0;
    for await (const d of victim) {
      n += d.tokens.length;
      if (n === 3) controller.abort();
    }
    const out = await victim.result;
    expect(out.finishReason).toBe("aborted");
    expect(out.tokens.length).toBeLessThan(10);
    const otherOut = await other.result;
    expect(otherOut.tokens).toEqual(toyReference(randomPrompt(8, 9), 30, { temperature: 0, seed: 0 }, false));
    expect(usedPages(engine)).toBe(0);
  });

  it("preempts under a tiny KV budget and still completes every request exactly", async () => {
    await using engine = makeEngine(12).engine; // 48 token slots for 6 requests of ~30 tokens each
    const prompts = Array.from({ length: 6 }, (_, i) => randomPrompt(20 + i, 8 + i));
    const outs = await Promise.all(
      prompts.map((prompt) => engine.submit({ prompt, maxTokens: 20, ignoreEos: true }).result),
    );
    outs.forEach((o, i) => expect(o.tokens).toEqual(toyReference(prompts[i], 20, { temperature: 0, seed: 0 }, false)));
    expect(engine.metrics().preemptions).toBeGreaterThan(0);
    expect(usedPages(engine)).toBe(0);
  });

  it("rejects what cannot fit even alone with a clear error", async () => {
    await using engine = makeEngine(4).engine; // 16 token slots
    expect(() => engine.submit({ prompt: randomPrompt(1, 17) })).toThrow(
      /KV pool too small: the prompt \(17 tokens\) needs 5 pages.*raise the KV pool \(loadModel's kvPages or kvMemoryBytes\)/,
    );
    const grows = engine.submit({ prompt: randomPrompt(1, 10), maxTokens: 20, ignoreEos: true });
    await expect(grows.result).rejects.toThrow(
      /KV pool exhausted: sequence \d+ needs 5 pages .* the pool has 4 in total/,
    );
    const fine = await engine.submit({ prompt: randomPrompt(2, 10), maxTokens: 5, ignoreEos: true }).result;
    expect(fine.tokens).toHaveLength(5);
  });

  it("names the model's context, not the KV pool, when the prompt is longer than the context", async () => {
    const model = new PagedToyModel(64, 4, 16);
    await using engine = new Engine({ models: { model, tokenizer: toyCodec } });
    expect(() => engine.submit({ prompt: randomPrompt(1, 16) })).toThrow(
      /the prompt is 16 tokens and model "default"'s context is 16 tokens.*shorten the prompt to at most 15 tokens/,
    );
    expect(() => engine.submit({ prompt: randomPrompt(1, 15), maxTokens: 2 })).toThrow(/maxTokens/);
    expect((await engine.submit({ prompt: randomPrompt(1, 15), maxTokens: 1 }).result).tokens).toHaveLength(1);
  });

  it("stops on stop strings (not streamed), stop ids and eos", async () => {
    await using engine = makeEngine(64).engine;
    const prompt = randomPrompt(11, 6);
    const ref = toyText(toyReference(prompt, 40, { temperature: 0, seed: 0 }, false));
    const stop = ref.slice(10, 12);
    const handle = engine.submit({ prompt, maxTokens: 40, stop, ignoreEos: true });
    let streamed = "";
    for await (const d of handle) streamed += d.text;
    const out = await handle.result;
    expect(out.finishReason).toBe("stop");
    expect(out.stoppedBy).toBe(stop);
    expect(out.text).toBe(ref.slice(0, ref.indexOf(stop)));
    expect(streamed).toBe(out.text);
    const stopId = toyReference(prompt, 5, { temperature: 0, seed: 0 })[3];
    const byId = await engine.submit({ prompt, maxTokens: 40, stopTokenIds: [stopId], ignoreEos: true }).result;
    expect(byId.tokens.at(-1)).toBe(stopId);
    expect(byId.stoppedBy).toBe(stopId);
    // some seed makes the toy model emit eos early
    const outs = await Promise.all(
      Array.from({ length: 40 }, (_, i) => engine.submit({ prompt, maxTokens: 60, temperature: 2, seed: i }).result),
    );
    const eos = outs.find((o) => o.finishReason === "stop");
    expect(eos?.tokens.at(-1)).toBe(TOY_EOS);
  });

  it("returns logprobs and captured hidden states when asked", async () => {
    await using engine = makeEngine(64).engine;
    const out = await engine.submit({
      prompt: [5, 6, 7],
      maxTokens: 4,
      logprobs: 3,
      captureHidden: { layer: 1 },
      ignoreEos: true,
    }).result;
    expect(out.logprobs).toHaveLength(4);
    for (const lp of out.logprobs!) {
      expect(lp.top).toHaveLength(3);
      expect(lp.top[0].token).toBe(lp.token); // greedy picks the top token
    }
    expect(Array.from(out.hidden!)).toEqual([6, 1]); // context length at the last step, layer
    const scored = await engine.submit({ prompt: [5, 6, 7], maxTokens: 2, tokenLogprobs: [3, 40], ignoreEos: true })
      .result;
    const logits = toyLogits([5, 6, 7]);
    const logZ = Math.log(logits.reduce((sum, l) => sum + Math.exp(l), 0));
    expect(scored.logprobs![0].top).toEqual([]);
    expect(scored.logprobs![0].requested!.map((r) => r.token)).toEqual([3, 40]);
    expect(scored.logprobs![0].requested![0].logprob).toBeCloseTo(logits[3] - logZ, 5);
    expect(scored.logprobs![0].requested![1].logprob).toBeCloseTo(logits[40] - logZ, 5);
  });

  it("admits by the configured policy: priority first, then gang+sjf by the programs' estimates", async () => {
    const order = async (policy: EngineOptions["schedulingPolicy"]): Promise<string[]> => {
      await using engine = makeEngine(64, { schedulingPolicy: policy, maxBatchSeqs: 1 }).engine;
      const done: string[] = [];
      const submit = (name: string, programId: string, remainingKnob: number, priority = 0): Promise<void> =>
        engine
          .submit({
            prompt: [1, 2, 3],
            maxTokens: 2,
            ignoreEos: true,
            metadata: { programId, remainingKnob, meanTokensPerRound: 10, priority },
          })
          .result.then(() => void done.push(name));
      await Promise.all([
        submit("long-1", "long", 8),
        submit("short-1", "short", 1),
        submit("long-2", "long", 8),
        submit("short-2", "short", 1),
        submit("urgent", "x", 99, 5),
      ]);
      return done;
    };
    expect(await order("fcfs")).toEqual(["urgent", "long-1", "short-1", "long-2", "short-2"]);
    expect(await order("gang+sjf")).toEqual(["urgent", "short-1", "short-2", "long-1", "long-2"]);
  });

  it("validates requests at the boundary", async () => {
    await using engine = makeEngine(64).engine;
    expect(() => engine.submit({ prompt: [1], temperature: -1 })).toThrow(/request.temperature is -1/);
    expect(() => engine.submit({ prompt: [1], topP: 0 })).toThrow(/request.topP is 0/);
    expect(() => engine.submit({ prompt: [99] })).toThrow(/request.prompt\[0\] is 99/);
    expect(() => engine.submit({ prompt: [1], model: "nope" })).toThrow(/loaded models: default/);
    expect(() => engine.submit({ prompt: [1], n: 0 })).toThrow(/request.n is 0/);
    expect(() => engine.submit({ prompt: [] })).toThrow(/prompt is empty/);
    const model = new PagedToyModel(8);
    expect(() => new Engine({ models: { model }, kernelMode: "exact" as never })).toThrow(
      /Engine: options.kernelMode is "exact"; expected "fast" or "batch-invariant"/,
    );
    expect(() => new Engine({ models: { model }, schedulingPolicy: "lifo" as never })).toThrow(
      /options.schedulingPolicy is "lifo"; expected one of/,
    );
    expect(() => new Engine({ models: { model }, maxBatchTokens: 0 })).toThrow(/options.maxBatchTokens is 0/);
    expect(() => new Engine({ models: { model }, maxBatchToken: 64 } as never)).toThrow(
      /Engine: options.maxBatchToken is not a known field; did you mean maxBatchTokens\?/,
    );
    expect(() => new Engine({ models: { model }, verifyWindow: 1 })).toThrow(
      /options.verifyWindow is 1; expected an integer >= 2/,
    );
  });

  it("turns wrong-typed and unknown request fields into boundary errors, never raw TypeErrors", async () => {
    await using engine = makeEngine(64).engine;
    const submit = (r: unknown) => () => engine.submit(r as GenerateRequest);
    expect(submit(undefined)).toThrow(/^request is undefined; expected a request object such as \{ prompt/);
    expect(submit("text")).toThrow(/^request is "text"; expected a request object/);
    expect(submit({ prompt: null })).toThrow(/^request.prompt is null; expected text or an array of integer token ids/);
    expect(submit({ prompt: 42 })).toThrow(/^request.prompt is 42; expected text/);
    expect(submit({ prompt: { text: "hi" } })).toThrow(/^request.prompt is \{"text":"hi"\}; expected text/);
    expect(submit({})).toThrow(/^request.prompt is undefined; expected text/);
    expect(submit({ prompt: [1], temperature: NaN })).toThrow(
      /^request.temperature is NaN; expected a finite number >= 0/,
    );
    expect(submit({ prompt: [1], maxTokenz: 5 })).toThrow(
      /^request.maxTokenz is not a known field; did you mean maxTokens\?/,
    );
    expect(submit({ prompt: [1], metadata: { priorty: 1 } })).toThrow(
      /^request.metadata.priorty is not a known field; did you mean priority\?/,
    );
    expect(submit({ prompt: [1], stop: [""] })).toThrow(/^request.stop is \[""\]; expected a non-empty string/);
    const parent = engine.submit({ prompt: [1, 2], maxTokens: 2 });
    await parent.result;
    expect(() => engine.fork(parent, { lenght: 1 } as never)).toThrow(
      /^fork.lenght is not a known field; did you mean length\?/,
    );
    expect(() => engine.fork(parent, { sample: -1 })).toThrow(/^fork.sample is -1; expected an integer >= 0/);
    // None of these left anything behind.
    expect(engine.metrics().running + engine.metrics().waiting).toBe(0);
  });

  it("dispose resolves unfinished requests as aborted and refuses new ones; the event loop keeps turning", async () => {
    const { engine } = makeEngine(64);
    let ticks = 0;
    const timer = setInterval(() => ticks++, 0);
    const handle = engine.submit({ prompt: [1, 2, 3], maxTokens: 3000, ignoreEos: true });
    for await (const d of handle) if (d.tokens.length && ticks > 3) break;
    clearInterval(timer);
    await engine.dispose();
    await engine.dispose(); // idempotent
    expect((await handle.result).finishReason).toBe("aborted");
    expect(() => engine.submit({ prompt: [1] })).toThrow(/disposed/);
  });
});
