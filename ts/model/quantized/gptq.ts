// GPTQ checkpoints (AutoGPTQ / GPTQModel `QuantLinear`) into the grouped format.
// Layout, as AutoGPTQ's QuantLinear.pack writes it (auto_gptq/nn_modules/qlinear/qlinear_cuda_old.py, `pack`, and its
// unpacking in `forward`; vLLM's vllm/model_executor/layers/quantization/gptq.py creates the same parameters):
//   qweight int32 [K / (32/bits), N]   packed along K: word (i, n) holds channel i*(32/bits) + j in bits [bits*j, ...)
//   qzeros  int32 [K / G, N / (32/bits)] packed along N: word (g, c) holds output channel c*(32/bits) + j in field j
//   scales  f16   [K / G, N]
//   g_idx   int32 [K] the group of each input channel (act-order / desc_act permutes it); absent = k / G
//   W[n, k] = scales[g_idx[k], n] * (q(k, n) - z(g_idx[k], n)), z = the stored field + 1 in the v1 format ("gptq":
//   AutoGPTQ packs `zeros -= 1`; its dequantizer adds 1 back without masking, so a stored 0b1111 reads as 16 at 4
//   bits), z = the stored field in "gptq_v2" (GPTQModel).
import type { GroupedQuantWeight } from "../quantFormat.js";
import type { GptqScheme } from "./quantConfig.js";
import {
  badValues,
  field,
  FLOATS,
  floats,
  int32Words,
  need,
  permFromGroupIndex,
  permuteColumns,
  type LoadedTensors,
  type QuantTensorSpec,
} from "./tensors.js";

export function gptqTensors(prefix: string, N: number, K: number, s: GptqScheme): QuantTensorSpec[] {
  const pf = 32 / s.bits;
  const groups = K / (s.groupSize ?? K);
  return [
    { role: "qweight", name: `${prefix}.qweight`, shape: [K / pf, N], dtypes: ["I32"] },
    { role: "qzeros", name: `${prefix}.qzeros`, shape: [groups, N / pf], dtypes: ["I32"] },
    { role: "scales", name: `${prefix}.scales`, shape: [groups, N], dtypes: FLOATS },
    { role: "g_idx", name: `${prefix}.g_idx`, shape: [K], dtypes: ["I32", "I64"], optional: true },
  ];
}

export function decodeGptq(t: LoadedTensors, N: number, K: number, s: GptqScheme): GroupedQuantWeight {
  const bits = s.bits;
  const pf = 32 / bits;
  const G = s.groupSize ?? K;
  const groups = K / G;
  const qweight = int32Words(need(t, "qweight"));
  const qzerosT = need(t, "qzeros");
  const qzeros = int32Words(qzerosT);
  const scales = floats(need(t, "scales"));
  const gIdx = t.get("g_idx");
  const perm = gIdx ? permFromGroupIndex(gIdx, K, G) : null;

  // A qweight word's little-endian bytes are already the format's bytes of its pf channels (channel j of the word in
  // field j; the format's byte b holds channels 2b, 2b+1 at 4 bits, channel b at 8): q as words [N, K/pf] is
  // qweight [K/pf, N] transposed. Act-order then reorders each row's columns (column k reads channel perm[k]).
  const stored = new Uint8Array(bits === 4 ? (N * K) / 2 : N * K);
  const out = new Uint32Array(stored.buffer);
  const rows = K / pf;
  for (let i = 0; i < rows; i++) for (let n = 0; n < N; n++) out[n * rows + i] = qweight[i * N + n];
  const q = perm ? permuteColumns(stored, N, K, bits, perm) : stored;
  const outScales = new Float32Array(N * groups);
  const zeros = new Uint8Array(N * groups);
  const zeroBias = s.zeroPointsMinusOne ? 1 : 0;
  for (let g = 0; g < groups; g++)
    for (let n = 0; n < N; n++) {
      outScales[n * groups + g] = scales[g * N + n];
      const z = field(qzeros[g * (N / pf) + Math.floor(n / pf)], n % pf, bits) + zeroBias;
      if (z > 255)
        badValues(
          qzerosT,
          `holds a v1 zero point of ${z} (a zero point of 0 stored minus one wraps to ${z - 1}) for output channel ${n}, group ${g}; 8-bit zero points must be 0..255, re-export the checkpoint in the gptq_v2 format`,
        );
      zeros[n * groups + g] = z;
    }
  return { bits, groupSize: G, shape: [N, K], q, scales: outScales, zeros, ...(perm ? { perm } : {}) };
}
