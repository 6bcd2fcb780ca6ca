// Pre-quantized Hugging Face checkpoints on the CPU (issue 47 part 1): the layout suite (quantizedSuite.ts) at the
// dense CPU forward's tolerance, and what only a checkpoint's own choices exercise (a projection left as float).
import { afterAll, describe, expect, it } from "vitest";
import { loadModel } from "../../ts/model/model.js";
import { cleanupFixtures } from "./fixtures.js";
import { FIXED, PAGE, runChunks } from "./forwardSuite.js";
import { quantizedCheckpointSuite, quantizedFixture } from "./quantizedSuite.js";

const device = "cpu";
afterAll(cleanupFixtures);

// f32 activations: dequantized f32 weights, or the grouped kernels' exact products, at the dense forward's 1e-4.
quantizedCheckpointSuite(device, 1e-4);

describe("checkpoint layout details", () => {
  it("keeps a projection the checkpoint stores as a float weight (modules_to_not_convert / ignore)", async () => {
    const keep = "model.layers.1.self_attn.o_proj.weight";
    const f = await quantizedFixture({ method: "awq", groupSize: 32 }, { keepFloat: (n: string) => n === keep });
    expect(f.references.has(keep)).toBe(false);
    const model = await loadModel(f.dir, { device, kvPages: 16, pageSize: PAGE });
    try {
      const [logits] = await runChunks(model, [1, 2, 3], [3], 0, FIXED);
      expect(logits.every(Number.isFinite)).toBe(true);
      expect(model.weights.formats.find((x) => x.format === "f32")?.tensors).toBeGreaterThan(0);
    } finally {
      model.dispose();
    }
  });

  it("with loadModel's quantize, re-quantizes the projections and says so", async () => {
    const f = await quantizedFixture({ method: "compressed-tensors", bits: 8, groupSize: null, symmetric: true });
    const model = await loadModel(f.dir, { device, kvPages: 16, pageSize: PAGE, quantize: "int8" });
    try {
      const [logits] = await runChunks(model, [1, 2, 3], [3], 0, FIXED);
      expect(logits.every(Number.isFinite)).toBe(true);
      expect(model.weights.formats.map((x) => x.format)).toContain(
        "compressed-tensors 8-bit per channel dequantized, then int8 (quantized at load)",
      );
      expect(model.weights.warnings.join("\n")).toMatch(/dequantized and quantized again at load \(quantize: "int8"\)/);
    } finally {
      model.dispose();
    }
  });
});
