// The pre-quantized checkpoint suite both backends run (quantizedCheckpoints.test.ts on the CPU,
// quantizedCheckpoints.cuda.test.ts on a GPU): a tiny model written in each exact layout (GPTQ v1 / v2 4- and 8-bit
// with act-order g_idx, AWQ GEMM, compressed-tensors pack-quantized W4A16 / W8A16, FP8 with block scales) from known
// f32 weights quantized in TS (scripts/fixture/quantizedFixture.ts). Each loaded projection equals the fixture's
// reference bit for bit (q, scales, zeros, perm; FP8: the f32 of e4m3 * scale); a forward of the loaded model equals
// the float64 reference of the dequantized model and the forward of that model in f32; generate runs end to end; the
// load report names the formats, the resident bytes and the cost of dequantizing.
import { describe, expect, it } from "vitest";
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
import { fp8ToF32 } from "../../ts/model/quantized/fp8.js";
import { quantizedLinears, readQuantizedLinear } from "../../ts/model/quantized/linear.js";
import { addonTakesGroupedWeights, DENSE_PROJECTION } from "../../ts/model/quantized/upload.js";
import { describeModelWeights } from "../../ts/model/quantized/weightsReport.js";
import { expectedTensors } from "../../ts/model/weights.js";
import { tempDir } from "./fixtures.js";
import { randomTokens, relL2 } from "./fixtureCache.js";
import { PAGE, runChunks } from "./forwardSuite.js";
import { ReferenceModel } from "./reference.js";

export async function quantizedFixture(quant: QuantFixtureScheme, extra: object = {}): Promise<QuantizedFixture> {
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
    what: "GPTQ v2 4-bit g32 symmetric (qwen3-moe: experts dequantized beside grouped dense layers)",
    quant: { method: "gptq", bits: 4, groupSize: 32, descAct: false, sym: true, checkpointFormat: "gptq_v2" },
    extra: { arch: "qwen3moe", moe: { experts: 4, expertsPerToken: 2, intermediate: 32, mlpOnlyLayers: [0] } },
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

/** relL2 of the logits between bf16-rounded and f32 inputs to the 4-bit layers (the tiny fixtures: ~1.7e-3). */
const TWIN_BF16_TOLERANCE = 1e-2;

/**
 * Every layout on `device`: loaded bit for bit, forward against the float64 reference of the dequantized model
 * (`tolerance`: relative L2 of the logits) and the f32 twin, generate, the weights report.
 */
export function quantizedCheckpointSuite(device: "cpu" | "cuda", tolerance: number): void {
  for (const layout of LAYOUTS)
    describe(`${layout.what} on ${device}`, () => {
      let fixture: QuantizedFixture;

      it("loads every projection equal to the fixture's reference, bit for bit", async () => {
        fixture = await quantizedFixture(layout.quant, layout.extra);
        const files = await openModelFiles(fixture.dir); // checks every layout tensor against config.json
        try {
          const quantized = quantizedLinears(
            files.config.quantization,
            expectedTensors(files.config),
            files.checkpoint,
          );
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
            } else if (read.kind === "fp8") {
              // the checkpoint's codes as stored, the block scales per row and group: dequantized, the reference
              expect(fp8ToF32(read.weight), `${name} e4m3`).toEqual(Float32Array.from(ref.dense));
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
        // The CPU's 4-bit and FP8 kernels multiply activations rounded to bf16 (cpp/cpu/cpu_gemm_quant.h): the
        // reference rounds the inputs of those layers (the dense projections held grouped or as e4m3; experts are
        // dequantized to f32) too, so the bound stays the f32 layouts' (measured ~1e-7). An activation within f32 noise of a bf16 tie can
        // round the other way natively than in float64 (one ulp of one input: AWQ's fixture at token seed 3 had one
        // step at 8.6e-4): the tokens are drawn with a seed that has no such tie in any layout, rather than a bound
        // 30,000x the real error. The f32 twin (unrounded inputs) is as far as a bf16 model is from f32.
        const rounded =
          device === "cpu"
            ? [...fixture.references]
                .filter(
                  ([name, r]) =>
                    (r.grouped?.bits === 4 || layout.quant.method === "fp8") && DENSE_PROJECTION.test(name),
                )
                .map(([name]) => name)
            : [];
        const ref = await ReferenceModel.load(twin, { bf16InputsFor: rounded });
        const twinTolerance = rounded.length > 0 ? TWIN_BF16_TOLERANCE : tolerance;
        const model = await loadModel(fixture.dir, { device, kvPages: 64, pageSize: PAGE });
        const dense = await loadModel(twin, { device, kvPages: 64, pageSize: PAGE });
        try {
          const tokens = randomTokens(10, model.config.vocabSize, 5);
          const want = ref.logits(tokens);
          const got = await runChunks(model, tokens, [7, 1, 1, 1], 0);
          got.forEach((g, i) => expect(relL2(g, want[6 + i]), `step ${i}`).toBeLessThan(tolerance));
          const f32 = await runChunks(dense, tokens, [7, 1, 1, 1], 0);
          // Without native grouped weights the projections are the twin's f32 weights: the same bits.
          const grouped = model.weights.formats.some((f) => /as (grouped|e4m3)/.test(f.format));
          if (process.env.DELIBERATE_PRINT_TWIN)
            console.log(
              layout.what,
              f32.map((d, i) => relL2(got[i], d)),
            );
          f32.forEach((d, i) =>
            grouped
              ? expect(relL2(got[i], d), `step ${i} vs f32`).toBeLessThan(twinTolerance)
              : expect(got[i]).toEqual(d),
          );
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
          // The native model holds what the report says (info.weightBytes: its resident weight bytes).
          const info = model.native.info as { weightBytes?: number };
          if (info.weightBytes !== undefined) expect(w.bytes).toBe(info.weightBytes);
          // `deliberate devices --model` plans the same from the headers alone.
          expect(await describeModelWeights(fixture.dir, { device })).toEqual(w);
          const quantizedFormats = w.formats.filter((f) => f.format.startsWith(w.scheme!));
          expect(quantizedFormats.reduce((a, f) => a + f.tensors, 0)).toBe(fixture.references.size);
          // Integer layouts go to the native grouped weights where the addon has them (dense projections).
          if (addonTakesGroupedWeights(model.native) && layout.quant.method !== "fp8")
            expect(w.formats.map((f) => f.format)).toContain(
              `${w.scheme} as grouped int${w.scheme!.includes("8-bit") ? 8 : 4}`,
            );
          // FP8 stays e4m3 on the CPU (MoE experts dequantized); CUDA's kernel has not run on a GPU yet
          if (layout.quant.method === "fp8" && device === "cpu" && addonTakesGroupedWeights(model.native))
            expect(w.formats.map((f) => f.format)).toContain(
              `${w.scheme} as e4m3 g${Math.min(128, layout.quant.block[1])}`,
            );
          if (layout.quant.method === "fp8" && device === "cuda")
            expect(w.warnings.join("\n")).toMatch(
              /dequantized to f32 at load \(deliberate's CUDA FP8 kernel has not run/,
            );
          if (w.formats.some((f) => f.format.endsWith("dequantized to f32")))
            expect(w.warnings.join("\n")).toMatch(/resident instead of the checkpoint's .* \(\d+\.\dx\)/);
        } finally {
          model.dispose();
        }
      });
    });
}
