// The mixture-of-experts op on CUDA against the float64 reference (moeSuite.ts), and against the CPU kernel on the
// same input with bf16 weights and activations (the routing equal, the outputs within bf16 rounding). Skipped, with
// the reason printed, without a usable CUDA device.
import { describe, expect, it } from "vitest";
import { cudaUnavailable } from "./cudaReference.js";
import { moeSuite, randomMoe, runMoe } from "./moeSuite.js";
import { makeRng } from "./reference.js";

const skipReason = cudaUnavailable;
if (skipReason) describe("moe (cuda)", () => it.skip(skipReason, () => {}));
else {
  moeSuite("cuda", 4646);
  describe("moe (cuda) against the CPU kernel", () => {
    it("routes a prefill-sized batch as the CPU does (groups of more than one 16-row tile)", async () => {
      const c = randomMoe(makeRng(7), 96, 128, 16, 96, 4, true);
      const cpu = await runMoe("cpu", c, { wDtype: "bf16" });
      const gpu = await runMoe("cuda", c, { wDtype: "bf16", xDtype: "bf16" });
      expect(Array.from(gpu.ids)).toEqual(Array.from(cpu.ids));
      let num = 0;
      let den = 0;
      for (let i = 0; i < cpu.out.length; i++) ((num += (gpu.out[i] - cpu.out[i]) ** 2), (den += cpu.out[i] ** 2));
      expect(Math.sqrt(num / den)).toBeLessThan(2e-2);
    });
  });
}
