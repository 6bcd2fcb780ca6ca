// The upload of a pre-quantized checkpoint's projections: to NativeModel.setQuantizedWeight in the grouped format, or
// FP8 as its e4m3 codes (CPU), where the native side takes them (dense layers' projections, a stack at a time), else
// dequantized exactly to f32 through setWeight (MoE experts, FP8 on CUDA or with k-blocks no native group fits:
// ts/model/quantized/fp8.ts; and every projection when loadModel quantizes at load, for the native model to quantize
// as it does float weights). ts/model/quantized/weightsReport.ts reports what this does.
import { ModelFormatError } from "../../errors/index.js";
import { asNativeError } from "../../errors/native.js";
import type { NativeModel } from "../../native/addonTypes.js";
import { checkGroupedWeight, dequantizeToInputOrder, type GroupedQuantWeight } from "../quantFormat.js";
import { fp8GroupSize, fp8ToF32, type Fp8QuantWeight } from "./fp8.js";
import { readQuantizedLinear, type QuantizedLinear, type ReadLinear } from "./linear.js";

/**
 * The dense layers' projections (not MoE experts): the ones loadModel's quantize stores as int8 and the ones
 * setQuantizedWeight takes (cpp/model/model_weights.cc: setGrouped refuses experts, embeddings, heads).
 */
export const DENSE_PROJECTION = /^model\.layers\.\d+\.(self_attn\.(q|k|v|o)_proj|mlp\.(gate|up|down)_proj)\.weight$/;

/**
 * Whether the native grouped weights take this projection as the checkpoint stores it: a dense layer's, groups a
 * multiple of 32 (setGrouped's kernels), and no 4-bit zero point past 16 (16 is a GPTQ v1 checkpoint's wrapped 0,
 * the most setGrouped takes).
 */
export function takesGrouped(ql: QuantizedLinear, w?: GroupedQuantWeight): boolean {
  const s = ql.scheme;
  if (s.method === "fp8" || !DENSE_PROJECTION.test(ql.name)) return false;
  const G = s.groupSize ?? ql.shape[1];
  if (G % 32 !== 0) return false;
  return w === undefined || w.bits === 8 || w.zeros.every((z) => z <= 16);
}

/**
 * Whether the native weights hold this FP8 projection as e4m3 codes on `device`: a dense layer's, k-blocks a native
 * group fits (fp8GroupSize), on the CPU. CUDA has an FP8 kernel (cuda/gemm_int4.cu) that has not run on a GPU yet:
 * until test/kernels/gemmFp8.cuda.test.ts passes on one, FP8 checkpoints load there dequantized to f32 (correct, 4x
 * the bytes) rather than through an unverified kernel.
 */
export function takesFp8(ql: QuantizedLinear, device: string): boolean {
  return (
    ql.scheme.method === "fp8" && device === "cpu" && DENSE_PROJECTION.test(ql.name) && fp8GroupSize(ql.scheme) !== null
  );
}

/** Whether the addon build has NativeModel.setQuantizedWeight. */
export function addonTakesGroupedWeights(native: object | null | undefined): boolean {
  return typeof (native as { setQuantizedWeight?: unknown } | null | undefined)?.setQuantizedWeight === "function";
}

/** Native surface the upload uses: setWeight, and setQuantizedWeight where the addon has it; info.device (default cpu). */
type QuantizedNative = Pick<NativeModel, "setWeight"> & {
  setQuantizedWeight?: (
    name: string,
    w:
      | {
          bits: 4 | 8;
          groupSize: number;
          shape: [number, number];
          q: Uint8Array;
          scales: Float32Array;
          zeros: Uint8Array;
          perm?: Int32Array;
        }
      | Fp8QuantWeight,
  ) => void;
  info?: { device?: string };
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
    const device = this.native.info?.device ?? "cpu";
    for (let i = 0; i < members.length && grouped; i++) {
      const r = read[i];
      const first = read[0];
      grouped =
        r.kind === "grouped"
          ? takesGrouped(members[i], r.weight) && samePerm(r.weight, first)
          : r.kind === "fp8" &&
            takesFp8(members[i], device) &&
            first.kind === "fp8" &&
            first.weight.groupSize === r.weight.groupSize;
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
        } else if (r.kind === "fp8") {
          if (grouped && this.native.setQuantizedWeight) this.native.setQuantizedWeight(ql.name, r.weight);
          else setF32(this.native, ql.name, ql.shape, fp8ToF32(r.weight));
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
