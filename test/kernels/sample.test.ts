// CPU sampling against the float64 reference rule: greedy (first max), Gumbel-max with temperature / top-k /
// top-p keyed by (seed, position, token id) and independent of the batch slot, raw log-softmax logprobs and
// top-k logprobs (descending, ties by lower id); invalid parameters reject naming the row.
import { describe, expect, it } from "vitest";
import { loadAddon } from "../../ts/native/loadAddon.js";
import {
  makeRng,
  randomF32,
  rankByLogit,
  refLogSoftmax,
  refSample,
  seedOf,
  worstViolation,
  type SampleParams,
} from "./reference.js";
import { disposeAll, readI32, tensorOf } from "./tensors.js";

const addon = loadAddon();
const rng = makeRng(31);

interface Row extends Omit<SampleParams, "seed"> {
  seedLow: number;
  seedHigh: number;
}

async function sample(logits: Float32Array, V: number, rows: Row[], numTop = 0) {
  const B = rows.length;
  const t = {
    logits: tensorOf(addon, "cpu", "f32", [B, V], logits),
    temperature: tensorOf(
      addon,
      "cpu",
      "f32",
      [B],
      rows.map((r) => r.temperature),
    ),
    topK: tensorOf(
      addon,
      "cpu",
      "i32",
      [B],
      rows.map((r) => r.topK),
    ),
    topP: tensorOf(
      addon,
      "cpu",
      "f32",
      [B],
      rows.map((r) => r.topP),
    ),
    seeds: tensorOf(
      addon,
      "cpu",
      "i32",
      [B, 2],
      rows.flatMap((r) => [r.seedLow, r.seedHigh]),
    ),
    positions: tensorOf(
      addon,
      "cpu",
      "i32",
      [B],
      rows.map((r) => r.position),
    ),
    tokens: addon.tensor("cpu", "i32", [B]),
    logprobs: addon.tensor("cpu", "f32", [B]),
    topIds: numTop ? addon.tensor("cpu", "i32", [B, numTop]) : undefined,
    topLogprobs: numTop ? addon.tensor("cpu", "f32", [B, numTop]) : undefined,
  };
  try {
    await addon.ops.sample(t);
    return {
      tokens: Array.from(readI32(t.tokens)),
      logprobs: t.logprobs.readF32(),
      topIds: t.topIds ? Array.from(readI32(t.topIds)) : [],
      topLogprobs: t.topLogprobs ? t.topLogprobs.readF32() : new Float32Array(0),
    };
  } finally {
    disposeAll(...Object.values(t));
  }
}

const params = (r: Row): SampleParams => ({ ...r, seed: seedOf(r.seedLow, r.seedHigh) });

describe("sample (cpu)", () => {
  it("samples the reference token with logprobs for greedy, temperature, top-k and top-p rows", async () => {
    const V = 1000;
    const rows: Row[] = [];
    for (const temperature of [0, 0.5, 1, 2])
      for (const [topK, topP] of [
        [0, 1],
        [5, 1],
        [0, 0.9],
        [40, 0.5],
        [1, 1],
      ])
        rows.push({
          temperature,
          topK,
          topP,
          seedLow: rows.length * 7919,
          seedHigh: -rows.length,
          position: 100 + rows.length,
        });
    const logits = randomF32(rng, rows.length * V, 4);
    const got = await sample(logits, V, rows, 5);
    for (let b = 0; b < rows.length; b++) {
      const row = logits.subarray(b * V, (b + 1) * V);
      const lp = refLogSoftmax(row);
      expect(got.tokens[b], `row ${b}: ${JSON.stringify(rows[b])}`).toBe(refSample(row, params(rows[b])));
      expect(worstViolation([got.logprobs[b]], [lp[got.tokens[b]]], 1e-5, 1e-6)).toBeUndefined();
      const top = rankByLogit(row).slice(0, 5);
      expect(got.topIds.slice(b * 5, b * 5 + 5)).toEqual(top);
      expect(
        worstViolation(
          got.topLogprobs.subarray(b * 5, b * 5 + 5),
          top.map((id) => lp[id]),
          1e-5,
          1e-6,
        ),
      ).toBeUndefined();
    }
  });

  it("keeps stochastic samples within top-k / top-p and varies them with the seed and position", async () => {
    const V = 50;
    const row = randomF32(rng, V, 2);
    const ranked = rankByLogit(row);
    const rows: Row[] = Array.from({ length: 64 }, (_, i) => ({
      temperature: 1.5,
      topK: 3,
      topP: 1,
      seedLow: i,
      seedHigh: 0,
      position: i % 5,
    }));
    const got = await sample(
      new Float32Array(rows.length * V).map((_, i) => row[i % V]),
      V,
      rows,
    );
    expect(new Set(got.tokens).size).toBeGreaterThan(1);
    for (const t of got.tokens) expect(ranked.slice(0, 3)).toContain(t);
    // top-p 0.01 leaves only the most likely token
    const narrow = await sample(row, V, [
      { temperature: 1, topK: 0, topP: 0.01, seedLow: 3, seedHigh: 4, position: 0 },
    ]);
    expect(narrow.tokens[0]).toBe(ranked[0]);
  });

  it("picks the first index of the max when greedy, and ranks ties by lower id", async () => {
    const logits = Float32Array.from([1, 5, 2, 5, 5, -1]);
    const got = await sample(
      logits,
      6,
      [{ temperature: 0, topK: 0, topP: 1, seedLow: 0, seedHigh: 0, position: 0 }],
      4,
    );
    expect(got.tokens).toEqual([1]);
    expect(got.topIds).toEqual([1, 3, 4, 2]);
  });

  it("ranks the top logprobs like a full sort over rows of many ties, NaN (as -inf), +-inf and few distinct values", async () => {
    const V = 5003;
    const values = [-3, -1, 0, 0.5, 2, 2, 7, Infinity, -Infinity, NaN];
    const rows: Float32Array[] = [
      Float32Array.from({ length: V }, () => values[Math.floor(rng() * values.length)]), // ties everywhere
      Float32Array.from({ length: V }, (_, i) => (i % 97 === 0 ? NaN : -Infinity)), // fewer than 64 above -inf
      Float32Array.from({ length: V }, (_, i) => i * 1e-3), // ascending: every logit beats the buffer
      Float32Array.from({ length: V }, (_, i) => -i * 1e-3), // descending: nothing enters after the first 64
      randomF32(rng, V, 4),
    ];
    for (const numTop of [1, 20, 64]) {
      for (const row of rows) {
        const got = await sample(
          row,
          V,
          [{ temperature: 0, topK: 0, topP: 1, seedLow: 0, seedHigh: 0, position: 0 }],
          numTop,
        );
        const asMinusInf = Array.from(row, (x) => (Number.isNaN(x) ? -Infinity : x));
        expect(got.topIds).toEqual(rankByLogit(asMinusInf).slice(0, numTop));
      }
    }
  });

  it("ties -0 and +0 (lower id first), for greedy, top-k 1 and the top logprobs", async () => {
    const logits = Float32Array.from([-1, -0, -2, 0, -3]);
    const greedy = await sample(
      logits,
      5,
      [{ temperature: 0, topK: 0, topP: 1, seedLow: 0, seedHigh: 0, position: 0 }],
      3,
    );
    expect(greedy.tokens).toEqual([1]);
    expect(greedy.topIds).toEqual([1, 3, 0]);
    const k1 = await sample(logits, 5, [{ temperature: 1, topK: 1, topP: 1, seedLow: 5, seedHigh: 6, position: 7 }]);
    expect(k1.tokens).toEqual([1]);
  });

  it("gives a row the same token whatever its batch slot and neighbours", async () => {
    const V = 300;
    const target = randomF32(rng, V, 3);
    const row: Row = { temperature: 0.8, topK: 0, topP: 0.95, seedLow: 12345, seedHigh: 678, position: 42 };
    const alone = await sample(target, V, [row]);
    const others = randomF32(rng, 3 * V, 3);
    const batch = new Float32Array(4 * V);
    batch.set(others.subarray(0, 2 * V), 0);
    batch.set(target, 2 * V);
    batch.set(others.subarray(2 * V), 3 * V);
    const neighbour: Row = { temperature: 1, topK: 10, topP: 1, seedLow: 1, seedHigh: 2, position: 7 };
    const got = await sample(batch, V, [neighbour, neighbour, row, neighbour]);
    expect(got.tokens[2]).toBe(alone.tokens[0]);
    expect(got.logprobs[2]).toBe(alone.logprobs[0]);
  });

  it("rejects invalid parameters naming the row", async () => {
    const ok: Row = { temperature: 1, topK: 0, topP: 1, seedLow: 0, seedHigh: 0, position: 0 };
    const logits = randomF32(rng, 2 * 4);
    await expect(sample(logits, 4, [ok, { ...ok, temperature: -1 }])).rejects.toThrow(
      /sample: row 1: temperature -1.* must be finite and >= 0/,
    );
    await expect(sample(logits, 4, [{ ...ok, topP: 0 }, ok])).rejects.toThrow(
      /sample: row 0: topP 0.* must be in \(0, 1\]/,
    );
    await expect(sample(logits, 4, [ok, { ...ok, topK: -2 }])).rejects.toThrow(/sample: row 1: topK -2 must be >= 0/);
  });
});
