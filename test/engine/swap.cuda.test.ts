// KV offloading on CUDA (page-locked staging): the swap suite of swap.test.ts on the GPU. Skipped, with the reason
// printed, without a usable CUDA device.
import { describe, it } from "vitest";
import { cudaUnavailable } from "../kernels/cudaReference.js";

const skipReason = cudaUnavailable;
if (skipReason) describe("KV pages to host memory and back (cuda)", () => it.skip(skipReason, () => {}));
else {
  process.env.SWAP_TEST_DEVICE = "cuda";
  await import("./swap.test.js");
}
