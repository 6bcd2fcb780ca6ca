// CUDA GEMM with FP8 e4m3 weights (wFormat "e4m3": the W8A16-style kernel of cuda/gemm_int4.cu): the float64
// reference of the dequantized weights (every finite code, subnormals, -0; K not a multiple of 128 or 4) with bf16 and
// f32 activations, split-K and bias; bitwise batch invariance of a fixed splitK across M and row position; gemmBlocks'
// cuts. Written without a GPU: the kernel has never run until scripts/device/check.sh runs this file on a lent one.
// Skips, saying why, where no CUDA device is usable.
import { afterEach, describe, expect, it } from "vitest";
import type { DType } from "../../ts/native/addonTypes.js";
import { dequantizeFp8, fp8Tensors, randomFp8 } from "./fp8Reference.js";
import { refGemm } from "./reference.js";
import {
  addon,
  bitsEqual,
  cudaUnavailable,
  disposeAll,
  poisoned,
  rand,
  randn,
  relL2,
  roundTo,
  tensor,
} from "./cudaReference.js";

const held: { dispose(): void }[] = [];
afterEach(() => {
  disposeAll();
  for (const t of held.splice(0)) t.dispose();
});

function fp8(w: ReturnType<typeof randomFp8>) {
  const g = fp8Tensors(addon, "cuda", w);
  held.push(g.w, g.wScales);
  return g;
}

if (cudaUnavailable) describe("gemm with FP8 e4m3 weights (cuda)", () => it.skip(cudaUnavailable!, () => {}));
else
  describe("gemm with FP8 e4m3 weights (cuda)", () => {
    it("matches the float64 reference of the dequantized weights (bf16 and f32 x, ragged K, split-K, bias)", async () => {
      for (const [M, N, K, G] of [
        [1, 64, 256, 128],
        [1, 37, 800, 128],
        [5, 130, 333, 128],
        [16, 96, 1024, 64],
        [70, 72, 258, 32],
      ] as [number, number, number, number][])
        for (const xt of ["bf16", "f32"] as DType[])
          for (const splitK of [1, 3]) {
            const xv = roundTo(randn(M * K), xt);
            const fw = randomFp8(rand, N, K, G);
            const bias = N % 4 ? undefined : randn(N);
            const x = tensor("cuda", xt, [M, K], xv);
            const b = bias ? tensor("cuda", "f32", [N], bias) : undefined;
            const y = poisoned("cuda", "f32", [M, N]);
            await addon.ops.gemm({ x, ...fp8(fw), bias: b, y, splitK });
            const ref = refGemm(xv, dequantizeFp8(fw), bias, M, N, K);
            expect(relL2(y.readF32(), ref), `M=${M} N=${N} K=${K} G=${G} x=${xt} splitK=${splitK}`).toBeLessThan(1e-5);
          }
    });

    it("gives every row the same bits alone or in a batch under a fixed splitK", async () => {
      const M = 40,
        N = 50,
        K = 777;
      const xv = roundTo(randn(M * K), "bf16");
      const g = fp8(randomFp8(rand, N, K, 128));
      for (const splitK of [1, 3]) {
        const run = async (row: number, rows: number) => {
          const x = tensor("cuda", "bf16", [rows, K], xv.subarray(row * K, (row + rows) * K));
          const y = poisoned("cuda", "f32", [rows, N]);
          await addon.ops.gemm({ x, ...g, y, splitK });
          return y.readF32();
        };
        const batch = await run(0, M);
        for (const [row, rows] of [
          [0, 1],
          [17, 1],
          [5, 16],
          [M - 3, 3],
        ])
          expect(
            bitsEqual(await run(row, rows), batch.subarray(row * N, (row + rows) * N)),
            `splitK=${splitK} rows ${row}+${rows}`,
          ).toBe(true);
      }
    });

    it("gemmBlocks writes the plain GEMM's bits in blocks (the fused q | k | v projection)", async () => {
      const M = 3,
        N = 24,
        K = 200;
      const xv = roundTo(randn(M * K), "bf16");
      const g = fp8(randomFp8(rand, N, K, 128));
      const x = tensor("cuda", "bf16", [M, K], xv);
      const plain = poisoned("cuda", "f32", [M, N]);
      await addon.ops.gemm({ x, ...g, y: plain, splitK: 2 });
      const y = poisoned("cuda", "f32", [M * N]);
      await addon.ops.gemmBlocks({ x, ...g, y, splitK: 2, cut1: 12, cut2: 18, rows: M, row0: 0 });
      const p = plain.readF32(),
        got = y.readF32();
      for (const [c, n] of [
        [0, 12],
        [12, 6],
        [18, 6],
      ])
        for (let m = 0; m < M; m++) for (let j = 0; j < n; j++) expect(got[M * c + m * n + j]).toBe(p[m * N + c + j]);
    });
  });
