// FP8 e4m3 weights for the kernel tests (View::Groups::e4m3, the gemm op's wFormat "e4m3"): random codes in which
// every one of the 254 finite codes appears (subnormals, both zeros), scales per (row, group of G columns; the last
// group partial when G does not divide K), the float64 dequantized weight the kernels are held to, and the op fields.
import { E4M3_VALUES } from "../../ts/model/quantized/fp8.js";
import type { Addon, DeviceKind, NativeTensor } from "../../ts/native/addonTypes.js";
import { tensorOf } from "./tensors.js";

export interface Fp8Weight {
  shape: [number, number];
  groupSize: number;
  /** e4m3fn codes [N, K]. */
  q: Uint8Array;
  /** f32 [N, ceil(K / G)], row-major. */
  scales: Float32Array;
}

export const isNanCode = (c: number): boolean => (c & 0x7f) === 0x7f;

/**
 * A random e4m3 weight [N, K]: codes uniform over the finite ones, then the first 254 positions (when N * K allows)
 * overwritten with every finite code once, so the subnormals (0x01-0x07, 0x81-0x87) and -0 (0x80) always appear;
 * scales +-[0.5, 1) / 4096 so the weights lie within +-0.11.
 */
export function randomFp8(rng: () => number, N: number, K: number, G: number): Fp8Weight {
  const q = new Uint8Array(N * K);
  for (let i = 0; i < q.length; i++) {
    let c = Math.floor(rng() * 256);
    while (isNanCode(c)) c = Math.floor(rng() * 256);
    q[i] = c;
  }
  const finite = Array.from({ length: 256 }, (_, c) => c).filter((c) => !isNanCode(c));
  for (let i = 0; i < Math.min(q.length, finite.length); i++) q[i] = finite[i];
  const ng = Math.ceil(K / G);
  const scales = Float32Array.from({ length: N * ng }, () => ((rng() < 0.5 ? -1 : 1) * (0.5 + 0.5 * rng())) / 4096);
  return { shape: [N, K], groupSize: G, q, scales };
}

/** The dequantized weight [N, K] in float64: e4m3(q) * scale of its group (exact: a 4-bit significand times f32). */
export function dequantizeFp8(w: Fp8Weight): Float64Array {
  const [N, K] = w.shape;
  const ng = Math.ceil(K / w.groupSize);
  const out = new Float64Array(N * K);
  for (let n = 0; n < N; n++)
    for (let k = 0; k < K; k++)
      out[n * K + k] = E4M3_VALUES[w.q[n * K + k]] * w.scales[n * ng + Math.floor(k / w.groupSize)];
  return out;
}

/** The gemm op's fields for w on `device`. */
export function fp8Tensors(
  addon: Addon,
  device: DeviceKind,
  w: Fp8Weight,
): { w: NativeTensor; wFormat: "e4m3"; wGroupSize: number; wScales: NativeTensor } {
  const [N, K] = w.shape;
  const qt = addon.tensor(device, "u8", [N, K]);
  qt.write(w.q);
  return {
    w: qt,
    wFormat: "e4m3",
    wGroupSize: w.groupSize,
    wScales: tensorOf(addon, device, "f32", [w.scales.length], w.scales),
  };
}
