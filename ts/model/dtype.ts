// Storage dtypes of checkpoint tensors and conversions between their raw little-endian bytes and float32.
// The element conversions match cpp/common.h (round-to-nearest-even for bf16 and f16, NaN preserved).

/**
 * Safetensors dtype names deliberate reads. Floats are weights; the integer dtypes appear in non-weight buffers and
 * in pre-quantized checkpoints' packed weights, zero points and group indices (I32, I64, I8, U8), F8_E4M3 in FP8
 * checkpoints (ts/model/quantized).
 */
export type SafetensorsDType = "F32" | "F16" | "BF16" | "I32" | "I64" | "I8" | "U8" | "F8_E4M3";
export const SAFETENSORS_DTYPES: readonly SafetensorsDType[] = [
  "F32",
  "F16",
  "BF16",
  "I32",
  "I64",
  "I8",
  "U8",
  "F8_E4M3",
];
export const FLOAT_DTYPES: readonly SafetensorsDType[] = ["F32", "F16", "BF16"];

export const DTYPE_BYTES: Record<SafetensorsDType, number> = {
  F32: 4,
  F16: 2,
  BF16: 2,
  I32: 4,
  I64: 8,
  I8: 1,
  U8: 1,
  F8_E4M3: 1,
};

/** Native (addon) dtype name for a float safetensors dtype. */
export function nativeDType(dtype: SafetensorsDType): "f32" | "f16" | "bf16" {
  if (dtype === "F32") return "f32";
  if (dtype === "F16") return "f16";
  if (dtype === "BF16") return "bf16";
  throw new Error(`dtype ${dtype} is not a floating-point weight dtype (expected F32, F16 or BF16)`);
}

const f32 = new Float32Array(1);
const u32 = new Uint32Array(f32.buffer);

export function bf16BitsToF32(bits: number): number {
  u32[0] = bits << 16;
  return f32[0];
}

export function f32ToBf16Bits(x: number): number {
  f32[0] = x;
  const b = u32[0];
  if ((b & 0x7fffffff) > 0x7f800000) return ((b >>> 16) | 0x40) & 0xffff; // quiet NaN
  return ((b + 0x7fff + ((b >>> 16) & 1)) >>> 16) & 0xffff;
}

export function f16BitsToF32(h: number): number {
  const sign = h & 0x8000 ? -1 : 1;
  const exp = (h >>> 10) & 0x1f;
  const mant = h & 0x3ff;
  if (exp === 0) return sign * mant * 2 ** -24;
  if (exp === 31) return mant ? NaN : sign * Infinity;
  return sign * (1 + mant / 1024) * 2 ** (exp - 15);
}

export function f32ToF16Bits(x: number): number {
  f32[0] = x;
  const b = u32[0];
  const sign = (b >>> 16) & 0x8000;
  const exp = (b >>> 23) & 0xff;
  let mant = b & 0x7fffff;
  if (exp === 0xff) return sign | 0x7c00 | (mant ? 0x200 : 0);
  let e = exp - 127 + 15;
  if (e >= 31) return sign | 0x7c00; // overflow -> inf
  if (e <= 0) {
    if (e < -10) return sign; // underflow -> signed zero
    mant |= 0x800000; // subnormal: shift the implicit 1 in, round to nearest even
    const shift = 14 - e;
    const half = 1 << (shift - 1);
    const rounded = (mant + half - 1 + ((mant >>> shift) & 1)) >>> shift;
    return sign | rounded;
  }
  const rounded = mant + 0xfff + ((mant >>> 13) & 1);
  if (rounded & 0x800000) {
    mant = 0;
    e += 1;
    if (e >= 31) return sign | 0x7c00;
  } else {
    mant = rounded;
  }
  return sign | (e << 10) | (mant >>> 13);
}

/** Decodes raw little-endian tensor bytes of a float dtype into float32 values. */
export function bytesToF32(bytes: Uint8Array, dtype: SafetensorsDType): Float32Array {
  const n = bytes.byteLength / DTYPE_BYTES[dtype];
  const dv = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const out = new Float32Array(n);
  if (dtype === "F32") {
    for (let i = 0; i < n; i++) out[i] = dv.getFloat32(i * 4, true);
  } else if (dtype === "BF16") {
    for (let i = 0; i < n; i++) out[i] = bf16BitsToF32(dv.getUint16(i * 2, true));
  } else if (dtype === "F16") {
    for (let i = 0; i < n; i++) out[i] = f16BitsToF32(dv.getUint16(i * 2, true));
  } else {
    throw new Error(`bytesToF32: dtype ${dtype} is not a float dtype`);
  }
  return out;
}

/** Encodes float values as raw little-endian bytes of a float dtype (rounding to nearest even). */
export function f32ToBytes(values: ArrayLike<number>, dtype: SafetensorsDType): Uint8Array {
  const n = values.length;
  const out = new Uint8Array(n * DTYPE_BYTES[dtype]);
  const dv = new DataView(out.buffer);
  if (dtype === "F32") {
    for (let i = 0; i < n; i++) dv.setFloat32(i * 4, values[i], true);
  } else if (dtype === "BF16") {
    for (let i = 0; i < n; i++) dv.setUint16(i * 2, f32ToBf16Bits(values[i]), true);
  } else if (dtype === "F16") {
    for (let i = 0; i < n; i++) dv.setUint16(i * 2, f32ToF16Bits(values[i]), true);
  } else {
    throw new Error(`f32ToBytes: dtype ${dtype} is not a float dtype`);
  }
  return out;
}
