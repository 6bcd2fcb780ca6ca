// Token masks that arrive while the step runs (NativeForwardBatch.lateMasks, CPU): the engine computes a step's masks
// on the JS thread after it has started the forward, which needs them only at the sampler. A late row's outputs are
// bitwise those of the same mask given as allowedTokens, whether its words were written before the call, right after
// it or long after (the forward waits); a row whose flag says it failed, whose mask allows nothing, or that gets no
// flag within the bound comes back with token -1 while the rest of the step is as without it, and the step never
// waits past the bound. Malformed late masks reject by name. A random llama fixture (f32), real native forward.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { NativeForwardBatch, NativeForwardResult, NativeForwardSequence } from "../../ts/native/addonTypes.js";
import { loadModel, type Model } from "../../ts/model/model.js";
import { tokenBitmask } from "../kernels/reference.js";
import { bitsOf } from "../kernels/tensors.js";
import { fixtureDir, randomTokens } from "./fixtureCache.js";

const PAGE = 4;
const N = 5;

/** Everything a row returns, floats as bits. */
const exact = (r: NativeForwardResult) => ({
  token: r.token,
  logprob: Array.from(bitsOf(Float32Array.of(r.logprob))),
  topIds: r.topIds && Array.from(r.topIds),
  topLogprobs: r.topLogprobs && Array.from(bitsOf(r.topLogprobs)),
});

describe("lateMasks: constrained decoding's masks written while the step runs (CPU)", () => {
  let model: Model;
  let V: number, W: number;
  const table = (k: number) => Int32Array.from({ length: 4 }, (_, i) => 4 * k + i);
  const prompt = (k: number) => Int32Array.from(randomTokens(6, V, 300 + k));
  /** Row k's mask: a few ids, spread over the words (the last id in the partial last word for one row). */
  const ids = (k: number) => [(7 * k + 3) % V, (31 * k + 40) % V, V - 1 - k, (k * 97) % V];

  beforeAll(async () => {
    model = await loadModel(await fixtureDir("llama", "f32"), { kvPages: 32, pageSize: PAGE });
    V = model.config.vocabSize;
    W = Math.ceil(V / 32);
    await model.forward({
      gemmSplitK: 1,
      kvSplits: 1,
      sequences: Array.from({ length: N }, (_, k) => ({
        tokens: prompt(k).subarray(0, -1),
        startPos: 0,
        blockTable: table(k),
        emitToken: false,
      })),
    });
  });
  afterAll(() => model?.dispose());

  /** Sequence k's decode step (the same position each time: its KV is rewritten as it was). */
  const decode = (k: number, extra: Partial<NativeForwardSequence> = {}): NativeForwardSequence => ({
    tokens: prompt(k).subarray(-1),
    startPos: prompt(k).length - 1,
    blockTable: table(k),
    sampling: { temperature: k % 2 === 0 ? 0 : 0.9, seed: 11 + k },
    numTopLogprobs: 3,
    ...extra,
  });
  const step = (sequences: NativeForwardSequence[], extra: Partial<NativeForwardBatch> = {}) =>
    model.forward({ gemmSplitK: 1, kvSplits: 1, sequences, ...extra });
  /** A late-mask buffer of `rows` rows over a SharedArrayBuffer (NativeForwardBatch.lateMasks). */
  const buffer = (rows: number) => new Int32Array(new SharedArrayBuffer(4 * rows * (1 + W)));
  const write = (buf: Int32Array, rows: number, k: number, mask: Int32Array, flag = 1) => {
    buf.set(mask, rows + k * W);
    Atomics.store(buf, k, flag);
  };
  /** The reference: rows 1 and 3 masked by allowedTokens, the others free. */
  const reference = () =>
    step(
      Array.from({ length: N }, (_, k) => decode(k, k % 2 === 1 ? { allowedTokens: tokenBitmask(V, [ids(k)]) } : {})),
    );
  /** The same rows with late masks 0 and 1 (rows 3 and 1: rows of lateMasks need not follow the sequences' order). */
  const lateRow = (k: number) => (k === 3 ? 0 : 1);
  const lateStep = (buf: Int32Array, waitMs = 10_000) =>
    step(
      Array.from({ length: N }, (_, k) => decode(k, k % 2 === 1 ? { lateMask: lateRow(k) } : {})),
      { lateMasks: buf, lateMaskWaitMs: waitMs },
    );

  it("outputs are allowedTokens' bitwise, the words written before the call, right after it, or 30 ms later", async () => {
    const want = (await reference()).map(exact);
    for (const r of [want[1]!, want[3]!]) expect(r.token).toBeGreaterThanOrEqual(0);
    expect(ids(1)).toContain(want[1]!.token);
    expect(ids(3)).toContain(want[3]!.token);

    const before = buffer(2);
    for (const k of [1, 3]) write(before, 2, lateRow(k), tokenBitmask(V, [ids(k)]));
    expect((await lateStep(before)).map(exact)).toEqual(want);

    const after = buffer(2);
    const pending = lateStep(after);
    for (const k of [3, 1]) write(after, 2, lateRow(k), tokenBitmask(V, [ids(k)]));
    expect((await pending).map(exact)).toEqual(want);

    const later = buffer(2);
    const waiting = lateStep(later);
    await new Promise((r) => setTimeout(r, 30));
    for (const k of [1, 3]) write(later, 2, lateRow(k), tokenBitmask(V, [ids(k)]));
    expect((await waiting).map(exact)).toEqual(want);

    // The object path (forward(batch)) reads the same fields.
    const direct = buffer(2);
    for (const k of [1, 3]) write(direct, 2, lateRow(k), tokenBitmask(V, [ids(k)]));
    const packed = await model.native.forward({
      gemmSplitK: 1,
      kvSplits: 1,
      sequences: Array.from({ length: N }, (_, k) => decode(k, k % 2 === 1 ? { lateMask: lateRow(k) } : {})),
      lateMasks: direct,
      lateMaskWaitMs: 1000,
    });
    expect(Array.from(packed.tokens)).toEqual(want.map((r) => r.token));
  });

  it("a row that failed, allows nothing or gets no flag in time is token -1; the others are as without it", async () => {
    const want = (await reference()).map(exact);
    // Row 3 failed (flag 2), row 1 fine.
    const failed = buffer(2);
    write(failed, 2, lateRow(1), tokenBitmask(V, [ids(1)]));
    Atomics.store(failed, lateRow(3), 2);
    const a = (await lateStep(failed)).map(exact);
    expect(a[3]!.token).toBe(-1);
    for (const k of [0, 1, 2, 4]) expect(a[k]).toEqual(want[k]);

    // Row 1's mask allows no id.
    const empty = buffer(2);
    write(empty, 2, lateRow(1), new Int32Array(W));
    write(empty, 2, lateRow(3), tokenBitmask(V, [ids(3)]));
    const b = (await lateStep(empty)).map(exact);
    expect(b[1]!.token).toBe(-1);
    for (const k of [0, 2, 3, 4]) expect(b[k]).toEqual(want[k]);

    // Row 3 never gets a flag: the step waits 50 ms for it, no longer.
    const never = buffer(2);
    write(never, 2, lateRow(1), tokenBitmask(V, [ids(1)]));
    const t0 = performance.now();
    const c = (await lateStep(never, 50)).map(exact);
    const ms = performance.now() - t0;
    expect(ms).toBeGreaterThanOrEqual(45);
    expect(ms).toBeLessThan(5000);
    expect(c[3]!.token).toBe(-1);
    for (const k of [0, 1, 2, 4]) expect(c[k]).toEqual(want[k]);
  });

  it("malformed late masks reject by name, and the model works afterwards", async () => {
    const buf = buffer(2);
    const late = (extra: Partial<NativeForwardSequence>) => decode(1, extra);
    await expect(step([late({ lateMask: 2 })], { lateMasks: buf, lateMaskWaitMs: 10 })).rejects.toThrow(
      /sequence 0: lateMask 2 is not a row of lateMasks \(2 rows\)/,
    );
    await expect(step([late({ lateMask: 0 })])).rejects.toThrow(/lateMask 0 is not a row of lateMasks \(0 rows\)/);
    await expect(
      step([late({ lateMask: 0 }), decode(2, { lateMask: 0 })], { lateMasks: buf, lateMaskWaitMs: 10 }),
    ).rejects.toThrow(/sequence 1: lateMask 0 is also sequence 0's/);
    await expect(
      step([late({ lateMask: 0, allowedTokens: tokenBitmask(V, [[1]]) })], { lateMasks: buf, lateMaskWaitMs: 10 }),
    ).rejects.toThrow(/give allowedTokens or lateMask, not both/);
    await expect(
      step([late({ lateMask: 0, emitToken: false })], { lateMasks: buf, lateMaskWaitMs: 10 }),
    ).rejects.toThrow(/lateMask masks one sampled row: it needs emitToken and not emitAll/);
    await expect(
      step([late({ lateMask: 0 })], {
        lateMasks: new Int32Array(new SharedArrayBuffer(4 * (W + 2))),
        lateMaskWaitMs: 10,
      }),
    ).rejects.toThrow(/'lateMasks' holds \d+ ints, not a multiple of 1 \+ ceil\(vocab/);
    // Over a plain ArrayBuffer (or an on-heap array): Atomics.store there orders nothing for another thread.
    for (const plain of [new Int32Array(new ArrayBuffer(4 * 2 * (1 + W))), new Int32Array(2 * (1 + W))])
      await expect(step([late({ lateMask: 0 })], { lateMasks: plain, lateMaskWaitMs: 10 })).rejects.toThrow(
        /'lateMasks' must be an Int32Array over a SharedArrayBuffer/,
      );
    await expect(step([late({ lateMask: 0 })], { lateMasks: buf })).rejects.toThrow(
      /'lateMaskWaitMs' must be a number/,
    );
    await expect(step([late({ lateMask: 0 })], { lateMasks: buf, lateMaskWaitMs: -1 })).rejects.toThrow(
      /'lateMaskWaitMs' must be in \[0, 600000\]/,
    );
    await expect(step([late({ lateMask: -3 })], { lateMasks: buf, lateMaskWaitMs: 10 })).rejects.toThrow(
      /negative lateMask in sequence 0/,
    );
    const want = (await reference()).map(exact);
    const ok = buffer(2);
    for (const k of [1, 3]) write(ok, 2, lateRow(k), tokenBitmask(V, [ids(k)]));
    expect((await lateStep(ok)).map(exact)).toEqual(want);
  });
});
