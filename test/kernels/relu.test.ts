// relu (Qwen2.5-Math-PRM's score head between score.0 and score.2) on each backend against float64 max(x, 0):
// exact in every dtype (no rounding happens), in place and out of place, NaN kept and -0 / negatives to +0, poisoned
// outputs fully written. The CUDA half skips (visibly) where no GPU is usable.
import { afterEach, describe, expect, it } from "vitest";
import type { DType } from "../../ts/native/addonTypes.js";
import { addon, cudaUnavailable, disposeAll, poisoned, randn, roundTo, tensor } from "./cudaReference.js";

afterEach(disposeAll);

function refRelu(x: Float32Array): Float64Array {
  return Float64Array.from(x, (v) => (Number.isNaN(v) ? NaN : Math.max(0, v)));
}

for (const device of ["cpu", "cuda"] as const) {
  describe.skipIf(device === "cuda" && cudaUnavailable !== undefined)(`relu (${device})`, () => {
    it.each<DType>(["f32", "bf16", "f16"])("%s: max(x, 0) exactly, NaN kept, in place too", async (dtype) => {
      const n = 70_007; // several threads' chunks on the CPU, a grid-stride tail on the GPU
      const x = roundTo(randn(n, 3), dtype);
      x[0] = -0;
      x[1] = NaN;
      x[2] = -Infinity;
      x[3] = Infinity;
      const want = refRelu(x);
      const out = poisoned(device, dtype, [7, 10_001]);
      await addon.ops.relu({ x: tensor(device, dtype, [7, 10_001], x), out });
      const got = out.readF32();
      for (let i = 0; i < n; i++)
        if (!(Object.is(got[i], want[i]) || (want[i] === 0 && got[i] === 0))) expect([i, got[i]]).toEqual([i, want[i]]);
      expect(Object.is(got[0], 0)).toBe(true); // -0 becomes +0 (as max(x, 0) in the score head)
      const inPlace = tensor(device, dtype, [n], x);
      await addon.ops.relu({ x: inPlace, out: inPlace });
      expect(Array.from(inPlace.readF32())).toEqual(Array.from(got));
    });

    it("names the field on a shape or dtype mismatch", async () => {
      await expect(
        addon.ops.relu({ x: tensor(device, "f32", [4], randn(4)), out: poisoned(device, "f32", [5]) }),
      ).rejects.toThrow(/relu/);
      await expect(
        addon.ops.relu({ x: tensor(device, "f32", [4], randn(4)), out: poisoned(device, "bf16", [4]) }),
      ).rejects.toThrow(/x and out must share one dtype/);
    });
  });
}
