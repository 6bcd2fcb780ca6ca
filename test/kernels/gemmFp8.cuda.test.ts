// CUDA GEMM with FP8 e4m3 weights (wFormat "e4m3": the W8A16-style kernel of cuda/gemm_int4.cu): the float64
// reference of the dequantized weights (every finite code, subnormals, -0, each also exactly; K not a multiple of 128
// or 4) with bf16 and f32 activations, split-K and bias; bitwise batch invariance of a fixed splitK across M and row
// position; gemmBlocks' cuts. Written without a GPU: the kernel has never run until scripts/device/check.sh runs this file on a lent one.
// Skips, saying why, where no CUDA device is usable.
import { afterEach, describe, expect, it } from "vitest";
import type { DType } from "../../ts/native/addonTypes.js";
import { E4M3_VALUES } from "../../ts/model/quantized/fp8.js";
import { dequantizeFp8, fp8Tensors, randomFp8 } from "./fp8Reference.js";
import { refGemm } from "./reference.js";
import { addon, cudaUnavailable, disposeAll, poisoned, rand, randn, relL2, roundTo, tensor } from "./cudaReference.js";
import {
  cudaBatchSlices,
  expectCudaGemmBlocksQkvBits,
  expectCudaRowsBitsAloneAsInBatch,
} from "./quantGemmCudaChecks.js";

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

describe.skipIf(!!cudaUnavailable)("gemm with FP8 e4m3 weights (cuda)", () => {
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

  it("decodes each of the 254 finite codes exactly (decode and prefill, bf16 and f32 x)", async () => {
    // relL2 above cannot see a subnormal decoded wrong (~1e-7 of the output): row n holds finite code n alone, at
    // column (37 n) % K (every lane, unit and group, the partial last group included), x row m = 2^-m, so
    // y[m, n] = round(e4m3(code) * 2^-m * scale): one rounding of an exact product, the other lanes adding +0
    const codes = Array.from({ length: 256 }, (_, c) => c).filter((c) => (c & 0x7f) !== 0x7f);
    const N = codes.length;
    for (const [M, K, G, splitK] of [
      [1, 100, 32, 1],
      [12, 100, 32, 3],
      [1, 300, 128, 2],
      [9, 300, 128, 1],
    ])
      for (const xt of ["bf16", "f32"] as DType[]) {
        const ng = Math.ceil(K / G);
        const q = new Uint8Array(N * K);
        codes.forEach((c, n) => (q[n * K + ((37 * n) % K)] = c));
        const scales = Float32Array.from({ length: N * ng }, () => (rand() < 0.5 ? -1 : 1) * (0.5 + 1.5 * rand()));
        const x = tensor(
          "cuda",
          xt,
          [M, K],
          Float32Array.from({ length: M * K }, (_, i) => 2 ** -Math.floor(i / K)),
        );
        const y = poisoned("cuda", "f32", [M, N]);
        await addon.ops.gemm({ x, ...fp8({ shape: [N, K], groupSize: G, q, scales }), y, splitK });
        const want = new Float32Array(M * N);
        for (let m = 0; m < M; m++)
          codes.forEach((c, n) => {
            want[m * N + n] = E4M3_VALUES[c] * 2 ** -m * scales[n * ng + Math.floor(((37 * n) % K) / G)] + 0;
          });
        expect(Array.from(y.readF32()), `M=${M} K=${K} G=${G} x=${xt}`).toEqual(Array.from(want));
      }
  });

  it("gives every row the same bits alone or in a batch under a fixed splitK", async () => {
    const M = 40,
      N = 50,
      K = 777;
    const xv = roundTo(randn(M * K), "bf16");
    const g = fp8(randomFp8(rand, N, K, 128));
    await expectCudaRowsBitsAloneAsInBatch(xv, [M, N, K], g, [1, 3], cudaBatchSlices(M));
  });

  it("gemmBlocks writes the plain GEMM's bits in blocks (the fused q | k | v projection)", async () => {
    const M = 3,
      N = 24,
      K = 200;
    const xv = roundTo(randn(M * K), "bf16");
    const g = fp8(randomFp8(rand, N, K, 128));
    const x = tensor("cuda", "bf16", [M, K], xv);
    await expectCudaGemmBlocksQkvBits(x, g, M, N);
  });
});
