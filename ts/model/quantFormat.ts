// The grouped quantized weight format every quantized linear layer is loaded into (.scratch/q4format.md, agreed
// between the int4 kernels and the checkpoint loaders), its shape checks and its float64 reference dequantizer.
//
// A linear weight W [N out, K in] (row n = output channel, as safetensors stores `weight`), `bits` 4 or 8, groups of
// G input channels (G divides K; G = K is one group per row, "per channel"):
//   q      uint8  bits 4: [N, K/2], byte j of row n = column 2j (low nibble) | column 2j+1 (high nibble); bits 8: [N, K]
//   scales f32    [N, K/G]
//   zeros  uint8  [N, K/G]  integer zero points (symmetric schemes: 8 or 128)
//   perm   int32  [K] optional: column k of q is the checkpoint's input channel perm[k] (GPTQ act-order), so that
//                 y[n] = sum_k Wq[n, k] * x[perm[k]]; absent = identity.
//   Wq[n, k] = scales[n, k / G] * (q[n, k] - zeros[n, k / G])   (exact in f32 and float64)

/** One quantized linear weight as NativeModel.setQuantizedWeight takes it. */
export interface GroupedQuantWeight {
  bits: 4 | 8;
  groupSize: number;
  /** [N, K]: output channels, input channels. */
  shape: [number, number];
  q: Uint8Array;
  scales: Float32Array;
  zeros: Uint8Array;
  perm?: Int32Array;
}

/** Throws an Error naming the field that does not fit the format (sizes, group size, perm a permutation). */
export function checkGroupedWeight(w: GroupedQuantWeight, what = "quantized weight"): void {
  const [n, k] = w.shape;
  const fail = (why: string): never => {
    throw new Error(`${what}: ${why}`);
  };
  if (w.bits !== 4 && w.bits !== 8) fail(`bits is ${String(w.bits)}; expected 4 or 8`);
  if (!Number.isInteger(n) || !Number.isInteger(k) || n < 1 || k < 1) fail(`shape [${n}, ${k}] is not a matrix`);
  if (!Number.isInteger(w.groupSize) || w.groupSize < 1 || k % w.groupSize !== 0)
    fail(`groupSize ${w.groupSize} does not divide K = ${k}`);
  if (w.bits === 4 && k % 2 !== 0) fail(`K = ${k} is odd; 4-bit rows pack two columns per byte`);
  const groups = n * (k / w.groupSize);
  const qBytes = w.bits === 4 ? (n * k) / 2 : n * k;
  if (w.q.length !== qBytes) fail(`q has ${w.q.length} bytes; [${n}, ${k}] at ${w.bits} bits needs ${qBytes}`);
  if (w.scales.length !== groups) fail(`scales has ${w.scales.length} values; expected N * K / G = ${groups}`);
  if (w.zeros.length !== groups) fail(`zeros has ${w.zeros.length} values; expected N * K / G = ${groups}`);
  if (w.perm !== undefined) {
    if (w.perm.length !== k) fail(`perm has ${w.perm.length} entries; expected K = ${k}`);
    const seen = new Uint8Array(k);
    for (const c of w.perm) {
      if (!(c >= 0 && c < k) || seen[c]) fail(`perm is not a permutation of 0..${k - 1} (entry ${c})`);
      seen[c] = 1;
    }
  }
}

/** The stored integer q[n, k] (0..15 or 0..255). */
export function quantAt(w: GroupedQuantWeight, n: number, k: number): number {
  const K = w.shape[1];
  if (w.bits === 8) return w.q[n * K + k];
  const byte = w.q[(n * K + k) >> 1];
  return k & 1 ? byte >> 4 : byte & 15;
}

/** Wq [N, K] row-major in the format's column order (column k reads input channel perm[k]), in float64. */
export function dequantizeGrouped(w: GroupedQuantWeight): Float64Array {
  const [N, K] = w.shape;
  const groups = K / w.groupSize;
  const out = new Float64Array(N * K);
  for (let n = 0; n < N; n++)
    for (let k = 0; k < K; k++) {
      const g = n * groups + Math.floor(k / w.groupSize);
      out[n * K + k] = w.scales[g] * (quantAt(w, n, k) - w.zeros[g]);
    }
  return out;
}

/**
 * W [N, K] in the checkpoint's input-channel order: W[n, perm[k]] = Wq[n, k] (identity without perm). This is the
 * dense weight an unquantized layer computing the same y would hold.
 */
export function dequantizeToInputOrder(w: GroupedQuantWeight): Float64Array {
  const wq = dequantizeGrouped(w);
  if (w.perm === undefined) return wq;
  const [N, K] = w.shape;
  const out = new Float64Array(N * K);
  for (let n = 0; n < N; n++) for (let k = 0; k < K; k++) out[n * K + w.perm[k]] = wq[n * K + k];
  return out;
}

/** Bytes the format holds for one weight (q, scales, zeros and perm). */
export function groupedWeightBytes(w: Pick<GroupedQuantWeight, "bits" | "groupSize" | "shape" | "perm">): number {
  const [n, k] = w.shape;
  const groups = n * (k / w.groupSize);
  return (w.bits === 4 ? (n * k) / 2 : n * k) + groups * 5 + (w.perm ? 4 * k : 0);
}
