// compressed-tensors `pack-quantized` checkpoints (what llm-compressor writes for W4A16 / W8A16) into the grouped
// format. Layout, as compressed-tensors writes it (src/compressed_tensors/compressors/quantized_compressors/
// pack_quantized.py: `compression_param_info`, `compress_weight`, `pack_to_int32`; vLLM's
// compressed_tensors/schemes/compressed_tensors_wNa16.py creates the same parameters):
//   weight_packed     int32 [N, ceil(K / (32/bits))] packed along K: field j of word (n, c) holds input channel
//                     c*(32/bits) + j, as the signed value + 2^(bits-1) (so 0..15 / 0..255)
//   weight_scale      float [N, K / G] (the "channel" strategy: [N, 1])
//   weight_zero_point int32 [ceil(N / (32/bits)), K / G] asymmetric only: packed along N (pack_to_int32's
//                     packed_dim 0), each the signed zero point + 2^(bits-1); a symmetric scheme's zero point is 0
//   weight_g_idx      int32 [K] optional (actorder "group"): the group of each input channel
//   weight_shape      int32 / int64 [2] = [N, K]
//   W[n, k] = weight_scale[n, g] * ((u(n, k) - 2^(bits-1)) - zp(n, g)), g = g_idx[k] (or k / G): in the grouped
//   format q = u and zero = zp + 2^(bits-1) (the middle, 8 or 128, when symmetric).
import type { GroupedQuantWeight } from "../quantFormat.js";
import type { CompressedTensorsScheme } from "./quantConfig.js";
import {
  badValues,
  field,
  FLOATS,
  floats,
  int32Words,
  integers,
  need,
  permFromGroupIndex,
  permuteColumns,
  type LoadedTensors,
  type QuantTensorSpec,
} from "./tensors.js";

export function compressedTensorsTensors(
  prefix: string,
  N: number,
  K: number,
  s: CompressedTensorsScheme,
): QuantTensorSpec[] {
  const pf = 32 / s.bits;
  const groups = K / (s.groupSize ?? K);
  const specs: QuantTensorSpec[] = [
    { role: "weight_packed", name: `${prefix}.weight_packed`, shape: [N, Math.ceil(K / pf)], dtypes: ["I32"] },
    { role: "weight_scale", name: `${prefix}.weight_scale`, shape: [N, groups], dtypes: FLOATS },
    { role: "weight_shape", name: `${prefix}.weight_shape`, shape: [2], dtypes: ["I32", "I64"] },
    { role: "weight_g_idx", name: `${prefix}.weight_g_idx`, shape: [K], dtypes: ["I32", "I64"], optional: true },
  ];
  if (!s.symmetric)
    specs.push({
      role: "weight_zero_point",
      name: `${prefix}.weight_zero_point`,
      shape: [Math.ceil(N / pf), groups],
      dtypes: ["I32"],
    });
  return specs;
}

export function decodeCompressedTensors(
  t: LoadedTensors,
  N: number,
  K: number,
  s: CompressedTensorsScheme,
): GroupedQuantWeight {
  const bits = s.bits;
  const pf = 32 / bits;
  const G = s.groupSize ?? K;
  const groups = K / G;
  const offset = 1 << (bits - 1);
  const shapeT = need(t, "weight_shape");
  const declared = integers(shapeT);
  if (declared[0] !== N || declared[1] !== K)
    badValues(shapeT, `is [${declared.join(", ")}]; config.json implies [${N}, ${K}]`);
  const packed = int32Words(need(t, "weight_packed"));
  const scales = floats(need(t, "weight_scale"));
  const gIdx = t.get("weight_g_idx");
  const perm = gIdx ? permFromGroupIndex(gIdx, K, G) : null;
  const words = Math.ceil(K / pf);

  // Packed along K in field order, a row of whole words is the format's row byte for byte (little-endian words);
  // act-order then reorders each row's columns (column k reads channel perm[k]).
  let stored: Uint8Array;
  if (K % pf === 0) stored = new Uint8Array(packed.buffer, packed.byteOffset, bits === 4 ? (N * K) / 2 : N * K).slice();
  else {
    stored = new Uint8Array(bits === 4 ? (N * K) / 2 : N * K); // a padded last word per row
    for (let n = 0; n < N; n++)
      for (let k = 0; k < K; k++) {
        const v = field(packed[n * words + Math.floor(k / pf)], k % pf, bits);
        if (bits === 8) stored[n * K + k] = v;
        else stored[(n * K + k) >> 1] |= k & 1 ? v << 4 : v;
      }
  }
  const q = perm ? permuteColumns(stored, N, K, bits, perm) : stored;
  // Scales are already [N, K / G]; the format holds them as f32 (exact for f16 / bf16).
  const zeros = new Uint8Array(N * groups).fill(offset);
  if (!s.symmetric) {
    const zp = int32Words(need(t, "weight_zero_point"));
    for (let n = 0; n < N; n++)
      for (let g = 0; g < groups; g++) zeros[n * groups + g] = field(zp[Math.floor(n / pf) * groups + g], n % pf, bits);
  }
  return { bits, groupSize: G, shape: [N, K], q, scales, zeros, ...(perm ? { perm } : {}) };
}
