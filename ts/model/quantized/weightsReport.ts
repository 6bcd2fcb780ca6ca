// A model's weights as they sit in native memory: each format's tensors and resident bytes, decided from the
// checkpoint's headers and the load's options (and, after a load, what the upload did), with the warnings a user
// should see (a dequantized checkpoint's cost). Model.weights holds it; `deliberate devices --model DIR` prints it
// before anything is loaded (issue 47 part 4). Its bytes equal the native model's info.weightBytes.
import type { DeviceKind } from "../../native/addonTypes.js";
import { loadAddon } from "../../native/loadAddon.js";
import type { ModelConfig } from "../config.js";
import { DTYPE_BYTES, type SafetensorsDType } from "../dtype.js";
import type { NativeModelPlan } from "../loadWeights.js";
import { openModelFiles } from "../modelFiles.js";
import { groupedWeightBytes } from "../quantFormat.js";
import { expectedTensors } from "../weights.js";
import { quantizedLinears } from "./linear.js";
import { describeScheme } from "./quantConfig.js";
import { fp8GroupSize, fp8WeightBytes } from "./fp8.js";
import { addonTakesGroupedWeights, DENSE_PROJECTION, stackOf, takesFp8, takesGrouped } from "./upload.js";

/** The projections loadModel's quantize stores quantized at load (the dense layers'). */
const INT8_AT_LOAD = DENSE_PROJECTION;

/** One format's share of a model's weights. */
export interface WeightFormatBytes {
  /** "bf16", "f32 (norms, biases)", "int8 per row (quantized at load)", "gptq 4-bit g128 as grouped int4", ... */
  format: string;
  tensors: number;
  /** Bytes resident on the device in this format. */
  bytes: number;
}

export interface WeightsReport {
  /** The checkpoint's quantization ("gptq 4-bit g128") or null for float weights. */
  scheme: string | null;
  /** loadModel's quantize ("int8", "int4", "fp8"), or null where the weights load as stored. */
  quantizedAtLoad: string | null;
  formats: WeightFormatBytes[];
  /** Sum of formats' bytes. */
  bytes: number;
  /** Costs the load pays that a user should know of (dequantized layers), one sentence each. */
  warnings: string[];
}

export interface WeightsPlanOptions {
  device: DeviceKind;
  quantize?: NativeModelPlan["quantize"];
  /** quantize "int4"'s inputs per group (default 32). */
  quantizeGroupSize?: number;
  /** The addon takes grouped int4 / int8 weights (NativeModel.setQuantizedWeight). */
  nativeGrouped: boolean;
  /** After a load: the projections the upload dequantized beyond what the headers tell (QuantizedUploader). */
  dequantized?: ReadonlySet<string>;
}

/** The plan of every expected tensor's resident format, from the checked headers. */
export function planWeights(
  config: ModelConfig,
  checkpoint: { tensors: Map<string, { dtype: SafetensorsDType; shape: number[]; file: string }> },
  options: WeightsPlanOptions,
): WeightsReport {
  const expected = expectedTensors(config);
  const quantized = quantizedLinears(config.quantization, expected, checkpoint);
  const by = new Map<string, WeightFormatBytes>();
  const add = (format: string, bytes: number): void => {
    const e = by.get(format) ?? { format, tensors: 0, bytes: 0 };
    e.tensors++;
    e.bytes += bytes;
    by.set(format, e);
  };
  let dequantized = { tensors: 0, bytes: 0, stored: 0 };
  let requantized = 0;
  const seen = new Set<string>();
  for (const { name, shape } of expected) {
    if (seen.has(name)) continue; // a tied embedding is listed once
    seen.add(name);
    const count = shape.reduce((a, b) => a * b, 1);
    const ql = quantized.get(name);
    if (ql) {
      const [N, K] = ql.shape;
      const s = ql.scheme;
      const scheme = describeScheme(s);
      const storedBytes = ql.tensors.reduce((a, spec) => {
        const t = checkpoint.tensors.get(spec.name);
        return a + (t ? t.shape.reduce((x, y) => x * y, 1) * DTYPE_BYTES[t.dtype] : 0);
      }, 0);
      const stackQuantized = stackOf(name).every((n) => quantized.has(n)) && !(options.dequantized?.has(name) ?? false);
      const fp8Group = s.method === "fp8" ? fp8GroupSize(s) : null;
      if (
        fp8Group !== null &&
        options.nativeGrouped &&
        options.quantize === undefined &&
        takesFp8(ql, options.device) &&
        stackQuantized
      ) {
        // the checkpoint's codes as stored, the block scales expanded to one f32 per row and group (fp8.ts)
        add(`${scheme} as e4m3 g${fp8Group}`, fp8WeightBytes(N, K, fp8Group));
        continue;
      }
      if (
        s.method !== "fp8" &&
        options.nativeGrouped &&
        options.quantize === undefined &&
        takesGrouped(ql) &&
        stackQuantized
      ) {
        // A permutation is held for an act-order g_idx (GPTQ desc_act, a compressed-tensors weight_g_idx) over more
        // than one group, once per native weight (a stack shares one); the headers cannot tell an identity g_idx.
        const actOrder =
          (s.method === "gptq" && s.descAct) ||
          (s.method === "compressed-tensors" &&
            checkpoint.tensors.has(`${name.slice(0, -".weight".length)}.weight_g_idx`));
        const G = s.groupSize ?? K;
        const perm = actOrder && K / G > 1 && stackOf(name)[0] === name ? new Int32Array(K) : undefined;
        add(
          `${scheme} as grouped int${s.bits}`,
          groupedWeightBytes({ bits: s.bits, groupSize: G, shape: [N, K], perm }),
        );
        continue;
      }
      if (options.quantize !== undefined && INT8_AT_LOAD.test(name)) {
        requantized++;
        add(
          `${scheme} dequantized, then ${options.quantize} (quantized at load)`,
          atLoadBytes(options.quantize, N, K, options.quantizeGroupSize),
        );
        continue;
      }
      add(`${scheme} dequantized to f32`, 4 * N * K);
      dequantized = {
        tensors: dequantized.tensors + 1,
        bytes: dequantized.bytes + 4 * N * K,
        stored: dequantized.stored + storedBytes,
      };
      continue;
    }
    const t = checkpoint.tensors.get(name)!;
    const dtype = t.dtype.toLowerCase();
    if (shape.length === 1)
      add(
        options.device === "cpu" ? "f32 (norms, biases)" : `${dtype} (norms, biases)`,
        (options.device === "cpu" ? 4 : DTYPE_BYTES[t.dtype]) * count,
      );
    else if (options.quantize !== undefined && INT8_AT_LOAD.test(name))
      add(
        `${options.quantize} (quantized at load)`,
        atLoadBytes(options.quantize, shape[0], shape[1], options.quantizeGroupSize),
      );
    else add(dtype, DTYPE_BYTES[t.dtype] * count);
  }
  const warnings: string[] = [];
  const s = config.quantization;
  if (s && dequantized.tensors > 0) {
    const why =
      s.method === "fp8"
        ? options.device !== "cpu"
          ? "deliberate's CUDA FP8 kernel has not run on a GPU yet, so FP8 loads dequantized there"
          : fp8GroupSize(s) === null
            ? `k-blocks of ${s.blockSize[1]} columns fit no native e4m3 group (32, 64 or 128 columns)`
            : !options.nativeGrouped
              ? "this build's addon has no native quantized weights (NativeModel.setQuantizedWeight)"
              : "they are MoE experts or share a stacked weight with float parts (the native e4m3 weights hold whole dense projections)"
        : !options.nativeGrouped
          ? `this build's addon has no grouped int${s.bits} weights (NativeModel.setQuantizedWeight)`
          : options.quantize !== undefined
            ? `they are MoE experts, which loadModel's quantize: "${options.quantize}" leaves as stored`
            : "the native grouped weights hold the dense layers' projections in groups of a multiple of 32 only (these are MoE experts or other groups)";
    const hint =
      s.method === "fp8" && options.device !== "cpu"
        ? '; quantize: "int8" stores them at about 1 byte a weight (a second, lossy rounding)'
        : "";
    warnings.push(
      `${dequantized.tensors} projections of ${describeScheme(s)} are dequantized to f32 at load (${why}): ` +
        `${gb(dequantized.bytes)} resident instead of the checkpoint's ${gb(dequantized.stored)} ` +
        `(${(dequantized.bytes / Math.max(1, dequantized.stored)).toFixed(1)}x)${hint}`,
    );
  }
  if (s && requantized > 0)
    warnings.push(
      `${requantized} projections of ${describeScheme(s)} are dequantized and quantized again at load (quantize: ` +
        `"${options.quantize}"): a second rounding of weights already quantized; load without quantize to keep them as stored`,
    );
  const formats = [...by.values()].sort((a, b) => b.bytes - a.bytes);
  return {
    scheme: s ? describeScheme(s) : null,
    quantizedAtLoad: options.quantize ?? null,
    formats,
    bytes: formats.reduce((a, f) => a + f.bytes, 0),
    warnings,
  };
}

/** Bytes of an [N, K] weight quantized at load: int8 per row (an f32 scale each), int4 in groups of G (an f32
 * scale each, and the grouped format's u8 zero point), or fp8 (e4m3 codes, an f32 scale per row and 128 inputs);
 * another value counts as int8. */
function atLoadBytes(quantize: string, N: number, K: number, G = 32): number {
  if (quantize === "int4") return (N * K) / 2 + ((N * K) / G) * 5;
  if (quantize === "fp8") return fp8WeightBytes(N, K, 128);
  return N * K + 4 * N;
}

function gb(bytes: number): string {
  return bytes >= 1e9 ? `${(bytes / 1e9).toFixed(2)} GB` : `${(bytes / 1e6).toFixed(1)} MB`;
}

/**
 * The plan of a model folder's weights without loading it (`deliberate devices --model DIR`): the headers are read
 * and checked as loadModel checks them, nothing is uploaded.
 */
export async function describeModelWeights(
  dir: string,
  options: { device?: DeviceKind; quantize?: NativeModelPlan["quantize"]; quantizeGroupSize?: number } = {},
): Promise<WeightsReport> {
  const files = await openModelFiles(dir);
  try {
    const nativeGrouped = addonTakesGroupedWeights(loadAddon().NativeModel.prototype as object);
    return planWeights(files.config, files.checkpoint, {
      device: options.device ?? "cpu",
      quantize: options.quantize,
      quantizeGroupSize: options.quantizeGroupSize,
      nativeGrouped,
    });
  } finally {
    await files.checkpoint.close();
  }
}

/**
 * A model's weights as they sit in device memory (issue 47 part 4): the checkpoint's quantization, each format's
 * tensors and resident bytes, the total, and the load's warnings (a dequantized checkpoint's cost).
 */
export function formatWeightsReport(label: string, w: WeightsReport): string {
  const size = (b: number) => (b >= 2 ** 30 ? `${(b / 2 ** 30).toFixed(2)} GiB` : `${(b / 2 ** 20).toFixed(1)} MiB`);
  const lines = [`model ${label}: ${size(w.bytes)} of weights${w.scheme ? `, checkpoint quantized ${w.scheme}` : ""}`];
  for (const f of w.formats)
    lines.push(`  ${size(f.bytes).padStart(10)}  ${String(f.tensors).padStart(5)} tensors  ${f.format}`);
  for (const warning of w.warnings) lines.push(`  warning: ${warning}`);
  return lines.join("\n");
}
