// FP8 e4m3 checkpoints with block scales (DeepSeek-V3's layout, Qwen3-*-FP8), kept at 1 byte a weight.
// Layout, as vLLM's Fp8LinearMethod reads it with a weight_block_size (vllm/model_executor/layers/quantization/fp8.py:
// `weight` float8_e4m3fn [N, K], `weight_scale_inv` float32 [ceil(N / bn), ceil(K / bk)]; the dequantized weight is
// weight * weight_scale_inv of its block, as its block-dequant fallback computes):
//   W[n, k] = e4m3(weight[n, k]) * weight_scale_inv[n / bn, k / bk]
// The native weights hold the codes as they are (View::Groups::e4m3, cpp/cpu/cpu_gemm_quant.h's FP8 schedule) with
// the block scales expanded to one f32 per row and group of G columns along K (G = 128, 64 or 32: the largest that
// divides bk; a block's scale repeated over its rows and groups; ~1/32 byte a weight at G = 128): the kernels decode
// each code to bf16 exactly (every e4m3 value, subnormals included, is a normal bf16) and multiply activations rounded
// to bf16, as the 4-bit kernels do. Where no such G exists (bk not a multiple of 32), on CUDA (its FP8 kernel has not
// run on a GPU yet: ts/model/quantized/upload.ts), for MoE experts and with loadModel's quantize, the weight is
// dequantized to f32 at load instead (exact up to one rounding of e4m3 * scale; 4 bytes a weight, which the load log
// states). A NaN code (0x7f / 0xff; e4m3fn has no infinity) is refused by name (ModelFormatError): vLLM would load it
// and compute NaN for every token that meets the row.
import type { Fp8BlockScheme } from "./quantConfig.js";
import { badValues, FLOATS, floats, need, type LoadedTensors, type QuantTensorSpec } from "./tensors.js";

export function fp8Tensors(prefix: string, N: number, K: number, s: Fp8BlockScheme): QuantTensorSpec[] {
  const [bn, bk] = s.blockSize;
  return [
    { role: "weight", name: `${prefix}.weight`, shape: [N, K], dtypes: ["F8_E4M3"] },
    {
      role: "weight_scale_inv",
      name: `${prefix}.weight_scale_inv`,
      shape: [Math.ceil(N / bn), Math.ceil(K / bk)],
      dtypes: FLOATS,
    },
  ];
}

/** The 256 e4m3fn values (1 sign, 4 exponent bits biased by 7, 3 mantissa bits; 0x7f / 0xff are NaN, no infinity). */
export const E4M3_VALUES: Float64Array = (() => {
  const v = new Float64Array(256);
  for (let b = 0; b < 256; b++) {
    const sign = b & 0x80 ? -1 : 1;
    const e = (b >> 3) & 15;
    const m = b & 7;
    if (e === 15 && m === 7) v[b] = NaN;
    else v[b] = sign * (e === 0 ? (m / 8) * 2 ** -6 : (1 + m / 8) * 2 ** (e - 7));
  }
  return v;
})();

/** One FP8 linear weight as NativeModel.setQuantizedWeight takes it (format "e4m3"). */
export interface Fp8QuantWeight {
  format: "e4m3";
  bits: 8;
  /** Columns per scale: 128, 64 or 32; K need not be a multiple (the last group is partial). */
  groupSize: number;
  /** [N, K] */
  shape: [number, number];
  /** The checkpoint's e4m3fn codes [N, K], as stored. */
  q: Uint8Array;
  /** f32 [N, ceil(K / groupSize)]: row n, group g takes weight_scale_inv[n / bn, g * groupSize / bk]. */
  scales: Float32Array;
}

/** The native weights' group for a k-block of bk columns: the largest of 128, 64, 32 dividing it, or null. */
export function fp8GroupSize(s: Fp8BlockScheme): number | null {
  const bk = s.blockSize[1];
  return [128, 64, 32].find((g) => bk % g === 0) ?? null;
}

/** Bytes an [N, K] FP8 weight holds natively (codes and expanded scales). */
export function fp8WeightBytes(N: number, K: number, groupSize: number): number {
  return N * K + 4 * N * Math.ceil(K / groupSize);
}

/**
 * The index of the first NaN code (0x7f / 0xff: low 7 bits all ones) in `w`, or -1. Four codes a step where the
 * bytes allow a word view: adding 1 to each byte's low 7 bits carries into its top bit only for 0x7f, and never into
 * the next byte (a 7B checkpoint holds ~6.5 G codes; byte by byte the scan took seconds).
 */
export function firstNanCode(w: Uint8Array): number {
  const isNan = (i: number): boolean => (w[i] & 0x7f) === 0x7f;
  const head = (4 - (w.byteOffset & 3)) & 3;
  if (w.length < head + 4) return w.findIndex((_, i) => isNan(i));
  for (let i = 0; i < head; i++) if (isNan(i)) return i;
  const words = new Uint32Array(w.buffer, w.byteOffset + head, (w.length - head) >>> 2);
  for (let j = 0; j < words.length; j++)
    if ((((words[j] & 0x7f7f7f7f) + 0x01010101) & 0x80808080) !== 0)
      for (let i = head + 4 * j; i < head + 4 * j + 4; i++) if (isNan(i)) return i;
  for (let i = head + 4 * words.length; i < w.length; i++) if (isNan(i)) return i;
  return -1;
}

/** Throws ModelFormatError naming the tensor and the first NaN code (0x7f / 0xff) of an [N, K] e4m3 weight. */
function refuseNanCodes(t: LoadedTensors, K: number): Uint8Array {
  const x = need(t, "weight");
  const w = x.bytes;
  const i = firstNanCode(w);
  if (i >= 0)
    badValues(
      x,
      `holds the e4m3 NaN code 0x${w[i].toString(16)} at [${Math.floor(i / K)}, ${i % K}]; ` +
        "a finite checkpoint has none (e4m3fn has no infinity): re-export the weight",
    );
  return w;
}

/** The codes and per-(row, group) scales of one projection (NaN codes refused). */
export function readFp8(t: LoadedTensors, N: number, K: number, s: Fp8BlockScheme, groupSize: number): Fp8QuantWeight {
  const [bn, bk] = s.blockSize;
  const q = refuseNanCodes(t, K);
  const block = floats(need(t, "weight_scale_inv"));
  const cols = Math.ceil(K / bk),
    ng = Math.ceil(K / groupSize);
  const scales = new Float32Array(N * ng);
  for (let n = 0; n < N; n++) {
    const srow = Math.floor(n / bn) * cols;
    for (let g = 0; g < ng; g++) scales[n * ng + g] = block[srow + Math.floor((g * groupSize) / bk)];
  }
  // the codes as read (readQuantizedLinear reads each tensor into its own buffer; the upload copies them)
  return { format: "e4m3", bits: 8, groupSize, shape: [N, K], q, scales };
}

/** The dequantized weight [N, K] in f32, row-major (NaN codes refused). */
export function decodeFp8(t: LoadedTensors, N: number, K: number, s: Fp8BlockScheme): Float32Array {
  const [bn, bk] = s.blockSize;
  const w = refuseNanCodes(t, K);
  const scale = floats(need(t, "weight_scale_inv"));
  const cols = Math.ceil(K / bk);
  const out = new Float32Array(N * K);
  for (let n = 0; n < N; n++) {
    const srow = Math.floor(n / bn) * cols;
    for (let k = 0; k < K; k++) out[n * K + k] = E4M3_VALUES[w[n * K + k]] * scale[srow + Math.floor(k / bk)];
  }
  return out;
}

/** Fp8QuantWeight dequantized to f32 [N, K] (what a weight the native side cannot hold as e4m3 is uploaded as). */
export function fp8ToF32(w: Fp8QuantWeight): Float32Array {
  const [N, K] = w.shape;
  const ng = Math.ceil(K / w.groupSize);
  const out = new Float32Array(N * K);
  for (let n = 0; n < N; n++)
    for (let k = 0; k < K; k++)
      out[n * K + k] = E4M3_VALUES[w.q[n * K + k]] * w.scales[n * ng + Math.floor(k / w.groupSize)];
  return out;
}
