// Helpers for the CUDA kernel tests: availability (visible skip), fresh random inputs, poisoned outputs on both
// devices, and the relative-L2 error of METHOD.md. The float64 references themselves are in reference.ts.
import { loadAddon } from "../../ts/native/loadAddon.js";
import type { DType, NativeTensor } from "../../ts/native/addonTypes.js";
import { mulberry32 } from "../../ts/util/random.js";

export const addon = loadAddon();
const report = addon.listDevices();
/** Why the CUDA tests skip, or undefined when a CUDA device is usable. */
export const cudaUnavailable: string | undefined = report.cuda.available
  ? undefined
  : `CUDA unavailable: ${report.cuda.reason ?? (report.cuda.compiled ? "no device" : "built without CUDA")}`;
if (cudaUnavailable) console.warn(`[cuda tests] skipped: ${cudaUnavailable}`);

// ---- fresh random inputs (a new seed per run, printed so a failure can be replayed) ----
const runSeed = Number(process.env.DL_TEST_SEED ?? Math.floor(Math.random() * 2 ** 31));
if (!cudaUnavailable) console.log(`[cuda tests] DL_TEST_SEED=${runSeed}`);
/** Uniform in [0, 1): mulberry32 from DL_TEST_SEED. */
export const rand = mulberry32(runSeed);
export const randInt = (lo: number, hi: number) => lo + Math.floor(rand() * (hi - lo)); // [lo, hi)
/** Uniform in [-scale, scale), never exactly zero. */
export function randn(n: number, scale = 1): Float32Array {
  const a = new Float32Array(n);
  for (let i = 0; i < n; i++) a[i] = (rand() * 2 - 1 || 0.5) * scale;
  return a;
}
export function shuffle<T>(a: T[]): T[] {
  for (let i = a.length - 1; i > 0; i--) {
    const j = randInt(0, i + 1);
    [a[i], a[j]] = [a[j], a[i]];
  }
  return a;
}

// ---- rounding as the kernels store ----
const f32 = new Float32Array(1);
const u32 = new Uint32Array(f32.buffer);
export function roundBf16(x: number): number {
  f32[0] = x;
  const u = u32[0];
  u32[0] = ((u + 0x7fff + ((u >>> 16) & 1)) >>> 16) << 16;
  return f32[0];
}
export function roundTo(values: Float32Array, dtype: DType): Float32Array {
  if (dtype === "bf16") return values.map(roundBf16);
  if (dtype === "f16") {
    const t = addon.tensor("cpu", "f16", [values.length]);
    t.writeF32(values);
    const r = t.readF32();
    t.dispose();
    return r;
  }
  return values;
}

// ---- tensors ----
const live: NativeTensor[] = [];
/** A tensor on `device` holding `values` (converted to dtype); disposed by disposeAll(). */
export function tensor(
  device: "cpu" | "cuda",
  dtype: DType,
  shape: number[],
  values?: ArrayLike<number>,
): NativeTensor {
  const t = addon.tensor(device, dtype, shape);
  live.push(t);
  if (values) {
    if (dtype === "i32") t.write(Int32Array.from(values));
    else t.writeF32(Float32Array.from(values));
  }
  return t;
}
/** An output tensor filled with NaN (i32: -7) so unwritten elements show. */
export function poisoned(device: "cpu" | "cuda", dtype: DType, shape: number[]): NativeTensor {
  const n = shape.reduce((a, b) => a * b, 1);
  return tensor(device, dtype, shape, dtype === "i32" ? new Int32Array(n).fill(-7) : new Float32Array(n).fill(NaN));
}
export function disposeAll(): void {
  for (const t of live.splice(0)) t.dispose();
}
export const ints = (t: NativeTensor) => Array.from(new Int32Array(t.read()));

/** Runs `fn` and returns false when the CPU op is still a stub ("not implemented yet"), so tests can skip it. */
export async function cpuHas(fn: () => Promise<void>): Promise<boolean> {
  try {
    await fn();
    return true;
  } catch (e) {
    if (/not implemented/.test((e as Error).message)) return false;
    throw e;
  }
}

// ---- error measures ----
/** ||out - ref|| / ||ref||; Infinity when out holds a NaN or differs in length. */
/** The largest relL2 over consecutive rows of `row` values: an error confined to some heads or sequences shows in
 *  full, where one relL2 over the whole output can hide it behind rows that are easy to get right. */
export function maxRowRelL2(out: ArrayLike<number>, ref: ArrayLike<number>, row: number): number {
  if (out.length !== ref.length || ref.length % row) return Infinity;
  let worst = 0;
  for (let i = 0; i < ref.length; i += row)
    worst = Math.max(
      worst,
      relL2(Array.prototype.slice.call(out, i, i + row), Array.prototype.slice.call(ref, i, i + row)),
    );
  return worst;
}

export function relL2(out: ArrayLike<number>, ref: ArrayLike<number>): number {
  if (out.length !== ref.length) return Infinity;
  let num = 0,
    den = 0;
  for (let i = 0; i < ref.length; i++) {
    if (Number.isNaN(out[i])) return Infinity;
    num += (out[i] - ref[i]) ** 2;
    den += ref[i] ** 2;
  }
  return Math.sqrt(num / Math.max(den, 1e-300));
}
export function bitsEqual(a: Float32Array, b: Float32Array): boolean {
  const ua = new Uint32Array(a.buffer, a.byteOffset, a.length),
    ub = new Uint32Array(b.buffer, b.byteOffset, b.length);
  return ua.length === ub.length && ua.every((v, i) => v === ub[i]);
}
