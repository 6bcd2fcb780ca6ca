// Pre-quantized checkpoints on CUDA: the layout suite (quantizedSuite.ts) with bf16 activations (2e-2 relative L2
// of the logits against the float64 reference, as the int8 CUDA forward). Skipped, with the reason printed, where no
// GPU is usable.
import { afterAll, describe, it } from "vitest";
import { cudaUnavailable } from "../kernels/cudaReference.js";
import { cleanupFixtures } from "./fixtures.js";
import { quantizedCheckpointSuite } from "./quantizedSuite.js";

afterAll(cleanupFixtures);

if (cudaUnavailable) describe("pre-quantized checkpoints on cuda", () => it.skip(cudaUnavailable!, () => {}));
else quantizedCheckpointSuite("cuda", 2e-2);
