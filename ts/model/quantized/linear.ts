// A pre-quantized checkpoint's linear layers: which of the config's projections are stored quantized (and in which
// tensors), the checks of those tensors against config.json, and reading one layer into the grouped format
// (ts/model/quantFormat.ts) or, for FP8, into its codes and per-group scales (ts/model/quantized/fp8.ts; dequantized f32
// where its k-blocks fit no native group).
//
// Which layers: the decoder layers' q/k/v/o, gate/up and down projections (MoE experts' too). A projection the
// checkpoint stores as a float `weight` stays as stored (GPTQ's modules_to_not_convert, compressed-tensors' `ignore`,
// FP8's unconverted layers): the tensors decide, not the lists. Embeddings, norms, the router, score heads and the
// LM head are never read as quantized.
import { FLOAT_DTYPES, type SafetensorsDType } from "../dtype.js";
import type { GroupedQuantWeight } from "../quantFormat.js";
import { awqTensors, decodeAwq } from "./awq.js";
import { compressedTensorsTensors, decodeCompressedTensors } from "./compressedTensors.js";
import { decodeFp8, fp8GroupSize, fp8Tensors, readFp8, type Fp8QuantWeight } from "./fp8.js";
import { decodeGptq, gptqTensors } from "./gptq.js";
import { describeScheme, type QuantScheme } from "./quantConfig.js";
import type { LoadedTensors, QuantTensorSpec } from "./tensors.js";

/** The projections a quantized checkpoint may store quantized (dense layers' and experts'). */
const QUANTIZABLE = /\.(q_proj|k_proj|v_proj|o_proj|gate_proj|up_proj|down_proj)\.weight$/;

/** One projection stored in a quantized layout. */
export interface QuantizedLinear {
  /** The weight's name in an unquantized checkpoint ("model.layers.0.self_attn.q_proj.weight"): what setWeight takes. */
  name: string;
  /** [N out, K in] as config.json implies. */
  shape: [number, number];
  scheme: QuantScheme;
  tensors: QuantTensorSpec[];
}

/** What the checks and the reader need of a checkpoint (a SafetensorsCheckpoint satisfies it). */
export interface QuantizedCheckpoint {
  tensors: Map<string, { dtype: SafetensorsDType; shape: number[]; file: string }>;
  source: string;
  read?(name: string): Promise<Uint8Array>;
}

/**
 * The expected tensors that this checkpoint stores quantized, by weight name. Empty without a scheme. A projection
 * whose `weight` the checkpoint holds as a float tensor is not in it (stored as is).
 */
export function quantizedLinears(
  scheme: QuantScheme | null,
  expected: readonly { name: string; shape: number[] }[],
  checkpoint: Pick<QuantizedCheckpoint, "tensors">,
): Map<string, QuantizedLinear> {
  const out = new Map<string, QuantizedLinear>();
  if (scheme === null) return out;
  for (const { name, shape } of expected) {
    if (!QUANTIZABLE.test(name) || shape.length !== 2) continue;
    const stored = checkpoint.tensors.get(name);
    if (stored && FLOAT_DTYPES.includes(stored.dtype)) continue;
    const prefix = name.slice(0, -".weight".length);
    const [N, K] = shape;
    out.set(name, { name, shape: [N, K], scheme, tensors: layoutTensors(scheme, prefix, N, K) });
  }
  return out;
}

function layoutTensors(s: QuantScheme, prefix: string, N: number, K: number): QuantTensorSpec[] {
  switch (s.method) {
    case "gptq":
      return gptqTensors(prefix, N, K, s);
    case "awq":
      return awqTensors(prefix, N, K, s);
    case "compressed-tensors":
      return compressedTensorsTensors(prefix, N, K, s);
    case "fp8":
      return fp8Tensors(prefix, N, K, s);
  }
}

/**
 * Problems (one line each, naming the file and the tensor) of one quantized projection's tensors: a group size
 * that does not divide K, a packed dimension the packing cannot fill, a missing tensor, a wrong shape or dtype.
 */
export function quantizedLinearProblems(ql: QuantizedLinear, checkpoint: QuantizedCheckpoint): string[] {
  const [N, K] = ql.shape;
  const s = ql.scheme;
  const what = `'${ql.name.slice(0, -".weight".length)}' (${describeScheme(s)}, [${N}, ${K}])`;
  if (s.method !== "fp8") {
    const pf = 32 / s.bits;
    if (s.groupSize !== null && K % s.groupSize !== 0)
      return [`${what}: ${K} input channels are not a multiple of quantization_config's group size ${s.groupSize}`];
    if (s.bits === 4 && K % 2 !== 0) return [`${what}: an odd number of input channels cannot be packed at 4 bits`];
    if (s.method === "gptq" && (K % pf !== 0 || N % pf !== 0))
      return [`${what}: GPTQ packs ${pf} channels per int32; ${K} inputs and ${N} outputs must both be multiples`];
    if (s.method === "awq" && N % 8 !== 0)
      return [`${what}: AWQ packs 8 output channels per int32; ${N} outputs are not a multiple of 8`];
  }
  const problems: string[] = [];
  for (const spec of ql.tensors) {
    const t = checkpoint.tensors.get(spec.name);
    if (!t) {
      if (!spec.optional)
        problems.push(
          `${checkpoint.source}: tensor '${spec.name}' is missing (the ${describeScheme(s)} layout of ${what})`,
        );
    } else if (t.shape.length !== spec.shape.length || t.shape.some((d, i) => d !== spec.shape[i])) {
      problems.push(
        `${t.file}: tensor '${spec.name}' has shape [${t.shape.join(", ")}], ${describeScheme(s)} of [${N}, ${K}] implies [${spec.shape.join(", ")}]`,
      );
    } else if (!spec.dtypes.includes(t.dtype)) {
      problems.push(
        `${t.file}: tensor '${spec.name}' has dtype ${t.dtype}; ${describeScheme(s)} stores it as ${spec.dtypes.join(" or ")}`,
      );
    }
  }
  return problems;
}

/** A quantized projection read and unpacked: the grouped format, FP8 codes, or its dequantized f32 weight [N, K]. */
export type ReadLinear =
  | { kind: "grouped"; weight: GroupedQuantWeight }
  | { kind: "fp8"; weight: Fp8QuantWeight }
  | { kind: "f32"; values: Float32Array };

/** Reads one projection's tensors (checked by quantizedLinearProblems) and unpacks them. */
export async function readQuantizedLinear(
  ql: QuantizedLinear,
  checkpoint: Required<Pick<QuantizedCheckpoint, "tensors" | "read">>,
): Promise<ReadLinear> {
  const loaded: LoadedTensors = new Map();
  for (const spec of ql.tensors) {
    const t = checkpoint.tensors.get(spec.name);
    if (!t) continue;
    loaded.set(spec.role, { name: spec.name, dtype: t.dtype, shape: t.shape, bytes: await checkpoint.read(spec.name) });
  }
  const [N, K] = ql.shape;
  const s = ql.scheme;
  switch (s.method) {
    case "gptq":
      return { kind: "grouped", weight: decodeGptq(loaded, N, K, s) };
    case "awq":
      return { kind: "grouped", weight: decodeAwq(loaded, N, K, s) };
    case "compressed-tensors":
      return { kind: "grouped", weight: decodeCompressedTensors(loaded, N, K, s) };
    case "fp8": {
      const G = fp8GroupSize(s);
      return G === null
        ? { kind: "f32", values: decodeFp8(loaded, N, K, s) }
        : { kind: "fp8", weight: readFp8(loaded, N, K, s, G) };
    }
  }
}
