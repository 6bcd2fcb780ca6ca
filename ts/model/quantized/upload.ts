// How each weight of a checkpoint sits in native memory (its format and resident bytes), decided from the headers
// alone, and the upload of a pre-quantized projection in that format. One plan serves the load (uploadWeights) and
// the report `deliberate devices --model DIR` prints before anything is loaded (issue 47 part 4).
//
// A grouped projection (GPTQ, AWQ, compressed-tensors) goes to NativeModel.setQuantizedWeight when the addon has it,
// else it is dequantized exactly to f32 and set with setWeight (4 bytes a weight: the load log warns). FP8 is always
// dequantized to f32 (no FP8 kernel; ts/model/quantized/fp8.ts says why), and then quantized to int8 per row when
// loadModel's quantize asks for it.
import { ModelFormatError } from "../../errors/index.js";
import { asNativeError } from "../../errors/native.js";
import type { DeviceKind, NativeModel } from "../../native/addonTypes.js";
import { loadAddon } from "../../native/loadAddon.js";
import type { ModelConfig } from "../config.js";
import { DTYPE_BYTES, type SafetensorsDType } from "../dtype.js";
import {
  checkGroupedWeight,
  dequantizeToInputOrder,
  groupedWeightBytes,
  type GroupedQuantWeight,
} from "../quantFormat.js";
import type { NativeModelPlan } from "../loadWeights.js";
import { openModelFiles } from "../modelFiles.js";
import { expectedTensors } from "../weights.js";
import { quantizedLinears, readQuantizedLinear, type QuantizedLinear } from "./linear.js";
import { describeScheme } from "./quantConfig.js";

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
}

/**
 * The dense layers' projections (not MoE experts): the ones loadModel's quantize stores as int8 and the ones
 * setQuantizedWeight takes (cpp/model/model_weights.cc: setGrouped refuses experts, embeddings, heads).
 */
const DENSE_PROJECTION = /^model\.layers\.\d+\.(self_attn\.(q|k|v|o)_proj|mlp\.(gate|up|down)_proj)\.weight$/;
const INT8_AT_LOAD = DENSE_PROJECTION;

/**
 * Whether the native grouped weights take this projection as the checkpoint stores it: a dense layer's, groups a
 * multiple of 32 (setGrouped's kernels), and no 4-bit zero point past 15 (a GPTQ v1 checkpoint's wrapped 0 reads as
 * 16: such a weight is dequantized instead, exactly).
 */
export function takesGrouped(ql: QuantizedLinear, w?: GroupedQuantWeight): boolean {
  const s = ql.scheme;
  if (s.method === "fp8" || !DENSE_PROJECTION.test(ql.name)) return false;
  const G = s.groupSize ?? ql.shape[1];
  if (G % 32 !== 0) return false;
  return w === undefined || w.bits === 8 || w.zeros.every((z) => z <= 15);
}

/** Whether the addon build has NativeModel.setQuantizedWeight. */
export function addonTakesGroupedWeights(native: object | null | undefined): boolean {
  return typeof (native as { setQuantizedWeight?: unknown } | null | undefined)?.setQuantizedWeight === "function";
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
      if (s.method !== "fp8" && options.nativeGrouped && options.quantize === undefined && takesGrouped(ql)) {
        // A permutation is held only for an act-order g_idx (GPTQ desc_act); the headers cannot tell more.
        const perm = s.method === "gptq" && s.descAct ? new Int32Array(K) : undefined;
        add(
          `${scheme} as grouped int${s.bits}`,
          groupedWeightBytes({ bits: s.bits, groupSize: s.groupSize ?? K, shape: [N, K], perm }),
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
        ? "deliberate has no FP8 kernel and e4m3 values do not fit an integer grid exactly"
        : !options.nativeGrouped
          ? `this build's addon has no grouped int${s.bits} weights (NativeModel.setQuantizedWeight)`
          : options.quantize !== undefined
            ? `they are MoE experts, which loadModel's quantize: "${options.quantize}" leaves as stored`
            : "the native grouped weights hold the dense layers' projections in groups of a multiple of 32 only (these are MoE experts or other groups)";
    const hint =
      s.method === "fp8" ? '; quantize: "int8" stores them at about 1 byte a weight (a second, lossy rounding)' : "";
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
    formats,
    bytes: formats.reduce((a, f) => a + f.bytes, 0),
    warnings,
  };
}

/** Bytes of an [N, K] weight quantized at load: int8 per row (an f32 scale each), or int4 in groups of G (an f32
 * scale each, and the grouped format's u8 zero point); another value counts as int8. */
function atLoadBytes(quantize: string, N: number, K: number, G = 32): number {
  if (quantize === "int4") return (N * K) / 2 + ((N * K) / G) * 5;
  return N * K + 4 * N;
}

function gb(bytes: number): string {
  return bytes >= 1e9 ? `${(bytes / 1e9).toFixed(2)} GB` : `${(bytes / 1e6).toFixed(1)} MB`;
}

/** Native surface the upload uses: setWeight, and setQuantizedWeight where the addon has it. */
type QuantizedNative = Pick<NativeModel, "setWeight"> & {
  setQuantizedWeight?: (
    name: string,
    w: {
      bits: 4 | 8;
      groupSize: number;
      shape: [number, number];
      q: Uint8Array;
      scales: Float32Array;
      zeros: Uint8Array;
      perm?: Int32Array;
    },
  ) => void;
};

/**
 * Reads, unpacks and uploads one quantized projection: to setQuantizedWeight as the grouped format when `grouped`,
 * else dequantized to f32 through setWeight (exact: scale * (q - zero) of an f16 / bf16 scale fits f32's 24 bits).
 */
export async function uploadQuantizedLinear(
  native: QuantizedNative,
  ql: QuantizedLinear,
  checkpoint: Parameters<typeof readQuantizedLinear>[1],
  grouped: boolean,
): Promise<void> {
  const read = await readQuantizedLinear(ql, checkpoint);
  try {
    if (read.kind === "grouped") {
      const w = read.weight;
      checkGroupedWeight(w, ql.name);
      if (grouped && native.setQuantizedWeight && takesGrouped(ql, w)) native.setQuantizedWeight(ql.name, w);
      else setF32(native, ql.name, w.shape, toF32(w));
    } else {
      setF32(native, ql.name, ql.shape, read.values);
    }
  } catch (e) {
    if (e instanceof ModelFormatError) throw e;
    throw asNativeError(e);
  }
}

/** The dense weight in the checkpoint's input order (exact in f32: the float64 products fit 24 bits). */
function toF32(w: GroupedQuantWeight): Float32Array {
  return Float32Array.from(dequantizeToInputOrder(w));
}

function setF32(native: QuantizedNative, name: string, shape: number[], values: Float32Array): void {
  native.setWeight(name, "f32", shape, new Uint8Array(values.buffer, values.byteOffset, values.byteLength));
}

/**
 * The plan of a model folder's weights without loading it (`deliberate devices --model DIR`): the headers are read
 * and checked as loadModel checks them, nothing is uploaded.
 */
export async function describeModelWeights(
  dir: string,
  options: { device?: DeviceKind; quantize?: NativeModelPlan["quantize"] } = {},
): Promise<WeightsReport> {
  const files = await openModelFiles(dir);
  try {
    const nativeGrouped = addonTakesGroupedWeights(loadAddon().NativeModel.prototype as object);
    return planWeights(files.config, files.checkpoint, {
      device: options.device ?? "cpu",
      quantize: options.quantize,
      nativeGrouped,
    });
  } finally {
    await files.checkpoint.close();
  }
}
