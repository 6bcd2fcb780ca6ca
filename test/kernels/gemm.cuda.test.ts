// CUDA GEMM: float64 reference and CPU backend on fresh random inputs (tensor-core and SIMT paths, every tile
// config, split-K, bias, odd sizes), bitwise batch invariance of a fixed splitK across M and row position.
import { afterEach, describe, expect, it } from "vitest";
import type { DType } from "../../ts/native/addonTypes.js";
import { refGemm } from "./reference.js";
import {
  addon,
  bitsEqual,
  cpuHas,
  cudaUnavailable,
  disposeAll,
  poisoned,
  randn,
  roundTo,
  relL2,
  tensor,
} from "./cudaReference.js";
import { blocksMismatch } from "./tensors.js";

afterEach(disposeAll);

async function gpuGemm(
  xv: Float32Array,
  wv: Float32Array,
  M: number,
  N: number,
  K: number,
  xt: DType,
  wt: DType,
  yt: DType,
  splitK: number,
  bias?: Float32Array,
) {
  const x = tensor("cuda", xt, [M, K], xv),
    w = tensor("cuda", wt, [N, K], wv);
  const b = bias ? tensor("cuda", "f32", [N], bias) : undefined;
  const y = poisoned("cuda", yt, [M, N]);
  await addon.ops.gemm({ x, w, bias: b, y, splitK });
  return y.readF32();
}

describe.skipIf(!!cudaUnavailable)("gemm (cuda)", () => {
  it("matches float64 and the CPU on every path and tile config", async () => {
    // M picks the tile config (<=16, <=32, <=64, <=128, larger); K % 8 != 0 or f32/f16 operands take the SIMT path.
    const shapes: [number, number, number][] = [
      [1, 64, 128],
      [5, 130, 520],
      [16, 96, 1000],
      [29, 200, 2048],
      [50, 100, 776],
      [100, 72, 264],
      [200, 136, 712],
      [3, 17, 99],
    ];
    const cpuGemm = await cpuHas(() =>
      addon.ops.gemm({
        x: tensor("cpu", "f32", [1, 8], randn(8)),
        w: tensor("cpu", "f32", [1, 8], randn(8)),
        y: tensor("cpu", "f32", [1, 1]),
      }),
    );
    for (const [M, N, K] of shapes)
      for (const [xt, wt] of [
        ["bf16", "bf16"],
        ["f32", "f32"],
        ["bf16", "f16"],
      ] as [DType, DType][])
        for (const splitK of [1, 3]) {
          const xv = roundTo(randn(M * K), xt),
            wv = roundTo(randn(N * K), wt),
            bias = N % 2 ? undefined : randn(N);
          const ref = refGemm(xv, wv, bias, M, N, K);
          const y32 = await gpuGemm(xv, wv, M, N, K, xt, wt, "f32", splitK, bias);
          const tag = `M=${M} N=${N} K=${K} ${xt}x${wt} splitK=${splitK}`;
          expect(relL2(y32, ref), tag).toBeLessThan(1e-5);
          const y16 = await gpuGemm(xv, wv, M, N, K, xt, wt, "bf16", splitK, bias);
          expect(relL2(y16, ref), `${tag} -> bf16`).toBeLessThan(1e-2);
          if (cpuGemm) {
            const x = tensor("cpu", "f32", [M, K], xv),
              w = tensor("cpu", wt, [N, K], wv),
              y = poisoned("cpu", "f32", [M, N]);
            await addon.ops.gemm({ x, w, bias: bias && tensor("cpu", "f32", [N], bias), y, splitK });
            expect(relL2(y32, y.readF32()), `${tag} vs cpu`).toBeLessThan(1e-5);
          }
        }
  });

  it("gives a row the same bits alone or anywhere in any batch (fixed splitK), and splitK changes bits", async () => {
    const K = 1544,
      N = 192,
      M = 160; // M = 160 takes 128x256 tiles; sub-batches take 16-, 32-, 64- and 128-row tiles
    for (const [xt, wt] of [
      ["bf16", "bf16"],
      ["f32", "bf16"],
    ] as [DType, DType][]) {
      const xv = roundTo(randn(M * K), xt),
        wv = roundTo(randn(N * K), wt);
      const bias = randn(N);
      const full: Record<number, Float32Array> = {};
      for (const splitK of [1, 4, 7]) {
        const batch = (full[splitK] = await gpuGemm(xv, wv, M, N, K, xt, wt, "f32", splitK, bias));
        for (const [row, rows] of [
          [0, 1],
          [M - 1, 1],
          [77, 1],
          [5, 8],
          [40, 16],
          [100, 30],
          [60, 50],
          [9, 100],
          [50, 110],
        ]) {
          const alone = await gpuGemm(
            xv.subarray(row * K, (row + rows) * K),
            wv,
            rows,
            N,
            K,
            xt,
            wt,
            "f32",
            splitK,
            bias,
          );
          expect(
            bitsEqual(alone, batch.subarray(row * N, (row + rows) * N)),
            `${xt} splitK=${splitK} rows ${row}+${rows}`,
          ).toBe(true);
        }
      }
      expect(bitsEqual(full[1], full[4]), "splitK 1 vs 4 should differ somewhere").toBe(false);
    }
  });

  it("keeps a row's bits where 33-64-row batches of a wide GEMM take the 64x128 tile (or wgmma, unsplit)", async () => {
    // N = 17920 (Qwen2.5-1.5B's gate|up): at 33-64 rows the 64x128 grid covers 132 SMs, so the default leaves the
    // 64x64 tile (cuda/gemm.cu tileConfig; wgmma on sm_90a at splitK 1); sub-batches of 1-32 rows keep 16/32-row tiles.
    // N = 12288: wgmma's 128 x 128 config instead of 128 x 256.
    const K = 264,
      M = 64;
    for (const N of [17920, 12288]) {
      const xv = roundTo(randn(M * K), "bf16"),
        wv = roundTo(randn(N * K), "bf16"),
        bias = randn(N);
      const ref = refGemm(xv, wv, bias, M, N, K);
      for (const splitK of [1, 3]) {
        const batch = await gpuGemm(xv, wv, M, N, K, "bf16", "bf16", "f32", splitK, bias);
        expect(relL2(batch, ref), `N=${N} splitK=${splitK}`).toBeLessThan(1e-5);
        for (const [row, rows] of [
          [0, 1],
          [63, 1],
          [5, 16],
          [10, 32],
          [0, 33],
          [20, 40],
          [1, 48],
        ]) {
          const alone = await gpuGemm(
            xv.subarray(row * K, (row + rows) * K),
            wv,
            rows,
            N,
            K,
            "bf16",
            "bf16",
            "f32",
            splitK,
            bias,
          );
          expect(
            bitsEqual(alone, batch.subarray(row * N, (row + rows) * N)),
            `N=${N} splitK=${splitK} rows ${row}+${rows}`,
          ).toBe(true);
        }
      }
    }
  });

  it("gemmBlocks stores the column blocks of rows [row0, row0 + M) with gemm's bits (split-K finish included)", async () => {
    const poison = -777.25;
    for (const [M, N, K, cuts, rows, row0] of [
      [1, 2048, 1536, [1536, 1792], 1, 0],
      [16, 960, 576, [576, 768], 40, 20],
      [70, 200, 264, [96, 136], 70, 0],
      [200, 136, 520, [64, 100], 256, 56],
    ] as [number, number, number, [number, number], number, number][])
      for (const [xt, wt] of [
        ["bf16", "bf16"],
        ["f32", "f32"],
      ] as [DType, DType][])
        for (const splitK of [1, 3]) {
          const xv = roundTo(randn(M * K), xt),
            wv = roundTo(randn(N * K), wt),
            bias = randn(N);
          const plain = await gpuGemm(xv, wv, M, N, K, xt, wt, "f32", splitK, bias);
          const y = tensor("cuda", "f32", [rows * N], new Float32Array(rows * N).fill(poison));
          await addon.ops.gemmBlocks({
            x: tensor("cuda", xt, [M, K], xv),
            w: tensor("cuda", wt, [N, K], wv),
            bias: tensor("cuda", "f32", [N], bias),
            y,
            splitK,
            cut1: cuts[0],
            cut2: cuts[1],
            rows,
            row0,
          });
          expect(
            blocksMismatch(plain, y.readF32(), M, N, cuts, rows, row0, poison),
            `M=${M} N=${N} ${xt} splitK=${splitK}`,
          ).toBeUndefined();
        }
  });

  it("rejects bad arguments with a clear Error", async () => {
    const x = tensor("cuda", "bf16", [4, 64], randn(256)),
      w = tensor("cuda", "bf16", [8, 64], randn(512));
    await expect(addon.ops.gemm({ x, w, y: tensor("cuda", "f32", [4, 9]) })).rejects.toThrow(/y must be/);
    await expect(addon.ops.gemm({ x, w, y: tensor("cuda", "f32", [4, 8]), splitK: 65 })).rejects.toThrow(/splitK/);
    await expect(
      addon.ops.gemm({ x, w: tensor("cpu", "bf16", [8, 64]), y: tensor("cuda", "f32", [4, 8]) }),
    ).rejects.toThrow(/is on cpu/);
  });
});

// The sm_90a wgmma kernels (cuda/sm90/gemm_wgmma.cu; by default for more than 64 rows and unsplit wide GEMMs of 33-64), forced through the tile hook.
const wgmmaUnavailable =
  cudaUnavailable ??
  (addon.listDevices().cuda.wgmmaGemm ? undefined : "no sm_90 GPU, or a build without nvcc's sm_90a target");
const wgmmaTiles = [6, 7, 8]; // 128 x 256, 128 x 128, 64 x 128 CTA tiles

describe.skipIf(!!wgmmaUnavailable)("gemm (cuda, sm_90a wgmma)", () => {
  afterEach(() => void addon.setGemmTile(-1));
  const run = async (tile: number, ...args: Parameters<typeof gpuGemm>) => {
    addon.setGemmTile(tile);
    try {
      return await gpuGemm(...args);
    } finally {
      addon.setGemmTile(-1);
    }
  };

  it("matches float64 and the mma.sync kernels on every config (split-K, bias, ragged M, N and K)", async () => {
    // M below one 64-row wgmma tile, between tiles, several tiles; N off the 128/256 tiles; K off the 64-deep stage.
    const shapes: [number, number, number][] = [
      [1, 64, 128],
      [37, 200, 520],
      [64, 128, 64],
      [130, 300, 1000],
      [257, 520, 776],
      [300, 1032, 2056],
    ];
    let equal = 0,
      total = 0;
    for (const [M, N, K] of shapes)
      for (const splitK of [1, 3]) {
        const xv = roundTo(randn(M * K), "bf16"),
          wv = roundTo(randn(N * K), "bf16"),
          bias = N % 3 ? randn(N) : undefined;
        const ref = refGemm(xv, wv, bias, M, N, K);
        const mmaSync = await run(4, xv, wv, M, N, K, "bf16", "bf16", "f32", splitK, bias);
        for (const tile of wgmmaTiles) {
          const tag = `tile ${tile} M=${M} N=${N} K=${K} splitK=${splitK}`;
          const y32 = await run(tile, xv, wv, M, N, K, "bf16", "bf16", "f32", splitK, bias);
          expect(relL2(y32, ref), tag).toBeLessThan(1e-5);
          expect(relL2(y32, mmaSync), `${tag} vs mma.sync`).toBeLessThan(1e-5);
          const y16 = await run(tile, xv, wv, M, N, K, "bf16", "bf16", "bf16", splitK, bias);
          expect(relL2(y16, ref), `${tag} -> bf16`).toBeLessThan(1e-2);
          total++;
          if (bitsEqual(y32, mmaSync)) equal++;
        }
      }
    // Whether the wgmma path may join the default schedule (cuda/gemm.cu wgmmaConfig) depends on this line.
    console.log(`wgmma bits vs mma.sync: ${equal} of ${total} results bitwise equal`);
  });

  it("gives a row the same bits alone or anywhere in a batch on each config", async () => {
    const K = 1544,
      N = 392,
      M = 200;
    const xv = roundTo(randn(M * K), "bf16"),
      wv = roundTo(randn(N * K), "bf16"),
      bias = randn(N);
    for (const tile of wgmmaTiles)
      for (const splitK of [1, 4]) {
        const batch = await run(tile, xv, wv, M, N, K, "bf16", "bf16", "f32", splitK, bias);
        for (const [row, rows] of [
          [0, 1],
          [M - 1, 1],
          [77, 1],
          [5, 8],
          [60, 70],
          [9, 150],
        ]) {
          const alone = await run(
            tile,
            xv.subarray(row * K, (row + rows) * K),
            wv,
            rows,
            N,
            K,
            "bf16",
            "bf16",
            "f32",
            splitK,
            bias,
          );
          expect(
            bitsEqual(alone, batch.subarray(row * N, (row + rows) * N)),
            `tile ${tile} splitK=${splitK} rows ${row}+${rows}`,
          ).toBe(true);
        }
      }
  });
});
if (!cudaUnavailable && wgmmaUnavailable)
  describe("gemm (cuda, sm_90a wgmma)", () => it.skip(wgmmaUnavailable, () => {}));

const skipReason = cudaUnavailable;
if (skipReason) describe("gemm (cuda)", () => it.skip(skipReason, () => {}));
