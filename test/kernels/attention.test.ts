// CPU paged attention against the float64 reference (decode with kvSplits, prefill/verify causal), on f32 and
// bf16 caches with GQA and odd lengths; bitwise batch invariance; distinct bits for distinct kvSplits; bad page
// tables reject with an Error that names the entry.
import { describe, expect, it } from "vitest";
import { loadAddon } from "../../ts/native/loadAddon.js";
import type { DType, NativeTensor } from "../../ts/native/addonTypes.js";
import {
  makeRng,
  randomF32,
  randomPagedKV,
  refAttentionDecode,
  refAttentionPrefill,
  roundBf16,
  worstViolation,
  type PagedKVData,
} from "./reference.js";
import { bitsOf, disposeAll, tensorOf } from "./tensors.js";

const addon = loadAddon();
const rng = makeRng(21);

interface KVTensors {
  kCache: NativeTensor;
  vCache: NativeTensor;
  indptr: NativeTensor;
  indices: NativeTensor;
  lastPageLen: NativeTensor;
}

/** Uploads kv (its values rounded in place to what the cache dtype stores, so the reference sees them). */
function upload(kv: PagedKVData, dtype: DType): KVTensors {
  if (dtype === "bf16") {
    kv.k = roundBf16(kv.k);
    kv.v = roundBf16(kv.v);
  }
  const shape = [kv.numPages, kv.pageSize, kv.Hk, kv.D];
  return {
    kCache: tensorOf(addon, "cpu", dtype, shape, kv.k),
    vCache: tensorOf(addon, "cpu", dtype, shape, kv.v),
    indptr: tensorOf(addon, "cpu", "i32", [kv.indptr.length], kv.indptr),
    indices: tensorOf(addon, "cpu", "i32", [kv.indices.length], kv.indices),
    lastPageLen: tensorOf(addon, "cpu", "i32", [kv.lastPageLen.length], kv.lastPageLen),
  };
}

function disposeKV(t: KVTensors): void {
  disposeAll(t.kCache, t.vCache, t.indptr, t.indices, t.lastPageLen);
}

/** Sequence b alone: the same caches, a one-sequence page table. */
function single(kv: PagedKVData, b: number): PagedKVData {
  return {
    ...kv,
    indptr: Int32Array.from([0, kv.indptr[b + 1] - kv.indptr[b]]),
    indices: kv.indices.slice(kv.indptr[b], kv.indptr[b + 1]),
    lastPageLen: kv.lastPageLen.slice(b, b + 1),
  };
}

async function decode(
  kv: KVTensors,
  q: Float32Array,
  B: number,
  Hq: number,
  D: number,
  kvSplits: number,
): Promise<Float32Array> {
  return decodeWith(kv, q, B, Hq, D, kvSplits, 0);
}

async function decodeWith(
  kv: KVTensors,
  q: Float32Array,
  B: number,
  Hq: number,
  D: number,
  kvSplits: number,
  slidingWindow: number,
): Promise<Float32Array> {
  const qt = tensorOf(addon, "cpu", "f32", [B, Hq, D], q);
  const out = addon.tensor("cpu", "f32", [B, Hq, D]);
  await addon.ops.attentionDecode({ ...kv, q: qt, out, kvSplits, slidingWindow });
  const r = out.readF32();
  disposeAll(qt, out);
  return r;
}

describe("attentionDecode (cpu)", () => {
  it("matches the reference for GQA, odd lengths, f32 and bf16 caches, several kvSplits", async () => {
    for (const [dtype, P, Hq, Hk, D, lens] of [
      ["f32", 4, 4, 2, 16, [1, 7, 33]],
      ["bf16", 16, 8, 2, 64, [100, 17, 16]],
      ["f32", 3, 3, 3, 10, [5, 31]],
    ] as [DType, number, number, number, number, number[]][]) {
      const kv = randomPagedKV(rng, lens, P, Hk, D);
      const t = upload(kv, dtype);
      const q = randomF32(rng, lens.length * Hq * D, 2);
      const ref = refAttentionDecode(q, kv, Hq, 1 / Math.sqrt(D));
      for (const kvSplits of [1, 3, 64]) {
        const got = await decode(t, q, lens.length, Hq, D, kvSplits);
        expect(
          worstViolation(got, ref, 1e-5, 1e-4),
          `${dtype} P=${P} lens=${lens} kvSplits=${kvSplits}`,
        ).toBeUndefined();
      }
      disposeKV(t);
    }
  });

  it("gives a sequence the same bits alone or in a batch, for any thread count", async () => {
    const lens = [40, 3, 77, 16],
      P = 8,
      Hq = 4,
      Hk = 2,
      D = 32;
    const kv = randomPagedKV(rng, lens, P, Hk, D);
    const t = upload(kv, "bf16");
    const q = randomF32(rng, lens.length * Hq * D);
    for (const kvSplits of [1, 4]) {
      for (const threads of [1, 2]) {
        addon.setThreads(threads);
        const batch = await decode(t, q, lens.length, Hq, D, kvSplits);
        for (let b = 0; b < lens.length; b++) {
          const tb = upload(single(kv, b), "bf16");
          const alone = await decode(tb, q.slice(b * Hq * D, (b + 1) * Hq * D), 1, Hq, D, kvSplits);
          expect(bitsOf(alone), `b=${b} kvSplits=${kvSplits} threads=${threads}`).toEqual(
            bitsOf(batch, b * Hq * D, Hq * D),
          );
          disposeKV(tb);
        }
      }
    }
    addon.setThreads(0);
    disposeKV(t);
  });

  it("gives different bits for different kvSplits on a long sequence", async () => {
    const kv = randomPagedKV(rng, [300], 16, 1, 64);
    const t = upload(kv, "f32");
    const q = randomF32(rng, 2 * 64, 3);
    const one = bitsOf(await decode(t, q, 1, 2, 64, 1));
    for (const kvSplits of [2, 5]) expect(bitsOf(await decode(t, q, 1, 2, 64, kvSplits))).not.toEqual(one);
    disposeKV(t);
  });

  it("rejects bad page tables naming the entry", async () => {
    const kv = randomPagedKV(rng, [5, 9], 4, 1, 8, 0);
    const q = randomF32(rng, 2 * 8);
    const cases: [Partial<PagedKVData>, RegExp][] = [
      [
        { indices: Int32Array.from([0, 1, 2, 9, 4]) },
        /attentionDecode: indices\[3\] = page 9 \(sequence 1\) is outside the cache's 5 pages/,
      ],
      [{ indices: Int32Array.from([0, -1, 2, 3, 4]) }, /indices\[1\] = page -1 \(sequence 0\)/],
      [{ lastPageLen: Int32Array.from([1, 5]) }, /lastPageLen\[1\] = 5 must be in \[1, pageSize = 4\]/],
      [{ indptr: Int32Array.from([0, 2, 7]) }, /indptr\[2\] = 7 exceeds the 5 entries of indices/],
      [{ indptr: Int32Array.from([0, 0, 5]) }, /sequence 0 has no KV pages/],
    ];
    for (const [patch, message] of cases) {
      const t = upload({ ...kv, ...patch }, "f32");
      await expect(decode(t, q, 2, 1, 8, 1)).rejects.toThrow(message);
      disposeKV(t);
    }
  });
});

async function prefill(
  kv: KVTensors,
  q: Float32Array,
  qIndptr: number[],
  Hq: number,
  D: number,
  maxQueryLen = 0,
  slidingWindow = 0,
): Promise<Float32Array> {
  const rows = qIndptr[qIndptr.length - 1];
  const qt = tensorOf(addon, "cpu", "f32", [rows, Hq, D], q);
  const qi = tensorOf(addon, "cpu", "i32", [qIndptr.length], qIndptr);
  const out = addon.tensor("cpu", "f32", [rows, Hq, D]);
  await addon.ops.attentionPrefill({ ...kv, q: qt, qIndptr: qi, out, maxQueryLen, slidingWindow });
  const r = out.readF32();
  disposeAll(qt, qi, out);
  return r;
}

describe("attentionPrefill (cpu)", () => {
  it("matches the causal reference over cached prefix + new tokens, f32 and bf16 caches", async () => {
    for (const [dtype, P, Hq, Hk, D, lens, newTokens] of [
      ["f32", 4, 4, 2, 16, [9, 5, 20], [9, 1, 6]],
      ["bf16", 16, 6, 3, 32, [40, 17], [13, 17]],
    ] as [DType, number, number, number, number, number[], number[]][]) {
      const kv = randomPagedKV(rng, lens, P, Hk, D);
      const t = upload(kv, dtype);
      const qIndptr = [0];
      for (const n of newTokens) qIndptr.push(qIndptr[qIndptr.length - 1] + n);
      const q = randomF32(rng, qIndptr[qIndptr.length - 1] * Hq * D, 2);
      const got = await prefill(t, q, qIndptr, Hq, D);
      expect(
        worstViolation(got, refAttentionPrefill(q, qIndptr, kv, Hq, 1 / Math.sqrt(D)), 1e-5, 1e-4),
        `${dtype} lens=${lens}`,
      ).toBeUndefined();
      disposeKV(t);
    }
  });

  it("gives a sequence's queries the same bits alone or in a batch", async () => {
    const lens = [30, 12],
      P = 8,
      Hq = 2,
      Hk = 1,
      D = 16,
      newTokens = [7, 12];
    const kv = randomPagedKV(rng, lens, P, Hk, D);
    const t = upload(kv, "f32");
    const q = randomF32(rng, 19 * Hq * D);
    const batch = await prefill(t, q, [0, 7, 19], Hq, D);
    const t1 = upload(single(kv, 1), "f32");
    const alone = await prefill(t1, q.slice(7 * Hq * D), [0, 12], Hq, D);
    expect(bitsOf(alone)).toEqual(bitsOf(batch, 7 * Hq * D, 12 * Hq * D));
    disposeKV(t);
    disposeKV(t1);
  });

  it("gives a query the same bits whatever tile of queries it falls in, and as the decode query", async () => {
    // 45 queries are cut into tiles of 16 (0-15, 16-31, 32-44); the last 21 into 24-39, 40-44; a query's bits must
    // not depend on which tile (or which other queries) share its pass, and the last one equals decode (kvSplits 1).
    for (const dtype of ["f32", "bf16"] as DType[]) {
      const len = 45,
        P = 8,
        Hq = 6,
        Hk = 2,
        D = 32;
      const kv = randomPagedKV(rng, [len], P, Hk, D);
      const t = upload(kv, dtype);
      const q = randomF32(rng, len * Hq * D, 2);
      const all = await prefill(t, q, [0, len], Hq, D);
      const last21 = await prefill(t, q.slice(24 * Hq * D), [0, 21], Hq, D);
      const last1 = await prefill(t, q.slice(44 * Hq * D), [0, 1], Hq, D);
      expect(bitsOf(last21), dtype).toEqual(bitsOf(all, 24 * Hq * D, 21 * Hq * D));
      expect(bitsOf(last1), dtype).toEqual(bitsOf(all, 44 * Hq * D, Hq * D));
      expect(bitsOf(await decode(t, q.slice(44 * Hq * D), 1, Hq, D, 1)), dtype).toEqual(bitsOf(last1));
      disposeKV(t);
    }
  });

  it("masks a sliding window (Mistral): decode and prefill match the windowed reference, and agree bitwise", async () => {
    // Windows inside a page, across pages and wider than the sequence; kvSplits that leave partitions wholly
    // outside the window.
    for (const [dtype, P, W] of [
      ["f32", 4, 5],
      ["bf16", 8, 8],
      ["f32", 3, 1],
      ["f32", 4, 100],
    ] as [DType, number, number][]) {
      const lens = [23, 6, 17],
        Hq = 4,
        Hk = 2,
        D = 16,
        newTokens = [9, 6, 1];
      const kv = randomPagedKV(rng, lens, P, Hk, D);
      const t = upload(kv, dtype);
      const scale = 1 / Math.sqrt(D);
      const qd = randomF32(rng, lens.length * Hq * D, 2);
      const refD = refAttentionDecode(qd, kv, Hq, scale, W);
      for (const kvSplits of [1, 4, 64]) {
        const got = await decodeWith(t, qd, lens.length, Hq, D, kvSplits, W);
        expect(
          worstViolation(got, refD, 1e-5, 1e-4),
          `decode ${dtype} P=${P} W=${W} kvSplits=${kvSplits}`,
        ).toBeUndefined();
      }
      const qIndptr = [0];
      for (const n of newTokens) qIndptr.push(qIndptr[qIndptr.length - 1] + n);
      const q = randomF32(rng, qIndptr[qIndptr.length - 1] * Hq * D, 2);
      const got = await prefill(t, q, qIndptr, Hq, D, 0, W);
      expect(
        worstViolation(got, refAttentionPrefill(q, qIndptr, kv, Hq, scale, W), 1e-5, 1e-4),
        `prefill ${dtype} W=${W}`,
      ).toBeUndefined();
      // The last query of a sequence as a prefill row and as a decode query (kvSplits 1): the same bits.
      const last = qIndptr[1] - 1;
      const t0 = upload(single(kv, 0), dtype);
      const asDecode = await decodeWith(t0, q.slice(last * Hq * D, (last + 1) * Hq * D), 1, Hq, D, 1, W);
      expect(bitsOf(asDecode), `decode = prefill row, W=${W}`).toEqual(bitsOf(got, last * Hq * D, Hq * D));
      disposeKV(t);
      disposeKV(t0);
    }
  });

  it("rejects more queries than cached tokens", async () => {
    const kv = randomPagedKV(rng, [3], 4, 1, 8);
    const t = upload(kv, "f32");
    await expect(prefill(t, randomF32(rng, 4 * 8), [0, 4], 1, 8)).rejects.toThrow(
      /sequence 0 has 4 queries but only 3 tokens in the cache/,
    );
    await expect(prefill(t, randomF32(rng, 3 * 8), [0, 3], 1, 8, 2)).rejects.toThrow(
      /sequence 0 has 3 queries, more than maxQueryLen 2/,
    );
    expect(bitsOf(await prefill(t, randomF32(rng, 3 * 8).fill(0.5), [0, 3], 1, 8, 3))).toEqual(
      bitsOf(await prefill(t, new Float32Array(3 * 8).fill(0.5), [0, 3], 1, 8)),
    );
    disposeKV(t);
  });
});
