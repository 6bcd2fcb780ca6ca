// The mixture-of-experts op (kernels.h MoeArgs) on one device against a float64 reference written from transformers'
// Qwen3MoeSparseMoeBlock: routing (softmax, top-k, ties to the lower id, norm_topk_prob), the output with f32 and bf16
// weights and split K, a token's bits alone and in any batch, and that only routed experts' weights are read (the
// others poisoned with NaN change nothing). moe.test.ts runs it on the CPU, moe.cuda.test.ts on CUDA.
import { describe, expect, it } from "vitest";
import { loadAddon } from "../../ts/native/loadAddon.js";
import type { DeviceKind, NativeTensor } from "../../ts/native/addonTypes.js";
import { makeRng, randomF32, roundBf16 } from "./reference.js";
import { bitsOf, disposeAll, readI32, tensorOf } from "./tensors.js";

const addon = loadAddon();

export interface MoeCase {
  T: number;
  C: number;
  E: number;
  I: number;
  k: number;
  normTopK: boolean;
  x: Float32Array; // [T, C]
  router: Float32Array; // [E, C]
  gateUp: Float32Array; // [E * 2I, C]
  down: Float32Array; // [E * C, I]
}

export function randomMoe(
  rng: () => number,
  T: number,
  C: number,
  E: number,
  I: number,
  k: number,
  normTopK: boolean,
): MoeCase {
  return {
    T,
    C,
    E,
    I,
    k,
    normTopK,
    x: randomF32(rng, T * C),
    router: randomF32(rng, E * C, 3 / Math.sqrt(C)),
    gateUp: randomF32(rng, E * 2 * I * C, 1 / Math.sqrt(C)),
    down: randomF32(rng, E * C * I, 1 / Math.sqrt(I)),
  };
}

/** Each token's experts (ascending id), weights, and the probability gap between its k-th and (k+1)-th expert. */
export function refRoute(c: MoeCase, bf16Inputs: boolean): { ids: number[][]; weights: number[][]; gap: number } {
  const ids: number[][] = [];
  const weights: number[][] = [];
  let gap = Infinity;
  for (let t = 0; t < c.T; t++) {
    const x = inputRow(c.x.subarray(t * c.C, (t + 1) * c.C), bf16Inputs);
    const logits = Array.from({ length: c.E }, (_, e) => dot(c.router, e * c.C, x));
    const max = Math.max(...logits);
    const p = logits.map((l) => Math.exp(l - max));
    const sum = p.reduce((a, b) => a + b, 0);
    const order = p.map((_, e) => e).sort((a, b) => p[b] - p[a] || a - b);
    const chosen = order.slice(0, c.k);
    if (c.k < c.E) gap = Math.min(gap, (p[order[c.k - 1]] - p[order[c.k]]) / sum);
    const norm = c.normTopK ? chosen.reduce((a, e) => a + p[e], 0) : sum;
    chosen.sort((a, b) => a - b);
    ids.push(chosen);
    weights.push(chosen.map((e) => p[e] / norm));
  }
  return { ids, weights, gap };
}

/** out [T, C]: sum over each token's experts of weight * down(silu(gate(x)) * up(x)), float64 (inputs of a bf16 GEMM
 * rounded to bf16, as the kernels and transformers do). */
export function refMoe(c: MoeCase, bf16Inputs: boolean): Float64Array {
  const { ids, weights } = refRoute(c, bf16Inputs);
  const out = new Float64Array(c.T * c.C);
  for (let t = 0; t < c.T; t++) {
    const x = inputRow(c.x.subarray(t * c.C, (t + 1) * c.C), bf16Inputs);
    ids[t].forEach((e, j) => {
      const act = new Float32Array(c.I);
      for (let i = 0; i < c.I; i++) {
        const g = dot(c.gateUp, (e * 2 * c.I + i) * c.C, x);
        const u = dot(c.gateUp, (e * 2 * c.I + c.I + i) * c.C, x);
        act[i] = (g / (1 + Math.exp(-g))) * u;
      }
      const a = inputRow(act, bf16Inputs);
      for (let d = 0; d < c.C; d++) out[t * c.C + d] += weights[t][j] * dot(c.down, (e * c.C + d) * c.I, a);
    });
  }
  return out;
}

function inputRow(v: Float32Array, bf16: boolean): Float32Array {
  return bf16 ? roundBf16(Float32Array.from(v)) : v;
}
function dot(w: Float32Array, at: number, x: ArrayLike<number>): number {
  let s = 0;
  for (let i = 0; i < x.length; i++) s += w[at + i] * x[i];
  return s;
}
function relL2(a: ArrayLike<number>, b: ArrayLike<number>): number {
  let num = 0;
  let den = 0;
  for (let i = 0; i < b.length; i++) ((num += (a[i] - b[i]) ** 2), (den += b[i] ** 2));
  return Math.sqrt(num / den);
}

/** Runs the op on `device`; the weights stored as `wDtype`, activations f32 (CPU) or `xDtype`. */
export async function runMoe(
  device: DeviceKind,
  c: MoeCase,
  opts: { wDtype?: "f32" | "bf16"; xDtype?: "f32" | "bf16"; splitK?: number; x?: Float32Array; T?: number } = {},
): Promise<{ out: Float32Array; ids: Int32Array; weights: Float32Array }> {
  const T = opts.T ?? c.T;
  const wd = opts.wDtype ?? "f32";
  const xd = opts.xDtype ?? "f32";
  const live: NativeTensor[] = [];
  const t = (dtype: "f32" | "bf16" | "i32", shape: number[], values: ArrayLike<number>) => {
    const x = tensorOf(addon, device, dtype, shape, values);
    live.push(x);
    return x;
  };
  try {
    const out = t(xd, [T, c.C], new Float32Array(T * c.C));
    const ids = t("i32", [T, c.k], new Int32Array(T * c.k));
    const weights = t("f32", [T, c.k], new Float32Array(T * c.k));
    await addon.ops.moe({
      x: t(xd, [T, c.C], opts.x ?? c.x),
      router: t(wd, [c.E, c.C], c.router),
      gateUp: t(wd, [c.E * 2 * c.I, c.C], c.gateUp),
      down: t(wd, [c.E * c.C, c.I], c.down),
      out,
      topK: c.k,
      normTopK: c.normTopK ? 1 : 0,
      splitK: opts.splitK ?? 1,
      expertIds: ids,
      weights,
    });
    return { out: out.readF32(), ids: readI32(ids), weights: weights.readF32() };
  } finally {
    disposeAll(...live);
  }
}

export function moeSuite(device: DeviceKind, seed: number): void {
  const rng = makeRng(seed);

  describe(`moe (${device})`, () => {
    it("routes as transformers does and gives the reference output (f32 and bf16 weights, split K)", async () => {
      for (const [T, C, E, I, k, normTopK] of [
        [13, 48, 8, 40, 2, true],
        [5, 64, 16, 96, 4, false],
        [1, 32, 4, 24, 4, true], // every expert
        [40, 72, 8, 32, 1, false],
      ] as const) {
        const c = randomMoe(rng, T, C, E, I, k, normTopK);
        for (const wDtype of ["f32", "bf16"] as const) {
          const w =
            wDtype === "bf16"
              ? { ...c, router: roundBf16(c.router), gateUp: roundBf16(c.gateUp), down: roundBf16(c.down) }
              : c;
          const { ids, gap } = refRoute(w, wDtype === "bf16");
          expect(gap).toBeGreaterThan(1e-4); // routing is decided: f32 and float64 must agree on it
          const want = refMoe(w, wDtype === "bf16");
          for (const splitK of [1, 3]) {
            // CUDA runs a bf16 model on bf16 activations (its GEMMs take X as stored): x, gate|up and act are rounded
            // to bf16 where the reference keeps gate|up in float64, so it is compared within bf16 rounding.
            const xDtype = device === "cuda" ? wDtype : "f32";
            const got = await runMoe(device, w, { wDtype, splitK, xDtype });
            expect(Array.from(got.ids)).toEqual(ids.flat());
            expect(relL2(got.out, want), `T ${T} E ${E} k ${k} ${wDtype} splitK ${splitK}`).toBeLessThan(
              xDtype === "bf16" ? 2e-2 : 1e-5,
            );
          }
        }
      }
    });

    it("breaks ties toward the lower expert id and renormalises only with normTopK", async () => {
      const c = randomMoe(rng, 3, 32, 6, 16, 2, true);
      c.router.fill(0); // every probability 1/6: experts 0 and 1 win, each 1/2 of the 2 (renormalised) or 1/6
      const norm = await runMoe(device, c);
      expect(Array.from(norm.ids)).toEqual([0, 1, 0, 1, 0, 1]);
      norm.weights.forEach((w) => expect(w).toBe(0.5));
      const raw = await runMoe(device, { ...c, normTopK: false });
      raw.weights.forEach((w) => expect(w).toBeCloseTo(1 / 6, 7));
      // Experts 4 and 2 share the top logit: both chosen, ascending.
      c.router.fill(0);
      for (const e of [2, 4]) c.router.fill(1, e * 32, (e + 1) * 32);
      const tie = await runMoe(device, c, { T: 1, x: new Float32Array(32).fill(0.5) });
      expect(Array.from(tie.ids)).toEqual([2, 4]);
    });

    it("gives a token bitwise the output it has alone, in any batch and at any place in it", async () => {
      const c = randomMoe(rng, 24, 64, 8, 48, 2, true);
      for (const splitK of [1, 2]) {
        const batch = await runMoe(device, c, { splitK });
        for (const t of [0, 7, 23]) {
          const alone = await runMoe(device, c, { splitK, T: 1, x: c.x.slice(t * c.C, (t + 1) * c.C) });
          expect(bitsOf(alone.out)).toEqual(bitsOf(batch.out, t * c.C, c.C));
        }
        // The same tokens in reverse order: each row's bits move with it.
        const rev = new Float32Array(c.x.length);
        for (let t = 0; t < c.T; t++) rev.set(c.x.subarray(t * c.C, (t + 1) * c.C), (c.T - 1 - t) * c.C);
        const reversed = await runMoe(device, c, { splitK, x: rev });
        for (let t = 0; t < c.T; t++)
          expect(bitsOf(reversed.out, (c.T - 1 - t) * c.C, c.C)).toEqual(bitsOf(batch.out, t * c.C, c.C));
      }
    });

    it("reads only the routed experts' weights (the others NaN: the same bits)", async () => {
      const c = randomMoe(rng, 1, 48, 16, 32, 2, true); // decode: one token, 2 of 16 experts
      const before = await runMoe(device, c);
      const routed = new Set(before.ids);
      const poisoned = { ...c, gateUp: Float32Array.from(c.gateUp), down: Float32Array.from(c.down) };
      for (let e = 0; e < c.E; e++) {
        if (routed.has(e)) continue;
        poisoned.gateUp.fill(NaN, e * 2 * c.I * c.C, (e + 1) * 2 * c.I * c.C);
        poisoned.down.fill(NaN, e * c.C * c.I, (e + 1) * c.C * c.I);
      }
      const after = await runMoe(device, poisoned);
      expect(bitsOf(after.out)).toEqual(bitsOf(before.out));
    });

    it("rejects inconsistent shapes with an Error naming the field", async () => {
      const c = randomMoe(rng, 2, 16, 4, 8, 2, true);
      await expect(runMoe(device, { ...c, k: 5 })).rejects.toThrow(/topK/);
      const live: NativeTensor[] = [];
      const t = (shape: number[]) => {
        live.push(addon.tensor(device, "f32", shape));
        return live[live.length - 1];
      };
      const args = {
        x: t([2, 16]),
        router: t([4, 16]),
        gateUp: t([4 * 16, 16]),
        down: t([4 * 16, 8]),
        out: t([2, 16]),
      };
      try {
        await expect(addon.ops.moe({ ...args, topK: 2 })).resolves.toBeUndefined();
        await expect(addon.ops.moe({ ...args, down: t([4 * 16, 4]), topK: 2 })).rejects.toThrow(
          /down must be \(E \* C, I\)/,
        );
        await expect(addon.ops.moe({ ...args, gateUp: t([4 * 16 + 2, 16]), topK: 2 })).rejects.toThrow(/gateUp/);
        await expect(addon.ops.moe({ ...args, out: t([3, 16]), topK: 2 })).rejects.toThrow(/out must be \(T, C\)/);
      } finally {
        disposeAll(...live);
      }
    });
  });
}
