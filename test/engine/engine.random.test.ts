// Random workloads on the paged reference model: submits (n samples, greedy or seeded), forks of running and
// finished requests (cut and/or suffixed), aborts, under a small KV pool and token budget so chunking,
// copy-on-write, prefix hits and preemption all interleave. Every finished sample must equal the unpaged
// reference computation, every aborted one a prefix of it, and the pool must end empty.
import { setImmediate } from "node:timers/promises";
import { describe, expect, it } from "vitest";
import { Engine } from "../../ts/engine/engine.js";
import type { RequestHandle } from "../../ts/engine/handle.js";
import type { GenerationOutput } from "../../ts/engine/outputs.js";
import { makeRng, type Rng } from "../helpers/prng.js";
import { PagedToyModel, toyCodec, toyReference } from "../helpers/pagedToyModel.js";

interface Issued {
  handle: RequestHandle;
  maxTokens: number;
  temperature: number;
  ignoreEos: boolean;
}

function randomTokens(rng: Rng, n: number): number[] {
  return Array.from({ length: n }, () => rng.int(1, 63));
}

async function runWorkload(
  seed: number,
): Promise<{ preemptions: number; hitRate: number; aborted: number; copies: number }> {
  const rng = makeRng(seed);
  const model = new PagedToyModel(24, 4); // 96 token slots
  await using engine = new Engine({
    models: { model, tokenizer: toyCodec },
    maxBatchTokens: rng.int(3, 24),
    maxBatchSeqs: rng.int(2, 8),
  });
  const stems = [randomTokens(rng, 10), randomTokens(rng, 6)];
  const issued: Issued[] = [];
  for (let op = 0; op < 40; op++) {
    const roll = rng.int(0, 9);
    if (roll <= 4 || issued.length === 0) {
      const prompt = [...rng.pick(stems).slice(0, rng.int(0, 10)), ...randomTokens(rng, rng.int(1, 8))];
      const temperature = rng.int(0, 1);
      const ignoreEos = rng.int(0, 1) === 1;
      const maxTokens = rng.int(1, 16);
      const handle = engine.submit({
        prompt,
        n: rng.int(1, 3),
        maxTokens,
        temperature,
        seed: rng.int(0, 1000),
        ignoreEos,
      });
      issued.push({ handle, maxTokens, temperature, ignoreEos });
    } else if (roll <= 7) {
      const parent = rng.pick(issued);
      const out = await Promise.race([parent.handle.result, setImmediate(null)]);
      // A finished parent's length is known; a running one is forked whole (its length is still moving).
      const length = out ? rng.int(1, out.promptTokens.length + out.tokens.length) : undefined;
      const append = rng.int(0, 1) ? randomTokens(rng, rng.int(1, 4)) : undefined;
      const maxTokens = rng.int(1, 12);
      const temperature = rng.int(0, 1);
      try {
        const handle = engine.fork(parent.handle, {
          length,
          append,
          maxTokens,
          temperature,
          ignoreEos: parent.ignoreEos,
        });
        issued.push({ handle, maxTokens, temperature, ignoreEos: parent.ignoreEos });
      } catch (e) {
        expect((e as Error).message).toMatch(/has not started yet|context/);
      }
    } else {
      rng.pick(issued).handle.abort();
    }
    for (let t = rng.int(0, 3); t > 0; t--) await setImmediate();
  }
  const outs: GenerationOutput[] = await Promise.all(issued.map((i) => i.handle.result));
  outs.forEach((out, k) => {
    const { maxTokens, temperature, ignoreEos } = issued[k];
    out.samples.forEach((s, i) => {
      const ref = toyReference(out.promptTokens, maxTokens, { temperature, seed: out.seed + i }, !ignoreEos);
      if (s.finishReason === "aborted") expect(ref.slice(0, s.tokens.length)).toEqual(s.tokens);
      else expect(s.tokens).toEqual(ref);
    });
  });
  const m = engine.metrics();
  expect([m.running, m.waiting, m.models[0].kvPagesUsed]).toEqual([0, 0, 0]);
  return {
    preemptions: m.preemptions,
    hitRate: m.prefixCacheHitRate,
    aborted: outs.filter((o) => o.finishReason === "aborted").length,
    copies: model.calls.filter((c) => c.pageCopies).length,
  };
}

describe("Engine under random workloads", () => {
  const stats: Array<Awaited<ReturnType<typeof runWorkload>>> = [];
  for (const seed of [1, 2, 3, 4, 5, 6]) {
    it(`matches the reference for every request (seed ${seed})`, async () => void stats.push(await runWorkload(seed)));
  }
  it("exercised preemption, prefix hits, aborts and copy-on-write", () => {
    expect(stats.some((s) => s.preemptions > 0)).toBe(true);
    expect(stats.some((s) => s.hitRate > 0)).toBe(true);
    expect(stats.some((s) => s.aborted > 0)).toBe(true);
    expect(stats.some((s) => s.copies > 0)).toBe(true);
  });
});
