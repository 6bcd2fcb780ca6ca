// maskLogits on CUDA against the plain rule (maskLogitsSuite.ts), and bitwise against the CPU kernel on the same
// input. Skipped, with the reason printed, without a usable CUDA device.
import { afterEach, describe, expect, it } from "vitest";
import { refMaskLogits } from "./reference.js";
import { addon, cudaUnavailable, disposeAll, rand, randn, tensor } from "./cudaReference.js";
import { bitsOf } from "./tensors.js";
import { maskLogitsSuite } from "./maskLogitsSuite.js";

afterEach(disposeAll);

const skipReason = cudaUnavailable;
if (skipReason) describe("maskLogits (cuda)", () => it.skip(skipReason, () => {}));
else {
  maskLogitsSuite("cuda", 4444);
  describe("maskLogits (cuda) against the CPU kernel", () => {
    it("gives the CPU kernel's bits on a 152k vocabulary (19 blocks a row)", async () => {
      const V = 151936,
        W = V / 32,
        B = 5,
        R = 3;
      const logits = randn(B * V, 8);
      const mask = Int32Array.from({ length: R * W }, () => (rand() < 0.5 ? -1 : (rand() * 2 ** 32) | 0));
      const rowOf = [1, -1, 0, 2, 1];
      const run = async (device: "cpu" | "cuda") => {
        const x = tensor(device, "f32", [B, V], logits);
        await addon.ops.maskLogits({
          logits: x,
          mask: tensor(device, "i32", [R, W], mask),
          rowOf: tensor(device, "i32", [B], rowOf),
        });
        return x.readF32();
      };
      const [gpu, cpu] = [await run("cuda"), await run("cpu")];
      expect(bitsOf(gpu)).toEqual(bitsOf(cpu));
      expect(bitsOf(gpu)).toEqual(bitsOf(refMaskLogits(logits, V, mask, rowOf)));
    });
  });
}
