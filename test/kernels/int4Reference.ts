// Grouped quantized weights for the kernel tests (the format of ts/model/quantFormat.ts): random q, scales, zero
// points and act-order perms, and the tensors the gemm op takes for them (w u8, wBits, wGroupSize, wScales, wZeros,
// wPerm). The tests hold the kernels to the float64 reference of the dequantized weights (dequantizeToInputOrder).
import type { Addon, DeviceKind, NativeTensor } from "../../ts/native/addonTypes.js";
import type { GroupedQuantWeight } from "../../ts/model/quantFormat.js";
import { shuffled } from "./reference.js";
import { tensorOf } from "./tensors.js";

export interface GroupedOptions {
  bits: 4 | 8;
  groupSize: number;
  /** Random zero points (else the middle: 8 or 128). */
  asymmetric?: boolean;
  /** A random act-order perm. */
  perm?: boolean;
}

/** A random grouped weight [N, K]: q uniform over its range, scales in +-[0.001, 0.05). */
export function randomGrouped(rng: () => number, N: number, K: number, o: GroupedOptions): GroupedQuantWeight {
  const levels = o.bits === 4 ? 16 : 256,
    groups = (N * K) / o.groupSize;
  const q = new Uint8Array(o.bits === 4 ? (N * K) / 2 : N * K);
  for (let i = 0; i < q.length; i++) q[i] = Math.floor(rng() * 256);
  const scales = Float32Array.from({ length: groups }, () => (rng() < 0.5 ? -1 : 1) * (0.001 + 0.049 * rng()));
  const zeros = Uint8Array.from({ length: groups }, () => (o.asymmetric ? Math.floor(rng() * levels) : levels / 2));
  const w: GroupedQuantWeight = { bits: o.bits, groupSize: o.groupSize, shape: [N, K], q, scales, zeros };
  if (o.perm) w.perm = shuffled(rng, K);
  return w;
}

/** The gemm op's fields for w on `device` (wZeros omitted when every zero point is the middle and !withZeros). */
export function groupedTensors(
  addon: Addon,
  device: DeviceKind,
  w: GroupedQuantWeight,
  withZeros = true,
): {
  w: NativeTensor;
  wBits: 4 | 8;
  wGroupSize: number;
  wScales: NativeTensor;
  wZeros?: NativeTensor;
  wPerm?: NativeTensor;
} {
  const [N, K] = w.shape;
  const qt = addon.tensor(device, "u8", [N, (K * w.bits) / 8]);
  qt.write(w.q);
  let wZeros: NativeTensor | undefined;
  if (withZeros) {
    wZeros = addon.tensor(device, "u8", [w.zeros.length]);
    wZeros.write(w.zeros);
  }
  let wPerm: NativeTensor | undefined;
  if (w.perm) {
    wPerm = addon.tensor(device, "i32", [K]);
    wPerm.write(w.perm);
  }
  return {
    w: qt,
    wBits: w.bits,
    wGroupSize: w.groupSize,
    wScales: tensorOf(addon, device, "f32", [w.scales.length], w.scales),
    wZeros,
    wPerm,
  };
}

/** Round half to even, as std::nearbyint in the default rounding mode. */
function roundHalfEven(v: number): number {
  const r = Math.round(v);
  return Math.abs(v % 1) === 0.5 && r % 2 !== 0 ? r - 1 : r;
}

/**
 * w [N, K] (values as stored, in f32) quantized as loadModel's quantize: "int4" does it (cpp/model/model_weights.cc
 * setQuantizedInt4, Q4_0's scheme): per group of G, m = the first value of largest magnitude, d = f32(m / -8),
 * q = clamp(round-half-even(f32(w / d)) + 8, 0, 15) (d = 0: q = 8), zero point 8.
 */
export function quantizeQ4Rows(w: ArrayLike<number>, N: number, K: number, G: number): GroupedQuantWeight {
  const q = new Uint8Array((N * K) / 2),
    scales = new Float32Array((N * K) / G),
    zeros = new Uint8Array((N * K) / G).fill(8);
  for (let n = 0; n < N; n++)
    for (let g = 0; g < K / G; g++) {
      let m = 0;
      for (let k = 0; k < G; k++) if (Math.abs(w[n * K + g * G + k]) > Math.abs(m)) m = w[n * K + g * G + k];
      const d = Math.fround(m / -8);
      scales[n * (K / G) + g] = d;
      for (let k = 0; k < G; k++) {
        const c = g * G + k;
        const v = d === 0 ? 8 : Math.max(0, Math.min(15, roundHalfEven(Math.fround(w[n * K + c] / d)) + 8));
        q[(n * K + c) >> 1] |= c & 1 ? v << 4 : v;
      }
    }
  return { bits: 4, groupSize: G, shape: [N, K], q, scales, zeros };
}
