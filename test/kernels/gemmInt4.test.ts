// CPU GEMM with grouped quantized weights (4 and 8 bits, groups of 32..K along K, symmetric or with zero points,
// act-order perm: the format of ts/model/quantFormat.ts, the schedule of cpp/cpu/cpu_gemm_quant.h): the float64
// reference of the dequantized weights on decode and prefill shapes (4 bits: against X rounded to bf16, as the
// kernels multiply it), bitwise batch invariance across M, row position
// and thread count under a fixed splitK, AVX2 == AVX-512, gemmBlocks' cuts, and the errors at the op's boundary.
import { afterAll, describe, expect, it } from "vitest";
import { dequantizeToInputOrder, type GroupedQuantWeight } from "../../ts/model/quantFormat.js";
import { loadAddon } from "../../ts/native/loadAddon.js";
import { groupedTensors, randomGrouped, type GroupedOptions } from "./int4Reference.js";
import { makeRng, randomF32, refGemm, roundBf16, worstViolation } from "./reference.js";
import {
  batchSlices,
  disposeWeight as dispose,
  expectGemmBlocksQkvBits,
  expectMatchesReferenceOnShapes,
  expectRowsBitsAloneAsInBatch,
  expectSameBitsOnAvx2AndNative,
  gemmCpu,
} from "./quantGemmChecks.js";
import { bitsOf, disposeAll, stored, tensorOf } from "./tensors.js";

const addon = loadAddon();
afterAll(() => addon.setThreads(0));

const SCHEMES: [string, GroupedOptions][] = [
  ["4-bit g32 symmetric", { bits: 4, groupSize: 32 }],
  ["4-bit g64 zero points", { bits: 4, groupSize: 64, asymmetric: true }],
  ["4-bit g128 act-order", { bits: 4, groupSize: 128, asymmetric: true, perm: true }],
  ["8-bit g64 zero points act-order", { bits: 8, groupSize: 64, asymmetric: true, perm: true }],
  ["8-bit g32 symmetric", { bits: 8, groupSize: 32 }],
];

describe("gemm with grouped quantized weights (cpu)", () => {
  for (const [what, o] of SCHEMES)
    it(`${what}: matches the float64 reference of the dequantized weights, decode and prefill shapes`, async () => {
      const rng = makeRng(21 + o.groupSize + o.bits);
      const shapes: [number, number, number][] = [
        [1, 1, 128],
        [1, 13, 256],
        [2, 7, 384],
        [5, 20, 128],
        [17, 9, 512],
        [70, 11, 256],
      ];
      await expectMatchesReferenceOnShapes(
        addon,
        rng,
        shapes.flatMap(([M, N, K]) =>
          [1, 3].map((splitK) => ({ M, N, K, splitK, label: `M=${M} N=${N} K=${K} splitK=${splitK}` })),
        ),
        {
          makeWeight: (N, K) => {
            const gw = randomGrouped(rng, N, K, o);
            return { weight: groupedTensors(addon, "cpu", gw, o.asymmetric === true), ref: dequantizeToInputOrder(gw) };
          },
          // 4 bits: the kernels multiply X rounded to bf16 (exact products with 128 + q), so the reference does too
          xRef: (x) => (o.bits === 4 ? roundBf16(x) : x),
          tol: (K) => 1e-5 * Math.sqrt(K),
          eps: 1e-5,
        },
      );
    });

  it("per-channel groups (G = K) and zero points passed as the middle equal the symmetric weight's bits", async () => {
    const rng = makeRng(5);
    const M = 3,
      N = 10,
      K = 576;
    const x = tensorOf(addon, "cpu", "f32", [M, K], randomF32(rng, M * K));
    const gw = randomGrouped(rng, N, K, { bits: 4, groupSize: K });
    const withZeros = groupedTensors(addon, "cpu", gw, true),
      without = groupedTensors(addon, "cpu", gw, false);
    const a = await gemmCpu(addon, x, withZeros, undefined, 2),
      b = await gemmCpu(addon, x, without, undefined, 2);
    expect(bitsOf(a)).toEqual(bitsOf(b));
    expect(
      worstViolation(a, refGemm(roundBf16(stored(x)), dequantizeToInputOrder(gw), undefined, M, N, K), 1e-4, 1e-5),
    ).toBeUndefined();
    disposeAll(x);
    dispose(withZeros);
    dispose(without);
  });

  it("4 bits: x far from zero (each octet's start, -(128 + zero) * sum(x), cancels against its products) stays within 1e-5 of sum |x w|", async () => {
    // decode, tiles and the expanded prefill, symmetric and with zero points: the schedule's worst case for rounding
    const rng = makeRng(77);
    for (const asymmetric of [false, true]) {
      const M = 20,
        N = 9,
        K = 512;
      const xs = Float32Array.from(randomF32(rng, M * K), (v) => 100 + v);
      const gw = randomGrouped(rng, N, K, { bits: 4, groupSize: 32, asymmetric });
      const g = groupedTensors(addon, "cpu", gw, asymmetric);
      const xr = roundBf16(xs),
        wr = dequantizeToInputOrder(gw);
      for (const rows of [1, 5, M]) {
        const xm = tensorOf(addon, "cpu", "f32", [rows, K], xs.subarray(0, rows * K));
        const got = await gemmCpu(addon, xm, g, undefined, 1);
        const ref = refGemm(xr, wr, undefined, rows, N, K);
        for (let m = 0; m < rows; m++)
          for (let n = 0; n < N; n++) {
            let size = 0;
            for (let k = 0; k < K; k++) size += Math.abs(xr[m * K + k] * wr[n * K + k]);
            const err = Math.abs(got[m * N + n] - ref[m * N + n]);
            expect(err, `asymmetric=${asymmetric} M=${rows} row ${m} col ${n}`).toBeLessThanOrEqual(1e-5 * size);
          }
        disposeAll(xm);
      }
      dispose(g);
    }
  });

  it("takes scales and zero points by group (a loaded model's layout) with the row-major layout's bits", async () => {
    const rng = makeRng(8);
    const M = 3,
      N = 14,
      K = 256,
      G = 64;
    const x = tensorOf(addon, "cpu", "f32", [M, K], randomF32(rng, M * K));
    const gw = randomGrouped(rng, N, K, { bits: 4, groupSize: G, asymmetric: true, perm: true });
    const rowMajor = groupedTensors(addon, "cpu", gw, true);
    const ng = K / G;
    const t = <T extends Float32Array | Uint8Array>(a: T): T => {
      const out = a.slice() as T;
      for (let n = 0; n < N; n++) for (let g = 0; g < ng; g++) out[g * N + n] = a[n * ng + g];
      return out;
    };
    const byGroup = groupedTensors(addon, "cpu", { ...gw, scales: t(gw.scales), zeros: t(gw.zeros) }, true);
    const a = await gemmCpu(addon, x, rowMajor, undefined, 2);
    const y = addon.tensor("cpu", "f32", [M, N]);
    await addon.ops.gemm({ x, ...byGroup, wByGroup: 1, y, splitK: 2 });
    expect(bitsOf(y.readF32())).toEqual(bitsOf(a));
    disposeAll(x, y);
    dispose(rowMajor);
    dispose(byGroup);
  });

  it("4 bits: takes scales and zero points by panel of 8 rows (a loaded CPU model's layout) with the same bits", async () => {
    const rng = makeRng(9);
    // M = 1 (decode panels, prefetching the next panel's scales), 5 (tiles of 4 rows), 20 (the expanded prefill's
    // blocks of 32 rows); N not a multiple of 8; groups straddling chunks; one and two threads
    for (const [M, N, K, G, asymmetric] of [
      [1, 37, 576, 32, true],
      [1, 16, 480, 96, false],
      [5, 21, 256, 64, true],
      [20, 45, 384, 32, true],
      [20, 13, 160, 160, false],
    ] as const) {
      const x = tensorOf(addon, "cpu", "f32", [M, K], randomF32(rng, M * K));
      const g = groupedTensors(
        addon,
        "cpu",
        randomGrouped(rng, N, K, { bits: 4, groupSize: G, asymmetric, perm: asymmetric }),
        asymmetric,
      );
      for (const splitK of [1, 3])
        for (const threads of [1, 2]) {
          addon.setThreads(threads);
          const y = addon.tensor("cpu", "f32", [M, N]);
          await addon.ops.gemm({ x, ...g, wPanel: 8, y, splitK });
          expect(bitsOf(y.readF32()), `M=${M} N=${N} K=${K} G=${G} splitK=${splitK} threads=${threads}`).toEqual(
            bitsOf(await gemmCpu(addon, x, g, undefined, splitK)),
          );
          y.dispose();
        }
      disposeAll(x);
      dispose(g);
    }
    addon.setThreads(0);
  });

  it("4 bits: rounds X to bf16 alike with and without perm (the whole chunks' vector copy against word by word)", async () => {
    // an identity perm takes the word-by-word copy; none, the AVX-512 copy of whole chunks: the same bits for
    // subnormals, signed zeros, halfway cases, the largest finites, infinities and NaN in x (K = 416: 3 whole chunks
    // and a partial one)
    const rng = makeRng(10);
    const M = 3,
      N = 11,
      K = 416;
    const xv = randomF32(rng, M * K);
    // row 0 small values (subnormals, signed zeros, halfway cases, the smallest normal), row 1 the largest finites
    // (each row's outputs show its words' bits: no larger value in the row absorbs them), row 2 the infinities and NaN
    [1e-40, -1e-40, -0, 0, 1 + 2 ** -8, 1 + 3 * 2 ** -8, -(1 + 3 * 2 ** -8), 2 ** -126].forEach((v, i) => {
      xv[i * 37] = v;
      xv[i * 41 + 3] = v;
    });
    [3.38e38, -3.38e38, 3.4e38].forEach((v, i) => (xv[K + i * 101 + 7] = v));
    [Infinity, -Infinity, NaN].forEach((v, i) => (xv[2 * K + i * 129 + 5] = v));
    const x = tensorOf(addon, "cpu", "f32", [M, K], xv);
    const gw = randomGrouped(rng, N, K, { bits: 4, groupSize: 32, asymmetric: false, perm: false });
    const plain = groupedTensors(addon, "cpu", gw, false);
    const identity = groupedTensors(addon, "cpu", { ...gw, perm: Int32Array.from({ length: K }, (_, k) => k) }, false);
    for (const m of [1, 3]) {
      const xm = m === 1 ? tensorOf(addon, "cpu", "f32", [1, K], xv.subarray(0, K)) : x;
      expect(bitsOf(await gemmCpu(addon, xm, plain, undefined, 1)), `M=${m}`).toEqual(
        bitsOf(await gemmCpu(addon, xm, identity, undefined, 1)),
      );
      if (m === 1) disposeAll(xm);
    }
    disposeAll(x);
    dispose(plain);
    dispose(identity);
  });

  it("gives every row the same bits alone or anywhere in a batch, for any thread count and path", async () => {
    const rng = makeRng(12);
    const K = 2048,
      N = 37,
      M = 70;
    const xs = randomF32(rng, M * K);
    for (const o of [SCHEMES[1][1], SCHEMES[3][1]]) {
      const g = groupedTensors(addon, "cpu", randomGrouped(rng, N, K, o), true);
      const bias = tensorOf(addon, "cpu", "f32", [N], randomF32(rng, N));
      await expectRowsBitsAloneAsInBatch(
        addon,
        xs,
        [M, N, K],
        { splitKs: [1, 2, 5], threads: [1, 2], slices: batchSlices(M, false), what: `bits ${o.bits} ` },
        (x, splitK) => gemmCpu(addon, x, g, bias, splitK),
      );
      disposeAll(bias);
      dispose(g);
    }
  });

  it("4 bits: the same row bits alone or in a batch with groups straddling chunks and a partial last chunk", async () => {
    // decode panels (M = 1), tiles (M < 16) and the expanded prefill (M >= 16), symmetric and with zero points
    const rng = makeRng(48);
    for (const [N, K, G, asymmetric] of [
      [21, 800, 160, false],
      [19, 480, 96, true],
    ] as [number, number, number, boolean][]) {
      const M = 40;
      const xs = randomF32(rng, M * K);
      const g = groupedTensors(
        addon,
        "cpu",
        randomGrouped(rng, N, K, { bits: 4, groupSize: G, asymmetric }),
        asymmetric,
      );
      await expectRowsBitsAloneAsInBatch(
        addon,
        xs,
        [M, N, K],
        {
          splitKs: [1, 3],
          threads: [1, 2],
          slices: [
            [0, 1],
            [M - 1, 1],
            [2, 3],
            [7, 17],
          ],
          what: `K=${K} G=${G} `,
        },
        (x, splitK) => gemmCpu(addon, x, g, undefined, splitK),
      );
      dispose(g);
    }
  });

  it("gemmBlocks cuts a grouped w with its scales and zero points (the fused q | k | v projection)", async () => {
    const rng = makeRng(13);
    const M = 3,
      N = 24,
      K = 128;
    const x = tensorOf(addon, "cpu", "f32", [M, K], randomF32(rng, M * K));
    const gw = randomGrouped(rng, N, K, { bits: 4, groupSize: 32, asymmetric: true, perm: true });
    const g = groupedTensors(addon, "cpu", gw, true);
    await expectGemmBlocksQkvBits(addon, x, g, M, N);
    disposeAll(x);
    dispose(g);
  });

  it("gives the same bits on the AVX2 and AVX-512 paths", () => {
    expectSameBitsOnAvx2AndNative(
      "gemm grouped",
      `
        for (const [M, N, K, G, bits, sk, sym] of [[1, 37, 576, 32, 4, 1, 0], [3, 20, 256, 64, 4, 2, 0], [24, 13, 384, 128, 8, 3, 0], [70, 50, 512, 32, 4, 3, 0], [1, 19, 480, 96, 4, 2, 1], [6, 9, 672, 32, 4, 1, 1], [1, 11, 96, 96, 4, 1, 0]]) {
          const x = addon.tensor("cpu", "f32", [M, K]); x.writeF32(Float32Array.from({ length: M * K }, () => r() - 0.5));
          const w = addon.tensor("cpu", "u8", [N, K * bits / 8]); w.write(Uint8Array.from({ length: N * K * bits / 8 }, () => Math.floor(r() * 256)));
          const wScales = addon.tensor("cpu", "f32", [N * K / G]); wScales.writeF32(Float32Array.from({ length: N * K / G }, () => (r() - 0.5) / 50));
          const wZeros = addon.tensor("cpu", "u8", [N * K / G]); wZeros.write(Uint8Array.from({ length: N * K / G }, () => Math.floor(r() * (bits === 4 ? 17 : 256))));
          const y = addon.tensor("cpu", "f32", [M, N]);
          await addon.ops.gemm({ x, w, wBits: bits, wGroupSize: G, wScales, wZeros: sym ? undefined : wZeros, y, splitK: sk });
          out.push(Buffer.from(y.read()).toString("base64"));
          if (bits === 4) { // scales and zero points by panel
            await addon.ops.gemm({ x, w, wBits: bits, wGroupSize: G, wScales, wZeros: sym ? undefined : wZeros, wPanel: 8, y, splitK: sk });
            out.push(Buffer.from(y.read()).toString("base64"));
          }
        }`,
      { seed: 7, centered: false },
    );
  });

  it("4 bits: groups that straddle the kernels' 128-column chunks (G = 96, 160) and a partial last chunk", async () => {
    const rng = makeRng(31);
    for (const [M, N, K, G, asymmetric, splitK] of [
      [1, 19, 480, 96, false, 1],
      [1, 9, 480, 160, true, 2],
      [3, 11, 96, 96, true, 1],
      [9, 17, 672, 32, false, 3],
      [1, 23, 800, 160, false, 4],
      [5, 6, 288, 96, true, 2],
    ] as [number, number, number, number, boolean, number][]) {
      const x = tensorOf(addon, "cpu", "f32", [M, K], randomF32(rng, M * K));
      const gw = randomGrouped(rng, N, K, { bits: 4, groupSize: G, asymmetric, perm: asymmetric });
      const g = groupedTensors(addon, "cpu", gw, asymmetric);
      const got = await gemmCpu(addon, x, g, undefined, splitK);
      const ref = refGemm(roundBf16(stored(x)), dequantizeToInputOrder(gw), undefined, M, N, K);
      expect(worstViolation(got, ref, 1e-5 * Math.sqrt(K), 1e-5), `M=${M} N=${N} K=${K} G=${G}`).toBeUndefined();
      disposeAll(x);
      dispose(g);
    }
  });

  it("4 bits: a zero point of 16 (GPTQ v1 stores a zero point of 0 minus one as 15; the loader adds one)", async () => {
    const rng = makeRng(47);
    for (const [M, N, K, G] of [
      [1, 19, 480, 96],
      [3, 11, 256, 32],
      [20, 13, 384, 128],
    ] as [number, number, number, number][]) {
      const x = tensorOf(addon, "cpu", "f32", [M, K], randomF32(rng, M * K));
      const gw = randomGrouped(rng, N, K, { bits: 4, groupSize: G, asymmetric: true });
      for (let i = 0; i < gw.zeros.length; i += 3) gw.zeros[i] = 16;
      const g = groupedTensors(addon, "cpu", gw, true);
      const got = await gemmCpu(addon, x, g, undefined, 2);
      const ref = refGemm(roundBf16(stored(x)), dequantizeToInputOrder(gw), undefined, M, N, K);
      expect(worstViolation(got, ref, 1e-5 * Math.sqrt(K), 1e-5), `M=${M} N=${N} K=${K} G=${G}`).toBeUndefined();
      disposeAll(x);
      dispose(g);
    }
  });

  it("rejects bad input with a clear Error", async () => {
    const rng = makeRng(3);
    const x = tensorOf(addon, "cpu", "f32", [2, 64], randomF32(rng, 128));
    const gw: GroupedQuantWeight = randomGrouped(rng, 3, 64, { bits: 4, groupSize: 32 });
    const g = groupedTensors(addon, "cpu", gw, true);
    const y = addon.tensor("cpu", "f32", [2, 3]);
    await expect(addon.ops.gemm({ x, w: g.w, y })).rejects.toThrow(/'wBits' must be 4 or 8/);
    await expect(addon.ops.gemm({ x, ...g, wGroupSize: 16, y })).rejects.toThrow(
      /'wGroupSize' must be a multiple of 32/,
    );
    await expect(addon.ops.gemm({ x, ...g, wScales: undefined, y })).rejects.toThrow(/'wScales' must be f32 with/);
    await expect(addon.ops.gemm({ x, ...g, wZeros: g.wScales, y })).rejects.toThrow(/'wZeros' must be u8/);
    const badPerm = tensorOf(addon, "cpu", "i32", [64], new Int32Array(64).fill(64));
    await expect(addon.ops.gemm({ x, ...g, wPerm: badPerm, y })).rejects.toThrow(/perm\[0\] = 64 is outside/);
    const bigZeros = addon.tensor("cpu", "u8", [6]);
    bigZeros.write(Uint8Array.of(8, 8, 8, 17, 8, 8));
    await expect(addon.ops.gemm({ x, ...g, wZeros: bigZeros, y })).rejects.toThrow(
      /4-bit grouped w's zero points must be in \[0, 16\], got zeros\[3\] = 17/,
    );
    await expect(addon.ops.gemm({ x, w: addon.tensor("cpu", "f32", [3, 64]), wScales: g.wScales, y })).rejects.toThrow(
      /'wScales', 'wZeros' and 'wPerm' are for a u8/,
    );
    expect(() => g.w.writeF32(new Float32Array(96))).toThrow(/dtype is u8; use write/);
    disposeAll(x, y, badPerm, bigZeros);
    dispose(g);
  });
});
