// Pre-quantized Hugging Face checkpoints (issue 47 part 1): a tiny model written in each exact layout (GPTQ v1 / v2
// 4- and 8-bit with act-order g_idx, AWQ GEMM, compressed-tensors pack-quantized W4A16 / W8A16, FP8 with 128 x 128
// block scales) from known f32 weights quantized in TS (scripts/fixture/quantizedFixture.ts). Each loaded projection
// equals the fixture's reference bit for bit (q, scales, zeros, perm; FP8: the f32 of e4m3 * scale); a forward of the
// loaded model equals the float64 reference of the dequantized model and the f32 forward of that model; generate
// runs end to end; the load log reports the formats; bad tensors and unsupported fields are refused by name.
import { mkdir } from "node:fs/promises";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import {
  makeDequantizedTwin,
  makeQuantizedFixture,
  type QuantFixtureScheme,
  type QuantizedFixture,
} from "../../scripts/fixture/quantizedFixture.js";
import { generate } from "../../ts/engine/generate.js";
import { loadModel } from "../../ts/model/model.js";
import { openModelFiles } from "../../ts/model/modelFiles.js";
import { dequantizeToInputOrder } from "../../ts/model/quantFormat.js";
import { quantizedLinears, readQuantizedLinear } from "../../ts/model/quantized/linear.js";
import { addonTakesGroupedWeights } from "../../ts/model/quantized/upload.js";
import { expectedTensors } from "../../ts/model/weights.js";
import { cleanupFixtures, tempDir } from "./fixtures.js";
import { randomTokens, relL2 } from "./fixtureCache.js";
import { FIXED, PAGE, runChunks } from "./forwardSuite.js";
import { ReferenceModel } from "./reference.js";

const device = (process.env.DELIBERATE_TEST_DEVICE ?? "cpu") as "cpu" | "cuda";
// CPU: dequantized f32 weights (or the grouped kernels' exact products) at f32 activations, as the dense forward.
const TOLERANCE = device === "cpu" ? 1e-4 : 2e-2;

afterAll(cleanupFixtures);

async function quantizedFixture(quant: QuantFixtureScheme, extra: object = {}): Promise<QuantizedFixture> {
  const out = await tempDir(`deliberate-${quant.method}-`);
  return makeQuantizedFixture({ arch: "llama", out, quant, ...extra });
}

const LAYOUTS: { what: string; quant: QuantFixtureScheme; extra?: object }[] = [
  {
    what: "GPTQ v1 4-bit g32 symmetric",
    quant: { method: "gptq", bits: 4, groupSize: 32, descAct: false, sym: true, checkpointFormat: "gptq" },
  },
  {
    what: "GPTQ v1 4-bit g32 asymmetric, act-order (qwen2: q/k/v biases)",
    quant: { method: "gptq", bits: 4, groupSize: 32, descAct: true, sym: false, checkpointFormat: "gptq" },
    extra: { arch: "qwen2" },
  },
  {
    what: "GPTQ v2 8-bit g64 asymmetric, act-order",
    quant: { method: "gptq", bits: 8, groupSize: 64, descAct: true, sym: false, checkpointFormat: "gptq_v2" },
  },
  {
    what: "GPTQ v2 4-bit per channel (group_size -1)",
    quant: { method: "gptq", bits: 4, groupSize: -1, descAct: false, sym: false, checkpointFormat: "gptq_v2" },
  },
  { what: "AWQ GEMM 4-bit g32", quant: { method: "awq", groupSize: 32 } },
  {
    what: "compressed-tensors W4A16 g32 symmetric (qwen3)",
    quant: { method: "compressed-tensors", bits: 4, groupSize: 32, symmetric: true },
    extra: { arch: "qwen3" },
  },
  {
    what: "compressed-tensors W4A16 g64 asymmetric, actorder group",
    quant: { method: "compressed-tensors", bits: 4, groupSize: 64, symmetric: false, actorder: true },
  },
  {
    what: "compressed-tensors W8A16 per channel",
    quant: { method: "compressed-tensors", bits: 8, groupSize: null, symmetric: true },
  },
  {
    what: "FP8 e4m3 128x128 blocks, bf16 scales (hidden 192: partial blocks)",
    quant: { method: "fp8", block: [128, 128], scaleDtype: "BF16" },
    extra: { hidden: 192, heads: 4, intermediate: 320 },
  },
  {
    what: "FP8 e4m3 32x32 blocks, f32 scales (qwen3-moe: experts quantized)",
    quant: { method: "fp8", block: [32, 32], scaleDtype: "F32" },
    extra: { arch: "qwen3moe", moe: { experts: 4, expertsPerToken: 2, intermediate: 32, mlpOnlyLayers: [0] } },
  },
];

for (const layout of LAYOUTS)
  describe(`${layout.what} on ${device}`, () => {
    let fixture: QuantizedFixture;

    it("loads every projection equal to the fixture's reference, bit for bit", async () => {
      fixture = await quantizedFixture(layout.quant, layout.extra);
      const files = await openModelFiles(fixture.dir); // checks every layout tensor against config.json
      try {
        const quantized = quantizedLinears(files.config.quantization, expectedTensors(files.config), files.checkpoint);
        expect([...quantized.keys()].sort()).toEqual([...fixture.references.keys()].sort());
        for (const [name, ql] of quantized) {
          const ref = fixture.references.get(name)!;
          const read = await readQuantizedLinear(ql, files.checkpoint);
          if (read.kind === "grouped") {
            const w = read.weight;
            const g = ref.grouped!;
            expect([w.bits, w.groupSize, w.shape], name).toEqual([g.bits, g.groupSize, g.shape]);
            expect(Buffer.compare(w.q, g.q), `${name} q`).toBe(0);
            expect(Buffer.compare(w.zeros, g.zeros), `${name} zeros`).toBe(0);
            expect(w.scales, `${name} scales`).toEqual(g.scales);
            expect(w.perm ? [...w.perm] : null, `${name} perm`).toEqual(g.perm ? [...g.perm] : null);
            expect(dequantizeToInputOrder(w), `${name} dequantized`).toEqual(ref.dense);
          } else {
            expect(read.values, `${name} f32`).toEqual(Float32Array.from(ref.dense));
          }
        }
      } finally {
        await files.checkpoint.close();
      }
    });

    it("forwards as the dequantized model: the float64 reference, the f32 model's logits; generate runs", async () => {
      const twin = await makeDequantizedTwin(fixture, await tempDir("deliberate-dequantized-"));
      const ref = await ReferenceModel.load(twin);
      const model = await loadModel(fixture.dir, { device, kvPages: 64, pageSize: PAGE });
      const dense = await loadModel(twin, { device, kvPages: 64, pageSize: PAGE });
      try {
        const tokens = randomTokens(10, model.config.vocabSize, 3);
        const want = ref.logits(tokens);
        const got = await runChunks(model, tokens, [7, 1, 1, 1], 0);
        got.forEach((g, i) => expect(relL2(g, want[6 + i]), `step ${i}`).toBeLessThan(TOLERANCE));
        const f32 = await runChunks(dense, tokens, [7, 1, 1, 1], 0);
        // Without native grouped weights the projections are the twin's f32 weights: the same bits.
        const grouped = model.weights.formats.some((f) => f.format.includes("as grouped"));
        f32.forEach((d, i) => (grouped ? expect(relL2(got[i], d)).toBeLessThan(TOLERANCE) : expect(got[i]).toEqual(d)));
        const r = await generate(model, { tokens: tokens.slice(0, 5) }, { maxTokens: 6, temperature: 0 });
        expect(r.tokens.length).toBeGreaterThan(0);
      } finally {
        model.dispose();
        dense.dispose();
      }
    });

    it("reports the formats and resident bytes, and names the cost of dequantizing", async () => {
      const model = await loadModel(fixture.dir, { device, kvPages: 16, pageSize: PAGE });
      try {
        const w = model.weights;
        expect(w.scheme).toMatch(
          layout.quant.method === "compressed-tensors" ? /^compressed-tensors/ : layout.quant.method,
        );
        expect(w.bytes).toBe(w.formats.reduce((a, f) => a + f.bytes, 0));
        const quantizedFormats = w.formats.filter((f) => f.format.startsWith(w.scheme!));
        expect(quantizedFormats.reduce((a, f) => a + f.tensors, 0)).toBe(fixture.references.size);
        // Integer layouts go to the native grouped weights where the addon has them (dense projections).
        if (addonTakesGroupedWeights(model.native) && layout.quant.method !== "fp8")
          expect(w.formats.map((f) => f.format)).toContain(
            `${w.scheme} as grouped int${w.scheme!.includes("8-bit") ? 8 : 4}`,
          );
        if (layout.quant.method === "fp8")
          expect(w.warnings.join("\n")).toMatch(/dequantized to f32 at load \(deliberate has no FP8 kernel/);
        if (w.formats.some((f) => f.format.endsWith("dequantized to f32")))
          expect(w.warnings.join("\n")).toMatch(/resident instead of the checkpoint's .* \(\d+\.\dx\)/);
      } finally {
        model.dispose();
      }
    });
  });

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
});
