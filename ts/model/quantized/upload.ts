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
import { quantizedLinears, readQuantizedLinear, type QuantizedLinear, type ReadLinear } from "./linear.js";
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
  /** After a load: the projections the upload dequantized beyond what the headers tell (QuantizedUploader). */
  dequantized?: ReadonlySet<string>;
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
      const stackQuantized = stackOf(name).every((n) => quantized.has(n)) && !(options.dequantized?.has(name) ?? false);
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
 * The projections stacked into one native weight with `name` (q/k/v; gate/up: one input, one GEMM), in order;
 * [name] for the others.
 */
export function stackOf(name: string): string[] {
  const m = /^(.*)\.(q|k|v|gate|up)_proj\.weight$/.exec(name);
  if (!m || !DENSE_PROJECTION.test(name)) return [name];
  const parts = m[2] === "gate" || m[2] === "up" ? ["gate", "up"] : ["q", "k", "v"];
  return parts.map((p) => `${m[1]}.${p}_proj.weight`);
}

/**
 * Uploads a checkpoint's quantized projections, a stack at a time: the native side holds q/k/v (and gate/up) as one
 * weight, so they go in grouped only together (every member quantized, taken by the grouped weights, and one act-order
 * perm: GPTQ quantizes them from one Hessian of their shared input, so a checkpoint's g_idx agree; vLLM assumes the
 * same), else all dequantized to f32 (exact).
 */
export class QuantizedUploader {
  private readonly done = new Set<string>();
  /** Projections dequantized although the addon takes grouped weights (their stack's perms or zero points). */
  readonly dequantized = new Set<string>();

  constructor(
    private readonly native: QuantizedNative,
    private readonly quantized: Map<string, QuantizedLinear>,
    private readonly checkpoint: Parameters<typeof readQuantizedLinear>[1],
    /** The addon takes grouped weights and loadModel does not quantize at load. */
    private readonly grouped: boolean,
  ) {}

  /** Uploads `name`'s stack the first time one of its members comes; later members are already set. */
  async upload(name: string): Promise<void> {
    if (this.done.has(name)) return;
    const stack = stackOf(name);
    const members = stack.map((n) => this.quantized.get(n)).filter((q): q is QuantizedLinear => q !== undefined);
    // A member the checkpoint stores as float goes in with setWeight (uploadWeights' loop): the rest dequantized.
    const read = await Promise.all(members.map((ql) => readQuantizedLinear(ql, this.checkpoint)));
    let grouped = this.grouped && members.length === stack.length;
    for (let i = 0; i < members.length && grouped; i++) {
      const r = read[i];
      grouped = r.kind === "grouped" && takesGrouped(members[i], r.weight) && samePerm(r.weight, read[0]);
    }
    for (let i = 0; i < members.length; i++) {
      const ql = members[i];
      const r = read[i];
      this.done.add(ql.name);
      try {
        if (r.kind === "grouped") {
          checkGroupedWeight(r.weight, ql.name);
          if (grouped && this.native.setQuantizedWeight) this.native.setQuantizedWeight(ql.name, r.weight);
          else {
            if (this.grouped) this.dequantized.add(ql.name);
            setF32(this.native, ql.name, r.weight.shape, toF32(r.weight));
          }
        } else {
          setF32(this.native, ql.name, ql.shape, r.values);
        }
      } catch (e) {
        if (e instanceof ModelFormatError) throw e;
        throw asNativeError(e);
      }
    }
  }
}

function samePerm(w: GroupedQuantWeight, first: ReadLinear): boolean {
  if (first.kind !== "grouped") return false;
  const a = w.perm;
  const b = first.weight.perm;
  if (a === undefined || b === undefined) return a === b;
  return a.length === b.length && a.every((c, k) => c === b[k]);
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
