// FP8 e4m3 checkpoints with block scales (DeepSeek-V3's layout, Qwen3-*-FP8), dequantized at load.
// Layout, as vLLM's Fp8LinearMethod reads it with a weight_block_size (vllm/model_executor/layers/quantization/fp8.py:
// `weight` float8_e4m3fn [N, K], `weight_scale_inv` float32 [ceil(N / bn), ceil(K / bk)]; the dequantized weight is
// weight * weight_scale_inv of its block, as its block-dequant fallback computes):
//   W[n, k] = e4m3(weight[n, k]) * weight_scale_inv[n / bn, k / bk]
// Why dequantize: e4m3's 16 values per binade are not uniformly spaced, so no integer grid of the grouped format
// holds them exactly, and there is no FP8 GEMM here (vLLM itself runs FP8 natively only on sm_89+, and elsewhere
// falls back to Marlin W8A16). The product of a 4-bit e4m3 significand and the scale is rounded once to f32 (exact
// when the scale is bf16 or f16; one rounding of an f32 scale, as an f32 kernel's multiply would do); the layer then
// costs 4 bytes per weight, 4x the checkpoint's, which the load log states.
import type { Fp8BlockScheme } from "./quantConfig.js";
import { FLOATS, floats, need, type LoadedTensors, type QuantTensorSpec } from "./tensors.js";

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

/** The dequantized weight [N, K] in f32, row-major. */
export function decodeFp8(t: LoadedTensors, N: number, K: number, s: Fp8BlockScheme): Float32Array {
  const [bn, bk] = s.blockSize;
  const w = need(t, "weight").bytes;
  const scale = floats(need(t, "weight_scale_inv"));
  const cols = Math.ceil(K / bk);
  const out = new Float32Array(N * K);
  for (let n = 0; n < N; n++) {
    const srow = Math.floor(n / bn) * cols;
    for (let k = 0; k < K; k++) out[n * K + k] = E4M3_VALUES[w[n * K + k]] * scale[srow + Math.floor(k / bk)];
  }
  return out;
}
