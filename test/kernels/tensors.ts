// Test helpers over the addon's tensors: create from values, read back, compare bits. Device-generic so the CUDA
// tests can reuse them.
import type { Addon, DeviceKind, DType, NativeTensor } from "../../ts/native/addonTypes.js";

/** A tensor holding `values` (converted to dtype; i32 tensors take integers). */
export function tensorOf(
  addon: Addon,
  device: DeviceKind,
  dtype: DType,
  shape: number[],
  values: ArrayLike<number>,
): NativeTensor {
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

/**
 * gemmBlocks' layout against a plain (M, N) result: block j (columns [c_j, c_j+1)) is a (rows, n_j) matrix at
 * rows * c_j whose row row0 + m holds plain row m bitwise; every other element still holds `poison`. Returns the
 * first difference, or undefined.
 */
export function blocksMismatch(
  plain: Float32Array,
  blocks: Float32Array,
  M: number,
  N: number,
  cuts: [number, number],
  rows: number,
  row0: number,
  poison: number,
): string | undefined {
  const want = new Float32Array(rows * N).fill(poison);
  const bounds = [0, cuts[0], cuts[1], N];
  for (let j = 0; j < 3; j++) {
    const c = bounds[j]!,
      n = bounds[j + 1]! - c;
    for (let m = 0; m < M; m++) for (let i = 0; i < n; i++) want[rows * c + (row0 + m) * n + i] = plain[m * N + c + i]!;
  }
  const a = bitsOf(blocks, 0, rows * N),
    b = bitsOf(want);
  for (let i = 0; i < b.length; i++) if (a[i] !== b[i]) return `element ${i}: ${blocks[i]} vs ${want[i]}`;
  return undefined;
}

/**
 * ropeKvWrite against rope then kvWrite on `device`: the same random q, k, v, positions and slots through both, and
 * q, k and both caches compared bitwise. Returns the first difference, or undefined.
 */
export async function ropeKvWriteMismatch(
  addon: Addon,
  device: DeviceKind,
  dtype: DType,
  cacheDtype: DType,
  shape: { T: number; Hq: number; Hk: number; D: number; pages: number; pageSize: number },
  rand: () => number,
): Promise<string | undefined> {
  const { T, Hq, Hk, D, pages, pageSize } = shape;
  const values = (n: number) => Float32Array.from({ length: n }, () => 2 * rand() - 1);
  const qv = values(T * Hq * D),
    kv = values(T * Hk * D),
    vv = values(T * Hk * D),
    cache = values(pages * pageSize * Hk * D);
  const positions = Array.from({ length: T }, () => Math.floor(rand() * 4096));
  const slots = Array.from({ length: pages * pageSize }, (_, i) => i)
    .sort(() => rand() - 0.5)
    .slice(0, T);
  const invFreq = Float32Array.from({ length: D / 2 }, (_, i) => 10000 ** ((-2 * i) / D));
  const run = async (fused: boolean) => {
    const t = {
      q: tensorOf(addon, device, dtype, [T, Hq, D], qv),
      k: tensorOf(addon, device, dtype, [T, Hk, D], kv),
      v: tensorOf(addon, device, dtype, [T, Hk, D], vv),
      positions: tensorOf(addon, device, "i32", [T], positions),
      invFreq: tensorOf(addon, device, "f32", [D / 2], invFreq),
      kCache: tensorOf(addon, device, cacheDtype, [pages, pageSize, Hk, D], cache),
      vCache: tensorOf(addon, device, cacheDtype, [pages, pageSize, Hk, D], cache),
      slots: tensorOf(addon, device, "i32", [T], slots),
    };
    if (fused) await addon.ops.ropeKvWrite(t);
    else (await addon.ops.rope(t), await addon.ops.kvWrite(t));
    const out = { q: t.q.readF32(), k: t.k.readF32(), kCache: t.kCache.readF32(), vCache: t.vCache.readF32() };
    disposeAll(...Object.values(t));
    return out;
  };
  const [a, b] = [await run(true), await run(false)];
  for (const key of ["q", "k", "kCache", "vCache"] as const) {
    const x = bitsOf(a[key]),
      y = bitsOf(b[key]);
    for (let i = 0; i < x.length; i++) if (x[i] !== y[i]) return `${key}[${i}]: ${a[key][i]} fused vs ${b[key][i]}`;
  }
  return undefined;
}
