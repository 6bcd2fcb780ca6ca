// The small MLPs of DUCHESS (the paper's appendix A.1), in plain TypeScript: LayerNorm on the input activation,
// then fully connected layers each followed by an activation and dropout, then the output layer. The correctness
// probe is LayerNorm -> FC -> ReLU -> Dropout -> FC -> ReLU -> Dropout -> FC(1) trained with binary cross-entropy;
// the difficulty classifier the same shape with GELU and K outputs trained with label-smoothed cross-entropy.
// Training is AdamW (torch's update, decoupled weight decay on every parameter) with a StepLR schedule, seeded
// initialisation, shuffling and dropout, so the same data and seed give the same bits.

export type Activation = "relu" | "gelu";

export interface MlpShape {
  input: number;
  /** Hidden layer widths, e.g. [64, 32]. */
  hidden: number[];
  /** 1: one logit (binary); K > 1: class logits. */
  output: number;
  activation: Activation;
  /** Dropout probability after each hidden layer (training only). */
  dropout: number;
}

export interface Linear {
  /** [out, in], row-major (torch's nn.Linear layout). */
  weight: Float32Array;
  bias: Float32Array;
  in: number;
  out: number;
}

const LN_EPS = 1e-5;

/** Seeded uniform numbers in [0, 1) (splitmix64 on two 32-bit halves: no BigInt in the hot loop). */
export class Prng {
  private a: number;
  private b: number;
  constructor(seed: number) {
    this.a = (seed >>> 0) ^ 0x9e3779b9;
    this.b = Math.floor(seed / 2 ** 32) ^ 0x85ebca6b;
    for (let i = 0; i < 4; i++) this.next();
  }
  next(): number {
    // xorshift64 on (a, b), then a 32-bit finaliser.
    let a = this.a;
    const b = this.b;
    this.a = b;
    a ^= a << 23;
    a ^= a >>> 17;
    a ^= b ^ (b >>> 26);
    this.b = a;
    let h = (this.a + this.b) >>> 0;
    h = Math.imul(h ^ (h >>> 16), 0x85ebca6b);
    h = Math.imul(h ^ (h >>> 13), 0xc2b2ae35);
    return ((h ^ (h >>> 16)) >>> 0) / 2 ** 32;
  }
  /** In-place Fisher-Yates shuffle. */
  shuffle<T>(xs: T[]): T[] {
    for (let i = xs.length - 1; i > 0; i--) {
      const j = Math.floor(this.next() * (i + 1));
      [xs[i], xs[j]] = [xs[j], xs[i]];
    }
    return xs;
  }
}

function gelu(x: number): number {
  return 0.5 * x * (1 + Math.tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)));
}
function geluGrad(x: number): number {
  const u = 0.7978845608028654 * (x + 0.044715 * x * x * x);
  const t = Math.tanh(u);
  return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * 0.7978845608028654 * (1 + 3 * 0.044715 * x * x);
}

export class Mlp {
  readonly lnWeight: Float32Array;
  readonly lnBias: Float32Array;
  readonly layers: Linear[];

  constructor(
    readonly shape: MlpShape,
    params?: {
      lnWeight: Float32Array;
      lnBias: Float32Array;
      layers: Array<{ weight: Float32Array; bias: Float32Array }>;
    },
    seed = 0,
  ) {
    const dims = [shape.input, ...shape.hidden, shape.output];
    if (params) {
      if (params.lnWeight.length !== shape.input || params.lnBias.length !== shape.input)
        throw new Error(`mlp: layer norm has ${params.lnWeight.length} weights, expected ${shape.input}`);
      if (params.layers.length !== dims.length - 1)
        throw new Error(`mlp: ${params.layers.length} linear layers, expected ${dims.length - 1}`);
      this.lnWeight = params.lnWeight;
      this.lnBias = params.lnBias;
      this.layers = params.layers.map((l, i) => {
        if (l.weight.length !== dims[i] * dims[i + 1] || l.bias.length !== dims[i + 1]) {
          throw new Error(
            `mlp: linear ${i} is ${l.weight.length} weights / ${l.bias.length} biases, expected [${dims[i + 1]}, ${dims[i]}]`,
          );
        }
        return { weight: l.weight, bias: l.bias, in: dims[i], out: dims[i + 1] };
      });
      return;
    }
    // torch's defaults: LayerNorm weight 1, bias 0; Linear weight and bias U(-1/sqrt(in), 1/sqrt(in)).
    const rng = new Prng(seed);
    this.lnWeight = new Float32Array(shape.input).fill(1);
    this.lnBias = new Float32Array(shape.input);
    this.layers = [];
    for (let i = 0; i + 1 < dims.length; i++) {
      const bound = 1 / Math.sqrt(dims[i]);
      const u = (): number => (2 * rng.next() - 1) * bound;
      this.layers.push({
        weight: Float32Array.from({ length: dims[i] * dims[i + 1] }, u),
        bias: Float32Array.from({ length: dims[i + 1] }, u),
        in: dims[i],
        out: dims[i + 1],
      });
    }
  }

  /** Logits for one input (inference: no dropout). */
  forward(x: ArrayLike<number>): Float64Array {
    return this.run(x, null).out;
  }

  /** Every parameter tensor, in a fixed order (the optimiser's and the file's). */
  parameters(): Float32Array[] {
    return [this.lnWeight, this.lnBias, ...this.layers.flatMap((l) => [l.weight, l.bias])];
  }

  /** Forward keeping what backward needs; `drop` samples dropout masks (training), null = inference. */
  run(x: ArrayLike<number>, drop: Prng | null): Trace {
    const n = this.shape.input;
    if (x.length !== n) throw new Error(`mlp: input has ${x.length} values, expected ${n}`);
    let mean = 0;
    for (let i = 0; i < n; i++) mean += x[i];
    mean /= n;
    let varSum = 0;
    for (let i = 0; i < n; i++) varSum += (x[i] - mean) ** 2;
    const invStd = 1 / Math.sqrt(varSum / n + LN_EPS);
    const xhat = new Float64Array(n);
    const h0 = new Float64Array(n);
    for (let i = 0; i < n; i++) {
      xhat[i] = (x[i] - mean) * invStd;
      h0[i] = xhat[i] * this.lnWeight[i] + this.lnBias[i];
    }
    const inputs: Float64Array[] = [h0];
    const pre: Float64Array[] = [];
    const masks: Array<Float64Array | null> = [];
    let h = h0;
    const keep = 1 - this.shape.dropout;
    this.layers.forEach((l, li) => {
      const z = new Float64Array(l.out);
      for (let o = 0; o < l.out; o++) {
        let s = l.bias[o];
        const row = o * l.in;
        for (let i = 0; i < l.in; i++) s += l.weight[row + i] * h[i];
        z[o] = s;
      }
      if (li === this.layers.length - 1) {
        h = z;
        return;
      }
      pre.push(z);
      const a = new Float64Array(l.out);
      for (let o = 0; o < l.out; o++) a[o] = this.shape.activation === "relu" ? Math.max(0, z[o]) : gelu(z[o]);
      let mask: Float64Array | null = null;
      if (drop !== null && this.shape.dropout > 0) {
        mask = new Float64Array(l.out);
        for (let o = 0; o < l.out; o++) mask[o] = drop.next() < keep ? 1 / keep : 0;
        for (let o = 0; o < l.out; o++) a[o] *= mask[o];
      }
      masks.push(mask);
      inputs.push(a);
      h = a;
    });
    return { xhat, inputs, pre, masks, out: h };
  }

  /** Adds d(loss)/d(params) for one traced input, given d(loss)/d(logits), into `grads` (parameters() order). */
  backward(t: Trace, dOut: Float64Array, grads: Float64Array[]): void {
    let d = dOut;
    for (let li = this.layers.length - 1; li >= 0; li--) {
      const l = this.layers[li];
      const x = t.inputs[li];
      const gw = grads[2 + 2 * li];
      const gb = grads[3 + 2 * li];
      const dx = new Float64Array(l.in);
      for (let o = 0; o < l.out; o++) {
        const g = d[o];
        if (g === 0) continue;
        gb[o] += g;
        const row = o * l.in;
        for (let i = 0; i < l.in; i++) {
          gw[row + i] += g * x[i];
          dx[i] += g * l.weight[row + i];
        }
      }
      if (li === 0) {
        d = dx;
        break;
      }
      // Through the previous hidden layer's dropout and activation.
      const z = t.pre[li - 1];
      const mask = t.masks[li - 1];
      for (let i = 0; i < l.in; i++) {
        const m = mask ? mask[i] : 1;
        dx[i] *= m * (this.shape.activation === "relu" ? (z[i] > 0 ? 1 : 0) : geluGrad(z[i]));
      }
      d = dx;
    }
    // LayerNorm.
    const n = this.shape.input;
    for (let i = 0; i < n; i++) {
      grads[0][i] += d[i] * t.xhat[i];
      grads[1][i] += d[i];
    }
    // The input's gradient is not needed: the activations are data.
  }
}

export interface Trace {
  xhat: Float64Array;
  /** Input of each linear layer. */
  inputs: Float64Array[];
  /** Pre-activation of each hidden layer. */
  pre: Float64Array[];
  masks: Array<Float64Array | null>;
  out: Float64Array;
}

export interface TrainOptions {
  epochs: number;
  batchSize: number;
  lr: number;
  weightDecay: number;
  /** StepLR: multiply lr by gamma every stepSize epochs. */
  stepSize: number;
  gamma: number;
  seed: number;
  /** Label smoothing of the K-class cross-entropy (0 = none). */
  labelSmoothing?: number;
}

/** The paper's probe recipe: AdamW lr 3e-4, weight decay 0.1, StepLR(5, 0.8), up to 15 epochs. */
export const PROBE_TRAINING: TrainOptions = {
  epochs: 15,
  batchSize: 64,
  lr: 3e-4,
  weightDecay: 0.1,
  stepSize: 5,
  gamma: 0.8,
  seed: 1,
};

export interface Example {
  x: Float32Array;
  /** 0/1 for a binary MLP, the class index for K outputs. */
  y: number;
}

export const sigmoid = (z: number): number => 1 / (1 + Math.exp(-z));

export function softmax(z: ArrayLike<number>): Float64Array {
  let max = -Infinity;
  for (let i = 0; i < z.length; i++) max = Math.max(max, z[i]);
  const out = new Float64Array(z.length);
  let s = 0;
  for (let i = 0; i < z.length; i++) s += out[i] = Math.exp(z[i] - max);
  for (let i = 0; i < z.length; i++) out[i] /= s;
  return out;
}

/** Mean loss of `mlp` over `data` (no dropout): binary cross-entropy or (smoothed) cross-entropy. */
export function meanLoss(mlp: Mlp, data: readonly Example[], labelSmoothing = 0): number {
  let total = 0;
  for (const e of data) total += lossAndGrad(mlp, mlp.forward(e.x), e.y, labelSmoothing).loss;
  return total / Math.max(1, data.length);
}

function lossAndGrad(
  mlp: Mlp,
  z: Float64Array,
  y: number,
  labelSmoothing: number,
): { loss: number; grad: Float64Array } {
  if (mlp.shape.output === 1) {
    const p = sigmoid(z[0]);
    // log(1 + e^-|z|) form: stable for large |z|.
    const loss = Math.max(z[0], 0) - z[0] * y + Math.log1p(Math.exp(-Math.abs(z[0])));
    return { loss, grad: Float64Array.of(p - y) };
  }
  const K = mlp.shape.output;
  const p = softmax(z);
  const grad = new Float64Array(K);
  let loss = 0;
  for (let k = 0; k < K; k++) {
    const q = (k === y ? 1 - labelSmoothing : 0) + labelSmoothing / K;
    grad[k] = p[k] - q;
    loss -= q * Math.log(Math.max(p[k], 1e-300));
  }
  return { loss, grad };
}

/**
 * Trains `mlp` in place on `train`; after each epoch `score(mlp)` rates it on validation data (higher is better) and
 * the best epoch's weights are kept (the paper keeps the epoch with the highest validation accuracy). Returns the
 * per-epoch training loss and validation score.
 */
export function trainMlp(
  mlp: Mlp,
  train: readonly Example[],
  o: TrainOptions,
  score: (m: Mlp) => number,
): { losses: number[]; scores: number[]; bestEpoch: number } {
  const params = mlp.parameters();
  const m = params.map((p) => new Float64Array(p.length));
  const v = params.map((p) => new Float64Array(p.length));
  const grads = params.map((p) => new Float64Array(p.length));
  const rng = new Prng(o.seed);
  const order = train.map((_, i) => i);
  const [b1, b2, eps] = [0.9, 0.999, 1e-8];
  let t = 0;
  const losses: number[] = [];
  const scores: number[] = [];
  let best = -Infinity;
  let bestEpoch = -1;
  let bestParams = params.map((p) => p.slice());
  for (let epoch = 0; epoch < o.epochs; epoch++) {
    const lr = o.lr * o.gamma ** Math.floor(epoch / o.stepSize);
    rng.shuffle(order);
    let epochLoss = 0;
    for (let start = 0; start < order.length; start += o.batchSize) {
      const batch = order.slice(start, start + o.batchSize);
      for (const g of grads) g.fill(0);
      for (const idx of batch) {
        const e = train[idx];
        const tr = mlp.run(e.x, rng);
        const { loss, grad } = lossAndGrad(mlp, tr.out, e.y, o.labelSmoothing ?? 0);
        epochLoss += loss;
        for (let k = 0; k < grad.length; k++) grad[k] /= batch.length;
        mlp.backward(tr, grad, grads);
      }
      t++;
      const c1 = 1 - b1 ** t;
      const c2 = 1 - b2 ** t;
      params.forEach((p, pi) => {
        const g = grads[pi];
        const mp = m[pi];
        const vp = v[pi];
        for (let i = 0; i < p.length; i++) {
          p[i] -= lr * o.weightDecay * p[i];
          mp[i] = b1 * mp[i] + (1 - b1) * g[i];
          vp[i] = b2 * vp[i] + (1 - b2) * g[i] * g[i];
          p[i] -= (lr * (mp[i] / c1)) / (Math.sqrt(vp[i] / c2) + eps);
        }
      });
    }
    losses.push(epochLoss / Math.max(1, order.length));
    const s = score(mlp);
    scores.push(s);
    if (s > best) {
      best = s;
      bestEpoch = epoch;
      bestParams = params.map((p) => p.slice());
    }
  }
  params.forEach((p, i) => p.set(bestParams[i]));
  return { losses, scores, bestEpoch };
}
