// Per-output-row symmetric int8 quantization exactly as the native loader does it (cpp/model/model_weights.cc
// setQuantized): scale = f32(max|w_row| / 127), q = round-half-even(f32(w / scale)) clamped to [-127, 127]. The tests
// hold the kernels and the quantized model to the float64 reference of the dequantized weights q * scale.

/** Round half to even, as std::nearbyint in the default rounding mode. */
function roundHalfEven(v: number): number {
  const r = Math.round(v);
  return Math.abs(v % 1) === 0.5 && r % 2 !== 0 ? r - 1 : r;
}

export interface QuantizedRows {
  q: Float32Array; // [N, K] integers in [-127, 127] (written to an i8 tensor with writeF32)
  scale: Float32Array; // [N]
}

/** w [N, K] (values as stored in f32) quantized per row. */
export function quantizeRows(w: ArrayLike<number>, N: number, K: number): QuantizedRows {
  const q = new Float32Array(N * K),
    scale = new Float32Array(N);
  for (let n = 0; n < N; n++) {
    let amax = 0;
    for (let k = 0; k < K; k++) amax = Math.max(amax, Math.abs(w[n * K + k]));
    const s = Math.fround(amax / 127);
    scale[n] = s;
    if (s === 0) continue;
    for (let k = 0; k < K; k++)
      q[n * K + k] = Math.max(-127, Math.min(127, roundHalfEven(Math.fround(w[n * K + k] / s))));
  }
  return { q, scale };
}

/** The dequantized weights q * scale in float64 [N, K]. */
export function dequantize({ q, scale }: QuantizedRows, N: number, K: number): Float64Array {
  const w = new Float64Array(N * K);
  for (let n = 0; n < N; n++) for (let k = 0; k < K; k++) w[n * K + k] = q[n * K + k] * scale[n];
  return w;
}
