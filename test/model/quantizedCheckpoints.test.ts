// Pre-quantized Hugging Face checkpoints on the CPU (issue 47 part 1): the layout suite (quantizedSuite.ts) at the
// dense CPU forward's tolerance, and what only a checkpoint's own choices exercise (a projection left as float).
import { cp } from "node:fs/promises";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { ModelFormatError } from "../../ts/errors/index.js";
import { fp8ToF32 } from "../../ts/model/quantized/fp8.js";
import { quantizedLinears, readQuantizedLinear } from "../../ts/model/quantized/linear.js";
import { addonTakesGroupedWeights } from "../../ts/model/quantized/upload.js";
import { openModelFiles } from "../../ts/model/modelFiles.js";
import { expectedTensors } from "../../ts/model/weights.js";
import { openSafetensors } from "../../ts/model/safetensors.js";
import { writeSafetensors, type TensorToWrite } from "../../ts/model/safetensorsWriter.js";
import { loadModel } from "../../ts/model/model.js";
import { cleanupFixtures, tempDir } from "./fixtures.js";
import { FIXED, PAGE, runChunks } from "./forwardSuite.js";
import { quantizedCheckpointSuite, quantizedFixture } from "./quantizedSuite.js";
import { makeDequantizedTwin } from "../../scripts/fixture/quantizedFixture.js";

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

  it("loads a stack whose act-orders differ (q/k/v share one native weight) dequantized, and reports it", async () => {
    const f = await quantizedFixture({
      method: "gptq",
      bits: 4,
      groupSize: 32,
      descAct: true,
      sym: false,
      checkpointFormat: "gptq_v2",
    });
    // Give k_proj of layer 0 another (valid) act-order: its g_idx and qweight columns rotated by one group.
    const dir = await tempDir();
    await cp(f.dir, dir, { recursive: true });
    const ckpt = await openSafetensors(dir);
    const t = new Map<string, TensorToWrite>();
    for (const [name, info] of ckpt.tensors)
      t.set(name, { dtype: info.dtype, shape: info.shape, data: await ckpt.read(name) });
    await ckpt.close();
    const K = "model.layers.0.self_attn.k_proj";
    const g = new Int32Array((t.get(`${K}.g_idx`)!.data as Uint8Array).slice().buffer);
    t.set(`${K}.g_idx`, { dtype: "I32", shape: [g.length], data: g.map((x) => 1 - x) }); // groups 0 <-> 1 (K = 64)
    await writeSafetensors(join(dir, "model.safetensors"), t);
    const model = await loadModel(dir, { device, kvPages: 16, pageSize: PAGE });
    try {
      const formats = Object.fromEntries(model.weights.formats.map((x) => [x.format, x.tensors]));
      if (addonTakesGroupedWeights(model.native))
        expect(formats["gptq 4-bit g32 act-order dequantized to f32"]).toBe(3); // layer 0's q, k, v
      const [logits] = await runChunks(model, [1, 2, 3], [3], 0, FIXED);
      expect(logits.every(Number.isFinite)).toBe(true);
    } finally {
      model.dispose();
    }
  });
});

describe("FP8 checkpoints on the CPU", () => {
  it("holds the dense projections at ~1 byte a weight: about 1/4 of the f32-dequantized load", async () => {
    const f = await quantizedFixture({ method: "fp8", block: [128, 128], scaleDtype: "BF16" }, { hidden: 256 });
    const twin = await makeDequantizedTwin(f, await tempDir("deliberate-dequantized-"));
    const model = await loadModel(f.dir, { device, kvPages: 16, pageSize: PAGE });
    const dense = await loadModel(twin, { device, kvPages: 16, pageSize: PAGE });
    try {
      if (!addonTakesGroupedWeights(model.native)) return;
      const e4m3 = model.weights.formats.find((x) => x.format === "fp8 e4m3 128x128 blocks as e4m3 g128")!;
      expect(e4m3.tensors).toBe(f.references.size);
      // the same non-projection tensors in both: the twin's projections are its total less them
      const fp8Total = (model.native.info as { weightBytes: number }).weightBytes;
      const f32Total = (dense.native.info as { weightBytes: number }).weightBytes;
      const others = fp8Total - e4m3.bytes;
      const ratio = e4m3.bytes / (f32Total - others);
      // codes (1 byte) + an f32 scale per row and 128 columns: (1 + 4 / 128) / 4
      expect(ratio).toBeCloseTo((1 + 4 / 128) / 4, 6);
      expect(model.native.info.linearFormat).toBe("e4m3 g128");
      expect(model.weights.warnings).toEqual([]);
    } finally {
      model.dispose();
      dense.dispose();
    }
  });

  it("expands k-blocks wider than the group to each group's block scale ([64, 96] -> g32, [48, 256] -> g128)", async () => {
    // the suite's layouts have G = bk (128 x 128, 32 x 32), where a group index is its block's: here a k-block holds
    // 3 groups of 32 (96) or covers K = 192 with room to spare (256), and row blocks end inside N
    for (const [block, G] of [
      [[64, 96], 32],
      [[48, 256], 128],
    ] as [[number, number], number][]) {
      const f = await quantizedFixture({ method: "fp8", block, scaleDtype: "F32" }, { hidden: 192 });
      const files = await openModelFiles(f.dir);
      try {
        const quantized = quantizedLinears(files.config.quantization, expectedTensors(files.config), files.checkpoint);
        expect(quantized.size).toBe(f.references.size);
        for (const [name, ql] of quantized) {
          const read = await readQuantizedLinear(ql, files.checkpoint);
          if (read.kind !== "fp8") throw new Error(`${name}: expected e4m3 codes`);
          expect(read.weight.groupSize, name).toBe(G);
          expect(fp8ToF32(read.weight), `${name} [${block}]`).toEqual(Float32Array.from(f.references.get(name)!.dense));
        }
      } finally {
        await files.checkpoint.close();
      }
      const model = await loadModel(f.dir, { device, kvPages: 16, pageSize: PAGE });
      try {
        if (addonTakesGroupedWeights(model.native)) expect(model.native.info.linearFormat).toBe(`e4m3 g${G}`);
      } finally {
        model.dispose();
      }
    }
  });

  it("refuses a NaN code (0x7f / 0xff) with a ModelFormatError naming the tensor and the position", async () => {
    const f = await quantizedFixture({ method: "fp8", block: [128, 128], scaleDtype: "BF16" });
    const dir = await tempDir();
    await cp(f.dir, dir, { recursive: true });
    const ckpt = await openSafetensors(dir);
    const t = new Map<string, TensorToWrite>();
    for (const [name, info] of ckpt.tensors)
      t.set(name, { dtype: info.dtype, shape: info.shape, data: (await ckpt.read(name)).slice() });
    await ckpt.close();
    const W = "model.layers.1.mlp.down_proj.weight";
    const w = t.get(W)!;
    (w.data as Uint8Array)[w.shape[1] * 2 + 5] = 0xff;
    await writeSafetensors(join(dir, "model.safetensors"), t);
    const err = await loadModel(dir, { device, kvPages: 16, pageSize: PAGE }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ModelFormatError);
    expect((err as ModelFormatError).field).toBe(W);
    expect((err as Error).message).toMatch(
      /tensor 'model\.layers\.1\.mlp\.down_proj\.weight' holds the e4m3 NaN code 0xff at \[2, 5\]/,
    );
  });
});
