// What a pre-quantized linear layer's loader works with: the checkpoint tensors it expects (name, shape, dtypes) and
// their bytes once read, with the small unpacking helpers the layouts share.
import { ModelFormatError } from "../../errors/index.js";
import { bytesToF32, type SafetensorsDType } from "../dtype.js";

/** One checkpoint tensor a quantized layout stores for a linear layer. */
export interface QuantTensorSpec {
  /** Role within the layout: "qweight", "scales", "weight_packed", ... */
  role: string;
  /** Full tensor name: "<prefix>.<role>". */
  name: string;
  shape: number[];
  dtypes: readonly SafetensorsDType[];
  /** Absent is allowed (g_idx of a checkpoint without act-order, a symmetric scheme's zero point). */
  optional?: boolean;
}

/** A read tensor: header fields and raw little-endian bytes. */
export interface LoadedTensor {
  name: string;
  dtype: SafetensorsDType;
  shape: number[];
  bytes: Uint8Array;
}

export type LoadedTensors = Map<string, LoadedTensor>;

export const FLOATS: readonly SafetensorsDType[] = ["F16", "BF16", "F32"];

/** The tensor of role `role`, required. */
export function need(t: LoadedTensors, role: string): LoadedTensor {
  const x = t.get(role);
  if (!x) throw new Error(`internal: quantized tensor role '${role}' was not read`);
  return x;
}

/**
 * Little-endian int32 words of an I32 tensor (a copy when the bytes are not 4-byte aligned). A typed-array view reads
 * host order: Node's platforms (x86-64, arm64) are little-endian, as safetensors is.
 */
export function int32Words(x: LoadedTensor): Int32Array {
  const b = x.bytes;
  if (b.byteOffset % 4 === 0) return new Int32Array(b.buffer, b.byteOffset, b.byteLength / 4);
  return new Int32Array(b.slice().buffer);
}

/** Integer values of an I32 / I64 / I8 / U8 tensor as numbers (I64 must be a safe integer). */
export function integers(x: LoadedTensor): number[] {
  const dv = new DataView(x.bytes.buffer, x.bytes.byteOffset, x.bytes.byteLength);
  const out: number[] = [];
  if (x.dtype === "I32") for (let i = 0; i < x.bytes.byteLength; i += 4) out.push(dv.getInt32(i, true));
  else if (x.dtype === "I64") for (let i = 0; i < x.bytes.byteLength; i += 8) out.push(Number(dv.getBigInt64(i, true)));
  else if (x.dtype === "I8") for (let i = 0; i < x.bytes.byteLength; i++) out.push(dv.getInt8(i));
  else if (x.dtype === "U8") for (let i = 0; i < x.bytes.byteLength; i++) out.push(dv.getUint8(i));
  else throw new Error(`internal: ${x.name} (${x.dtype}) is not an integer tensor`);
  return out;
}

/** f16 / bf16 / f32 values, exactly, as f32. */
export function floats(x: LoadedTensor): Float32Array {
  return bytesToF32(x.bytes, x.dtype);
}

/** Field `i` (0-based from the low bits) of `bits` width in a 32-bit word. */
export function field(word: number, i: number, bits: number): number {
  return (word >>> (bits * i)) & ((1 << bits) - 1);
}

/** The data error of one tensor's values (a bad g_idx, a zero point the format cannot hold). */
export function badValues(x: LoadedTensor, why: string): never {
  throw new ModelFormatError(`tensor '${x.name}' ${why}`, { field: x.name });
}

/**
 * A g_idx (group of each input channel, [K]) as the format's permutation: the channels sorted by group, stably, so
 * that each group's G channels are contiguous (GPTQ act-order; ts/model/quantFormat.ts `perm`). Null when g_idx is
 * the identity layout (channel k in group k / G). Every group must hold exactly G channels.
 */
export function permFromGroupIndex(x: LoadedTensor, K: number, G: number): Int32Array | null {
  const gIdx = integers(x);
  const groups = K / G;
  const count = new Int32Array(groups);
  let identity = true;
  for (let k = 0; k < K; k++) {
    const g = gIdx[k];
    if (!Number.isInteger(g) || g < 0 || g >= groups)
      badValues(x, `maps input channel ${k} to group ${g}; expected a group in [0, ${groups})`);
    count[g]++;
    if (g !== Math.floor(k / G)) identity = false;
  }
  if (identity) return null;
  for (let g = 0; g < groups; g++)
    if (count[g] !== G)
      badValues(x, `puts ${count[g]} input channels in group ${g}; every group must hold the group size ${G}`);
  const perm = Int32Array.from({ length: K }, (_, k) => k);
  perm.sort((a, b) => gIdx[a] - gIdx[b] || a - b);
  return perm;
}

/** q [N, K] in the format (4-bit nibbles or bytes) with its columns reordered: column k of the result is column
 * perm[k] of `q`. */
export function permuteColumns(q: Uint8Array, N: number, K: number, bits: 4 | 8, perm: Int32Array): Uint8Array {
  const out = new Uint8Array(q.length);
  if (bits === 8) {
    for (let n = 0; n < N; n++) {
      const row = n * K;
      for (let k = 0; k < K; k++) out[row + k] = q[row + perm[k]];
    }
    return out;
  }
  const half = K / 2;
  for (let n = 0; n < N; n++) {
    const row = n * half;
    for (let k = 0; k < K; k += 2) {
      const a = perm[k];
      const b = perm[k + 1];
      const lo = (q[row + (a >> 1)] >> ((a & 1) << 2)) & 15;
      const hi = (q[row + (b >> 1)] >> ((b & 1) << 2)) & 15;
      out[row + (k >> 1)] = lo | (hi << 4);
    }
  }
  return out;
}
