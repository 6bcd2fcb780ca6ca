// CPU GEMM with int8 weights (per-row f32 scales, the layout loadModel(dir, { quantize: "int8" }) gives the dense
// layers): the float64 reference of the dequantized weights on odd shapes (decode panels and the large-M path),
// bitwise batch invariance across M, row position and thread count under a fixed splitK, AVX2 == AVX-512, and the
// errors at the op's boundary.
import { afterAll, describe, expect, it } from "vitest";
import { loadAddon } from "../../ts/native/loadAddon.js";
import { dequantize, quantizeRows } from "./int8Reference.js";
import { makeRng, randomF32, refGemm, worstViolation } from "./reference.js";
import {
  batchSlices,
  disposeWeight,
  expectGemmBlocksQkvBits,
  expectMatchesReferenceOnShapes,
  expectRowsBitsAloneAsInBatch,
  expectSameBitsOnAvx2AndNative,
  gemmCpu,
} from "./quantGemmChecks.js";
import { runPerSimd } from "../helpers/childAddon.js";
import { bitsOf, disposeAll, stored, tensorOf } from "./tensors.js";

const addon = loadAddon();
afterAll(() => addon.setThreads(0));
const avx512 = addon.listDevices().cpu.simd !== "avx2";
if (!avx512) console.log("[gemm int8] packed W test skipped: this CPU has no AVX-512 (packed i8 W is used only there)");

/** w quantized per row as the loader does it: the op's fields { w: i8, wScale } and the float64 dequantized values. */
function int8Weight(w: Float32Array, N: number, K: number) {
  const qr = quantizeRows(w, N, K);
  return {
    weight: { w: tensorOf(addon, "cpu", "i8", [N, K], qr.q), wScale: tensorOf(addon, "cpu", "f32", [N], qr.scale) },
    ref: dequantize(qr, N, K),
  };
}

describe("gemm with int8 weights (cpu)", () => {
  it("matches the float64 reference of the dequantized weights on odd shapes, with and without bias", async () => {
    const rng = makeRng(11);
    const shapes: [number, number, number][] = [
      [1, 1, 1],
      [1, 7, 33],
      [3, 13, 100],
      [5, 64, 257],
      [17, 30, 130],
      [40, 50, 64],
      [70, 9, 515], // M > 64: the large-M path (W blocks widened to f32)
    ];
    await expectMatchesReferenceOnShapes(
      addon,
      rng,
      shapes.flatMap(([M, N, K]) =>
        [1, Math.min(K, 3)].map((splitK) => ({ M, N, K, splitK, label: `M=${M} N=${N} K=${K} splitK=${splitK}` })),
      ),
      {
        makeWeight: (N, K) => int8Weight(randomF32(rng, N * K), N, K),
        xRef: (x) => x,
        tol: (K) => 1e-5 * Math.sqrt(K),
        eps: 1e-5,
      },
    );
  });

  it("gives a zero row (all weights 0, scale 0) exact zeros plus its bias", async () => {
    const K = 40;
    const wv = randomF32(makeRng(4), 3 * K);
    wv.fill(0, K, 2 * K);
    const x = tensorOf(addon, "cpu", "f32", [2, K], randomF32(makeRng(5), 2 * K));
    const { weight } = int8Weight(wv, 3, K);
    const bias = tensorOf(addon, "cpu", "f32", [3], [0.5, -0.25, 2]);
    const got = await gemmCpu(addon, x, weight, bias, 2);
    expect([got[1], got[4]]).toEqual([-0.25, -0.25]);
    disposeAll(x, bias);
    disposeWeight(weight);
  });

  it("gives every row the same bits alone or anywhere in a batch, for any thread count and path", async () => {
    const rng = makeRng(12);
    const K = 2100,
      N = 37,
      M = 70;
    const xs = randomF32(rng, M * K);
    const { weight } = int8Weight(randomF32(rng, N * K), N, K);
    const bias = tensorOf(addon, "cpu", "f32", [N], randomF32(rng, N));
    await expectRowsBitsAloneAsInBatch(
      addon,
      xs,
      [M, N, K],
      { splitKs: [1, 2, 5], threads: [1, 2], slices: batchSlices(M, true), what: "" },
      (x, splitK) => gemmCpu(addon, x, weight, bias, splitK),
    );
    disposeAll(bias);
    disposeWeight(weight);
  });

  it("gemmBlocks cuts an int8 w with its scales (the fused q | k | v projection)", async () => {
    const rng = makeRng(13);
    const M = 3,
      N = 24,
      K = 40;
    const x = tensorOf(addon, "cpu", "f32", [M, K], randomF32(rng, M * K));
    const { weight, ref: wRef } = int8Weight(randomF32(rng, N * K), N, K);
    const plain = await expectGemmBlocksQkvBits(addon, x, weight, M, N);
    expect(worstViolation(plain, refGemm(stored(x), wRef, undefined, M, N, K), 1e-4, 1e-5)).toBeUndefined();
    disposeAll(x);
    disposeWeight(weight);
  });

  it.skipIf(!avx512)(
    "gives row-major W's bits with W packed in panels (a model's int8 weights on an AVX-512 CPU)",
    async () => {
      const rng = makeRng(14);
      // N not a multiple of the 6-row panel, K not of 32 or 16, splitK cutting groups; M = 1 (the GEMV), 2-16 (the
      // decode tiles), > 64 (the large-M path widens W blocks from the packed places); one and two threads
      for (const [M, N, K] of [
        [1, 37, 576],
        [1, 8, 100],
        [1, 13, 2100],
        [2, 13, 1536],
        [5, 50, 161],
        [16, 31, 77],
        [70, 19, 300],
      ]) {
        const x = tensorOf(addon, "cpu", "f32", [M, K], randomF32(rng, M * K));
        const { weight } = int8Weight(randomF32(rng, N * K), N, K);
        const bias = tensorOf(addon, "cpu", "f32", [N], randomF32(rng, N));
        for (const splitK of [1, 3]) {
          for (const threads of [1, 2]) {
            addon.setThreads(threads);
            const y = addon.tensor("cpu", "f32", [M, N]);
            await addon.ops.gemm({ x, ...weight, bias, y, splitK, packW: 1 });
            expect(bitsOf(y.readF32()), `M=${M} N=${N} K=${K} splitK=${splitK} threads=${threads}`).toEqual(
              bitsOf(await gemmCpu(addon, x, weight, bias, splitK)),
            );
            y.dispose();
          }
        }
        disposeAll(x, bias);
        disposeWeight(weight);
      }
    },
  );

  it.skipIf(!avx512)("gives row-major W's bits with W packed on the AVX-512 path without AVX512-BF16 too", () => {
    // a child capped at AVX-512 (DELIBERATE_SIMD=avx512) runs the packed i8 kernels as a CPU without BF16 would
    const [capped, native] = runPerSimd(
      `
        for (const [M, N, K, sk] of [[1, 37, 576, 1], [1, 13, 2100, 3], [5, 50, 161, 2], [70, 19, 300, 3]]) {
          const x = addon.tensor("cpu", "f32", [M, K]); x.writeF32(Float32Array.from({ length: M * K }, r));
          const w = addon.tensor("cpu", "i8", [N, K]); w.writeF32(Float32Array.from({ length: N * K }, () => Math.round(r() * 254)));
          const wScale = addon.tensor("cpu", "f32", [N]); wScale.writeF32(Float32Array.from({ length: N }, () => r() / 100));
          const y = addon.tensor("cpu", "f32", [M, N]);
          for (const packW of [0, 1]) {
            await addon.ops.gemm({ x, w, wScale, y, splitK: sk, packW });
            out.push(Buffer.from(y.read()).toString("base64"));
          }
        }`,
      { seed: 8, centered: true, levels: ["avx512", ""] },
    );
    expect(capped.simd).toBe("avx512");
    for (const run of [capped, native])
      for (let i = 0; i < run.out.length; i += 2) expect(run.out[i + 1], `${run.simd} call ${i / 2}`).toBe(run.out[i]);
    expect(capped.out).toEqual(native.out);
  });

  it("gives the same bits on the AVX2 and AVX-512 paths", () => {
    expectSameBitsOnAvx2AndNative(
      "gemm int8",
      `
        for (const [M, N, K, sk] of [[1, 37, 576, 1], [3, 20, 77, 2], [24, 13, 161, 3], [70, 50, 300, 3]]) {
          const x = addon.tensor("cpu", "f32", [M, K]); x.writeF32(Float32Array.from({ length: M * K }, r));
          const w = addon.tensor("cpu", "i8", [N, K]); w.writeF32(Float32Array.from({ length: N * K }, () => Math.round(r() * 254)));
          const wScale = addon.tensor("cpu", "f32", [N]); wScale.writeF32(Float32Array.from({ length: N }, () => r() / 100));
          const y = addon.tensor("cpu", "f32", [M, N]);
          await addon.ops.gemm({ x, w, wScale, y, splitK: sk });
          out.push(Buffer.from(y.read()).toString("base64"));
        }`,
      { seed: 7, centered: true },
    );
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
