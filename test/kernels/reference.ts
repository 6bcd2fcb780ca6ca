// Float64 references for every kernel of cpp/kernels.h, plus seeded random inputs. Plain TypeScript with no
// addon dependency, shared by the CPU tests (test/kernels/*.test.ts) and the CUDA tests (*.cuda.test.ts).
// Shapes follow cpp/kernels.h; arrays are row-major.
import { mulberry32, shuffleInPlace } from "../../ts/util/random.js";

/** A seeded PRNG (mulberry32): uniform in [0, 1). */
export const makeRng = mulberry32;

/** n values uniform in [-scale, scale), as f32. */
export function randomF32(rng: () => number, n: number, scale = 1): Float32Array {
  const out = new Float32Array(n);
  for (let i = 0; i < n; i++) out[i] = (rng() * 2 - 1) * scale;
  return out;
}

/** n integers uniform in [lo, hi). */
export function randomInts(rng: () => number, n: number, lo: number, hi: number): Int32Array {
  const out = new Int32Array(n);
  for (let i = 0; i < n; i++) out[i] = lo + Math.floor(rng() * (hi - lo));
  return out;
}

/** A random permutation of 0..n-1 (Fisher-Yates). */
export function shuffled(rng: () => number, n: number): Int32Array {
  return shuffleInPlace(
    Int32Array.from({ length: n }, (_, i) => i),
    rng,
  );
}

/** f32 -> bf16 -> f32 with round-to-nearest-even (what a bf16 tensor stores). */
export function roundBf16(values: Float32Array): Float32Array {
  const u = new Uint32Array(values.buffer.slice(values.byteOffset, values.byteOffset + values.byteLength));
  for (let i = 0; i < u.length; i++) {
    const x = u[i];
    u[i] = ((x + 0x7fff + ((x >>> 16) & 1)) >>> 16) << 16;
  }
  return new Float32Array(u.buffer);
}

/** The largest violation of |got - ref| <= tol + |ref| * eps, or undefined when every element passes. */
export function worstViolation(
  got: ArrayLike<number>,
  ref: ArrayLike<number>,
  tol: number,
  eps: number,
): { index: number; got: number; ref: number; excess: number } | undefined {
  if (got.length !== ref.length) return { index: -1, got: got.length, ref: ref.length, excess: Infinity };
  let worst: { index: number; got: number; ref: number; excess: number } | undefined;
  for (let i = 0; i < ref.length; i++) {
    const err = Math.abs(got[i] - ref[i]);
    const excess = Number.isNaN(err) ? Infinity : err - (tol + Math.abs(ref[i]) * eps);
    if (excess > 0 && (!worst || excess > worst.excess)) worst = { index: i, got: got[i], ref: ref[i], excess };
  }
  return worst;
}

/** Y[M,N] = X[M,K] . W[N,K]^T (+ bias[N]). */
export function refGemm(
  x: ArrayLike<number>,
  w: ArrayLike<number>,
  bias: ArrayLike<number> | undefined,
  M: number,
  N: number,
  K: number,
): Float64Array {
  const y = new Float64Array(M * N);
  for (let m = 0; m < M; m++)
    for (let n = 0; n < N; n++) {
      let s = bias ? bias[n] : 0;
      for (let k = 0; k < K; k++) s += x[m * K + k] * w[n * K + k];
      y[m * N + n] = s;
    }
  return y;
}

/** residual += x (when given), out = rmsnorm(residual or x) * weight; x [M,C]. */
export function refRmsnorm(
  x: ArrayLike<number>,
  residual: ArrayLike<number> | undefined,
  weight: ArrayLike<number>,
  M: number,
  C: number,
  eps: number,
): { out: Float64Array; residual?: Float64Array } {
  const out = new Float64Array(M * C);
  const res = residual ? Float64Array.from(residual, (r, i) => r + x[i]) : undefined;
  const src = res ?? x;
  for (let m = 0; m < M; m++) {
    let ss = 0;
    for (let c = 0; c < C; c++) ss += src[m * C + c] ** 2;
    const r = 1 / Math.sqrt(ss / C + eps);
    for (let c = 0; c < C; c++) out[m * C + c] = src[m * C + c] * r * weight[c];
  }
  return { out, residual: res };
}

/** HF rotate-half RoPE of one tensor [T,H,D]; angle = position * invFreq[i] (invFreq [D/2]). */
export function refRope(
  x: ArrayLike<number>,
  positions: ArrayLike<number>,
  invFreq: ArrayLike<number>,
  T: number,
  H: number,
  D: number,
): Float64Array {
  const out = Float64Array.from(x);
  const half = D / 2;
  for (let t = 0; t < T; t++)
    for (let h = 0; h < H; h++)
      for (let i = 0; i < half; i++) {
        const angle = positions[t] * invFreq[i];
        const c = Math.cos(angle),
          s = Math.sin(angle);
        const o = (t * H + h) * D;
        const a = x[o + i],
          b = x[o + i + half];
        out[o + i] = a * c - b * s;
        out[o + i + half] = b * c + a * s;
      }
  return out;
}

/** out[M,I] = silu(gateUp[:, :I]) * gateUp[:, I:]. */
export function refSiluMul(gateUp: ArrayLike<number>, M: number, I: number): Float64Array {
  const out = new Float64Array(M * I);
  for (let m = 0; m < M; m++)
    for (let i = 0; i < I; i++) {
      const g = gateUp[m * 2 * I + i],
        u = gateUp[m * 2 * I + I + i];
      out[m * I + i] = (g / (1 + Math.exp(-g))) * u;
    }
  return out;
}

/** out[T,C] = table[ids[T], :]. */
export function refEmbedding(ids: ArrayLike<number>, table: ArrayLike<number>, C: number): Float64Array {
  const out = new Float64Array(ids.length * C);
  for (let t = 0; t < ids.length; t++) for (let c = 0; c < C; c++) out[t * C + c] = table[ids[t] * C + c];
  return out;
}

/** A paged KV cache in flashinfer's CSR form: caches [numPages, pageSize, Hk, D], sequence b on indices[indptr[b]..indptr[b+1]). */
export interface PagedKVData {
  k: Float32Array;
  v: Float32Array;
  indptr: Int32Array;
  indices: Int32Array;
  lastPageLen: Int32Array;
  numPages: number;
  pageSize: number;
  Hk: number;
  D: number;
}

/** Random K/V for sequences of the given token counts on shuffled pages, plus `sparePages` unused pages. */
export function randomPagedKV(
  rng: () => number,
  seqLens: number[],
  pageSize: number,
  Hk: number,
  D: number,
  sparePages = 2,
): PagedKVData {
  const pagesPer = seqLens.map((n) => Math.ceil(n / pageSize));
  const used = pagesPer.reduce((a, b) => a + b, 0);
  const numPages = used + sparePages;
  const order = shuffled(rng, numPages);
  const indptr = new Int32Array(seqLens.length + 1);
  for (let b = 0; b < seqLens.length; b++) indptr[b + 1] = indptr[b] + pagesPer[b];
  return {
    k: randomF32(rng, numPages * pageSize * Hk * D),
    v: randomF32(rng, numPages * pageSize * Hk * D),
    indptr,
    indices: order.slice(0, used),
    lastPageLen: Int32Array.from(seqLens, (n) => n - (Math.ceil(n / pageSize) - 1) * pageSize),
    numPages,
    pageSize,
    Hk,
    D,
  };
}

/** Token t of sequence b, head hk: the offset of its D values in the caches. */
function slotOffset(kv: PagedKVData, b: number, t: number, hk: number): number {
  const page = kv.indices[kv.indptr[b] + Math.floor(t / kv.pageSize)];
  return ((page * kv.pageSize + (t % kv.pageSize)) * kv.Hk + hk) * kv.D;
}

/** Tokens held by sequence b. */
export function seqLen(kv: PagedKVData, b: number): number {
  return (kv.indptr[b + 1] - kv.indptr[b] - 1) * kv.pageSize + kv.lastPageLen[b];
}

/** softmax(scale * q . k_t) . v over tokens [first, n) of sequence b, one query head q [D] reading KV head hk. */
function attendRef(
  kv: PagedKVData,
  b: number,
  hk: number,
  q: ArrayLike<number>,
  qOff: number,
  n: number,
  scale: number,
  out: Float64Array,
  oOff: number,
  first = 0,
): void {
  const s = new Float64Array(n).fill(-Infinity);
  let mx = -Infinity;
  for (let t = first; t < n; t++) {
    const o = slotOffset(kv, b, t, hk);
    let d = 0;
    for (let i = 0; i < kv.D; i++) d += q[qOff + i] * kv.k[o + i];
    s[t] = d * scale;
    mx = Math.max(mx, s[t]);
  }
  let l = 0;
  for (let t = first; t < n; t++) l += s[t] = Math.exp(s[t] - mx);
  for (let t = first; t < n; t++) {
    const o = slotOffset(kv, b, t, hk);
    for (let i = 0; i < kv.D; i++) out[oOff + i] += (s[t] / l) * kv.v[o + i];
  }
}

/** First key a query at position `pos` sees: 0, or pos - window + 1 under a sliding window (transformers' mask). */
export const firstKey = (pos: number, window = 0): number => (window > 0 ? Math.max(0, pos - window + 1) : 0);

/** Decode: q [B,Hq,D], one query per sequence attending to all its tokens (the last `window` with a sliding
 * window); GQA head h reads KV head h / (Hq/Hk). */
export function refAttentionDecode(
  q: ArrayLike<number>,
  kv: PagedKVData,
  Hq: number,
  scale: number,
  window = 0,
): Float64Array {
  const B = kv.lastPageLen.length,
    D = kv.D,
    G = Hq / kv.Hk;
  const out = new Float64Array(B * Hq * D);
  for (let b = 0; b < B; b++) {
    const L = seqLen(kv, b);
    for (let h = 0; h < Hq; h++)
      attendRef(
        kv,
        b,
        Math.floor(h / G),
        q,
        (b * Hq + h) * D,
        L,
        scale,
        out,
        (b * Hq + h) * D,
        firstKey(L - 1, window),
      );
  }
  return out;
}

/** Prefill: q [Ttot,Hq,D]; sequence b's rows qIndptr[b]..qIndptr[b+1] are its last positions, causal. */
export function refAttentionPrefill(
  q: ArrayLike<number>,
  qIndptr: ArrayLike<number>,
  kv: PagedKVData,
  Hq: number,
  scale: number,
  window = 0,
): Float64Array {
  const B = kv.lastPageLen.length,
    D = kv.D,
    G = Hq / kv.Hk;
  const out = new Float64Array(qIndptr[B] * Hq * D);
  for (let b = 0; b < B; b++) {
    const T = qIndptr[b + 1] - qIndptr[b],
      L = seqLen(kv, b);
    for (let i = 0; i < T; i++) {
      const row = qIndptr[b] + i;
      const pos = L - T + i;
      for (let h = 0; h < Hq; h++)
        attendRef(
          kv,
          b,
          Math.floor(h / G),
          q,
          (row * Hq + h) * D,
          pos + 1,
          scale,
          out,
          (row * Hq + h) * D,
          firstKey(pos, window),
        );
    }
  }
  return out;
}

const MASK64 = (1n << 64n) - 1n;
function mix64(z0: bigint): bigint {
  let z = (z0 + 0x9e3779b97f4a7c15n) & MASK64;
  z = ((z ^ (z >> 30n)) * 0xbf58476d1ce4e5b9n) & MASK64;
  z = ((z ^ (z >> 27n)) * 0x94d049bb133111ebn) & MASK64;
  return z ^ (z >> 31n);
}

/** The counter-based uniform of cpp/kernels.h: in (0, 1), a function of (seed, position, token) only. */
export function sampleUniform(seed: bigint, position: number, token: number): number {
  const counter = (BigInt(position >>> 0) << 32n) | BigInt(token >>> 0);
  const u = mix64((seed & MASK64) ^ mix64(counter));
  return (Number(u >> 11n) + 0.5) * (1 / 9007199254740992);
}

/** The u64 seed from the two i32 halves the kernels take ([low, high]). */
export function seedOf(low: number, high: number): bigint {
  return (BigInt(high >>> 0) << 32n) | BigInt(low >>> 0);
}

/** log-softmax of one row of logits. */
export function refLogSoftmax(logits: ArrayLike<number>): Float64Array {
  let mx = -Infinity;
  for (let i = 0; i < logits.length; i++) mx = Math.max(mx, logits[i]);
  let s = 0;
  for (let i = 0; i < logits.length; i++) s += Math.exp(logits[i] - mx);
  const lse = mx + Math.log(s);
  return Float64Array.from(logits, (l) => l - lse);
}

export interface SampleParams {
  temperature: number;
  topK: number;
  topP: number;
  seed: bigint;
  position: number;
}

/** Token ids by descending logit, ties by lower id. */
export function rankByLogit(logits: ArrayLike<number>): number[] {
  return Array.from({ length: logits.length }, (_, i) => i).sort((a, b) => logits[b] - logits[a] || a - b);
}

/** The sampling rule of cpp/kernels.h (greedy; else top-k, then top-p over softmax(l/T), then Gumbel-max). */
export function refSample(logits: ArrayLike<number>, p: SampleParams): number {
  const ranked = rankByLogit(logits);
  if (p.temperature === 0) return ranked[0];
  let kept = p.topK > 0 && p.topK < logits.length ? ranked.slice(0, p.topK) : ranked;
  if (p.topP < 1) {
    const mx = logits[ranked[0]];
    const w = kept.map((id) => Math.exp((logits[id] - mx) / p.temperature));
    const total = w.reduce((a, b) => a + b, 0);
    let mass = 0;
    let n = 0;
    while (n < kept.length) {
      mass += w[n] / total;
      n++;
      if (mass >= p.topP) break;
    }
    kept = kept.slice(0, n);
  }
  let best = -1;
  let bestScore = -Infinity;
  for (const id of kept) {
    const score = logits[id] / p.temperature - Math.log(-Math.log(sampleUniform(p.seed, p.position, id)));
    if (best < 0 || score > bestScore || (score === bestScore && id < best)) [best, bestScore] = [id, score];
  }
  return best;
}

/** XGrammar's token bitmask of `rows` allowed-id lists over a vocabulary of V: ceil(V / 32) int32 words a row, id t
 *  allowed iff bit (t & 31) of word t >> 5 is set. */
export function tokenBitmask(V: number, rows: ArrayLike<number>[]): Int32Array {
  const W = Math.ceil(V / 32);
  const mask = new Int32Array(rows.length * W);
  rows.forEach((ids, r) => {
    for (let i = 0; i < ids.length; i++) mask[r * W + (ids[i] >> 5)] |= 1 << (ids[i] & 31);
  });
  return mask;
}

/** Whether id t is allowed by row r of a token bitmask of W words a row. */
export const bitmaskAllows = (mask: Int32Array, W: number, r: number, t: number): boolean =>
  ((mask[r * W + (t >> 5)] >>> (t & 31)) & 1) === 1;

/** maskLogits' rule: logits [B, V] with every id that mask row rowOf[b] disallows at -inf (rows with -1 as given). */
export function refMaskLogits(
  logits: Float32Array,
  V: number,
  mask: Int32Array,
  rowOf: ArrayLike<number>,
): Float32Array {
  const out = logits.slice();
  const W = Math.ceil(V / 32);
  for (let b = 0; b < rowOf.length; b++) {
    if (rowOf[b] < 0) continue;
    for (let t = 0; t < V; t++) if (!bitmaskAllows(mask, W, rowOf[b], t)) out[b * V + t] = -Infinity;
  }
  return out;
}
