// CPU row-wise kernels against the float64 reference: rmsnorm (plain and fused residual), rope, siluMul,
// embedding, kvWrite, pageCopy; out-of-range ids, slots and pages reject with an Error that names them.
import { describe, expect, it } from "vitest";
import { loadAddon } from "../../ts/native/loadAddon.js";
import type { DType } from "../../ts/native/addonTypes.js";
import {
  makeRng,
  randomF32,
  randomInts,
  refEmbedding,
  refRmsnorm,
  refRope,
  refSiluMul,
  roundBf16,
  shuffled,
  worstViolation,
} from "./reference.js";
import { bitsOf, disposeAll, ropeKvWriteMismatch, stored, tensorOf } from "./tensors.js";

const addon = loadAddon();
const rng = makeRng(11);

describe("rmsnorm (cpu)", () => {
  it("matches the reference with and without the fused residual add, f32 and bf16 weights", async () => {
    for (const [M, C] of [
      [1, 1],
      [3, 7],
      [5, 64],
      [2, 1000],
    ])
      for (const wType of ["f32", "bf16"] as DType[])
        for (const withResidual of [false, true]) {
          const x = tensorOf(addon, "cpu", "f32", [M, C], randomF32(rng, M * C, 3));
          const weight = tensorOf(addon, "cpu", wType, [C], randomF32(rng, C));
          const residual = withResidual ? tensorOf(addon, "cpu", "f32", [M, C], randomF32(rng, M * C, 3)) : undefined;
          const out = addon.tensor("cpu", "f32", [M, C]);
          const ref = refRmsnorm(stored(x), residual && stored(residual), stored(weight), M, C, 1e-5);
          await addon.ops.rmsnorm({ x, residual, weight, out, eps: 1e-5 });
          expect(worstViolation(out.readF32(), ref.out, 1e-6, 1e-5), `M=${M} C=${C}`).toBeUndefined();
          if (residual) expect(worstViolation(residual.readF32(), ref.residual!, 0, 1e-7)).toBeUndefined();
          disposeAll(x, weight, residual, out);
        }
  });

  it("normalizes a row to the same bits alone or in a batch", async () => {
    const M = 9,
      C = 333;
    const xs = randomF32(rng, M * C);
    const weight = tensorOf(addon, "cpu", "f32", [C], randomF32(rng, C));
    const x = tensorOf(addon, "cpu", "f32", [M, C], xs);
    const out = addon.tensor("cpu", "f32", [M, C]);
    await addon.ops.rmsnorm({ x, weight, out });
    const x1 = tensorOf(addon, "cpu", "f32", [1, C], xs.subarray(4 * C, 5 * C));
    const out1 = addon.tensor("cpu", "f32", [1, C]);
    await addon.ops.rmsnorm({ x: x1, weight, out: out1 });
    expect(bitsOf(out1.readF32())).toEqual(bitsOf(out.readF32(), 4 * C, C));
    disposeAll(weight, x, out, x1, out1);
  });
});

describe("rope (cpu)", () => {
  it("rotates q and k in place (HF rotate-half) like the reference", async () => {
    for (const [T, Hq, Hk, D] of [
      [1, 1, 1, 2],
      [5, 4, 2, 16],
      [7, 6, 3, 64],
    ]) {
      const q = tensorOf(addon, "cpu", "f32", [T, Hq, D], randomF32(rng, T * Hq * D));
      const k = tensorOf(addon, "cpu", "f32", [T, Hk, D], randomF32(rng, T * Hk * D));
      const positions = tensorOf(addon, "cpu", "i32", [T], randomInts(rng, T, 0, 4096));
      const invFreq = Float32Array.from({ length: D / 2 }, (_, i) => 10000 ** ((-2 * i) / D));
      const inv = tensorOf(addon, "cpu", "f32", [D / 2], invFreq);
      // angle = position * invFreq in f32, as the kernel computes it
      const angleBase = Float32Array.from(invFreq);
      const refQ = refRopeF32Angle(stored(q), new Int32Array(positions.read()), angleBase, T, Hq, D);
      const refK = refRopeF32Angle(stored(k), new Int32Array(positions.read()), angleBase, T, Hk, D);
      await addon.ops.rope({ q, k, positions, invFreq: inv });
      expect(worstViolation(q.readF32(), refQ, 1e-5, 1e-5), `T=${T} D=${D}`).toBeUndefined();
      expect(worstViolation(k.readF32(), refK, 1e-5, 1e-5)).toBeUndefined();
      disposeAll(q, k, positions, inv);
    }
  });
});

/** refRope with each angle first rounded to f32 (the kernel's angle; a f32 angle near 4096 rad is off by ~2e-4). */
function refRopeF32Angle(
  x: Float32Array,
  positions: Int32Array,
  invFreq: Float32Array,
  T: number,
  H: number,
  D: number,
): Float64Array {
  const out = new Float64Array(x.length);
  for (let t = 0; t < T; t++) {
    // One position per call so that the angle can be rounded per (t, i).
    const angles = Float32Array.from(invFreq, (f) => Math.fround(positions[t] * f));
    const row = refRope(x.subarray(t * H * D, (t + 1) * H * D), [1], angles, 1, H, D);
    out.set(row, t * H * D);
  }
  return out;
}

describe("siluMul (cpu)", () => {
  it("matches the reference", async () => {
    for (const [M, I] of [
      [1, 1],
      [3, 17],
      [4, 300],
    ]) {
      const gateUp = tensorOf(addon, "cpu", "f32", [M, 2 * I], randomF32(rng, M * 2 * I, 8));
      const out = addon.tensor("cpu", "f32", [M, I]);
      await addon.ops.siluMul({ gateUp, out });
      expect(worstViolation(out.readF32(), refSiluMul(stored(gateUp), M, I), 1e-6, 1e-6)).toBeUndefined();
      disposeAll(gateUp, out);
    }
  });

  it("stays within a few ulp of float64 over exp's whole range, with the same bits in vector lanes and the tail", async () => {
    // Gates swept over [-120, 120] (exp(-g) from underflow to overflow) with up = 1: relative error of silu(g)
    // within 4 ulp (exp within 1 ulp, then add, divide, multiply); below g = -88.7 exp(-g) overflows f32 and silu
    // gives -0 where float64 has ~1e-37.
    const I = 4001;
    const gu = new Float32Array(2 * I);
    for (let i = 0; i < I; i++) ((gu[i] = -120 + (240 * i) / (I - 1) + (i % 7) * 1e-3), (gu[I + i] = 1));
    const sweep = tensorOf(addon, "cpu", "f32", [1, 2 * I], gu);
    const sweepOut = addon.tensor("cpu", "f32", [1, I]);
    await addon.ops.siluMul({ gateUp: sweep, out: sweepOut });
    expect(worstViolation(sweepOut.readF32(), refSiluMul(stored(sweep), 1, I), 1e-36, 4 * 2 ** -23)).toBeUndefined();
    // I = 13: elements 0-7 go through the 8-lane path, 8-12 through the scalar tail; element i + 8 repeats element i.
    const gates = [0.37, -3.25, 95, -95, -88.9];
    const ups = [1.5, -0.75, 2, 3, -1];
    const I2 = 13,
      row = new Float32Array(2 * I2).fill(0.5);
    gates.forEach((g, i) => ((row[i] = row[i + 8] = g), (row[I2 + i] = row[I2 + i + 8] = ups[i]!)));
    const gateUp = tensorOf(addon, "cpu", "f32", [1, 2 * I2], row);
    const out = addon.tensor("cpu", "f32", [1, I2]);
    await addon.ops.siluMul({ gateUp, out });
    const o = out.readF32();
    for (let i = 0; i < gates.length; i++)
      expect(Object.is(o[i + 8], o[i]), `element ${i}: ${o[i]} vs ${o[i + 8]}`).toBe(true);
    expect(o[2]).toBe(Math.fround(95 * 2));
    expect(Object.is(o[3], -0) || Math.abs(o[3]!) < 1e-37).toBe(true);
    disposeAll(sweep, sweepOut, gateUp, out);
  });
});

describe("embedding (cpu)", () => {
  it("gathers rows of f32, bf16 and f16 tables", async () => {
    const V = 50,
      C = 24,
      T = 9;
    for (const dtype of ["f32", "bf16", "f16"] as DType[]) {
      const table = tensorOf(addon, "cpu", dtype, [V, C], randomF32(rng, V * C));
      const idValues = randomInts(rng, T, 0, V);
      const ids = tensorOf(addon, "cpu", "i32", [T], idValues);
      const out = addon.tensor("cpu", "f32", [T, C]);
      await addon.ops.embedding({ ids, table, out });
      expect(Array.from(out.readF32())).toEqual(Array.from(refEmbedding(idValues, stored(table), C)));
      disposeAll(table, ids, out);
    }
  });

  it("rejects an out-of-range token id naming it", async () => {
    const table = addon.tensor("cpu", "f32", [10, 4]);
    const out = addon.tensor("cpu", "f32", [3, 4]);
    for (const bad of [10, -1]) {
      const ids = tensorOf(addon, "cpu", "i32", [3], [1, bad, 2]);
      await expect(addon.ops.embedding({ ids, table, out })).rejects.toThrow(
        new RegExp(`embedding: ids\\[1\\] = ${bad} is out of range for a vocabulary of 10`),
      );
      ids.dispose();
    }
    disposeAll(table, out);
  });
});

describe("kvWrite and pageCopy (cpu)", () => {
  it("writes tokens to their slots in f32 and bf16 caches and copies whole pages", async () => {
    const numPages = 6,
      P = 4,
      Hk = 2,
      D = 8,
      T = 7,
      row = Hk * D;
    for (const dtype of ["f32", "bf16"] as DType[]) {
      const kCache = tensorOf(addon, "cpu", dtype, [numPages, P, Hk, D], randomF32(rng, numPages * P * row));
      const vCache = tensorOf(addon, "cpu", dtype, [numPages, P, Hk, D], randomF32(rng, numPages * P * row));
      const kv = randomF32(rng, T * row),
        vv = randomF32(rng, T * row);
      const k = tensorOf(addon, "cpu", "f32", [T, Hk, D], kv);
      const v = tensorOf(addon, "cpu", "f32", [T, Hk, D], vv);
      const slotValues = shuffled(rng, numPages * P).slice(0, T);
      const slots = tensorOf(addon, "cpu", "i32", [T], slotValues);
      const expectK = kCache.readF32(),
        expectV = vCache.readF32();
      const kq = dtype === "bf16" ? roundBf16(kv) : kv,
        vq = dtype === "bf16" ? roundBf16(vv) : vv;
      for (let t = 0; t < T; t++) {
        expectK.set(kq.subarray(t * row, (t + 1) * row), slotValues[t] * row);
        expectV.set(vq.subarray(t * row, (t + 1) * row), slotValues[t] * row);
      }
      await addon.ops.kvWrite({ k, v, kCache, vCache, slots });
      expect(kCache.readF32()).toEqual(expectK);
      expect(vCache.readF32()).toEqual(expectV);

      const src = tensorOf(addon, "cpu", "i32", [2], [1, 4]);
      const dst = tensorOf(addon, "cpu", "i32", [2], [5, 0]);
      const pageLen = P * row;
      for (const [s, d] of [
        [1, 5],
        [4, 0],
      ]) {
        expectK.copyWithin(d * pageLen, s * pageLen, (s + 1) * pageLen);
        expectV.copyWithin(d * pageLen, s * pageLen, (s + 1) * pageLen);
      }
      await addon.ops.pageCopy({ kCache, vCache, src, dst });
      expect(kCache.readF32()).toEqual(expectK);
      expect(vCache.readF32()).toEqual(expectV);
      disposeAll(kCache, vCache, k, v, slots, src, dst);
    }
  });

  it("ropeKvWrite gives rope then kvWrite bitwise (f32 and bf16 caches)", async () => {
    for (const cache of ["f32", "bf16"] as DType[])
      for (const shape of [
        { T: 1, Hq: 2, Hk: 1, D: 8, pages: 3, pageSize: 4 },
        { T: 9, Hq: 6, Hk: 2, D: 16, pages: 5, pageSize: 4 },
      ])
        expect(
          await ropeKvWriteMismatch(addon, "cpu", "f32", cache, shape, rng),
          `${cache} T=${shape.T}`,
        ).toBeUndefined();
  });

  it("rejects out-of-range slots and pages naming them, leaving the cache untouched", async () => {
    const kCache = tensorOf(addon, "cpu", "f32", [3, 4, 1, 2], randomF32(rng, 24));
    const vCache = addon.tensor("cpu", "f32", [3, 4, 1, 2]);
    const before = kCache.readF32();
    const k = tensorOf(addon, "cpu", "f32", [2, 1, 2], [1, 2, 3, 4]);
    const slots = tensorOf(addon, "cpu", "i32", [2], [0, 12]);
    await expect(addon.ops.kvWrite({ k, v: k, kCache, vCache, slots })).rejects.toThrow(
      /kvWrite: slots\[1\] = 12 is outside the cache's 12 slots \(3 pages of 4\)/,
    );
    expect(kCache.readF32()).toEqual(before);
    const src = tensorOf(addon, "cpu", "i32", [2], [0, 1]);
    const dst = tensorOf(addon, "cpu", "i32", [2], [2, 7]);
    await expect(addon.ops.pageCopy({ kCache, vCache, src, dst })).rejects.toThrow(
      /pageCopy: dst\[1\] = page 7 is outside the cache's 3 pages/,
    );
    expect(kCache.readF32()).toEqual(before);
    disposeAll(kCache, vCache, k, slots, src, dst);
  });
});
