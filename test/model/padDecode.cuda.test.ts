// Decode steps padded to batch-size buckets on CUDA with bf16 weights: the tensor-core GEMM tiles, split-K finished
// in the GEMM and split-KV merged in the decode kernel (the test forces splitK 2, kvSplits 2), CUDA graphs replaying
// padded steps. Skipped, with the reason printed, without a usable CUDA device.
import { describe, it } from "vitest";
import { cudaUnavailable } from "../kernels/cudaReference.js";
import { padDecodeSuite } from "./padDecodeSuite.js";

const skipReason = cudaUnavailable;
if (skipReason) describe("decode steps padded to a batch-size bucket (cuda)", () => it.skip(skipReason, () => {}));
else padDecodeSuite("cuda", "bf16");
