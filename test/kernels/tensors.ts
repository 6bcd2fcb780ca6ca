// Test helpers over the addon's tensors: create from values, read back, compare bits. Device-generic so the CUDA
// tests can reuse them.
import type { Addon, DeviceKind, DType, NativeTensor } from "../../ts/native/addonTypes.js";

/** A tensor holding `values` (converted to dtype; i32 tensors take integers). */
export function tensorOf(addon: Addon, device: DeviceKind, dtype: DType, shape: number[], values: ArrayLike<number>): NativeTensor {
  const t = addon.tensor(device, dtype, shape);
  if (dtype === "i32") t.write(Int32Array.from(values));
  else t.writeF32(Float32Array.from(values));
  return t;
}

/** The values a float tensor actually stores (after rounding to its dtype). */
export function stored(t: NativeTensor): Float32Array {
  return t.readF32();
}

export function readI32(t: NativeTensor): Int32Array {
  return new Int32Array(t.read());
}

/** The raw bits of a tensor's first `count` f32 values from `offset` (for exact equality). */
export function bitsOf(values: Float32Array, offset = 0, count = values.length - offset): Uint32Array {
  return new Uint32Array(values.buffer, values.byteOffset + offset * 4, count).slice();
}

/** Disposes every tensor given. */
export function disposeAll(...ts: (NativeTensor | undefined)[]): void {
  for (const t of ts) t?.dispose();
}
