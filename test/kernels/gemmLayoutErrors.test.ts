// The gemm op's test-only layout fields at its boundary: packW (a packed copy of a bf16 or i8 w) and wPanel (a 4-bit
// or e4m3 w's scales by panel of 8 rows) refuse every value and weight they do not apply to with a named error (a
// rejected promise, never an abort), before any work.
import { afterAll, describe, expect, it } from "vitest";
import { loadAddon } from "../../ts/native/loadAddon.js";
import { groupedTensors, randomGrouped } from "./int4Reference.js";
import { fp8Tensors, randomFp8 } from "./fp8Reference.js";
import { makeRng, randomF32 } from "./reference.js";
import { disposeWeight } from "./quantGemmChecks.js";
import { disposeAll, tensorOf } from "./tensors.js";

const addon = loadAddon();
const M = 2,
  N = 9,
  K = 64;
const rng = makeRng(5);
const x = tensorOf(addon, "cpu", "f32", [M, K], randomF32(rng, M * K));
const y = addon.tensor("cpu", "f32", [M, N]);
const int4 = groupedTensors(addon, "cpu", randomGrouped(rng, N, K, { bits: 4, groupSize: 32, asymmetric: true }));
const int8g = groupedTensors(addon, "cpu", randomGrouped(rng, N, K, { bits: 8, groupSize: 32, asymmetric: false }));
const fp8 = fp8Tensors(addon, "cpu", randomFp8(rng, N, K, 32));
const f16 = { w: tensorOf(addon, "cpu", "f16", [N, K], randomF32(rng, N * K)) };
const i8 = {
  w: tensorOf(
    addon,
    "cpu",
    "i8",
    [N, K],
    Float32Array.from({ length: N * K }, () => Math.round(rng() * 254 - 127)),
  ),
  wScale: tensorOf(addon, "cpu", "f32", [N], new Float32Array(N).fill(0.01)),
};
afterAll(() => {
  disposeAll(x, y);
  for (const w of [int4, int8g, fp8, f16, i8]) disposeWeight(w);
});

describe("gemm op: packW and wPanel refusals", () => {
  it("refuses a wPanel other than 0 or 8, or for a weight without scales by group", async () => {
    const panelRule = /gemm: wPanel must be 8, for a 4-bit or e4m3 w/;
    for (const wPanel of [-1, 9, 16, 0.5, "8", true])
      await expect(
        addon.ops.gemm({ x, ...int4, y, wPanel: wPanel as never }),
        `wPanel ${String(wPanel)}`,
      ).rejects.toThrow(/gemm: 'wPanel' must be an integer in \[0, 8\]/);
    for (const wPanel of [1, 4, 7])
      await expect(addon.ops.gemm({ x, ...int4, y, wPanel: wPanel as never })).rejects.toThrow(panelRule);
    await expect(addon.ops.gemm({ x, ...int4, wByGroup: 1, y, wPanel: 8 })).rejects.toThrow(panelRule);
    await expect(addon.ops.gemm({ x, ...int8g, y, wPanel: 8 })).rejects.toThrow(panelRule);
    await expect(addon.ops.gemm({ x, ...f16, y, wPanel: 8 })).rejects.toThrow(panelRule);
    await expect(addon.ops.gemm({ x, ...i8, y, wPanel: 8 })).rejects.toThrow(panelRule);
    // and the ones it applies to run
    await addon.ops.gemm({ x, ...int4, y, wPanel: 8 });
    await addon.ops.gemm({ x, ...fp8, y, wPanel: 8 });
  });

  it("refuses a packW other than 0 or 1, or for a weight other than bf16 or i8", async () => {
    for (const packW of [2, -1, 0.5, "1"])
      await expect(addon.ops.gemm({ x, ...i8, y, packW: packW as never })).rejects.toThrow(
        /gemm: 'packW' must be an integer in \[0, 1\]/,
      );
    for (const w of [f16, int4, int8g, fp8])
      await expect(addon.ops.gemm({ x, ...w, y, packW: 1 })).rejects.toThrow(
        /gemm: packW needs a bf16 or i8 w on the CPU/,
      );
  });
});
