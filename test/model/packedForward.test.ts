// Model.forward packs a step into two typed arrays (ts/model/packForward.ts, NativeModel.forwardPacked): the packed
// path must give the bytes of the object path (NativeModel.forward) for every field a batch can carry, reject what
// the object path rejects with the same words, and leave what it cannot hold exactly to the object path.
import { fc, test as fcTest } from "@fast-check/vitest";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { NativeForwardBatch, NativeForwardPacked, NativeForwardSequence } from "../../ts/native/addonTypes.js";
import { loadModel, type Model } from "../../ts/model/model.js";
import { packForward } from "../../ts/model/packForward.js";
import { fixtureDir } from "./fixtureCache.js";

const device = (process.env.DELIBERATE_TEST_DEVICE ?? "cpu") as "cpu" | "cuda";
const PAGE = 4;
let model: Model;

beforeAll(async () => {
  model = await loadModel(await fixtureDir("llama", "f32"), { device, kvPages: 32, pageSize: PAGE });
});
afterAll(() => model?.dispose());

const pages = (...ids: number[]): Int32Array => Int32Array.from(ids);

/** Every field a sequence and a batch can carry, each set away from its default somewhere. */
function fullBatch(): NativeForwardBatch {
  return {
    gemmSplitK: 2,
    kvSplits: 2,
    fixedGemmSplitK: 3,
    fastSplitK: true,
    returnLogits: true,
    pageCopies: { src: pages(20, 21), dst: pages(22, 23) },
    sequences: [
      // a prompt's last chunk, sampled (top-k, top-p, a seed above 2^32), with top logprobs and confidence
      { tokens: Int32Array.from([3, 9, 4, 1, 7]), startPos: 0, blockTable: pages(0, 1), sampling: { temperature: 0.8, topK: 5, topP: 0.9, seed: 2 ** 40 + 3 }, numTopLogprobs: 3, confidenceTopK: 2 },
      // a prompt chunk that is not the last: nothing sampled
      { tokens: Int32Array.from([5, 6, 2, 8]), startPos: 0, blockTable: pages(2), emitToken: false },
      // a decode row with a bigint seed and two hidden-state captures
      { tokens: Int32Array.of(11), startPos: 3, blockTable: pages(3), sampling: { temperature: 1, seed: 2n ** 63n + 5n }, captureHiddenLayers: Int32Array.from([0, 2]) },
      // a verify row on the fixed schedule, sampled at every position
      { tokens: Int32Array.from([4, 4, 2]), startPos: 0, blockTable: pages(4), fixedSchedule: true, emitAll: true, numTopLogprobs: 2, confidenceTopK: 2 },
      // plain greedy decode, every optional field absent, extra trailing block-table entries
      { tokens: Int32Array.of(1), startPos: 6, blockTable: pages(5, 6, 7, 8) },
    ],
  };
}

/** The raw packed results of both paths for one batch (each run on the same pages, so the same KV). */
async function bothPaths(batch: NativeForwardBatch): Promise<[NativeForwardPacked, NativeForwardPacked]> {
  const packed = packForward(batch);
  expect(packed).not.toBeNull();
  const viaObject = await model.native.forward(batch);
  const viaPacked = await model.native.forwardPacked(packed!.ints, packed!.floats);
  return [viaObject, viaPacked];
}

/** How a forward ends: its results, or its error's message. */
async function outcome(run: () => Promise<unknown>): Promise<unknown> {
  try {
    return { ok: await run() };
  } catch (e) {
    return { error: (e as Error).message };
  }
}

describe("packed forward batches", () => {
  it("give the object path's bytes for every field", async () => {
    const [a, b] = await bothPaths(fullBatch());
    expect(b).toEqual(a);
    expect(a.extras.filter((x) => x !== undefined).length).toBeGreaterThan(0); // captures, top logprobs, logits came back
    // and Model.forward (which packs) returns what unpacking the object path's results gives
    const viaModel = await model.forward(fullBatch());
    expect(viaModel.map((r) => r.token)).toEqual(Array.from(a.tokens));
  });

  it("reuse their buffers across batches of different sizes", async () => {
    const big: NativeForwardBatch = { gemmSplitK: 1, kvSplits: 1, sequences: Array.from({ length: 24 }, (_, i) => ({ tokens: Int32Array.of(1 + (i % 9)), startPos: 2, blockTable: pages(i) })) };
    const small = fullBatch();
    for (const batch of [big, small, big]) {
      const [a, b] = await bothPaths(batch);
      expect(b).toEqual(a);
    }
  });

  it("leave what the arrays cannot hold exactly to the object path, which names it", async () => {
    const ok: NativeForwardSequence = { tokens: Int32Array.from([1, 2, 3]), startPos: 0, blockTable: pages(0) };
    const cases: Array<[Partial<NativeForwardSequence>, Partial<NativeForwardBatch>, RegExp]> = [
      [{ tokens: [1, 2] as unknown as Int32Array }, {}, /'tokens' must be an Int32Array/],
      [{ startPos: 1.5 }, {}, /'startPos' must be an integer/],
      [{ startPos: undefined }, {}, /missing 'startPos'/],
      [{ emitToken: "yes" as unknown as boolean }, {}, /'emitToken' must be a boolean/],
      [{ captureHiddenLayer: 99 }, {}, /captureHiddenLayer/],
      [{ sampling: { seed: -1 } }, {}, /'seed' must be a non-negative safe integer/],
      [{ sampling: { seed: 2n ** 64n } }, {}, /seed/],
      [{ sampling: { temperature: "hot" as unknown as number } }, {}, /'temperature' must be a number/],
      [{}, { kvSplits: 2 ** 40 }, /'kvSplits' must be an integer in \[1, 1024\]/],
      [{}, { pageCopies: { src: pages(1), dst: pages() } }, /same length/],
    ];
    for (const [seq, extra, words] of cases) {
      const batch = { gemmSplitK: 1, kvSplits: 1, ...extra, sequences: [ok, { ...ok, ...seq }] } as NativeForwardBatch;
      expect(packForward(batch), JSON.stringify(seq, (_, v) => (typeof v === "bigint" ? `${v}n` : v))).toBeNull();
      await expect(model.forward(batch)).rejects.toThrow(words);
    }
  });

  // Integer fields take any int32 into the arrays; the native side applies the object path's ranges to them.
  fcTest.prop(
    [
      fc.constantFrom("startPos", "numTopLogprobs", "confidenceTopK", "topK", "gemmSplitK", "kvSplits", "fixedGemmSplitK"),
      fc.oneof(fc.integer({ min: -3, max: 70 }), fc.integer({ min: -(2 ** 31), max: 2 ** 31 - 1 })),
    ],
    { numRuns: 60 },
  )("reject and accept integer fields as the object path does, with its words", async (field, value) => {
    const seq: NativeForwardSequence = { tokens: Int32Array.of(2), startPos: 1, blockTable: pages(9), sampling: { temperature: 0.7, seed: 7 } };
    const batch: NativeForwardBatch = { gemmSplitK: 1, kvSplits: 1, sequences: [seq] };
    if (field === "topK") seq.sampling!.topK = value;
    else if (field === "startPos" || field === "numTopLogprobs" || field === "confidenceTopK") seq[field] = value;
    else batch[field] = value;
    expect(packForward(batch)).not.toBeNull();
    const a = await outcome(() => model.native.forward(batch));
    const b = await outcome(() => {
      const { ints, floats } = packForward(batch)!;
      return model.native.forwardPacked(ints, floats);
    });
    expect(b).toEqual(a);
  });
});
