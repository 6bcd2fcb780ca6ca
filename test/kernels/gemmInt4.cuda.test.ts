// CUDA GEMM with grouped quantized weights (W4A16 / W8A16 and f32 x: cuda/gemm_int4.cu, the format of
// ts/model/quantFormat.ts): the float64 reference of the dequantized weights with bf16 and f32 activations, zero
// points, act-order perm, split-K and bias; bitwise batch invariance of a fixed splitK across M and row position;
// gemmBlocks' cuts. Skips, saying why, where no CUDA device is usable.
import { afterEach, describe, expect, it } from "vitest";
import { dequantizeToInputOrder } from "../../ts/model/quantFormat.js";
import type { DType } from "../../ts/native/addonTypes.js";
import { refGemm } from "./reference.js";
import { addon, cudaUnavailable, disposeAll, poisoned, rand, randn, relL2, roundTo, tensor } from "./cudaReference.js";
import {
  cudaBatchSlices,
  expectCudaGemmBlocksQkvBits,
  expectCudaRowsBitsAloneAsInBatch,
} from "./quantGemmCudaChecks.js";
import { groupedTensors, randomGrouped, type GroupedOptions } from "./int4Reference.js";

const held: { dispose(): void }[] = [];
afterEach(() => {
  disposeAll();
  for (const t of held.splice(0)) t.dispose();
});

function grouped(w: ReturnType<typeof randomGrouped>, withZeros: boolean) {
  const g = groupedTensors(addon, "cuda", w, withZeros);
  for (const t of [g.w, g.wScales, g.wZeros, g.wPerm]) if (t) held.push(t);
  return g;
}

const SCHEMES: GroupedOptions[] = [
  { bits: 4, groupSize: 32 },
  { bits: 4, groupSize: 128, asymmetric: true, perm: true },
  { bits: 8, groupSize: 64, asymmetric: true, perm: true },
];

describe.skipIf(!!cudaUnavailable)("gemm with grouped quantized weights (cuda)", () => {
  it("matches the float64 reference of the dequantized weights (bf16 and f32 x, split-K, bias)", async () => {
    for (const o of SCHEMES)
      for (const [M, N, K] of [
        [1, 64, 128],
        [5, 130, 512],
        [16, 96, 1024],
        [70, 72, 256],
      ] as [number, number, number][])
        for (const xt of ["bf16", "f32"] as DType[])
          for (const splitK of [1, 3]) {
            const xv = roundTo(randn(M * K), xt);
            const gw = randomGrouped(rand, N, K, o);
            const bias = N % 4 ? undefined : randn(N);
            const x = tensor("cuda", xt, [M, K], xv);
            const b = bias ? tensor("cuda", "f32", [N], bias) : undefined;
            const y = poisoned("cuda", "f32", [M, N]);
            await addon.ops.gemm({ x, ...grouped(gw, o.asymmetric === true), bias: b, y, splitK });
            const ref = refGemm(xv, dequantizeToInputOrder(gw), bias, M, N, K);
            const what = `bits ${o.bits} G ${o.groupSize} M=${M} N=${N} K=${K} x=${xt} splitK=${splitK}`;
            expect(relL2(y.readF32(), ref), what).toBeLessThan(1e-5);
          }
  });

  it("gives every row the same bits alone or in a batch under a fixed splitK", async () => {
    const M = 40,
      N = 50,
      K = 768;
    const xv = roundTo(randn(M * K), "bf16");
    const g = grouped(randomGrouped(rand, N, K, { bits: 4, groupSize: 64, asymmetric: true, perm: true }), true);
    await expectCudaRowsBitsAloneAsInBatch(xv, [M, N, K], g, [1, 3], cudaBatchSlices(M));
  });

  it("gemmBlocks writes the plain GEMM's bits in blocks (the fused q | k | v projection)", async () => {
    const M = 3,
      N = 24,
      K = 128;
    const xv = roundTo(randn(M * K), "bf16");
    const g = grouped(randomGrouped(rand, N, K, { bits: 4, groupSize: 32, asymmetric: true }), true);
    const x = tensor("cuda", "bf16", [M, K], xv);
    await expectCudaGemmBlocksQkvBits(x, g, M, N);
  });
});
