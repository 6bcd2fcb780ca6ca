// CUDA GEMM with int8 weights (W8A16 / W8A32: per-row f32 scales, the SIMT kernel reading q exactly): the float64
// reference of the dequantized weights with bf16 and f32 activations, split-K and bias, and bitwise batch invariance
// of a fixed splitK across M and row position. Skips, saying why, where no CUDA device is usable.
import { afterEach, describe, expect, it } from "vitest";
import type { DType } from "../../ts/native/addonTypes.js";
import { refGemm } from "./reference.js";
import { addon, cudaUnavailable, disposeAll, poisoned, randn, relL2, roundTo, tensor } from "./cudaReference.js";
import { cudaBatchSlices, expectCudaRowsBitsAloneAsInBatch } from "./quantGemmCudaChecks.js";
import { dequantize, quantizeRows } from "./int8Reference.js";

afterEach(disposeAll);

describe.skipIf(!!cudaUnavailable)("gemm with int8 weights (cuda)", () => {
  it("matches the float64 reference of the dequantized weights (bf16 and f32 x, split-K, bias)", async () => {
    for (const [M, N, K] of [
      [1, 64, 128],
      [5, 130, 520],
      [16, 96, 1000],
      [70, 72, 264],
      [3, 17, 99],
    ] as [number, number, number][])
      for (const xt of ["bf16", "f32"] as DType[])
        for (const splitK of [1, 4]) {
          const xv = roundTo(randn(M * K), xt);
          const qr = quantizeRows(randn(N * K), N, K);
          const bias = N % 2 ? randn(N) : undefined;
          const x = tensor("cuda", xt, [M, K], xv);
          const w = tensor("cuda", "i8", [N, K], qr.q);
          const wScale = tensor("cuda", "f32", [N], qr.scale);
          const b = bias ? tensor("cuda", "f32", [N], bias) : undefined;
          const y = poisoned("cuda", "f32", [M, N]);
          await addon.ops.gemm({ x, w, wScale, bias: b, y, splitK });
          const ref = refGemm(xv, dequantize(qr, N, K), bias, M, N, K);
          expect(relL2(y.readF32(), ref), `M=${M} N=${N} K=${K} x=${xt} splitK=${splitK}`).toBeLessThan(1e-5);
        }
  });

  it("gives every row the same bits alone or in a batch under a fixed splitK", async () => {
    const M = 40,
      N = 50,
      K = 777;
    const xv = roundTo(randn(M * K), "bf16");
    const qr = quantizeRows(randn(N * K), N, K);
    const w = tensor("cuda", "i8", [N, K], qr.q);
    const wScale = tensor("cuda", "f32", [N], qr.scale);
    await expectCudaRowsBitsAloneAsInBatch(xv, [M, N, K], { w, wScale }, [1, 3], cudaBatchSlices(M));
  });

  it("refuses an i8 w without its scales", async () => {
    const x = tensor("cuda", "bf16", [2, 8]),
      w = tensor("cuda", "i8", [3, 8]),
      y = tensor("cuda", "f32", [2, 3]);
    await expect(addon.ops.gemm({ x, w, y })).rejects.toThrow(/an i8 w needs 'wScale'/);
  });
});
