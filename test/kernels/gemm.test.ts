// CPU GEMM: float64 reference on random shapes (odd sizes, every W dtype, bias; bf16 W takes X rounded to bf16),
// bitwise batch invariance across M, row position, thread count and the decode / large-M paths, distinct bits for
// distinct splitK, AVX2 == AVX-512 == AVX512-BF16, boundary errors, and the event loop staying live during a long
// GEMM.
import { afterAll, describe, expect, it } from "vitest";
import { loadAddon } from "../../ts/native/loadAddon.js";
import { runPerSimd } from "../helpers/childAddon.js";
import type { DType, NativeTensor } from "../../ts/native/addonTypes.js";
import { makeRng, randomF32, refGemm, roundBf16, worstViolation } from "./reference.js";
import { batchSlices, expectRowsBitsAloneAsInBatch } from "./quantGemmChecks.js";
import { bitsOf, blocksMismatch, disposeAll, stored, tensorOf } from "./tensors.js";

const addon = loadAddon();
afterAll(() => addon.setThreads(0));
const packedWSupported = addon.listDevices().cpu.simd === "avx512-bf16";
if (!packedWSupported)
  console.log("[gemm] packed W test skipped: this CPU has no AVX512-BF16 (packed W is used only there)");

async function gemm(
  x: NativeTensor,
  w: NativeTensor,
  bias: NativeTensor | undefined,
  splitK: number,
): Promise<Float32Array> {
  const y = addon.tensor("cpu", "f32", [x.shape[0], w.shape[0]]);
  await addon.ops.gemm({ x, w, bias, y, splitK });
  const out = y.readF32();
  y.dispose();
  return out;
}

describe("gemm (cpu)", () => {
  it("gemmBlocks stores the column blocks (q | k | v) of rows [row0, row0 + M) with gemm's bits", async () => {
    const rng = makeRng(5);
    const poison = 12345.5;
    for (const [M, N, K, cuts, rows, row0, splitK] of [
      [3, 24, 40, [12, 18], 7, 2, 1],
      [5, 20, 33, [8, 8], 5, 0, 2],
      [1, 9, 16, [0, 9], 4, 3, 1],
      [4, 10, 64, [4, 7], 4, 0, 3],
      [1, 9, 40, [3, 6], 1, 0, 2], // one row: the blocks are the plain output (one GEMM call on the CPU)
    ] as [number, number, number, [number, number], number, number, number][]) {
      const x = tensorOf(addon, "cpu", "f32", [M, K], randomF32(rng, M * K));
      const w = tensorOf(addon, "cpu", "bf16", [N, K], randomF32(rng, N * K));
      const bias = tensorOf(addon, "cpu", "f32", [N], randomF32(rng, N));
      const plain = await gemm(x, w, bias, splitK);
      const y = tensorOf(addon, "cpu", "f32", [rows * N], new Float32Array(rows * N).fill(poison));
      await addon.ops.gemmBlocks({ x, w, bias, y, splitK, cut1: cuts[0], cut2: cuts[1], rows, row0 });
      expect(
        blocksMismatch(plain, y.readF32(), M, N, cuts, rows, row0, poison),
        `M=${M} N=${N} cuts=${cuts} rows=${rows} row0=${row0}`,
      ).toBeUndefined();
      disposeAll(x, w, bias, y);
    }
    const x = tensorOf(addon, "cpu", "f32", [2, 8], randomF32(rng, 16)),
      w = tensorOf(addon, "cpu", "f32", [6, 8], randomF32(rng, 48));
    const y = addon.tensor("cpu", "f32", [12]);
    await expect(addon.ops.gemmBlocks({ x, w, y, cut1: 4, cut2: 3, rows: 2 })).rejects.toThrow(/cuts must satisfy/);
    await expect(addon.ops.gemmBlocks({ x, w, y, cut1: 2, cut2: 4, rows: 2, row0: 1 })).rejects.toThrow(
      /must lie in \[0, rows = 2\)/,
    );
    await expect(addon.ops.gemmBlocks({ x, w, y, cut1: 2, cut2: 4, rows: 3 })).rejects.toThrow(
      /y must hold rows \* N = 18/,
    );
    disposeAll(x, w, y);
  });

  it("matches the float64 reference on odd shapes, every W dtype, with and without bias", async () => {
    const rng = makeRng(1);
    const shapes: [number, number, number][] = [
      [1, 1, 1],
      [1, 7, 33],
      [3, 13, 100],
      [5, 64, 257],
      [17, 30, 130],
      [40, 50, 64],
      [70, 9, 515],
    ];
    for (const [M, N, K] of shapes)
      for (const wType of ["f32", "bf16", "f16"] as DType[])
        for (const splitK of [1, Math.min(K, 3)]) {
          const x = tensorOf(addon, "cpu", "f32", [M, K], randomF32(rng, M * K));
          const w = tensorOf(addon, "cpu", wType, [N, K], randomF32(rng, N * K));
          const bias =
            N % 2 ? tensorOf(addon, "cpu", wType === "f16" ? "f16" : "f32", [N], randomF32(rng, N)) : undefined;
          const got = await gemm(x, w, bias, splitK);
          // bf16 W: the kernels multiply X rounded to bf16 (cpu_gemm.h), so the reference does too
          const xRef = wType === "bf16" ? roundBf16(stored(x)) : stored(x);
          const ref = refGemm(xRef, stored(w), bias && stored(bias), M, N, K);
          // f32 accumulation over K terms of size <= 1: error grows ~ sqrt(K) * 2^-24 per term
          const bad = worstViolation(got, ref, 1e-5 * Math.sqrt(K), 1e-5);
          expect(bad, `M=${M} N=${N} K=${K} w=${wType} splitK=${splitK}`).toBeUndefined();
          disposeAll(x, w, bias);
        }
  });

  it("rounds X to bf16 for bf16 W: ties to even, subnormals to zero (vector and scalar paths alike)", async () => {
    // W = identity (bf16): y[m][n] = bf16(x[m][n]) exactly. K = 37: each row is converted 8 at a time, then 5 singly.
    const K = 37,
      M = 3;
    const ties = [1 + 2 ** -8, 1 + 3 * 2 ** -8, -(2 + 2 ** -7), 3 + 2 ** -7, 0.5 + 2 ** -10, 1 + 2 ** -8 + 2 ** -20];
    const specials = [1e-39, -1e-39, 2 ** -127, 1e-38, 2 ** -126, -0, 0, 65504.5, -3.0000002];
    const xs = new Float32Array(M * K);
    const rng = makeRng(9);
    for (let m = 0; m < M; m++)
      for (let k = 0; k < K; k++) {
        const pool = [...ties, ...specials];
        xs[m * K + k] =
          (k + m * 7) % 3 === 0 ? pool[(k + m) % pool.length] : (rng() * 2 - 1) * 10 ** Math.floor(rng() * 6 - 3);
      }
    const eye = new Float32Array(K * K);
    for (let k = 0; k < K; k++) eye[k * K + k] = 1;
    const x = tensorOf(addon, "cpu", "f32", [M, K], xs);
    const w = tensorOf(addon, "cpu", "bf16", [K, K], eye);
    const got = await gemm(x, w, undefined, 1);
    const want = roundBf16(xs).map((v) => (Math.abs(v) < 2 ** -126 ? 0 : v));
    for (let i = 0; i < M * K; i++) expect(got[i], `x = ${xs[i]}`).toBe(want[i] === 0 ? 0 : want[i]);
    expect(Array.from(roundBf16(Float32Array.of(1 + 2 ** -8, 1 + 3 * 2 ** -8)))).toEqual([1, 1 + 2 ** -6]);
    disposeAll(x, w);
  });

  it("gives every row the same bits alone or anywhere in a batch, for any thread count and path", async () => {
    const rng = makeRng(2);
    // M > 64: the batch takes the large-M path; sub-batches of up to 64 rows (32 on AVX2) the decode panels, which
    // feed K = 2100 to the kernels in chunks (edges at 704 and 1408) that the splitK partitions cross.
    const K = 2100,
      N = 37,
      M = 70;
    const xs = randomF32(rng, M * K);
    for (const wType of ["f32", "bf16"] as DType[]) {
      const w = tensorOf(addon, "cpu", wType, [N, K], randomF32(rng, N * K));
      const bias = tensorOf(addon, "cpu", "f32", [N], randomF32(rng, N));
      await expectRowsBitsAloneAsInBatch(
        addon,
        xs,
        [M, N, K],
        { splitKs: [1, 2, 5], threads: [1, 2], slices: batchSlices(M, true), what: `w=${wType} ` },
        (x, splitK) => gemm(x, w, bias, splitK),
      );
      disposeAll(w, bias);
    }
  });

  it.skipIf(!packedWSupported)(
    "gives row-major W's bits with W packed in panels (a loaded model's bf16 weights on an AVX512-BF16 CPU)",
    async () => {
      const rng = makeRng(5);
      // N not a multiple of the 6-row panel, K not of 32, splitK cutting groups, M = 1 / several m-tiles / > 64
      // (the large-M path unpacks its W blocks), one and two threads.
      for (const [M, N, K] of [
        [1, 37, 576],
        [1, 8, 100],
        [2, 13, 1536],
        [5, 50, 161],
        [17, 960, 64],
        [64, 21, 600],
        [70, 19, 300],
      ]) {
        const x = tensorOf(addon, "cpu", "f32", [M, K], randomF32(rng, M * K));
        const w = tensorOf(addon, "cpu", "bf16", [N, K], randomF32(rng, N * K));
        const bias = tensorOf(addon, "cpu", "f32", [N], randomF32(rng, N));
        for (const splitK of [1, 3]) {
          for (const threads of [1, 2]) {
            addon.setThreads(threads);
            const y = addon.tensor("cpu", "f32", [M, N]);
            await addon.ops.gemm({ x, w, bias, y, splitK, packW: 1 });
            expect(bitsOf(y.readF32()), `M=${M} N=${N} K=${K} splitK=${splitK} threads=${threads}`).toEqual(
              bitsOf(await gemm(x, w, bias, splitK)),
            );
            y.dispose();
          }
        }
        disposeAll(x, w, bias);
      }
      const y = addon.tensor("cpu", "f32", [1, 3]);
      const f32w = addon.tensor("cpu", "f32", [3, 8]);
      await expect(addon.ops.gemm({ x: addon.tensor("cpu", "f32", [1, 8]), w: f32w, y, packW: 1 })).rejects.toThrow(
        /gemm: packW needs a bf16 or i8 w on the CPU, got f32/,
      );
      disposeAll(y, f32w);
    },
  );

  it("gives different bits for different splitK on some inputs", async () => {
    const rng = makeRng(3);
    const M = 4,
      N = 64,
      K = 1000;
    const x = tensorOf(addon, "cpu", "f32", [M, K], randomF32(rng, M * K));
    const w = tensorOf(addon, "cpu", "f32", [N, K], randomF32(rng, N * K));
    const a = bitsOf(await gemm(x, w, undefined, 1));
    for (const splitK of [2, 3, 8]) expect(bitsOf(await gemm(x, w, undefined, splitK))).not.toEqual(a);
    disposeAll(x, w);
  });

  it("gives the same bits on the AVX2, AVX-512 and AVX512-BF16 paths", () => {
    // Child processes capped at AVX2 and at AVX-512 without the BF16 dot product (DELIBERATE_SIMD=avx2 / avx512)
    // compute the same GEMMs as the native one; on a CPU without AVX-512 (or without BF16) some of the runs take
    // the same path and the test still checks determinism across processes. The children load the addon the
    // parent does where DELIBERATE_ADDON_PATH names one (the sanitized build: scripts/asan/run.sh).
    const [forced, avx512, native] = runPerSimd(
      `
        for (const [M, N, K, wt, sk] of [[3, 20, 77, "f32", 1], [24, 13, 161, "bf16", 3], [5, 11, 64, "f16", 2], [40, 9, 1100, "bf16", 2], [1, 37, 576, "bf16", 1], [70, 50, 300, "bf16", 3], [130, 49, 64, "bf16", 1], [9, 31, 160, "f32", 1], [17, 25, 96, "f16", 1]]) {
          const x = addon.tensor("cpu", "f32", [M, K]); x.writeF32(Float32Array.from({ length: M * K }, r));
          const w = addon.tensor("cpu", wt, [N, K]); w.writeF32(Float32Array.from({ length: N * K }, r));
          const y = addon.tensor("cpu", "f32", [M, N]);
          await addon.ops.gemm({ x, w, y, splitK: sk });
          out.push(Buffer.from(y.read()).toString("base64"));
        }`,
      { seed: 7, centered: true, levels: ["avx2", "avx512", ""] },
    );
    expect(forced.simd).toBe("avx2");
    console.log(`[gemm] SIMD paths compared: avx2, ${avx512.simd}, ${native.simd}`);
    expect(avx512.out).toEqual(forced.out);
    expect(native.out).toEqual(forced.out);
  });

  it("rejects bad input with a clear Error", async () => {
    const x = addon.tensor("cpu", "f32", [2, 8]);
    const w = addon.tensor("cpu", "bf16", [3, 8]);
    const y = addon.tensor("cpu", "f32", [2, 3]);
    await expect(addon.ops.gemm({ x, w: addon.tensor("cpu", "f32", [3, 7]), y })).rejects.toThrow(
      /gemm: x is \[2,8\] f32 but w is \[3,7\] f32/,
    );
    await expect(addon.ops.gemm({ x, w, y: addon.tensor("cpu", "f32", [3, 3]) })).rejects.toThrow(/y must be \[2,3\]/);
    await expect(addon.ops.gemm({ x, w, y, splitK: 9 })).rejects.toThrow(/splitK 9 exceeds K = 8/);
    await expect(addon.ops.gemm({ x, w, y, bias: addon.tensor("cpu", "f16", [3]) })).rejects.toThrow(
      /bias must be f32 or w's dtype \(bf16\), got f16/,
    );
    await expect(addon.ops.gemm({ x: addon.tensor("cpu", "bf16", [2, 8]), w, y })).rejects.toThrow(
      /CPU backend takes x as f32/,
    );
    await expect(addon.ops.gemm({ x, w: addon.tensor("cpu", "i32", [3, 8]), y })).rejects.toThrow(
      /'w' must be f32, bf16, f16 or i8, got i32/,
    );
    w.dispose();
    await expect(addon.ops.gemm({ x, w, y })).rejects.toThrow(/tensor 'w' is disposed/);
    disposeAll(x, y);
  });

  it("keeps the event loop running while a large GEMM runs", async () => {
    addon.setThreads(0);
    const M = 512,
      N = 2048,
      K = 2048; // ~4 GFLOP: tens of milliseconds at least on two cores
    const x = tensorOf(addon, "cpu", "f32", [M, K], new Float32Array(M * K).fill(0.5));
    const w = addon.tensor("cpu", "f32", [N, K]);
    const y = addon.tensor("cpu", "f32", [M, N]);
    let ticks = 0;
    const timer = setInterval(() => ticks++, 1);
    // A GEMM that blocked the JS thread would settle before any timer callback could run.
    const ticksAtResolve = await addon.ops.gemm({ x, w, y }).then(() => ticks);
    clearInterval(timer);
    expect(ticksAtResolve).toBeGreaterThanOrEqual(2);
    disposeAll(x, w, y);
  });
});
