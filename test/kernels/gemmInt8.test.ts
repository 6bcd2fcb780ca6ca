// CPU GEMM with int8 weights (per-row f32 scales, the layout loadModel(dir, { quantize: "int8" }) gives the dense
// layers): the float64 reference of the dequantized weights on odd shapes (decode panels and the large-M path),
// bitwise batch invariance across M, row position and thread count under a fixed splitK, AVX2 == AVX-512, and the
// errors at the op's boundary.
import { afterAll, describe, expect, it } from "vitest";
import { loadAddon } from "../../ts/native/loadAddon.js";
import type { NativeTensor } from "../../ts/native/addonTypes.js";
import { runPerSimd } from "../helpers/childAddon.js";
import { dequantize, quantizeRows } from "./int8Reference.js";
import { makeRng, randomF32, refGemm, worstViolation } from "./reference.js";
import { bitsOf, disposeAll, stored, tensorOf } from "./tensors.js";

const addon = loadAddon();
afterAll(() => addon.setThreads(0));

function int8Weight(w: Float32Array, N: number, K: number) {
  const qr = quantizeRows(w, N, K);
  return {
    w: tensorOf(addon, "cpu", "i8", [N, K], qr.q),
    wScale: tensorOf(addon, "cpu", "f32", [N], qr.scale),
    ref: dequantize(qr, N, K),
  };
}

async function gemm(
  x: NativeTensor,
  w: NativeTensor,
  wScale: NativeTensor,
  bias: NativeTensor | undefined,
  splitK: number,
) {
  const y = tensorOf(
    addon,
    "cpu",
    "f32",
    [x.shape[0], w.shape[0]],
    new Float32Array(x.shape[0] * w.shape[0]).fill(NaN),
  );
  await addon.ops.gemm({ x, w, wScale, bias, y, splitK });
  const out = y.readF32();
  y.dispose();
  return out;
}

describe("gemm with int8 weights (cpu)", () => {
  it("matches the float64 reference of the dequantized weights on odd shapes, with and without bias", async () => {
    const rng = makeRng(11);
    for (const [M, N, K] of [
      [1, 1, 1],
      [1, 7, 33],
      [3, 13, 100],
      [5, 64, 257],
      [17, 30, 130],
      [40, 50, 64],
      [70, 9, 515], // M > 64: the large-M path (W blocks widened to f32)
    ] as [number, number, number][])
      for (const splitK of [1, Math.min(K, 3)]) {
        const x = tensorOf(addon, "cpu", "f32", [M, K], randomF32(rng, M * K));
        const { w, wScale, ref: wRef } = int8Weight(randomF32(rng, N * K), N, K);
        const bias = N % 2 ? tensorOf(addon, "cpu", "f32", [N], randomF32(rng, N)) : undefined;
        const got = await gemm(x, w, wScale, bias, splitK);
        const ref = refGemm(stored(x), wRef, bias && stored(bias), M, N, K);
        const bad = worstViolation(got, ref, 1e-5 * Math.sqrt(K), 1e-5);
        expect(bad, `M=${M} N=${N} K=${K} splitK=${splitK}`).toBeUndefined();
        disposeAll(x, w, wScale, bias);
      }
  });

  it("gives a zero row (all weights 0, scale 0) exact zeros plus its bias", async () => {
    const K = 40;
    const wv = randomF32(makeRng(4), 3 * K);
    wv.fill(0, K, 2 * K);
    const x = tensorOf(addon, "cpu", "f32", [2, K], randomF32(makeRng(5), 2 * K));
    const { w, wScale } = int8Weight(wv, 3, K);
    const bias = tensorOf(addon, "cpu", "f32", [3], [0.5, -0.25, 2]);
    const got = await gemm(x, w, wScale, bias, 2);
    expect([got[1], got[4]]).toEqual([-0.25, -0.25]);
    disposeAll(x, w, wScale, bias);
  });

  it("gives every row the same bits alone or anywhere in a batch, for any thread count and path", async () => {
    const rng = makeRng(12);
    const K = 2100,
      N = 37,
      M = 70;
    const xs = randomF32(rng, M * K);
    const { w, wScale } = int8Weight(randomF32(rng, N * K), N, K);
    const bias = tensorOf(addon, "cpu", "f32", [N], randomF32(rng, N));
    const x = tensorOf(addon, "cpu", "f32", [M, K], xs);
    for (const splitK of [1, 2, 5])
      for (const threads of [1, 2]) {
        addon.setThreads(threads);
        const batch = await gemm(x, w, wScale, bias, splitK);
        for (const [row, rows] of [
          [0, 1],
          [M - 1, 1],
          [13, 1],
          [20, 8],
          [3, 16],
          [29, 40],
          [5, 64],
        ]) {
          const sub = tensorOf(addon, "cpu", "f32", [rows, K], xs.subarray(row * K, (row + rows) * K));
          const alone = await gemm(sub, w, wScale, bias, splitK);
          expect(bitsOf(alone), `splitK=${splitK} threads=${threads} rows ${row}+${rows}`).toEqual(
            bitsOf(batch, row * N, rows * N),
          );
          sub.dispose();
        }
      }
    disposeAll(w, wScale, bias, x);
  });

  it("gemmBlocks cuts an int8 w with its scales (the fused q | k | v projection)", async () => {
    const rng = makeRng(13);
    const M = 3,
      N = 24,
      K = 40;
    const x = tensorOf(addon, "cpu", "f32", [M, K], randomF32(rng, M * K));
    const { w, wScale, ref: wRef } = int8Weight(randomF32(rng, N * K), N, K);
    const y = addon.tensor("cpu", "f32", [M * N]);
    await addon.ops.gemmBlocks({ x, w, wScale, y, splitK: 2, cut1: 12, cut2: 18, rows: M, row0: 0 });
    const plain = await gemm(x, w, wScale, undefined, 2);
    const got = y.readF32();
    // block j is a (M, n_j) matrix at M * c_j
    for (const [c, n] of [
      [0, 12],
      [12, 6],
      [18, 6],
    ])
      for (let m = 0; m < M; m++) for (let j = 0; j < n; j++) expect(got[M * c + m * n + j]).toBe(plain[m * N + c + j]);
    expect(worstViolation(plain, refGemm(stored(x), wRef, undefined, M, N, K), 1e-4, 1e-5)).toBeUndefined();
    disposeAll(x, w, wScale, y);
  });

  it("gives the same bits on the AVX2 and AVX-512 paths", () => {
    const [avx2, native] = runPerSimd(
      `
        for (const [M, N, K, sk] of [[1, 37, 576, 1], [3, 20, 77, 2], [24, 13, 161, 3], [70, 50, 300, 3]]) {
          const x = addon.tensor("cpu", "f32", [M, K]); x.writeF32(Float32Array.from({ length: M * K }, r));
          const w = addon.tensor("cpu", "i8", [N, K]); w.writeF32(Float32Array.from({ length: N * K }, () => Math.round(r() * 254)));
          const wScale = addon.tensor("cpu", "f32", [N]); wScale.writeF32(Float32Array.from({ length: N }, () => r() / 100));
          const y = addon.tensor("cpu", "f32", [M, N]);
          await addon.ops.gemm({ x, w, wScale, y, splitK: sk });
          out.push(Buffer.from(y.read()).toString("base64"));
        }`,
      { seed: 7, centered: true, levels: ["avx2", ""] },
    );
    expect(avx2.simd).toBe("avx2");
    console.log(`[gemm int8] SIMD paths compared: avx2, ${native.simd}`);
    expect(native.out).toEqual(avx2.out);
  });

  it("rejects bad input with a clear Error", async () => {
    const x = addon.tensor("cpu", "f32", [2, 8]);
    const w = addon.tensor("cpu", "i8", [3, 8]);
    const y = addon.tensor("cpu", "f32", [2, 3]);
    const wScale = addon.tensor("cpu", "f32", [3]);
    await expect(addon.ops.gemm({ x, w, y })).rejects.toThrow(/an i8 w needs 'wScale': f32 \[N\]/);
    await expect(addon.ops.gemm({ x, w, y, wScale: addon.tensor("cpu", "f32", [4]) })).rejects.toThrow(
      /'wScale' must be f32 \[3\], got f32 \[4\]/,
    );
    await expect(addon.ops.gemm({ x, w, y, wScale: addon.tensor("cpu", "bf16", [3]) })).rejects.toThrow(
      /'wScale' must be f32 \[3\], got bf16/,
    );
    await expect(addon.ops.gemm({ x, w: addon.tensor("cpu", "f32", [3, 8]), y, wScale })).rejects.toThrow(
      /'wScale' is for an i8 w only; w is f32/,
    );
    await expect(addon.ops.gemm({ x: addon.tensor("cpu", "i8", [2, 8]), w, y, wScale })).rejects.toThrow(
      /'x' must be f32, bf16 or f16, got i8/,
    );
    await expect(addon.ops.rmsnorm({ x: addon.tensor("cpu", "i8", [2, 8]), weight: wScale, out: y })).rejects.toThrow(
      /must be f32, bf16 or f16, got i8/,
    );
    expect(() => w.writeF32(new Float32Array(24).fill(0.5))).toThrow(/an i8 tensor takes integers in \[-128, 127\]/);
    expect(() => w.writeF32(new Float32Array(24).fill(128))).toThrow(/integers in \[-128, 127\]/);
    disposeAll(x, w, y, wScale);
  });
});
