// AutoAWQ's GEMM layout into the grouped format.
// As AutoAWQ's WQLinear_GEMM.from_linear packs it (awq/modules/linear/gemm.py: pack_num = 32 / 4, order_map
// [0, 2, 4, 6, 1, 3, 5, 7]: field i of a word holds output channel 8c + order_map[i]; GPTQModel's
// nn_modules/qlinear/awq_gemm.py unpacks with AWQ_REVERSE_ORDER (0, 4, 1, 5, 2, 6, 3, 7); vLLM's awq.py and
// awq_triton.py read the same):
//   qweight int32 [K, N / 8]      packed along N, AWQ's interleaved order
//   qzeros  int32 [K / G, N / 8]  packed the same way; zero points stored as they are (no minus one)
//   scales  f16   [K / G, N]
//   W[n, k] = scales[k / G, n] * (q(k, n) - z(k / G, n))
import type { GroupedQuantWeight } from "../quantFormat.js";
import type { AwqScheme } from "./quantConfig.js";
import { field, FLOATS, floats, int32Words, need, type LoadedTensors, type QuantTensorSpec } from "./tensors.js";

/** Field of each output channel within its word: column 8c + j sits in field AWQ_REVERSE_ORDER[j]. */
export const AWQ_REVERSE_ORDER = [0, 4, 1, 5, 2, 6, 3, 7] as const;

export function awqTensors(prefix: string, N: number, K: number, s: AwqScheme): QuantTensorSpec[] {
  const groups = K / (s.groupSize ?? K);
  return [
    { role: "qweight", name: `${prefix}.qweight`, shape: [K, N / 8], dtypes: ["I32"] },
    { role: "qzeros", name: `${prefix}.qzeros`, shape: [groups, N / 8], dtypes: ["I32"] },
    { role: "scales", name: `${prefix}.scales`, shape: [groups, N], dtypes: FLOATS },
  ];
}

export function decodeAwq(t: LoadedTensors, N: number, K: number, s: AwqScheme): GroupedQuantWeight {
  const G = s.groupSize ?? K;
  const groups = K / G;
  const words = N / 8;
  const qweight = int32Words(need(t, "qweight"));
  const qzeros = int32Words(need(t, "qzeros"));
  const scales = floats(need(t, "scales"));
  // Two input rows at a time give whole bytes of the format (row k in the low nibble, k + 1 in the high one).
  const q = new Uint8Array((N * K) / 2);
  const half = K / 2;
  for (let k = 0; k < K; k += 2)
    for (let c = 0; c < words; c++) {
      const lo = qweight[k * words + c];
      const hi = qweight[(k + 1) * words + c];
      for (let j = 0; j < 8; j++) {
        const shift = 4 * AWQ_REVERSE_ORDER[j];
        q[(8 * c + j) * half + (k >> 1)] = ((lo >>> shift) & 15) | (((hi >>> shift) & 15) << 4);
      }
    }
  const outScales = new Float32Array(N * groups);
  const zeros = new Uint8Array(N * groups);
  for (let g = 0; g < groups; g++)
    for (let n = 0; n < N; n++) {
      outScales[n * groups + g] = scales[g * N + n];
      zeros[n * groups + g] = field(qzeros[g * words + (n >> 3)], AWQ_REVERSE_ORDER[n & 7], 4);
    }
  return { bits: 4, groupSize: G, shape: [N, K], q, scales: outScales, zeros };
}
