// The checks the CUDA quantized-GEMM tests (gemmInt8 / gemmInt4 / gemmFp8 .cuda.test.ts) repeat for each weight
// format, written once: bitwise batch invariance of a fixed splitK across M and row position, and gemmBlocks' q | k | v
// cuts against the plain GEMM. Tensors come from cudaReference.ts's tensor / poisoned (NaN outputs, so an element the
// kernel leaves unwritten fails), disposed by its disposeAll after each test.
import { expect } from "vitest";
import { addon, bitsEqual, poisoned, tensor } from "./cudaReference.js";
import { expectQkvBlocksOfPlain, type GemmWeight } from "./quantGemmChecks.js";

/** The row slices (first row, row count) the three CUDA tests cut from their 40-row batch: rows 0, 17, 5-20, the last 3. */
export const cudaBatchSlices = (M: number): number[][] => [
  [0, 1],
  [17, 1],
  [5, 16],
  [M - 3, 3],
];

/**
 * For each splitK: gemm of the whole bf16 batch xv [M, K], then of each slice (first row, row count) alone; asserts
 * the slice's output bits equal the batch's rows exactly (message `splitK=.. rows row+rows`).
 */
export async function expectCudaRowsBitsAloneAsInBatch(
  xv: Float32Array,
  [M, N, K]: [number, number, number],
  weight: GemmWeight,
  splitKs: number[],
  slices: number[][],
): Promise<void> {
  for (const splitK of splitKs) {
    const run = async (row: number, rows: number) => {
      const x = tensor("cuda", "bf16", [rows, K], xv.subarray(row * K, (row + rows) * K));
      const y = poisoned("cuda", "f32", [rows, N]);
      await addon.ops.gemm({ x, ...weight, y, splitK });
      return y.readF32();
    };
    const batch = await run(0, M);
    for (const [row, rows] of slices)
      expect(
        bitsEqual(await run(row, rows), batch.subarray(row * N, (row + rows) * N)),
        `splitK=${splitK} rows ${row}+${rows}`,
      ).toBe(true);
  }
}

/**
 * The plain gemm of x and weight (N = 24) under splitK 2, then gemmBlocks with cuts 12 and 18 over every row under the
 * same splitK; asserts expectQkvBlocksOfPlain (every block element exactly the plain value).
 */
export async function expectCudaGemmBlocksQkvBits(
  x: ReturnType<typeof tensor>,
  weight: GemmWeight,
  M: number,
  N: number,
): Promise<void> {
  const plain = poisoned("cuda", "f32", [M, N]);
  await addon.ops.gemm({ x, ...weight, y: plain, splitK: 2 });
  const y = poisoned("cuda", "f32", [M * N]);
  await addon.ops.gemmBlocks({ x, ...weight, y, splitK: 2, cut1: 12, cut2: 18, rows: M, row0: 0 });
  expectQkvBlocksOfPlain(y.readF32(), plain.readF32(), M, N);
}
