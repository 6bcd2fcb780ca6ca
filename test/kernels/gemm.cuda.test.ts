// CUDA GEMM: float64 reference and CPU backend on fresh random inputs (tensor-core and SIMT paths, every tile
// config, split-K, bias, odd sizes), bitwise batch invariance of a fixed splitK across M and row position.
import { afterEach, describe, expect, it } from "vitest";
import type { DType } from "../../ts/native/addonTypes.js";
import { refGemm } from "./reference.js";
import { addon, bitsEqual, cpuHas, cudaUnavailable, disposeAll, poisoned, randn, roundTo, relL2, tensor } from "./cudaReference.js";

afterEach(disposeAll);

async function gpuGemm(xv: Float32Array, wv: Float32Array, M: number, N: number, K: number, xt: DType, wt: DType, yt: DType, splitK: number, bias?: Float32Array) {
  const x = tensor("cuda", xt, [M, K], xv), w = tensor("cuda", wt, [N, K], wv);
  const b = bias ? tensor("cuda", "f32", [N], bias) : undefined;
  const y = poisoned("cuda", yt, [M, N]);
  await addon.ops.gemm({ x, w, bias: b, y, splitK });
  return y.readF32();
}

describe.skipIf(!!cudaUnavailable)("gemm (cuda)", () => {
  it("matches float64 and the CPU on every path and tile config", async () => {
    // M picks the tile config (<=16, <=32, <=64, <=128, larger); K % 8 != 0 or f32/f16 operands take the SIMT path.
    const shapes: [number, number, number][] = [[1, 64, 128], [5, 130, 520], [16, 96, 1000], [29, 200, 2048], [50, 100, 776], [100, 72, 264], [200, 136, 712], [3, 17, 99]];
    const cpuGemm = await cpuHas(() => addon.ops.gemm({ x: tensor("cpu", "f32", [1, 8], randn(8)), w: tensor("cpu", "f32", [1, 8], randn(8)), y: tensor("cpu", "f32", [1, 1]) }));
    for (const [M, N, K] of shapes)
      for (const [xt, wt] of [["bf16", "bf16"], ["f32", "f32"], ["bf16", "f16"]] as [DType, DType][])
        for (const splitK of [1, 3]) {
          const xv = roundTo(randn(M * K), xt), wv = roundTo(randn(N * K), wt), bias = N % 2 ? undefined : randn(N);
          const ref = refGemm(xv, wv, bias, M, N, K);
          const y32 = await gpuGemm(xv, wv, M, N, K, xt, wt, "f32", splitK, bias);
          const tag = `M=${M} N=${N} K=${K} ${xt}x${wt} splitK=${splitK}`;
          expect(relL2(y32, ref), tag).toBeLessThan(1e-5);
          const y16 = await gpuGemm(xv, wv, M, N, K, xt, wt, "bf16", splitK, bias);
          expect(relL2(y16, ref), `${tag} -> bf16`).toBeLessThan(1e-2);
          if (cpuGemm) {
            const x = tensor("cpu", "f32", [M, K], xv), w = tensor("cpu", wt, [N, K], wv), y = poisoned("cpu", "f32", [M, N]);
            await addon.ops.gemm({ x, w, bias: bias && tensor("cpu", "f32", [N], bias), y, splitK });
            expect(relL2(y32, y.readF32()), `${tag} vs cpu`).toBeLessThan(1e-5);
          }
        }
  });

  it("gives a row the same bits alone or anywhere in any batch (fixed splitK), and splitK changes bits", async () => {
    const K = 1544, N = 192, M = 160; // M = 160 takes 128x256 tiles; sub-batches take 16-, 32-, 64- and 128-row tiles
    for (const [xt, wt] of [["bf16", "bf16"], ["f32", "bf16"]] as [DType, DType][]) {
      const xv = roundTo(randn(M * K), xt), wv = roundTo(randn(N * K), wt);
      const bias = randn(N);
      const full: Record<number, Float32Array> = {};
      for (const splitK of [1, 4, 7]) {
        const batch = (full[splitK] = await gpuGemm(xv, wv, M, N, K, xt, wt, "f32", splitK, bias));
        for (const [row, rows] of [[0, 1], [M - 1, 1], [77, 1], [5, 8], [40, 16], [100, 30], [60, 50], [9, 100], [50, 110]]) {
          const alone = await gpuGemm(xv.subarray(row * K, (row + rows) * K), wv, rows, N, K, xt, wt, "f32", splitK, bias);
          expect(bitsEqual(alone, batch.subarray(row * N, (row + rows) * N)), `${xt} splitK=${splitK} rows ${row}+${rows}`).toBe(true);
        }
      }
      expect(bitsEqual(full[1], full[4]), "splitK 1 vs 4 should differ somewhere").toBe(false);
    }
  });

  it("rejects bad arguments with a clear Error", async () => {
    const x = tensor("cuda", "bf16", [4, 64], randn(256)), w = tensor("cuda", "bf16", [8, 64], randn(512));
    await expect(addon.ops.gemm({ x, w, y: tensor("cuda", "f32", [4, 9]) })).rejects.toThrow(/y must be/);
    await expect(addon.ops.gemm({ x, w, y: tensor("cuda", "f32", [4, 8]), splitK: 65 })).rejects.toThrow(/splitK/);
    await expect(addon.ops.gemm({ x, w: tensor("cpu", "bf16", [8, 64]), y: tensor("cuda", "f32", [4, 8]) })).rejects.toThrow(/is on cpu/);
  });
});

const skipReason = cudaUnavailable;
if (skipReason) describe("gemm (cuda)", () => it.skip(skipReason, () => {}));
