// CUDA elementwise, KV-cache and sampling ops against float64 (reference.ts) and the CPU backend on fresh random
// inputs with poisoned outputs: rmsnorm(+residual), rope, siluMul, embedding, add, kvWrite, pageCopy, sample.
import { afterEach, describe, expect, it } from "vitest";
import type { DType } from "../../ts/native/addonTypes.js";
import { refEmbedding, refLogSoftmax, refRmsnorm, refSample, refSiluMul, seedOf } from "./reference.js";
import {
  addon,
  cpuHas,
  cudaUnavailable,
  disposeAll,
  ints,
  poisoned,
  rand,
  randInt,
  randn,
  relL2,
  roundTo,
  tensor,
} from "./cudaReference.js";
import { ropeKvWriteMismatch } from "./tensors.js";

afterEach(disposeAll);
const dtypes: DType[] = ["bf16", "f32"];
const tol = (t: DType) => (t === "f32" ? 1e-6 : 1e-2);

/** HF rotate-half RoPE in float64 with the kernel's f32 angle (position * invFreq rounded to f32). */
function refRope32(
  x: Float32Array,
  positions: number[],
  invFreq: Float32Array,
  T: number,
  H: number,
  D: number,
): Float64Array {
  const out = Float64Array.from(x),
    half = D / 2;
  for (let t = 0; t < T; t++)
    for (let h = 0; h < H; h++)
      for (let i = 0; i < half; i++) {
        const angle = Math.fround(positions[t] * invFreq[i]),
          c = Math.cos(angle),
          s = Math.sin(angle),
          o = (t * H + h) * D;
        out[o + i] = x[o + i] * c - x[o + i + half] * s;
        out[o + i + half] = x[o + i + half] * c + x[o + i] * s;
      }
  return out;
}

describe.skipIf(!!cudaUnavailable)("elementwise ops (cuda)", () => {
  it("rmsnorm with and without residual", async () => {
    for (const t of dtypes)
      for (const [M, C] of [
        [1, 4096],
        [7, 1000],
        [33, 64],
      ]) {
        const xv = roundTo(randn(M * C, 3), t),
          rv = roundTo(randn(M * C, 3), t),
          wv = roundTo(randn(C), t);
        for (const withRes of [false, true]) {
          const res = withRes ? tensor("cuda", t, [M, C], rv) : undefined;
          const out = poisoned("cuda", t, [M, C]);
          await addon.ops.rmsnorm({
            x: tensor("cuda", t, [M, C], xv),
            residual: res,
            weight: tensor("cuda", t, [C], wv),
            out,
            eps: 1e-5,
          });
          const ref = refRmsnorm(xv, withRes ? rv : undefined, wv, M, C, 1e-5);
          expect(relL2(out.readF32(), ref.out), `${t} M=${M} C=${C} res=${withRes}`).toBeLessThan(tol(t));
          if (res) expect(relL2(res.readF32(), ref.residual!), `${t} residual`).toBeLessThan(tol(t));
          // The CPU backend takes activations as f32 (same values; its residual is not rounded to bf16).
          const cpuOut = poisoned("cpu", "f32", [M, C]);
          if (
            await cpuHas(() =>
              addon.ops.rmsnorm({
                x: tensor("cpu", "f32", [M, C], xv),
                residual: withRes ? tensor("cpu", "f32", [M, C], rv) : undefined,
                weight: tensor("cpu", t, [C], wv),
                out: cpuOut,
                eps: 1e-5,
              }),
            )
          )
            expect(relL2(out.readF32(), cpuOut.readF32()), `${t} vs cpu`).toBeLessThan(tol(t));
        }
      }
  });

  it("rope, siluMul, add, embedding", async () => {
    for (const t of dtypes) {
      const T = 9,
        Hq = 8,
        Hk = 2,
        D = 128;
      const qv = roundTo(randn(T * Hq * D), t),
        kv = roundTo(randn(T * Hk * D), t);
      const pos = Array.from({ length: T }, () => randInt(0, 8000));
      const invFreq = Float32Array.from({ length: D / 2 }, (_, i) => Math.fround(500000 ** (-(2 * i) / D)));
      const q = tensor("cuda", t, [T, Hq, D], qv),
        k = tensor("cuda", t, [T, Hk, D], kv);
      await addon.ops.rope({
        q,
        k,
        positions: tensor("cuda", "i32", [T], pos),
        invFreq: tensor("cuda", "f32", [D / 2], invFreq),
      });
      expect(relL2(q.readF32(), refRope32(qv, pos, invFreq, T, Hq, D)), `rope q ${t}`).toBeLessThan(tol(t) * 2);
      expect(relL2(k.readF32(), refRope32(kv, pos, invFreq, T, Hk, D)), `rope k ${t}`).toBeLessThan(tol(t) * 2);

      const M = 5,
        I = 1000,
        gu = roundTo(randn(M * 2 * I, 4), t);
      const out = poisoned("cuda", t, [M, I]);
      await addon.ops.siluMul({ gateUp: tensor("cuda", t, [M, 2 * I], gu), out });
      expect(relL2(out.readF32(), refSiluMul(gu, M, I)), `siluMul ${t}`).toBeLessThan(tol(t) * 2);

      const av = roundTo(randn(3001), t),
        bv = roundTo(randn(3001), t),
        sum = poisoned("cuda", t, [3001]);
      await addon.ops.add({ a: tensor("cuda", t, [3001], av), b: tensor("cuda", t, [3001], bv), out: sum });
      expect(
        relL2(
          sum.readF32(),
          av.map((x, i) => x + bv[i]),
        ),
        `add ${t}`,
      ).toBeLessThan(tol(t));

      const V = 500,
        C = 96,
        table = roundTo(randn(V * C), t),
        ids = Array.from({ length: 11 }, () => randInt(0, V));
      const emb = poisoned("cuda", t, [11, C]);
      await addon.ops.embedding({
        ids: tensor("cuda", "i32", [11], ids),
        table: tensor("cuda", t, [V, C], table),
        out: emb,
      });
      expect(relL2(emb.readF32(), refEmbedding(ids, table, C)), `embedding ${t}`).toBe(0);
      await expect(
        addon.ops.embedding({
          ids: tensor("cuda", "i32", [2], [3, V]),
          table: tensor("cuda", t, [V, C], table),
          out: poisoned("cuda", t, [2, C]),
        }),
      ).rejects.toThrow(/token id 500 is out of range/);
    }
  });

  it("ropeKvWrite (one launch) gives rope then kvWrite bitwise", async () => {
    for (const [dtype, cache] of [
      ["bf16", "bf16"],
      ["f32", "f32"],
      ["f32", "bf16"],
    ] as [DType, DType][])
      for (const shape of [
        { T: 1, Hq: 12, Hk: 2, D: 128, pages: 4, pageSize: 16 },
        { T: 37, Hq: 9, Hk: 3, D: 64, pages: 8, pageSize: 16 },
        { T: 5, Hq: 4, Hk: 4, D: 80, pages: 2, pageSize: 7 },
      ])
        expect(
          await ropeKvWriteMismatch(addon, "cuda", dtype, cache, shape, rand),
          `${dtype}/${cache} T=${shape.T} D=${shape.D}`,
        ).toBeUndefined();
  });

  it("kvWrite scatters into slots and pageCopy copies whole pages; bad slots are rejected", async () => {
    const numPages = 6,
      ps = 16,
      Hk = 2,
      D = 64,
      T = 5,
      row = Hk * D;
    const kc = tensor("cuda", "bf16", [numPages, ps, Hk, D], randn(numPages * ps * row)),
      vc = tensor("cuda", "bf16", [numPages, ps, Hk, D], randn(numPages * ps * row));
    const before = [kc.readF32(), vc.readF32()];
    const kv = [roundTo(randn(T * row), "bf16"), roundTo(randn(T * row), "bf16")];
    const slots = [17, 3, 95, 40, 64];
    await addon.ops.kvWrite({
      k: tensor("cuda", "bf16", [T, Hk, D], kv[0]),
      v: tensor("cuda", "bf16", [T, Hk, D], kv[1]),
      kCache: kc,
      vCache: vc,
      slots: tensor("cuda", "i32", [T], slots),
    });
    [kc, vc].forEach((c, j) => {
      const want = before[j].slice();
      slots.forEach((s, t) => want.set(kv[j].subarray(t * row, (t + 1) * row), s * row));
      expect(relL2(c.readF32(), want), "kvWrite").toBe(0);
    });
    const page = ps * row,
      snap = kc.readF32();
    await addon.ops.pageCopy({
      kCache: kc,
      vCache: vc,
      src: tensor("cuda", "i32", [2], [1, 4]),
      dst: tensor("cuda", "i32", [2], [5, 0]),
    });
    const after = kc.readF32();
    expect(relL2(after.subarray(5 * page, 6 * page), snap.subarray(page, 2 * page))).toBe(0);
    expect(relL2(after.subarray(0, page), snap.subarray(4 * page, 5 * page))).toBe(0);
    await expect(
      addon.ops.kvWrite({
        k: tensor("cuda", "bf16", [1, Hk, D], kv[0].subarray(0, row)),
        v: tensor("cuda", "bf16", [1, Hk, D], kv[1].subarray(0, row)),
        kCache: kc,
        vCache: vc,
        slots: tensor("cuda", "i32", [1], [numPages * ps]),
      }),
    ).rejects.toThrow(/slot 96 is out of range/);
  });
});

describe.skipIf(!!cudaUnavailable)("sample (cuda)", () => {
  it("matches the reference rule and the CPU: greedy, temperature, top-k, top-p, logprobs, top logprobs", async () => {
    const V = 5003,
      B = 12,
      numTop = 5;
    const logits = randn(B * V, 6);
    logits[3 * V + 100] = logits[3 * V + 4000] = 50; // tie at the max: first index wins
    for (let i = 0; i < 40; i++) logits[5 * V + 1000 + i] = 7.25; // a tie block across the top-k / top-p cut
    const temperature = Array.from({ length: B }, (_, b) => (b % 4 === 3 ? 0 : 0.3 + rand()));
    temperature[5] = 1;
    const topK = Array.from({ length: B }, (_, b) => [0, 1, 20, 50][b % 4]);
    const topP = Array.from({ length: B }, (_, b) => [1, 0.9, 0.5, 1e-3][(b >> 1) % 4]);
    const seeds = Array.from({ length: 2 * B }, () => randInt(-(2 ** 31), 2 ** 31));
    const positions = Array.from({ length: B }, () => randInt(0, 100000));
    const run = async (device: "cpu" | "cuda") => {
      const out = {
        tokens: poisoned(device, "i32", [B]),
        logprobs: poisoned(device, "f32", [B]),
        topIds: poisoned(device, "i32", [B, numTop]),
        topLogprobs: poisoned(device, "f32", [B, numTop]),
      };
      await addon.ops.sample({
        logits: tensor(device, "f32", [B, V], logits),
        temperature: tensor(device, "f32", [B], temperature),
        topK: tensor(device, "i32", [B], topK),
        topP: tensor(device, "f32", [B], topP),
        seeds: tensor(device, "i32", [B, 2], seeds),
        positions: tensor(device, "i32", [B], positions),
        ...out,
      });
      return {
        tokens: ints(out.tokens),
        logprobs: out.logprobs.readF32(),
        topIds: ints(out.topIds),
        topLogprobs: out.topLogprobs.readF32(),
      };
    };
    const gpu = await run("cuda");
    for (let b = 0; b < B; b++) {
      const row = logits.subarray(b * V, (b + 1) * V),
        lsm = refLogSoftmax(row);
      const want = refSample(row, {
        temperature: Math.fround(temperature[b]),
        topK: topK[b],
        topP: Math.fround(topP[b]),
        seed: seedOf(seeds[2 * b], seeds[2 * b + 1]),
        position: positions[b],
      });
      expect(gpu.tokens[b], `row ${b}`).toBe(want);
      expect(Math.abs(gpu.logprobs[b] - lsm[want]), `logprob row ${b}`).toBeLessThan(1e-5);
      const rank = Array.from({ length: V }, (_, i) => i)
        .sort((x, y) => row[y] - row[x] || x - y)
        .slice(0, numTop);
      expect(gpu.topIds.slice(b * numTop, (b + 1) * numTop), `top ids row ${b}`).toEqual(rank);
      rank.forEach((id, j) => expect(Math.abs(gpu.topLogprobs[b * numTop + j] - lsm[id])).toBeLessThan(1e-5));
    }
    expect(gpu.tokens[3]).toBe(100);
    const cpu = await run("cpu").catch((e: Error) =>
      /not implemented/.test(e.message) ? undefined : Promise.reject(e),
    );
    if (cpu) expect(gpu.tokens).toEqual(cpu.tokens);
  });

  it("ties -0 and +0 as the CPU does (lower id first)", async () => {
    const V = 8,
      B = 2,
      numTop = 3;
    const row = [-1, -0, -2, -3, -4, 0, -5, -6];
    const run = async (device: "cpu" | "cuda") => {
      const out = {
        tokens: poisoned(device, "i32", [B]),
        logprobs: poisoned(device, "f32", [B]),
        topIds: poisoned(device, "i32", [B, numTop]),
        topLogprobs: poisoned(device, "f32", [B, numTop]),
      };
      await addon.ops.sample({
        logits: tensor(device, "f32", [B, V], [...row, ...row]),
        temperature: tensor(device, "f32", [B], [0, 1]),
        topK: tensor(device, "i32", [B], [0, 1]),
        topP: tensor(device, "f32", [B], [1, 1]),
        seeds: tensor(device, "i32", [B, 2], [1, 2, 3, 4]),
        positions: tensor(device, "i32", [B], [0, 0]),
        ...out,
      });
      return { tokens: ints(out.tokens), topIds: ints(out.topIds) };
    };
    const [gpu, cpu] = [await run("cuda"), await run("cpu")];
    expect(cpu.tokens).toEqual([1, 1]);
    expect(gpu).toEqual(cpu);
  });

  it("depends on (seed, position), not on the batch slot", async () => {
    const V = 3000,
      logits = randn(V, 2),
      B = 4;
    const rows = new Float32Array(B * V);
    for (let b = 0; b < B; b++) rows.set(logits, b * V);
    const tokens = poisoned("cuda", "i32", [B]);
    await addon.ops.sample({
      logits: tensor("cuda", "f32", [B, V], rows),
      temperature: tensor("cuda", "f32", [B], [1, 1, 1, 1]),
      topK: tensor("cuda", "i32", [B], [0, 0, 0, 0]),
      topP: tensor("cuda", "f32", [B], [1, 1, 1, 1]),
      seeds: tensor("cuda", "i32", [B, 2], [7, 0, 9, 0, 7, 0, 7, 0]),
      positions: tensor("cuda", "i32", [B], [5, 5, 5, 6]),
      tokens,
      logprobs: poisoned("cuda", "f32", [B]),
    });
    const t = ints(tokens);
    expect(t[2]).toBe(t[0]);
    expect(t.every((x) => x >= 0 && x < V)).toBe(true);
  });
});

const skipReason = cudaUnavailable;
if (skipReason) describe("ops (cuda)", () => it.skip(skipReason, () => {}));
