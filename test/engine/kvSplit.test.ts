// Roofline-guided generator / verifier KV split (FlashTTS): the plan obeys its budget, is the cost model's optimum,
// errors clearly when nothing fits; profiles are measured on the device and cached per model and device.
import { fc, test as fcTest } from "@fast-check/vitest";
import { existsSync, mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { bundledModelDir, bundledPrmDir } from "../../ts/bundledModel.js";
import {
  freeDecodeBatch,
  interpolate,
  loadSplitModels,
  planKvSplit,
  profilePath,
  profileThroughput,
  type KvSplitInput,
  type ThroughputProfile,
} from "../../ts/engine/kvSplit.js";
import { loadModel } from "../../ts/model/model.js";

/** Decode: a fixed cost plus a little per sequence (memory-bound); prefill: per prompt cost, saturating at 4. */
const gpuLike = (fixed: number, perSeq: number): ThroughputProfile => ({
  decode: [1, 2, 4, 8, 16, 32, 64].map((b) => ({ batch: b, ms: fixed + perSeq * b })),
  prefill: [1, 2, 4, 8, 16, 32, 64].map((b) => ({ batch: b, tokens: 64, ms: 2 + 1.0 * b + (b > 4 ? 0 : 3 / b) })),
});

const input = (budgetBytes: number, n = 64): KvSplitInput => ({
  budgetBytes,
  n,
  generator: { profile: gpuLike(10, 0.05), bytesPerToken: 1024, pageSize: 16 },
  verifier: { profile: gpuLike(10, 0.05), bytesPerToken: 1024, pageSize: 16 },
  generatorTokens: 256,
  stepTokens: 32,
  verifierTokens: 256,
});

describe("planKvSplit", () => {
  fcTest.prop([fc.integer({ min: 600_000, max: 80_000_000 }), fc.integer({ min: 1, max: 128 })])(
    "obeys the budget and is the least T_tot on the boundary",
    (budget, n) => {
      const o = input(budget, n);
      const p = planKvSplit(o);
      expect(p.generatorBytes + p.verifierBytes).toBeLessThanOrEqual(budget);
      expect(p.decodeBatch).toBeGreaterThanOrEqual(1);
      expect(p.prefillBatch).toBeGreaterThanOrEqual(1);
      // The generator's pool holds its batch, the verifier's its own.
      expect(p.generatorPages).toBeGreaterThanOrEqual(p.decodeBatch * 16);
      expect(p.verifierPages).toBe(p.prefillBatch * 16);
      const least = Math.min(...p.candidates.map((c) => c.ms));
      expect(p.estimatedMs).toBe(least);
    },
  );

  it("gives decoding the memory when prefill saturates early (the paper's asymmetry)", () => {
    const p = planKvSplit(input(64 * 256 * 1024 * 1.2, 64));
    expect(p.decodeBatch).toBeGreaterThan(p.prefillBatch);
    expect(p.generatorBytes).toBeGreaterThan(p.verifierBytes);
  });

  it("errors clearly when the budget holds no generator / verifier pair", () => {
    expect(() => planKvSplit(input(300_000))).toThrow(
      /kvSplit: a KV budget of 300000 bytes holds no generator \/ verifier pair: .* raise the budget to at least 524288 bytes/,
    );
    expect(() => planKvSplit({ ...input(1e6), n: 0 })).toThrow(/kvSplit: n must be > 0/);
  });

  it("finds the free decode batch: the largest whose step costs at most 1.25x a one-row step", () => {
    // The 2-core CPU's profile of a SmolLM-135M-shaped generator (flat to 8 rows, then ~1.6 ms a row).
    const cpu: ThroughputProfile = {
      decode: [
        [1, 12.1],
        [2, 11.8],
        [4, 13.3],
        [8, 14.7],
        [16, 28.1],
        [32, 51.7],
        [64, 72.3],
      ].map(([batch, ms]) => ({ batch, ms })),
      prefill: [],
    };
    expect(freeDecodeBatch(cpu)).toBe(8);
    expect(freeDecodeBatch(cpu, 0.1)).toBe(4); // 13.3 <= 1.1 x 12.1
    expect(freeDecodeBatch(gpuLike(10, 0.05))).toBe(32); // 11.6 ms at 32 rows, 13.2 at 64 (> 12.56)
    expect(planKvSplit({ ...input(4e6), generator: { ...input(4e6).generator, profile: cpu } }).speculativeRows).toBe(
      8,
    );
    expect(() => freeDecodeBatch({ decode: [], prefill: [] })).toThrow(/no decode points/);
  });

  it("interpolates step times between measured batch sizes and extrapolates beyond", () => {
    const pts = [
      { batch: 1, ms: 10 },
      { batch: 4, ms: 16 },
    ];
    expect(interpolate(pts, 1)).toBe(10);
    expect(interpolate(pts, 2)).toBe(12);
    expect(interpolate(pts, 7)).toBe(22);
    expect(interpolate([{ batch: 2, ms: 4 }], 4)).toBe(8);
  });
});

describe("profileThroughput and loadSplitModels", () => {
  it("measures the bundled model once, then reads the cache", async () => {
    const cacheDir = mkdtempSync(join(tmpdir(), "roofline-"));
    const model = await loadModel(bundledModelDir);
    try {
      const first = await profileThroughput(model, { batches: [1, 4], prefillTokens: 32, cacheDir });
      expect(first.decode.map((d) => d.batch)).toEqual([1, 4]);
      for (const d of first.decode) expect(d.ms).toBeGreaterThan(0);
      const path = await profilePath(model, cacheDir);
      expect(existsSync(path)).toBe(true);
      const again = await profileThroughput(model, { batches: [1, 4], prefillTokens: 32, cacheDir });
      expect(again).toEqual(first);
      // Read, not measured: a profile edited in the cache file comes back as written.
      const cached = JSON.parse(readFileSync(path, "utf8")) as { profile: ThroughputProfile };
      cached.profile.decode[0].ms = 12345;
      writeFileSync(path, JSON.stringify(cached));
      const edited = await profileThroughput(model, { batches: [1, 4], prefillTokens: 32, cacheDir });
      expect(edited.decode[0].ms).toBe(12345);
    } finally {
      model.dispose();
    }
  }, 60_000);

  it("caches a model quantized at load apart from the same folder as stored, and each quantize apart", async () => {
    const paths: string[] = [];
    for (const quantize of [undefined, "int8", "fp8"] as const) {
      const model = await loadModel(bundledModelDir, { quantize });
      try {
        expect(model.weights.quantizedAtLoad).toBe(quantize ?? null);
        paths.push(await profilePath(model, "/cache"));
      } finally {
        model.dispose();
      }
    }
    expect(new Set(paths).size).toBe(3);
    expect(paths[0]).not.toMatch(/-w\d+\.json$/);
  }, 60_000);

  it("loads the pair with pools sized by the split", async () => {
    const budgetBytes = 4 * 1024 * 1024;
    const { generator, verifier } = await loadSplitModels(bundledModelDir, bundledPrmDir, {
      budgetBytes,
      n: 8,
      kvSplit: { generator: 0.75, verifier: 0.25 },
      generatorTokens: 200,
      stepTokens: 16,
      verifierTokens: 200,
    });
    try {
      const g = generator.kv.numPages * generator.kv.bytesPerPage;
      const v = verifier.kv.numPages * verifier.kv.bytesPerPage;
      expect(g).toBeLessThanOrEqual(0.75 * budgetBytes);
      expect(g).toBeGreaterThan(0.75 * budgetBytes - generator.kv.bytesPerPage);
      expect(v).toBeLessThanOrEqual(0.25 * budgetBytes);
    } finally {
      generator.dispose();
      verifier.dispose();
    }
    await expect(
      loadSplitModels(bundledModelDir, bundledPrmDir, {
        budgetBytes,
        n: 8,
        kvSplit: { generator: 0.9, verifier: 0.3 },
        generatorTokens: 200,
        stepTokens: 16,
        verifierTokens: 200,
      }),
    ).rejects.toThrow(/summing to at most 1/);
  }, 60_000);
});
