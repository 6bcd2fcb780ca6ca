// The checks the CPU GEMM tests (gemm.test.ts and the int8 / grouped / FP8 weight tests) repeat for each weight
// format, written once: the op run into a NaN-poisoned y, the float64 reference over a list of shapes and splitK,
// bitwise batch invariance of every row across M, row position and thread count, gemmBlocks' q | k | v cuts against
// the plain GEMM, and AVX2 == the CPU's best SIMD path. Each helper asserts exactly what its name says, with the
// tolerances, shapes and labels its caller passes; the callers keep their shapes, seeds and splitK in view.
import { expect } from "vitest";
import type { Addon, NativeTensor } from "../../ts/native/addonTypes.js";
import { runPerSimd } from "../helpers/childAddon.js";
import { randomF32, refGemm, worstViolation } from "./reference.js";
import { bitsOf, disposeAll, stored, tensorOf } from "./tensors.js";

/** The gemm op's weight fields: w plus whatever its format takes (wScale; wBits, wScales, wZeros, wPerm; wFormat). */
export type GemmWeight = { w: NativeTensor } & Record<string, unknown>;

/** Disposes every tensor among a weight's fields (the numbers and strings are left). */
export function disposeWeight(weight: GemmWeight): void {
  for (const v of Object.values(weight))
    if (v && typeof v === "object" && typeof (v as NativeTensor).dispose === "function") (v as NativeTensor).dispose();
}

/**
 * y = gemm(x, weight) (+ bias) on the CPU under `splitK` (and any `extra` op fields), read back. y starts as NaN so an
 * element the op leaves unwritten fails every comparison against it.
 */
export async function gemmCpu(
  addon: Addon,
  x: NativeTensor,
  weight: GemmWeight,
  bias: NativeTensor | undefined,
  splitK: number,
  extra: object = {},
): Promise<Float32Array> {
  const N = weight.w.shape[0];
  const y = tensorOf(addon, "cpu", "f32", [x.shape[0], N], new Float32Array(x.shape[0] * N).fill(NaN));
  await addon.ops.gemm({ x, ...weight, bias, y, splitK, ...extra });
  const out = y.readF32();
  y.dispose();
  return out;
}

export interface ReferenceCase {
  M: number;
  N: number;
  K: number;
  splitK: number;
  /** The failure message's prefix naming the case. */
  label: string;
}

/**
 * For each case, in order: x = randomF32(rng, M * K), then the weight from `makeWeight` (which may draw from rng),
 * then a bias of randomF32(rng, N) when N is odd; asserts that gemmCpu's result lies within tol(K) + |ref| * eps of
 * refGemm(xRef(x as stored), weight's float64 dequantized values, bias) at every element (worstViolation is
 * undefined).
 */
export async function expectMatchesReferenceOnShapes<C extends ReferenceCase>(
  addon: Addon,
  rng: () => number,
  cases: C[],
  o: {
    /** The case's weight [N, K] (c carries any format parameter, e.g. the group size). */
    makeWeight: (N: number, K: number, c: C) => { weight: GemmWeight; ref: ArrayLike<number> };
    xRef: (x: Float32Array) => ArrayLike<number>;
    tol: (K: number) => number;
    eps: number;
  },
): Promise<void> {
  for (const c of cases) {
    const { M, N, K, splitK, label } = c;
    const x = tensorOf(addon, "cpu", "f32", [M, K], randomF32(rng, M * K));
    const { weight, ref: wRef } = o.makeWeight(N, K, c);
    const bias = N % 2 ? tensorOf(addon, "cpu", "f32", [N], randomF32(rng, N)) : undefined;
    const got = await gemmCpu(addon, x, weight, bias, splitK);
    const ref = refGemm(o.xRef(stored(x)), wRef, bias && stored(bias), M, N, K);
    const bad = worstViolation(got, ref, o.tol(K), o.eps);
    expect(bad, label).toBeUndefined();
    disposeAll(x, bias);
    disposeWeight(weight);
  }
}

/**
 * The row slices (first row, row count) that gemm.test, gemmInt8.test and gemmInt4.test cut from their M = 70 batch:
 * single rows at both ends and inside (decode), 8, 16 and 40-row sub-batches (tiles), and, with `with64`, a 64-row one
 * (the largest decode panel; the batch itself takes the large-M path).
 */
export function batchSlices(M: number, with64: boolean): number[][] {
  const slices = [
    [0, 1],
    [M - 1, 1],
    [13, 1],
    [20, 8],
    [3, 16],
    [29, 40],
  ];
  return with64 ? [...slices, [5, 64]] : slices;
}

/**
 * Bitwise batch invariance: for each splitK and thread count, runs the whole batch xs [M, K], then each slice
 * (first row, row count) alone, and asserts the slice's output bits equal the batch's rows exactly. `run` is the
 * caller's GEMM (weight, bias and all); the message reads `${what}splitK=.. threads=.. rows row+rows`.
 */
export async function expectRowsBitsAloneAsInBatch(
  addon: Addon,
  xs: Float32Array,
  [M, N, K]: [number, number, number],
  o: { splitKs: number[]; threads: number[]; slices: number[][]; what: string },
  run: (x: NativeTensor, splitK: number) => Promise<Float32Array>,
): Promise<void> {
  const x = tensorOf(addon, "cpu", "f32", [M, K], xs);
  for (const splitK of o.splitKs)
    for (const threads of o.threads) {
      addon.setThreads(threads);
      const batch = await run(x, splitK);
      for (const [row, rows] of o.slices) {
        const sub = tensorOf(addon, "cpu", "f32", [rows, K], xs.subarray(row * K, (row + rows) * K));
        const alone = await run(sub, splitK);
        expect(bitsOf(alone), `${o.what}splitK=${splitK} threads=${threads} rows ${row}+${rows}`).toEqual(
          bitsOf(batch, row * N, rows * N),
        );
        sub.dispose();
      }
    }
  x.dispose();
}

/**
 * The fused q | k | v cut of an N = 24 output: blocks [0, 12), [12, 18), [18, 24), block j stored as an (M, n_j)
 * matrix at M * c_j of `got`. Asserts every element of every block is exactly (Object.is) plain's [M, N] value.
 */
export function expectQkvBlocksOfPlain(got: ArrayLike<number>, plain: ArrayLike<number>, M: number, N: number): void {
  for (const [c, n] of [
    [0, 12],
    [12, 6],
    [18, 6],
  ])
    for (let m = 0; m < M; m++) for (let j = 0; j < n; j++) expect(got[M * c + m * n + j]).toBe(plain[m * N + c + j]);
}

/**
 * gemmBlocks of x and weight (N = 24) with cuts 12 and 18, splitK 2, every row, against gemmCpu's plain result under
 * the same splitK: asserts expectQkvBlocksOfPlain, and returns the plain result for further checks.
 */
export async function expectGemmBlocksQkvBits(
  addon: Addon,
  x: NativeTensor,
  weight: GemmWeight,
  M: number,
  N: number,
): Promise<Float32Array> {
  const y = addon.tensor("cpu", "f32", [M * N]);
  await addon.ops.gemmBlocks({ x, ...weight, y, splitK: 2, cut1: 12, cut2: 18, rows: M, row0: 0 });
  const plain = await gemmCpu(addon, x, weight, undefined, 2);
  expectQkvBlocksOfPlain(y.readF32(), plain, M, N);
  y.dispose();
  return plain;
}

/**
 * Runs `body` (runPerSimd's child script, which pushes base64 outputs to `out`) forced to AVX2 and on the CPU's best
 * path; asserts the first really ran AVX2 and that both give the same bytes. Logs which paths were compared.
 */
export function expectSameBitsOnAvx2AndNative(tag: string, body: string, o: { seed: number; centered: boolean }): void {
  const [avx2, native] = runPerSimd(body, { ...o, levels: ["avx2", ""] });
  expect(avx2.simd).toBe("avx2");
  console.log(`[${tag}] SIMD paths compared: avx2, ${native.simd}`);
  expect(native.out).toEqual(avx2.out);
}
