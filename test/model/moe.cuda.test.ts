// Qwen3-MoE on CUDA against the float64 reference: the forward suite (forwardSuite.ts) over bf16 MoE fixtures, the
// moe op's grouped GEMM tiles crossing experts and its combine included. Skipped, with the reason printed, where no
// GPU is usable.
import { describe, it } from "vitest";
import { cudaUnavailable } from "../kernels/cudaReference.js";
import { forwardSuite, type FixtureCase } from "./forwardSuite.js";
import { MOE_EXTRA } from "./moeFixture.js";

const CASES: FixtureCase[] = [
  { arch: "qwen3moe", dtype: "bf16", extra: MOE_EXTRA, what: "8 experts top-2, layer 0 dense" },
  // Wider: 16 experts, 4 per token, hidden 128 (more than one 64-column tile per GEMM, groups past 16 rows at prefill).
  {
    arch: "qwen3moe",
    dtype: "bf16",
    extra: {
      ...MOE_EXTRA,
      hidden: 128,
      heads: 4,
      kvHeads: 2,
      moe: { experts: 16, expertsPerToken: 4, intermediate: 96 },
    },
    what: "16 experts top-4, hidden 128",
  },
];

const skipReason = cudaUnavailable;
if (skipReason) describe("qwen3moe forward on cuda vs float64 reference", () => it.skip(skipReason, () => {}));
else
  forwardSuite({
    device: "cuda",
    cases: CASES,
    tolerance: () => 2e-2, // bf16 activations and KV, as forward.cuda.test.ts
    chunkedTolerance: 1e-2,
    prefillLengths: [1, 6, 23, 70],
    batchFixture: CASES[0],
  });
