// CPU GEMM with FP8 e4m3 weights (wFormat "e4m3": codes [N, K], a scale per row and group of G columns; the schedule
// of cpp/cpu/cpu_gemm_quant.h): the float64 reference of the dequantized weights against X rounded to bf16 (as the
// kernels multiply it) on decode, tile and prefill shapes with every finite code (subnormals, -0) and K not a
// multiple of 128 or 32; bitwise batch invariance across M, row position and thread count under a fixed splitK;
// AVX2 == AVX512-BF16; scales by group; gemmBlocks' cuts; a NaN code's row; the errors at the op's boundary.
import { spawnSync } from "node:child_process";
import { afterAll, describe, expect, it } from "vitest";
import { loadAddon } from "../../ts/native/loadAddon.js";
import { childAddonExpr } from "../helpers/childAddon.js";
import { E4M3_VALUES } from "../../ts/model/quantized/fp8.js";
import { dequantizeFp8, fp8Tensors, randomFp8 } from "./fp8Reference.js";
import { makeRng, randomF32, roundBf16 } from "./reference.js";
import {
  disposeWeight as dispose,
  expectGemmBlocksQkvBits,
  expectMatchesReferenceOnShapes,
  expectRowsBitsAloneAsInBatch,
  expectSameBitsOnAvx2AndNative,
  gemmCpu,
} from "./quantGemmChecks.js";
import { bitsOf, disposeAll, tensorOf } from "./tensors.js";

const addon = loadAddon();
afterAll(() => addon.setThreads(0));

describe("gemm with FP8 e4m3 weights (cpu)", () => {
  it("matches the float64 reference of the dequantized weights: every code, ragged K, decode and prefill", async () => {
    const rng = makeRng(81);
    const shapes: [number, number, number, number][] = [
      [1, 1, 256, 128],
      [1, 13, 256, 128],
      [1, 37, 800, 128], // K = 6 x 128 + 32: a partial last group
      [2, 7, 100, 128], // K < 128, not a multiple of 32
      [5, 20, 384, 64],
      [17, 9, 520, 32],
      [3, 130, 333, 128],
      [40, 11, 1000, 128], // the expanded prefill
    ];
    await expectMatchesReferenceOnShapes(
      addon,
      rng,
      shapes.flatMap(([M, N, K, G]) =>
        [1, 3].map((splitK) => ({ M, N, K, G, splitK, label: `M=${M} N=${N} K=${K} G=${G} splitK=${splitK}` })),
      ),
      {
        makeWeight: (N, K, { G }) => {
          const fw = randomFp8(rng, N, K, G);
          return { weight: fp8Tensors(addon, "cpu", fw), ref: dequantizeFp8(fw) };
        },
        xRef: roundBf16,
        // f32 sums of exact products: measured at most 0.16 of this bound (it was 1e-6 * sqrt(K) + 1e-5 |ref|, ~300x
        // the error, loose enough to pass code 0x03 decoded as twice its value; at this bound that fails by 5-10x)
        tol: (K) => 2e-8 * Math.sqrt(K),
        eps: 2e-7,
      },
    );
  });

  it("multiplies the subnormal codes exactly (a weight of only subnormals and -0)", async () => {
    // one row per subnormal code (and -0) in column 0, x = 1: y = that code's value * scale, exactly
    const codes = [0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x80, 0x81, 0x87];
    const K = 160;
    const q = new Uint8Array(codes.length * K);
    codes.forEach((c, n) => q.fill(c, n * K, n * K + 1)); // column 0 only; the rest +0
    const fw = {
      shape: [codes.length, K] as [number, number],
      groupSize: 128,
      q,
      scales: new Float32Array(codes.length * 2).fill(2),
    };
    const g = fp8Tensors(addon, "cpu", fw);
    const x = tensorOf(addon, "cpu", "f32", [1, K], new Float32Array(K).fill(1));
    const got = await gemmCpu(addon, x, g, undefined, 1);
    // (-0 sums to +0: the lane sums start at +0)
    expect([...got]).toEqual(codes.map((c) => (c & 0x80 ? -1 : 1) * (c & 7) * 2 ** -9 * 2 + 0));
    disposeAll(x);
    dispose(g);
  });

  it("decodes each of the 254 finite codes exactly on every path (decode, tiles, expanded prefill, AVX2)", () => {
    // row n holds finite code n alone, at column (37 n) % K (every lane, block and group, the partial last block and
    // group included), x row m = 2^-m: y[m, n] = round(e4m3(code) * 2^-m * scale), one rounding of an exact product
    // (the other columns' +0 products and the lane tree add zeros). A code decoded wrong by any bit differs.
    const script = `
      const addon = ${childAddonExpr()};
      let s = 5; const r = () => ((s = (s * 1103515245 + 12345) >>> 0) / 4294967296);
      (async () => {
        const out = [];
        for (const [M, K, G, sk] of [[1, 100, 32, 1], [3, 100, 32, 2], [20, 100, 32, 3], [1, 300, 128, 1], [5, 300, 128, 1], [40, 300, 128, 2]]) {
          const codes = Array.from({ length: 256 }, (_, c) => c).filter((c) => (c & 0x7f) !== 0x7f);
          const N = codes.length, ng = Math.ceil(K / G);
          const q = new Uint8Array(N * K);
          codes.forEach((c, n) => { q[n * K + ((37 * n) % K)] = c; });
          const w = addon.tensor("cpu", "u8", [N, K]); w.write(q);
          const sc = Float32Array.from({ length: N * ng }, () => (r() < 0.5 ? -1 : 1) * (0.5 + 1.5 * r()));
          const wScales = addon.tensor("cpu", "f32", [N * ng]); wScales.writeF32(sc);
          const x = addon.tensor("cpu", "f32", [M, K]);
          x.writeF32(Float32Array.from({ length: M * K }, (_, i) => 2 ** -Math.floor(i / K)));
          const y = addon.tensor("cpu", "f32", [M, N]);
          await addon.ops.gemm({ x, w, wFormat: "e4m3", wGroupSize: G, wScales, y, splitK: sk });
          out.push({ M, K, G, codes, scales: Array.from(sc), y: Array.from(y.readF32()) });
        }
        console.log(JSON.stringify({ simd: addon.listDevices().cpu.simd, out }));
      })();`;
    for (const simd of ["avx2", ""]) {
      const r = spawnSync(process.execPath, ["-e", script], {
        env: { ...process.env, DELIBERATE_SIMD: simd },
        encoding: "utf8",
      });
      expect(r.status, r.stderr).toBe(0);
      const res = JSON.parse(r.stdout) as {
        simd: string;
        out: { M: number; K: number; G: number; codes: number[]; scales: number[]; y: number[] }[];
      };
      for (const { M, K, G, codes, scales, y } of res.out) {
        const N = codes.length,
          ng = Math.ceil(K / G);
        const want = new Float32Array(M * N);
        for (let m = 0; m < M; m++)
          codes.forEach((c, n) => {
            want[m * N + n] = E4M3_VALUES[c] * 2 ** -m * scales[n * ng + Math.floor(((37 * n) % K) / G)] + 0;
          });
        expect(N).toBe(254);
        expect(y, `${res.simd} M=${M} K=${K} G=${G}`).toEqual(Array.from(want));
      }
    }
  });

  it("gives every row the same bits alone or anywhere in a batch, for any thread count and path", async () => {
    const rng = makeRng(82);
    for (const [N, K, G] of [
      [37, 2048, 128],
      [21, 800, 128],
      [19, 480, 64],
      [9, 1000, 32],
    ] as [number, number, number][]) {
      const M = 40;
      const xs = randomF32(rng, M * K);
      const g = fp8Tensors(addon, "cpu", randomFp8(rng, N, K, G));
      const bias = tensorOf(addon, "cpu", "f32", [N], randomF32(rng, N));
      await expectRowsBitsAloneAsInBatch(
        addon,
        xs,
        [M, N, K],
        {
          splitKs: [1, 2, 5],
          threads: [1, 2],
          slices: [
            [0, 1],
            [M - 1, 1],
            [13, 1],
            [2, 3],
            [7, 17],
            [3, 16],
          ],
          what: `K=${K} G=${G} `,
        },
        (x, splitK) => gemmCpu(addon, x, g, bias, splitK),
      );
      disposeAll(bias);
      dispose(g);
    }
  });

  it("takes scales by group (a loaded model's layout) with the row-major layout's bits", async () => {
    const rng = makeRng(83);
    const M = 3,
      N = 14,
      K = 300,
      G = 128,
      ng = Math.ceil(K / G);
    const x = tensorOf(addon, "cpu", "f32", [M, K], randomF32(rng, M * K));
    const fw = randomFp8(rng, N, K, G);
    const rowMajor = fp8Tensors(addon, "cpu", fw);
    const t = new Float32Array(fw.scales.length);
    for (let n = 0; n < N; n++) for (let g = 0; g < ng; g++) t[g * N + n] = fw.scales[n * ng + g];
    const byGroup = fp8Tensors(addon, "cpu", { ...fw, scales: t });
    const a = await gemmCpu(addon, x, rowMajor, undefined, 2);
    const b = await gemmCpu(addon, x, byGroup, undefined, 2, { wByGroup: 1 });
    expect(bitsOf(b)).toEqual(bitsOf(a));
    disposeAll(x);
    dispose(rowMajor);
    dispose(byGroup);
  });

  it("takes scales by panel of 8 rows (a loaded CPU model's layout) with the row-major layout's bits", async () => {
    const rng = makeRng(86);
    // decode panels (M = 1), tiles (5), the expanded prefill (20); N not a multiple of 8; ragged K
    for (const [M, N, K, G] of [
      [1, 37, 300, 128],
      [5, 21, 256, 64],
      [20, 45, 200, 32],
    ]) {
      const x = tensorOf(addon, "cpu", "f32", [M, K], randomF32(rng, M * K));
      const g = fp8Tensors(addon, "cpu", randomFp8(rng, N, K, G));
      for (const splitK of [1, 2])
        for (const threads of [1, 2]) {
          addon.setThreads(threads);
          const a = await gemmCpu(addon, x, g, undefined, splitK);
          const b = await gemmCpu(addon, x, g, undefined, splitK, { wPanel: 8 });
          expect(bitsOf(b), `M=${M} N=${N} K=${K} G=${G} splitK=${splitK} threads=${threads}`).toEqual(bitsOf(a));
        }
      disposeAll(x);
      dispose(g);
    }
    addon.setThreads(0);
  });

  it("gemmBlocks cuts an e4m3 w with its scales (the fused q | k | v projection)", async () => {
    const rng = makeRng(84);
    const M = 3,
      N = 24,
      K = 200;
    const x = tensorOf(addon, "cpu", "f32", [M, K], randomF32(rng, M * K));
    const g = fp8Tensors(addon, "cpu", randomFp8(rng, N, K, 128));
    await expectGemmBlocksQkvBits(addon, x, g, M, N);
    disposeAll(x);
    dispose(g);
  });

  it("makes a row with a NaN code (0x7f / 0xff) NaN and leaves the other rows finite", async () => {
    const rng = makeRng(85);
    const M = 2,
      N = 5,
      K = 256;
    const fw = randomFp8(rng, N, K, 128);
    fw.q[1 * K + 3] = 0x7f;
    fw.q[3 * K + 200] = 0xff;
    const g = fp8Tensors(addon, "cpu", fw);
    const x = tensorOf(addon, "cpu", "f32", [M, K], randomF32(rng, M * K));
    const got = await gemmCpu(addon, x, g, undefined, 1);
    for (let m = 0; m < M; m++)
      for (let n = 0; n < N; n++) expect(Number.isNaN(got[m * N + n]), `${m}, ${n}`).toBe(n === 1 || n === 3);
    disposeAll(x);
    dispose(g);
  });

  it("gives the same bits on the AVX2 and AVX-512 paths", () => {
    expectSameBitsOnAvx2AndNative(
      "gemm fp8",
      `
        for (const [M, N, K, G, sk] of [[1, 37, 576, 128, 1], [1, 19, 800, 128, 2], [3, 20, 256, 64, 2], [24, 13, 333, 128, 3], [70, 50, 512, 32, 3], [1, 11, 100, 128, 1]]) {
          const x = addon.tensor("cpu", "f32", [M, K]); x.writeF32(Float32Array.from({ length: M * K }, () => r() - 0.5));
          const codes = Uint8Array.from({ length: N * K }, (_, i) => i < 256 ? i : Math.floor(r() * 256)).map((c) => ((c & 0x7f) === 0x7f ? c - 1 : c));
          const w = addon.tensor("cpu", "u8", [N, K]); w.write(codes);
          const ng = Math.ceil(K / G);
          const wScales = addon.tensor("cpu", "f32", [N * ng]); wScales.writeF32(Float32Array.from({ length: N * ng }, () => (r() - 0.5) / 50));
          const y = addon.tensor("cpu", "f32", [M, N]);
          await addon.ops.gemm({ x, w, wFormat: "e4m3", wGroupSize: G, wScales, y, splitK: sk });
          out.push(Buffer.from(y.read()).toString("base64"));
          await addon.ops.gemm({ x, w, wFormat: "e4m3", wGroupSize: G, wScales, wPanel: 8, y, splitK: sk }); // scales by panel
          out.push(Buffer.from(y.read()).toString("base64"));
        }`,
      { seed: 9, centered: false },
    );
  });

  it("rejects bad input with a clear Error", async () => {
    const rng = makeRng(86);
    const x = tensorOf(addon, "cpu", "f32", [2, 64], randomF32(rng, 128));
    const g = fp8Tensors(addon, "cpu", randomFp8(rng, 3, 64, 32));
    const y = addon.tensor("cpu", "f32", [2, 3]);
    await expect(addon.ops.gemm({ x, ...g, wFormat: "e5m2" as "e4m3", y })).rejects.toThrow(
      /'wFormat' must be "int" or "e4m3", got "e5m2"/,
    );
    await expect(addon.ops.gemm({ x, ...g, wGroupSize: 96, y })).rejects.toThrow(
      /e4m3 w's 'wGroupSize' must be 32, 64 or 128, got 96/,
    );
    await expect(addon.ops.gemm({ x, ...g, wGroupSize: 64, y })).rejects.toThrow(
      /'wScales' must be f32 with N \* ceil\(K \/ wGroupSize\) = 3 values/,
    );
    await expect(addon.ops.gemm({ x, ...g, wZeros: g.w, y })).rejects.toThrow(/an e4m3 w takes 'wScales' only/);
    await expect(addon.ops.gemm({ x, ...g, wBits: 4, y })).rejects.toThrow(/an e4m3 w has 'wBits' 8/);
    const f = addon.tensor("cpu", "f32", [3, 64]);
    await expect(addon.ops.gemm({ x, ...g, w: f, y })).rejects.toThrow(/an e4m3 w holds its codes as u8, got f32/);
    disposeAll(x, y, f);
    dispose(g);
  });
});
