// config.json's `quantization_config` -> QuantScheme: which pre-quantized layout the checkpoint's linear layers are
// stored in (GPTQ, AWQ GEMM, compressed-tensors pack-quantized, FP8 with block scales). Every field that would change
// the weights is read or refused by name: an unsupported value is an UnsupportedError, a malformed one a
// ModelFormatError, each with `field` "quantization_config.<key>".
import { ModelFormatError, UnsupportedError } from "../../errors/index.js";

/**
 * GPTQ (AutoGPTQ / GPTQModel `QuantLinear`): qweight int32 packed along K, qzeros int32 packed along N, scales f16,
 * g_idx int32. `zeroPointsMinusOne`: the v1 checkpoint format ("gptq") stores zero points minus one; "gptq_v2" stores
 * them as they are.
 */
export interface GptqScheme {
  method: "gptq";
  bits: 4 | 8;
  /** Input channels per group, or null for one group per row (group_size -1). */
  groupSize: number | null;
  descAct: boolean;
  sym: boolean;
  zeroPointsMinusOne: boolean;
}

/** AutoAWQ's GEMM layout: qweight / qzeros int32 packed along N in AWQ's interleaved order, scales f16. */
export interface AwqScheme {
  method: "awq";
  bits: 4;
  groupSize: number | null;
}

/** compressed-tensors `pack-quantized` (llm-compressor's W4A16 / W8A16): weight_packed int32 packed along K. */
export interface CompressedTensorsScheme {
  method: "compressed-tensors";
  bits: 4 | 8;
  /** Input channels per group, or null for the "channel" strategy (one scale per output row). */
  groupSize: number | null;
  symmetric: boolean;
}

/** FP8 e4m3 weights with one f32 scale per block (`weight_scale_inv`; DeepSeek-V3 / Qwen3-*-FP8). */
export interface Fp8BlockScheme {
  method: "fp8";
  /** [rows (output channels), columns (input channels)] per scale. */
  blockSize: [number, number];
}

export type QuantScheme = GptqScheme | AwqScheme | CompressedTensorsScheme | Fp8BlockScheme;

/** Group sizes the grouped format and its kernels take (or null: one group per row). */
export const SUPPORTED_GROUP_SIZES = [32, 64, 128] as const;

type Json = Record<string, unknown>;

/** A short name for logs and errors: "gptq 4-bit g128", "awq 4-bit g128", "fp8 e4m3 128x128 blocks". */
export function describeScheme(s: QuantScheme): string {
  if (s.method === "fp8") return `fp8 e4m3 ${s.blockSize[0]}x${s.blockSize[1]} blocks`;
  const g = s.groupSize === null ? "per channel" : `g${s.groupSize}`;
  const extra = s.method === "gptq" && s.descAct ? " act-order" : "";
  return `${s.method} ${s.bits}-bit ${g}${extra}`;
}

/** Parses config.json's quantization_config (null when absent). `file` names config.json in errors. */
export function parseQuantizationConfig(raw: unknown, file: string): QuantScheme | null {
  if (raw == null) return null;
  const where = "quantization_config";
  if (typeof raw !== "object" || Array.isArray(raw))
    throw new ModelFormatError(`${file}: field '${where}' is ${show(raw)}; expected an object`, { field: where });
  const r = new Reader(raw as Json, file, where);
  const method = r.raw("quant_method");
  switch (method) {
    case "gptq":
      return parseGptq(r);
    case "awq":
      return parseAwq(r);
    case "compressed-tensors":
      return parseCompressedTensors(r);
    case "fp8":
      return parseFp8(r);
    default:
      return r.unsupported(
        "quant_method",
        method,
        "deliberate loads gptq, awq (GEMM), compressed-tensors (pack-quantized) and fp8 (block scales) checkpoints",
      );
  }
}

function parseGptq(r: Reader): GptqScheme {
  const bits = r.bits([4, 8]);
  const groupSize = r.groupSize("group_size");
  const descAct = r.bool("desc_act", false);
  const sym = r.bool("sym", true);
  // GPTQModel writes checkpoint_format (older versions `format`); AutoGPTQ's v1 layout when absent.
  const formatKey = r.has("checkpoint_format") ? "checkpoint_format" : r.has("format") ? "format" : "checkpoint_format";
  const format = r.raw(formatKey) ?? "gptq";
  if (format !== "gptq" && format !== "gptq_v2")
    r.unsupported(formatKey, format, 'deliberate loads the "gptq" (v1) and "gptq_v2" layouts (not marlin / bitblas)');
  if (r.raw("lm_head") === true)
    r.unsupported("lm_head", true, "a quantized LM head is not supported; the LM head must stay as stored");
  const dynamic = r.raw("dynamic");
  if (dynamic != null && !(typeof dynamic === "object" && Object.keys(dynamic as Json).length === 0))
    r.unsupported("dynamic", dynamic, "per-module overrides of bits / group size are not supported");
  return { method: "gptq", bits, groupSize, descAct, sym, zeroPointsMinusOne: format === "gptq" };
}

function parseAwq(r: Reader): AwqScheme {
  // AutoAWQ's own quant_config.json names them w_bit / q_group_size; transformers' config.json bits / group_size.
  const bits = r.bits([4], r.has("w_bit") ? "w_bit" : "bits");
  const groupSize = r.groupSize(r.has("q_group_size") ? "q_group_size" : "group_size");
  const version = r.raw("version") ?? "gemm";
  if (typeof version !== "string" || version.toLowerCase() !== "gemm")
    r.unsupported("version", version, "deliberate loads AWQ's GEMM packing only (not gemv / marlin / exllama)");
  const zeroPoint = r.raw("zero_point") ?? true;
  if (zeroPoint !== true)
    r.unsupported(
      "zero_point",
      zeroPoint,
      "AWQ without zero points is not supported (AutoAWQ writes zero_point: true)",
    );
  return { method: "awq", bits, groupSize };
}

function parseCompressedTensors(r: Reader): CompressedTensorsScheme {
  const format = r.raw("format");
  const groups = r.raw("config_groups");
  if (typeof groups !== "object" || groups === null || Array.isArray(groups) || Object.keys(groups).length === 0)
    r.malformed("config_groups", groups, "expected an object of quantization schemes");
  const kv = r.raw("kv_cache_scheme");
  if (kv != null) r.unsupported("kv_cache_scheme", kv, "a quantized KV cache from the checkpoint is not supported");
  const sparsity = r.raw("sparsity_config");
  if (sparsity != null && typeof sparsity === "object" && Object.keys(sparsity as Json).length > 0) {
    const sf = (sparsity as Json).format;
    if (sf !== "dense") r.unsupported("sparsity_config", sparsity, "sparse (2:4) checkpoints are not supported");
  }
  if (r.raw("transform_config") != null)
    r.unsupported(
      "transform_config",
      r.raw("transform_config"),
      "rotated (SpinQuant / QuIP) weights are not supported",
    );
  const status = r.raw("quantization_status");
  if (status != null && status !== "compressed" && status !== "frozen")
    r.unsupported("quantization_status", status, 'expected "compressed" (a checkpoint llm-compressor saved packed)');
  // Each config group must be the same weight-only scheme (deliberate runs one per model).
  let scheme: CompressedTensorsScheme | null = null;
  for (const [name, g] of Object.entries(groups as Json)) {
    const gr = r.child(g, `config_groups.${name}`);
    const groupFormat = gr.raw("format") ?? format;
    if (groupFormat !== "pack-quantized")
      gr.unsupported(
        "format",
        groupFormat,
        'deliberate loads the "pack-quantized" format (W4A16 / W8A16); float-quantized (FP8), int-quantized (W8A8) and naive-quantized are not supported',
      );
    if (gr.raw("input_activations") != null)
      gr.unsupported(
        "input_activations",
        gr.raw("input_activations"),
        "activation quantization (WnA8) is not supported",
      );
    if (gr.raw("output_activations") != null)
      gr.unsupported("output_activations", gr.raw("output_activations"), "output quantization is not supported");
    const w = gr.child(gr.raw("weights"), "weights");
    const type = w.raw("type") ?? "int";
    if (type !== "int") w.unsupported("type", type, 'only "int" weights are packed (float weights are FP8)');
    const bits = w.bits([4, 8], "num_bits");
    if (w.raw("dynamic") === true) w.unsupported("dynamic", true, "dynamic weight scales are not supported");
    const strategy = w.raw("strategy");
    let groupSize: number | null;
    if (strategy === "group") {
      groupSize = w.groupSize("group_size");
      if (groupSize === null) w.unsupported("group_size", w.raw("group_size"), "the group strategy needs a group size");
    } else if (strategy === "channel") groupSize = null;
    else
      return w.unsupported(
        "strategy",
        strategy,
        'deliberate loads the "group" and "channel" strategies (not tensor / block / token)',
      );
    const symmetric = w.bool("symmetric", true);
    const next: CompressedTensorsScheme = { method: "compressed-tensors", bits, groupSize, symmetric };
    if (scheme && JSON.stringify(scheme) !== JSON.stringify(next))
      gr.unsupported("weights", gr.raw("weights"), "config groups with different weight schemes are not supported");
    scheme = next;
  }
  return scheme!;
}

function parseFp8(r: Reader): Fp8BlockScheme {
  const fmt = r.raw("fmt") ?? "e4m3";
  if (fmt !== "e4m3") r.unsupported("fmt", fmt, "deliberate loads e4m3 FP8 weights only");
  const act = r.raw("activation_scheme") ?? "dynamic";
  if (act !== "dynamic")
    r.unsupported("activation_scheme", act, 'static activation scales are not supported (expected "dynamic")');
  const block = r.raw("weight_block_size");
  if (block == null)
    r.unsupported(
      "weight_block_size",
      block,
      "per-tensor FP8 (no weight_block_size) is not supported; deliberate loads block-scaled FP8 (weight_scale_inv)",
    );
  if (!Array.isArray(block) || block.length !== 2 || !block.every((b) => Number.isInteger(b) && b >= 1))
    r.malformed("weight_block_size", block, "expected [rows, columns], two positive integers");
  return { method: "fp8", blockSize: [(block as number[])[0], (block as number[])[1]] };
}

/** Field access on one object of quantization_config with errors that name the dotted field. */
class Reader {
  constructor(
    private readonly obj: Json,
    private readonly file: string,
    private readonly path: string,
  ) {}

  has(key: string): boolean {
    return this.obj[key] !== undefined;
  }

  raw(key: string): unknown {
    return this.obj[key];
  }

  child(v: unknown, key: string): Reader {
    if (typeof v !== "object" || v === null || Array.isArray(v)) this.malformed(key, v, "expected an object");
    return new Reader(v as Json, this.file, `${this.path}.${key}`);
  }

  unsupported(key: string, value: unknown, why: string): never {
    const field = `${this.path}.${key}`;
    throw new UnsupportedError(`${this.file}: ${field} is ${show(value)}; ${why}`, { field });
  }

  malformed(key: string, value: unknown, why: string): never {
    const field = `${this.path}.${key}`;
    throw new ModelFormatError(`${this.file}: ${field} is ${show(value)}; ${why}`, { field });
  }

  bool(key: string, dflt: boolean): boolean {
    const v = this.obj[key] ?? dflt;
    if (typeof v !== "boolean") this.malformed(key, v, "expected true or false");
    return v as boolean;
  }

  bits<B extends number>(allowed: B[], key = "bits"): B {
    const v = this.obj[key];
    if (typeof v !== "number" || !Number.isInteger(v)) this.malformed(key, v, "expected an integer bit width");
    if (!allowed.includes(v as B))
      this.unsupported(key, v, `deliberate loads ${allowed.join(" or ")}-bit weights of this method`);
    return v as B;
  }

  /** A group size of 32, 64 or 128 input channels, or null for -1 / null (one group per output row). */
  groupSize(key: string): number | null {
    const v = this.obj[key];
    if (v === -1 || v === null) return null;
    if (typeof v !== "number" || !Number.isInteger(v)) this.malformed(key, v, "expected an integer (or -1)");
    if (!(SUPPORTED_GROUP_SIZES as readonly number[]).includes(v as number))
      this.unsupported(key, v, `deliberate loads groups of ${SUPPORTED_GROUP_SIZES.join(", ")} or -1 (per channel)`);
    return v as number;
  }
}

function show(v: unknown): string {
  if (v === undefined) return "missing";
  const s = JSON.stringify(v);
  return s === undefined ? String(v) : s.length > 80 ? `${s.slice(0, 77)}...` : s;
}
