// DeepConf confidence: the native token confidence against a float64 reference over the logits, the group / tail /
// bottom-10% figures against hand-computed values, and the early-stop rule on the engine (the first full window
// below the threshold ends the sample, its pages are freed, and under deterministic: true the stop is the same
// whatever else runs).
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ConfidenceTracker, smallest } from "../../ts/engine/confidence.js";
import { Engine } from "../../ts/engine/engine.js";
import { FIXED_SCHEDULE } from "../../ts/engine/kernelSchedule.js";
import { loadModel, type Model } from "../../ts/model/model.js";
import { fixtureDir, randomTokens } from "../model/fixtureCache.js";

let model: Model;
beforeAll(async () => {
  model = await loadModel(await fixtureDir("llama", "f32", { layers: 2 }), { kvPages: 256, pageSize: 16 });
});
afterAll(() => model?.dispose());

/** -mean of the k largest log-softmax values of `logits`, in float64. */
function referenceConfidence(logits: ArrayLike<number>, k: number): number {
  const xs = Array.from(logits);
  const max = Math.max(...xs);
  const logZ = max + Math.log(xs.reduce((s, x) => s + Math.exp(x - max), 0));
  const top = xs.sort((a, b) => b - a).slice(0, k);
  return -top.reduce((s, x) => s + (x - logZ), 0) / k;
}

describe("token confidence (native)", () => {
  it("is -mean of the top-k logprobs, as a float64 reference computes it from the logits, for last rows and emitAll rows", async () => {
    const V = model.config.vocabSize;
    const tokens = randomTokens(13, V, 4);
    for (const k of [1, 5, 20]) {
      const [r] = await model.forward({
        ...FIXED_SCHEDULE,
        returnLogits: true,
        sequences: [
          {
            tokens: Int32Array.from(tokens),
            startPos: 0,
            blockTable: Int32Array.from([0]),
            confidenceTopK: k,
            emitAll: true,
            numTopLogprobs: 2,
          },
        ],
      });
      expect(r.confidences!.length).toBe(tokens.length);
      expect(r.topIds!.length).toBe(tokens.length * 2); // the row's own numTopLogprobs, not the confidence's k
      for (let j = 0; j < tokens.length; j++) {
        const want = referenceConfidence(r.logits!.subarray(j * V, (j + 1) * V), k);
        expect(Math.abs(r.confidences![j] - want)).toBeLessThan(1e-5 + 1e-6 * Math.abs(want));
      }
      expect(r.confidence).toBe(r.confidences![tokens.length - 1]);
    }
    await expect(
      model.forward({
        ...FIXED_SCHEDULE,
        sequences: [
          { tokens: Int32Array.from([1]), startPos: 0, blockTable: Int32Array.from([0]), confidenceTopK: 65 },
        ],
      }),
    ).rejects.toThrow(/confidenceTopK/);
  });
});

describe("ConfidenceTracker", () => {
  it("reports mean, lowest group, bottom 10% and tail as computed by hand; the stop fires at the first full window below", () => {
    const c = [5, 4, 3, 2, 6, 1, 1, 7];
    const t = new ConfidenceTracker({ topK: 20, window: 3, threshold: null, tail: 2 });
    for (const x of c) expect(t.add(x)).toBe(false);
    // Windows of 3: [5,4,3]=4, [4,3,2]=3, [3,2,6]=11/3, [2,6,1]=3, [6,1,1]=8/3, [1,1,7]=3.
    const r = t.report()!;
    expect(r.mean).toBeCloseTo(29 / 8, 12);
    expect(r.lowestGroup).toBeCloseTo(8 / 3, 12);
    expect(r.bottom10Group).toBeCloseTo(8 / 3, 12); // ceil(10% of 6 groups) = 1 group
    expect(r.tail).toBeCloseTo(4, 12);
    expect(r.tokens).toBe(8);
    const s = new ConfidenceTracker({ topK: 20, window: 3, threshold: 3.5, tail: 3 });
    expect(c.map((x) => s.add(x))).toEqual([false, false, false, true, false, true, true, true]);
    const short = new ConfidenceTracker({ topK: 20, window: 10, threshold: 100, tail: 10 });
    expect([1, 2].map((x) => short.add(x))).toEqual([false, false]); // no full window: never stops
    expect(short.report()!.lowestGroup).toBeCloseTo(1.5, 12); // one group: the whole trace
  });

  it("reports, for a long random trace, exactly the figures of the plain rule (every window's mean, all sorted)", () => {
    let seed = 7;
    const rand = () => (seed = (Math.imul(seed, 1664525) + 1013904223) >>> 0) / 4294967296;
    for (const [n, window] of [
      [3000, 16],
      [777, 50],
      [100, 1],
      [64, 64],
      [65, 64],
    ]) {
      const c = Array.from({ length: n }, () => (rand() < 0.2 ? 2 : 1 + rand() * 3)); // ties among the groups
      const t = new ConfidenceTracker({ topK: 20, window, threshold: null, tail: 10 });
      for (const x of c) t.add(x);
      // The plain rule: a running window sum re-summed at every multiple of the window, every full window's mean.
      const groups: number[] = [];
      let ws = 0;
      for (let i = 1; i <= n; i++) {
        ws += c[i - 1];
        if (i > window) ws -= c[i - 1 - window];
        if (i % window === 0) ws = c.slice(i - window, i).reduce((a, b) => a + b, 0);
        if (i >= window) groups.push(ws / window);
      }
      groups.sort((a, b) => a - b);
      const k = Math.max(1, Math.ceil(groups.length * 0.1));
      const r = t.report()!;
      expect(r.lowestGroup).toBe(groups[0]);
      expect(r.bottom10Group).toBe(groups.slice(0, k).reduce((a, b) => a + b, 0) / k);
    }
  });
});

describe("smallest", () => {
  it("gives the k smallest ascending, as a full sort does, with duplicates and NaN", () => {
    let seed = 11;
    const rand = () => (seed = (Math.imul(seed, 1664525) + 1013904223) >>> 0) / 4294967296;
    for (let round = 0; round < 500; round++) {
      const n = 1 + Math.floor(rand() * 700);
      const xs = Float64Array.from({ length: n }, () =>
        rand() < 0.3 ? Math.floor(rand() * 4) : rand() < 0.01 ? NaN : rand(),
      );
      const k = 1 + Math.floor(rand() * n);
      expect(Array.from(smallest(Float64Array.from(xs), k))).toEqual(
        Array.from(Float64Array.from(xs).sort().subarray(0, k)),
      );
    }
  });
});

describe("confidence on the engine", () => {
  const V = (): number => model.config.vocabSize;

  it("stops a sample at the first full window below the threshold with finishReason low_confidence, and frees its pages", async () => {
    await using engine = new Engine({ models: { model }, kernelMode: "batch-invariant" });
    const prompt = randomTokens(10, V(), 9);
    const base = { prompt, maxTokens: 40, ignoreEos: true, temperature: 0.9, seed: 3 };
    const all = await engine.submit({ ...base, confidence: { window: 4 } }).result;
    expect(all.finishReason).toBe("length");
    expect(all.confidence!.tokens).toBe(40);
    // The per-token confidences, from one forward over the trace (batch-invariant: the same bits as the decode steps).
    const [r] = await model.forward({
      ...FIXED_SCHEDULE,
      sequences: [
        {
          tokens: Int32Array.from([...prompt, ...all.tokens.slice(0, -1)]),
          startPos: 0,
          blockTable: Int32Array.from([100, 101, 102, 103]),
          confidenceTopK: 20,
          emitAll: true,
        },
      ],
    });
    const perToken = Array.from(r.confidences!.slice(prompt.length - 1));
    expect(perToken).toHaveLength(40);
    expect(all.confidence!.mean).toBeCloseTo(perToken.reduce((a, b) => a + b, 0) / 40, 5);
    // Group i (a full window) completes at token i + 4; the threshold just above the lowest group stops there.
    const groups = perToken
      .slice(3)
      .map((_, i) => (perToken[i] + perToken[i + 1] + perToken[i + 2] + perToken[i + 3]) / 4);
    expect(all.confidence!.lowestGroup).toBeCloseTo(Math.min(...groups), 5);
    const threshold = Math.min(...groups) + 1e-6;
    const stopAt = groups.findIndex((g) => g < threshold) + 4;
    const h = engine.submit({ ...base, confidence: { window: 4, threshold } });
    const out = await h.result;
    expect(out.finishReason).toBe("low_confidence");
    expect(out.tokens).toEqual(all.tokens.slice(0, stopAt));
    expect(engine.metrics().models[0].kvPagesUsed).toBe(0);
  });

  it("deterministic: true with the stop gives the same tokens alone and under load", async () => {
    await using engine = new Engine({ models: { model } });
    const prompt = randomTokens(12, V(), 10);
    const req = {
      prompt,
      maxTokens: 32,
      ignoreEos: true,
      temperature: 0.8,
      seed: 5,
      deterministic: true,
      confidence: { window: 3, threshold: 1e9 },
    };
    const alone = await engine.submit(req).result;
    expect(alone.finishReason).toBe("low_confidence");
    expect(alone.tokens).toHaveLength(3); // the first full window is below any finite confidence
    const reqLow = { ...req, confidence: { window: 5, threshold: -1e9 } }; // never stops
    const aloneLow = await engine.submit(reqLow).result;
    const others = Array.from({ length: 6 }, (_, i) =>
      engine.submit({
        prompt: randomTokens(5 + i, V(), 20 + i),
        maxTokens: 30,
        ignoreEos: true,
        temperature: 1,
        seed: i,
      }),
    );
    const [loaded, loadedLow] = await Promise.all([engine.submit(req).result, engine.submit(reqLow).result]);
    await Promise.all(others.map((o) => o.result));
    expect(loaded.tokens).toEqual(alone.tokens);
    expect(loadedLow.tokens).toEqual(aloneLow.tokens);
    expect(loadedLow.finishReason).toBe("length");
    expect(loadedLow.confidence).toEqual(aloneLow.confidence);
  });
});
