// CUDA paged attention: decode (split-KV, GQA, fast bf16/f16 kernels and the generic path) and prefill/verify
// (causal, cached prefix) against float64 and the CPU backend; bitwise batch invariance; bad page ids rejected.
import { afterEach, describe, expect, it } from "vitest";
import type { DType, NativeTensor } from "../../ts/native/addonTypes.js";
import { type PagedKVData, makeRng, randomPagedKV, refAttentionDecode, refAttentionPrefill } from "./reference.js";
import {
  addon,
  bitsEqual,
  cpuHas,
  cudaUnavailable,
  disposeAll,
  maxRowRelL2,
  poisoned,
  randn,
  rand,
  relL2,
  roundTo,
  tensor,
} from "./cudaReference.js";

afterEach(disposeAll);

function upload(device: "cpu" | "cuda", kv: PagedKVData, dtype: DType) {
  const shape = [kv.numPages, kv.pageSize, kv.Hk, kv.D];
  return {
    kCache: tensor(device, dtype, shape, kv.k),
    vCache: tensor(device, dtype, shape, kv.v),
    indptr: tensor(device, "i32", [kv.indptr.length], kv.indptr),
    indices: tensor(device, "i32", [Math.max(1, kv.indices.length)], kv.indices.length ? kv.indices : [0]),
    lastPageLen: tensor(device, "i32", [kv.lastPageLen.length], kv.lastPageLen),
  };
}
function randomKV(lens: number[], pageSize: number, Hk: number, D: number, dtype: DType): PagedKVData {
  const kv = randomPagedKV(makeRng(Math.floor(rand() * 2 ** 31)), lens, pageSize, Hk, D);
  return { ...kv, k: roundTo(kv.k, dtype), v: roundTo(kv.v, dtype) };
}
async function decode(
  device: "cpu" | "cuda",
  kv: PagedKVData,
  dtype: DType,
  q: Float32Array,
  Hq: number,
  kvSplits: number,
  outType: DType = "f32",
) {
  const B = kv.lastPageLen.length;
  const out = poisoned(device, outType, [B, Hq, kv.D]);
  // The CPU backend takes activations (q, out) as f32 only; the values are the same (already rounded to dtype).
  await addon.ops.attentionDecode({
    ...upload(device, kv, dtype),
    q: tensor(device, device === "cpu" ? "f32" : dtype, [B, Hq, kv.D], q),
    out,
    kvSplits,
  });
  return out.readF32();
}
async function prefill(
  device: "cpu" | "cuda",
  kv: PagedKVData,
  dtype: DType,
  q: Float32Array,
  qIndptr: number[],
  Hq: number,
  maxQueryLen = 0,
) {
  const T = qIndptr[qIndptr.length - 1];
  const out: NativeTensor = poisoned(device, "f32", [T, Hq, kv.D]);
  await addon.ops.attentionPrefill({
    ...upload(device, kv, dtype),
    q: tensor(device, device === "cpu" ? "f32" : dtype, [T, Hq, kv.D], q),
    qIndptr: tensor(device, "i32", [qIndptr.length], qIndptr),
    out,
    maxQueryLen,
  });
  return out.readF32();
}

describe.skipIf(!!cudaUnavailable)("attention (cuda)", () => {
  it("decode matches float64 and the CPU for head dims, groups, dtypes, page sizes and kvSplits", async () => {
    const small = randomKV([3], 16, 1, 64, "f32");
    const cpuDecode = await cpuHas(async () => void (await decode("cpu", small, "f32", randn(64), 1, 1)));
    const mmaDecode = addon.listDevices().knobs.DL_DECODE_PIPE === "mma";
    // G = 20 (with DL_DECODE_PIPE=mma: two 16-row head groups), G = 12 at D = 128 (rows 8-15 of a 16-row tile),
    // page 1 (every key its own page).
    for (const [D, Hk, G, pageSize, dtype] of [
      [128, 2, 4, 16, "bf16"],
      [64, 1, 2, 16, "bf16"],
      [128, 1, 1, 7, "f16"],
      [64, 2, 8, 16, "bf16"],
      [128, 2, 3, 16, "bf16"],
      [96, 1, 4, 16, "bf16"],
      [128, 2, 4, 16, "f32"],
      [64, 1, 20, 1, "bf16"],
      [128, 1, 6, 16, "bf16"],
      [128, 1, 12, 16, "bf16"],
    ] as [number, number, number, number, DType][]) {
      const lens = [1, 37, 300, 129];
      const kv = randomKV(lens, pageSize, Hk, D, dtype),
        Hq = Hk * G;
      // Queries scaled up so the softmax is peaked (uniform K in [-1, 1] and unit queries give nearly flat weights,
      // where a wrong rescale or merge hardly shows); errors are judged per (sequence, head) row, not over the batch.
      const q = roundTo(
        randn(lens.length * Hq * D).map((x) => 4 * x),
        dtype,
      );
      const ref = refAttentionDecode(q, kv, Hq, 1 / Math.sqrt(D));
      // The tensor-core decode kernel (DL_DECODE_PIPE=mma, opt-in; bf16, D 64 / 128) rounds the probabilities to
      // bf16 for P.V, as the tensor-core prefill kernel does.
      const tol = mmaDecode && dtype === "bf16" && (D === 64 || D === 128) ? 1e-2 : 1e-5;
      for (const kvSplits of [1, 3, 40]) {
        const tag = `D=${D} Hk=${Hk} G=${G} page=${pageSize} ${dtype} kvSplits=${kvSplits}`;
        const got = await decode("cuda", kv, dtype, q, Hq, kvSplits);
        expect(maxRowRelL2(got, ref, D), tag).toBeLessThan(tol);
        expect(
          maxRowRelL2(await decode("cuda", kv, dtype, q, Hq, kvSplits, "bf16"), ref, D),
          `${tag} -> bf16`,
        ).toBeLessThan(2e-2);
        if (cpuDecode)
          expect(maxRowRelL2(got, await decode("cpu", kv, dtype, q, Hq, kvSplits), D), `${tag} vs cpu`).toBeLessThan(
            tol,
          );
      }
    }
  });

  it("decode gives a sequence the same bits alone or in any batch (fixed kvSplits)", async () => {
    const lens = [700, 33, 1, 250],
      D = 128,
      Hk = 2,
      Hq = 8;
    const kv = randomKV(lens, 16, Hk, D, "bf16");
    const q = roundTo(randn(lens.length * Hq * D), "bf16");
    for (const kvSplits of [1, 5]) {
      const batch = await decode("cuda", kv, "bf16", q, Hq, kvSplits);
      for (let b = 0; b < lens.length; b++) {
        const one: PagedKVData = {
          ...kv,
          indptr: Int32Array.from([0, kv.indptr[b + 1] - kv.indptr[b]]),
          indices: kv.indices.slice(kv.indptr[b], kv.indptr[b + 1]),
          lastPageLen: kv.lastPageLen.slice(b, b + 1),
        };
        const alone = await decode("cuda", one, "bf16", q.slice(b * Hq * D, (b + 1) * Hq * D), Hq, kvSplits);
        expect(bitsEqual(alone, batch.subarray(b * Hq * D, (b + 1) * Hq * D)), `seq ${b} kvSplits=${kvSplits}`).toBe(
          true,
        );
      }
    }
  });

  it("prefill/verify matches float64 and the CPU (causal over a cached prefix), for head dims 16..256 and groups", async () => {
    const small = randomKV([2], 16, 1, 64, "f32");
    const cpuPrefill = await cpuHas(async () => void (await prefill("cpu", small, "f32", randn(2 * 64), [0, 2], 1)));
    for (const [D, Hk, G, dtype] of [
      [128, 2, 4, "bf16"],
      [64, 2, 6, "bf16"],
      [64, 1, 8, "f16"],
      [128, 1, 5, "f32"],
      [16, 2, 2, "bf16"],
      [80, 1, 4, "bf16"],
      [256, 1, 2, "bf16"],
    ] as [number, number, number, DType][]) {
      const qLens = [5, 70, 1, 32],
        prefix = [30, 0, 200, 17];
      const lens = qLens.map((n, b) => n + prefix[b]);
      const kv = randomKV(lens, 16, Hk, D, dtype),
        Hq = Hk * G;
      const qIndptr = [0];
      for (const n of qLens) qIndptr.push(qIndptr[qIndptr.length - 1] + n);
      const q = roundTo(randn(qIndptr[qLens.length] * Hq * D), dtype);
      const ref = refAttentionPrefill(q, qIndptr, kv, Hq, 1 / Math.sqrt(D));
      const got = await prefill("cuda", kv, dtype, q, qIndptr, Hq);
      // The tensor-core kernel (the default; DL_PREFILL_MMA=0 turns it off; bf16, D 64 / 128) rounds the
      // probabilities to bf16 for P.V.
      const mma = addon.listDevices().knobs.DL_PREFILL_MMA === "1";
      const tol = mma && dtype === "bf16" && (D === 64 || D === 128) ? 5e-3 : 1e-5;
      expect(relL2(got, ref), `D=${D} G=${G} ${dtype}`).toBeLessThan(tol);
      if (cpuPrefill)
        expect(relL2(got, await prefill("cpu", kv, dtype, q, qIndptr, Hq)), `D=${D} G=${G} vs cpu`).toBeLessThan(tol);
      // Batch invariance: sequence 1 alone gives the same bits.
      const b = 1,
        one: PagedKVData = {
          ...kv,
          indptr: Int32Array.from([0, kv.indptr[b + 1] - kv.indptr[b]]),
          indices: kv.indices.slice(kv.indptr[b], kv.indptr[b + 1]),
          lastPageLen: kv.lastPageLen.slice(b, b + 1),
        };
      const row = Hq * D,
        alone = await prefill("cuda", one, dtype, q.slice(qIndptr[b] * row, qIndptr[b + 1] * row), [0, qLens[b]], Hq);
      expect(bitsEqual(alone, got.subarray(qIndptr[b] * row, qIndptr[b + 1] * row)), `D=${D} G=${G} seq alone`).toBe(
        true,
      );
      // A grid sized by the longest query count (what the model forward passes) computes the same bits.
      expect(
        bitsEqual(await prefill("cuda", kv, dtype, q, qIndptr, Hq, Math.max(...qLens)), got),
        `D=${D} G=${G} maxQueryLen`,
      ).toBe(true);
    }
  });

  it("rejects out-of-range page ids without crashing, and keeps working", async () => {
    const kv = randomKV([40], 16, 1, 128, "bf16");
    const bad = { ...kv, indices: Int32Array.from(kv.indices, (p, i) => (i === 1 ? kv.numPages + 5 : p)) };
    await expect(decode("cuda", bad, "bf16", randn(4 * 128), 4, 1)).rejects.toThrow(/page id \d+ .*out of range/);
    // A bad id past the kernels' first chunks: looked up a chunk ahead (shared memory), not in the prologue. Page 30
    // of 600 tokens is past the prologue of every pipe (32x4..32x8, 64x3, mma) at kvSplits 1 and 2 (a review's
    // emulation of the pipelines: at 200 tokens and page 10, 32x8 and kvSplits 2 met it in the prologue).
    const long = randomKV([600], 16, 1, 128, "bf16");
    const badLate = { ...long, indices: Int32Array.from(long.indices, (p, i) => (i === 30 ? long.numPages + 7 : p)) };
    for (const kvSplits of [1, 2])
      await expect(
        decode("cuda", badLate, "bf16", randn(4 * 128), 4, kvSplits),
        `kvSplits=${kvSplits}`,
      ).rejects.toThrow(/page id \d+ .*out of range/);
    await expect(prefill("cuda", bad, "bf16", randn(3 * 4 * 128), [0, 3], 4)).rejects.toThrow(
      /page id \d+ .*out of range/,
    );
    await expect(prefill("cuda", kv, "bf16", randn(3 * 4 * 128), [0, 3], 4, 2)).rejects.toThrow(
      /3 queries, more than maxQueryLen 2/,
    );
    const ok = await decode("cuda", kv, "bf16", roundTo(randn(4 * 128), "bf16"), 4, 2);
    expect(ok.every(Number.isFinite)).toBe(true);
  });
});

const skipReason = cudaUnavailable;
if (skipReason) describe("attention (cuda)", () => it.skip(skipReason, () => {}));
