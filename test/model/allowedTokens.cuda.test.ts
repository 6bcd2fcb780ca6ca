// Constrained decoding (allowedTokens) in the CUDA forward, bf16 fixture (masks uploaded with the step's metadata,
// CUDA graphs replaying masked steps): allowedTokensSuite.ts. Skipped, with the reason printed, without a usable
// CUDA device.
import { describe, it } from "vitest";
import { cudaUnavailable } from "../kernels/cudaReference.js";
import { allowedTokensSuite } from "./allowedTokensSuite.js";

const skipReason = cudaUnavailable;
if (skipReason)
  describe("allowedTokens: constrained decoding in the forward (cuda)", () => it.skip(skipReason, () => {}));
else allowedTokensSuite("cuda", "bf16");
