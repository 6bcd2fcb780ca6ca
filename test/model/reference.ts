// Float64 reference forward pass of a Llama-family decoder, written from the architecture (transformers'
// modeling_llama / modeling_qwen2), not from our kernels: it is the oracle the native engine is compared against.
// Simple and slow on purpose: plain loops, no batching, a dense per-layer KV cache. A projection whose weight is
// stored as bf16 multiplies its input rounded to bf16 (round to nearest even), as transformers does for a bf16
// model and as our kernels define it (cpp/cpu/cpu_gemm.h); everything else stays float64.
import { computeInvFreq, readModelConfig, ropeAttentionFactor, type ModelConfig } from "../../ts/model/config.js";
import { bytesToF32 } from "../../ts/model/dtype.js";
import { openSafetensors } from "../../ts/model/safetensors.js";
import { dequantize, quantizeRows } from "../kernels/int8Reference.js";
import { quantizeQ4Rows } from "../kernels/int4Reference.js";
import { dequantizeGrouped } from "../../ts/model/quantFormat.js";
import {
  checkWeights,
  expectedTensors,
  weightNames,
  type LayerWeightNames,
  type MoeWeightNames,
} from "../../ts/model/weights.js";

type Vec = Float64Array;

export class ReferenceModel {
  private readonly invFreq: Float64Array;

  private constructor(
    readonly config: ModelConfig,
    private readonly w: Map<string, Vec>,
    private readonly bf16: Set<string>,
  ) {
    this.invFreq = Float64Array.from(computeInvFreq(config));
  }

  /** Loads every weight of the model in `dir` as float64 (values exactly as stored, e.g. bf16-rounded). With
   * `bf16Inputs: false`, bf16 projections take their input unrounded (a runtime that widens bf16 weights to f32,
   * e.g. llama.cpp on an f32 export).
   * With `quantizeInt8`, the dense layers' q/k/v, o, gate/up and down weights are those loadModel's quantize: "int8"
   * keeps, dequantized (q * scale per row, test/kernels/int8Reference.ts), and take their input unrounded (the int8
   * kernels multiply f32 activations); `quantizeInt4Group` the same for quantize: "int4" in groups of that size, whose
   * projections take their input rounded to bf16 (the CPU's 4-bit kernels multiply bf16 activations,
   * cpp/cpu/cpu_gemm_quant.h). `bf16InputsFor`: more projections whose input is rounded to bf16 (a pre-quantized
   * checkpoint's 4-bit layers on the CPU, against its dequantized f32 twin). */
  static async load(
    dir: string,
    opts: {
      bf16Inputs?: boolean;
      quantizeInt8?: boolean;
      quantizeInt4Group?: number;
      bf16InputsFor?: Iterable<string>;
    } = {},
  ): Promise<ReferenceModel> {
    const config = await readModelConfig(dir);
    const ckpt = await openSafetensors(dir);
    try {
      checkWeights(config, ckpt);
      const w = new Map<string, Vec>();
      const bf16 = new Set<string>();
      for (const { name } of expectedTensors(config)) {
        const dtype = ckpt.tensors.get(name)!.dtype;
        w.set(name, Float64Array.from(bytesToF32(await ckpt.read(name), dtype)));
        if (dtype === "BF16" && opts.bf16Inputs !== false) bf16.add(name);
      }
      if (opts.quantizeInt8)
        for (const l of weightNames(config).layers)
          for (const name of [l.qProj, l.kProj, l.vProj, l.oProj, l.gateProj, l.upProj, l.downProj]) {
            if (name === null) continue;
            const [N, K] = ckpt.tensors.get(name)!.shape;
            w.set(name, dequantize(quantizeRows(w.get(name)!, N, K), N, K));
            bf16.delete(name);
          }
      // quantizeInt4Group: as loadModel's quantize: "int4" with that group (test/kernels/int4Reference.ts)
      if (opts.quantizeInt4Group)
        for (const l of weightNames(config).layers)
          for (const name of [l.qProj, l.kProj, l.vProj, l.oProj, l.gateProj, l.upProj, l.downProj]) {
            if (name === null) continue;
            const [N, K] = ckpt.tensors.get(name)!.shape;
            w.set(name, dequantizeGrouped(quantizeQ4Rows(w.get(name)!, N, K, opts.quantizeInt4Group)));
            bf16.add(name);
          }
      for (const name of opts.bf16InputsFor ?? []) bf16.add(name);
      return new ReferenceModel(config, w, bf16);
    } finally {
      await ckpt.close();
    }
  }

  /** A fresh sequence (empty KV cache). */
  session(): ReferenceSession {
    return new ReferenceSession(this);
  }

  /** Logits (vocab) at every position of `tokens`, starting from position 0. */
  logits(tokens: number[]): Float64Array[] {
    return this.session().append(tokens);
  }

  /** Greedy continuation: `n` tokens after `prompt`, each with the top-2 logit margin at its step. */
  greedy(prompt: number[], n: number): { tokens: number[]; margins: number[] } {
    const s = this.session();
    let last = s.append(prompt).at(-1)!;
    const tokens: number[] = [];
    const margins: number[] = [];
    for (let i = 0; i < n; i++) {
      const { index, margin } = top2(last);
      tokens.push(index);
      margins.push(margin);
      if (i + 1 < n) last = s.append([index])[0];
    }
    return { tokens, margins };
  }

  /** @internal used by ReferenceSession */
  weight(name: string): Vec {
    return this.w.get(name)!;
  }

  /** @internal y = W x for the projection `name` (rows, cols), x rounded to bf16 when W is stored as bf16. */
  project(name: string, x: Vec, rows: number, cols: number): Float64Array {
    return matVec(this.w.get(name)!, this.bf16.has(name) ? roundToBf16(x) : x, rows, cols);
  }

  /**
   * @internal A process reward model's head on the final-normed state h, as its modeling code runs it: Skywork's
   * v_head.summary gives [v]; Qwen2.5-Math-PRM's score.0, ReLU, score.2 give [l0, l1].
   */
  scoreHead(h: Vec): Float64Array {
    const H = this.config.hiddenSize;
    if (this.config.scoreHead === "value")
      return addBias(this.project("v_head.summary.weight", h, 1, H), this.weight("v_head.summary.bias"));
    const hidden = addBias(this.project("score.0.weight", h, H, H), this.weight("score.0.bias"));
    for (let i = 0; i < H; i++) hidden[i] = Math.max(0, hidden[i]);
    return addBias(this.project("score.2.weight", hidden, 2, H), this.weight("score.2.bias"));
  }

  /** @internal */
  rope(vec: Vec, offset: number, pos: number): void {
    const half = this.config.headDim / 2;
    // YaRN scales cos and sin by its attention factor (transformers' attention_scaling); 1 otherwise.
    const a = ropeAttentionFactor(this.config);
    for (let i = 0; i < half; i++) {
      const angle = pos * this.invFreq[i];
      const c = a * Math.cos(angle);
      const s = a * Math.sin(angle);
      const x1 = vec[offset + i];
      const x2 = vec[offset + i + half];
      vec[offset + i] = x1 * c - x2 * s; // rotate_half: (x1, x2) -> (x1 cos - x2 sin, x2 cos + x1 sin)
      vec[offset + i + half] = x2 * c + x1 * s;
    }
  }
}

/** A PRM's step score from its head's outputs at the step's scored token: sigmoid(v) for a value head's [v], the
 * softmax's second value for a two-class head's [l0, l1] (transformers' convention in each model's card). */
export function stepScore(head: ArrayLike<number>): number {
  if (head.length === 1) return 1 / (1 + Math.exp(-head[0]));
  return 1 / (1 + Math.exp(head[0] - head[1]));
}

/** First index of the maximum, and the gap to the runner-up. */
export function top2(logits: ArrayLike<number>): { index: number; margin: number } {
  let best = 0;
  for (let i = 1; i < logits.length; i++) if (logits[i] > logits[best]) best = i;
  let second = -Infinity;
  for (let i = 0; i < logits.length; i++) if (i !== best && logits[i] > second) second = logits[i];
  return { index: best, margin: logits[best] - second };
}

export class ReferenceSession {
  /** Per layer: keys and values of every position so far, each (numKvHeads * headDim). */
  private readonly keys: Vec[][];
  private readonly values: Vec[][];
  private position = 0;

  constructor(private readonly model: ReferenceModel) {
    this.keys = Array.from({ length: model.config.numLayers }, () => []);
    this.values = Array.from({ length: model.config.numLayers }, () => []);
  }

  /** Runs `tokens` at the next positions; returns each position's logits (vocab). */
  append(tokens: number[]): Float64Array[] {
    return tokens.map((t) => this.step(t));
  }

  private step(token: number): Float64Array {
    const m = this.model;
    const c = m.config;
    const names = weightNames(c);
    if (!Number.isInteger(token) || token < 0 || token >= c.vocabSize) throw new Error(`token ${token} out of range`);
    const x = m.weight(names.embedTokens).slice(token * c.hiddenSize, (token + 1) * c.hiddenSize);
    names.layers.forEach((l, i) => this.layer(i, l, x));
    const h = rmsNorm(x, m.weight(names.finalNorm), c.rmsNormEps);
    this.position++;
    if (c.scoreHead !== null) return m.scoreHead(h);
    return m.project(names.lmHead!, h, c.vocabSize, c.hiddenSize);
  }

  /** One decoder layer on the residual stream x (hidden), in place. */
  private layer(i: number, l: LayerWeightNames, x: Vec): void {
    const m = this.model;
    const { hiddenSize: H, numHeads, numKvHeads, headDim: hd, intermediateSize: F, rmsNormEps } = m.config;
    const pos = this.position;
    const h = rmsNorm(x, m.weight(l.inputNorm), rmsNormEps);
    const q = addBias(m.project(l.qProj, h, numHeads * hd, H), l.qBias ? m.weight(l.qBias) : null);
    const k = addBias(m.project(l.kProj, h, numKvHeads * hd, H), l.kBias ? m.weight(l.kBias) : null);
    const v = addBias(m.project(l.vProj, h, numKvHeads * hd, H), l.vBias ? m.weight(l.vBias) : null);
    if (l.qNorm && l.kNorm) {
      // Qwen3: RMSNorm over each head's hd values before RoPE.
      const qn = m.weight(l.qNorm);
      const kn = m.weight(l.kNorm);
      for (let hh = 0; hh < numHeads; hh++) q.set(rmsNorm(q.subarray(hh * hd, (hh + 1) * hd), qn, rmsNormEps), hh * hd);
      for (let hh = 0; hh < numKvHeads; hh++)
        k.set(rmsNorm(k.subarray(hh * hd, (hh + 1) * hd), kn, rmsNormEps), hh * hd);
    }
    for (let hh = 0; hh < numHeads; hh++) m.rope(q, hh * hd, pos);
    for (let hh = 0; hh < numKvHeads; hh++) m.rope(k, hh * hd, pos);
    this.keys[i].push(k);
    this.values[i].push(v);

    // Causal attention over positions [first, pos]; query head hh reads kv head hh / (numHeads / numKvHeads).
    const first = m.config.slidingWindow === null ? 0 : Math.max(0, pos - m.config.slidingWindow + 1);
    const attn = new Float64Array(numHeads * hd);
    const scale = 1 / Math.sqrt(hd);
    for (let hh = 0; hh < numHeads; hh++) {
      const kvh = Math.floor(hh / (numHeads / numKvHeads));
      const scores: number[] = [];
      for (let s = first; s <= pos; s++) {
        let dot = 0;
        const ks = this.keys[i][s];
        for (let d = 0; d < hd; d++) dot += q[hh * hd + d] * ks[kvh * hd + d];
        scores.push(dot * scale);
      }
      const max = Math.max(...scores);
      const exps = scores.map((sc) => Math.exp(sc - max));
      const sum = exps.reduce((a, b) => a + b, 0);
      for (let s = first; s <= pos; s++) {
        const p = exps[s - first] / sum;
        const vs = this.values[i][s];
        for (let d = 0; d < hd; d++) attn[hh * hd + d] += p * vs[kvh * hd + d];
      }
    }
    const o = addBias(m.project(l.oProj, attn, H, numHeads * hd), l.oBias ? m.weight(l.oBias) : null);
    for (let d = 0; d < H; d++) x[d] += o[d];

    const h2 = rmsNorm(x, m.weight(l.postAttentionNorm), rmsNormEps);
    const mlp = l.moe ? this.moe(l.moe, h2) : swiglu(m, l.gateProj!, l.upProj!, l.downProj!, h2, F, H);
    for (let d = 0; d < H; d++) x[d] += mlp[d];
  }

  /**
   * Qwen3-MoE's sparse block (transformers' Qwen3MoeSparseMoeBlock): softmax of the router logits, the top k (ties to
   * the lower id), renormalised when norm_topk_prob, each expert's SwiGLU output weighted and summed.
   */
  private moe(names: MoeWeightNames, h: Vec): Float64Array {
    const m = this.model;
    const { numExperts: E, expertsPerToken: k, intermediateSize: F, normTopKProb } = m.config.moe!;
    const H = m.config.hiddenSize;
    const logits = m.project(names.router, h, E, H);
    const max = Math.max(...logits);
    const p = Array.from(logits, (v) => Math.exp(v - max));
    const sum = p.reduce((a, b) => a + b, 0);
    const chosen: number[] = [];
    for (let j = 0; j < k; j++) {
      let best = -1;
      for (let e = 0; e < E; e++) if (!chosen.includes(e) && (best < 0 || p[e] > p[best])) best = e;
      chosen.push(best);
    }
    const norm = normTopKProb ? chosen.reduce((a, e) => a + p[e], 0) : sum;
    const out = new Float64Array(H);
    for (const e of chosen) {
      const x = names.experts[e];
      const y = swiglu(m, x.gateProj, x.upProj, x.downProj, h, F, H);
      for (let d = 0; d < H; d++) out[d] += (p[e] / norm) * y[d];
    }
    return out;
  }
}

/** The SwiGLU MLP down(silu(gate(h)) * up(h)), F wide over H. */
function swiglu(m: ReferenceModel, gate: string, up: string, down: string, h: Vec, F: number, H: number): Float64Array {
  const g = m.project(gate, h, F, H);
  const u = m.project(up, h, F, H);
  for (let j = 0; j < F; j++) g[j] = (g[j] / (1 + Math.exp(-g[j]))) * u[j];
  return m.project(down, g, H, F);
}

/** x rounded to the nearest bf16 (ties to even), as float64. */
function roundToBf16(x: Vec): Float64Array {
  const f = Float32Array.from(x);
  const u = new Uint32Array(f.buffer);
  for (let i = 0; i < u.length; i++) u[i] = ((u[i] + 0x7fff + ((u[i] >>> 16) & 1)) >>> 16) << 16;
  return Float64Array.from(f);
}

/** y = W x for W (rows, cols) row-major. */
function matVec(w: Vec, x: Vec, rows: number, cols: number): Float64Array {
  const y = new Float64Array(rows);
  for (let r = 0; r < rows; r++) {
    let acc = 0;
    const base = r * cols;
    for (let j = 0; j < cols; j++) acc += w[base + j] * x[j];
    y[r] = acc;
  }
  return y;
}

function addBias(y: Float64Array, b: Vec | null): Float64Array {
  if (b) for (let i = 0; i < y.length; i++) y[i] += b[i];
  return y;
}

/** RMSNorm: weight * x / sqrt(mean(x^2) + eps). */
function rmsNorm(x: Vec, weight: Vec, eps: number): Float64Array {
  let ss = 0;
  for (let i = 0; i < x.length; i++) ss += x[i] * x[i];
  const inv = 1 / Math.sqrt(ss / x.length + eps);
  const out = new Float64Array(x.length);
  for (let i = 0; i < x.length; i++) out[i] = weight[i] * x[i] * inv;
  return out;
}
