// Model.forward packs a step into two typed arrays (ts/model/packForward.ts, NativeModel.forwardPacked): the packed
// path must give the bytes of the object path (NativeModel.forward) for every field a batch can carry, reject what
// the object path rejects with the same words, and leave what it cannot hold exactly to the object path.
import { fc, test as fcTest } from "@fast-check/vitest";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { NativeForwardBatch, NativeForwardPacked, NativeForwardSequence } from "../../ts/native/addonTypes.js";
import { Engine } from "../../ts/engine/engine.js";
import { loadModel, type Model } from "../../ts/model/model.js";
import { packForward } from "../../ts/model/packForward.js";
import { fixtureDir } from "./fixtureCache.js";

const device = (process.env.DELIBERATE_TEST_DEVICE ?? "cpu") as "cpu" | "cuda";
const PAGE = 4;
let model: Model;

const pages = (...ids: number[]): Int32Array => Int32Array.from(ids);
const COPY_SRC = 20,
  COPY_DST = 22;

beforeAll(async () => {
  model = await loadModel(await fixtureDir("llama", "f32"), { device, kvPages: 160, pageSize: PAGE });
  // KV the full batch's rows read: a 9-token context over pages 10-12 (so kvSplits 2 cuts it in two) and a page
  // whose copy one row reads.
  await model.forward({
    gemmSplitK: 1,
    kvSplits: 1,
    sequences: [
      {
        tokens: Int32Array.from([2, 7, 1, 8, 2, 8, 1, 8, 2]),
        startPos: 0,
        blockTable: pages(10, 11, 12),
        emitToken: false,
      },
      { tokens: Int32Array.from([3, 1, 4, 1]), startPos: 0, blockTable: pages(COPY_SRC), emitToken: false },
    ],
  });
});
afterAll(() => model?.dispose());

/** allowedTokens words of one row: `words` first, the rest 0 (ids past them disallowed). */
const W = () => Math.ceil(model.config.vocabSize / 32);
function allowedWords(words: number[]): Int32Array {
  const row = new Int32Array(W());
  row.set(words);
  return row;
}

/** Every field a sequence and a batch can carry, each set away from its default somewhere and able to change a
 *  result when packed wrong (on the CPU, fastSplitK alone changes nothing: it is a CUDA schedule flag). */
function fullBatch(): NativeForwardBatch {
  // top-p 0.3 at temperature 1 keeps one or two tokens where top-p 1 samples the whole vocabulary
  const nucleus = (seed: number, page: number): NativeForwardSequence => ({
    tokens: Int32Array.of(5 + (seed % 7)),
    startPos: 0,
    blockTable: pages(page),
    sampling: { temperature: 1, topP: 0.3, seed },
  });
  return {
    gemmSplitK: 2,
    kvSplits: 2,
    fixedGemmSplitK: 3,
    fastSplitK: true,
    returnLogits: true,
    pageCopies: { src: pages(COPY_SRC), dst: pages(COPY_DST) },
    sequences: [
      // a prompt's last chunk, sampled (top-k, top-p, a seed above 2^32), with top logprobs and confidence
      {
        tokens: Int32Array.from([3, 9, 4, 1, 7]),
        startPos: 0,
        blockTable: pages(0, 1),
        sampling: { temperature: 0.8, topK: 5, topP: 0.9, seed: 2 ** 40 + 3 },
        numTopLogprobs: 3,
        confidenceTopK: 2,
        // constrained: ids 0-63, half of 64-95 (mixed bits in one word), 96-127
        allowedTokens: allowedWords([-1, -1, 0x0f0f0f0f, -1]),
      },
      // a prompt chunk that is not the last: nothing sampled
      { tokens: Int32Array.from([5, 6, 2, 8]), startPos: 0, blockTable: pages(2), emitToken: false },
      // a decode row with a bigint seed and two hidden-state captures
      {
        tokens: Int32Array.of(11),
        startPos: 3,
        blockTable: pages(3),
        sampling: { temperature: 1, seed: 2n ** 63n + 5n },
        captureHiddenLayers: Int32Array.from([0, 2]),
      },
      // a verify row on the fixed schedule, sampled at every position
      {
        tokens: Int32Array.from([4, 4, 2]),
        startPos: 0,
        blockTable: pages(4),
        fixedSchedule: true,
        emitAll: true,
        numTopLogprobs: 2,
        confidenceTopK: 2,
        // one mask row per position: ids 32-34, every id (all-ones words), ids 0-31
        allowedTokens: Int32Array.from([
          ...allowedWords([0, 7]),
          ...new Int32Array(W()).fill(-1),
          ...allowedWords([-1]),
        ]),
      },
      // plain greedy decode, every optional field absent, extra trailing block-table entries
      { tokens: Int32Array.of(1), startPos: 6, blockTable: pages(5, 6, 7, 8) },
      // a decode row over 9 tokens of real KV (kvSplits 2 splits it), and one over the page copied this step
      { tokens: Int32Array.of(3), startPos: 9, blockTable: pages(10, 11, 12) },
      { tokens: Int32Array.of(9), startPos: 4, blockTable: pages(COPY_DST, 23) },
      ...[101, 102, 103, 104].map((seed, i) => nucleus(seed, 30 + i)),
    ],
  };
}

/** Zeroes the copy's destination page, so a step that copies to the wrong page reads zeros there. */
async function clearCopyTarget(): Promise<void> {
  const bytes = await model.native.readPages(pages(COPY_DST));
  await model.native.writePages(pages(COPY_DST), new Uint8Array(bytes.length));
}

/** The raw packed results of both paths for one batch (each run on the same pages, so the same KV). */
async function bothPaths(batch: NativeForwardBatch): Promise<[NativeForwardPacked, NativeForwardPacked]> {
  const packed = packForward(batch);
  expect(packed).not.toBeNull();
  await clearCopyTarget();
  const viaObject = await model.native.forward(batch);
  await clearCopyTarget();
  const viaPacked = await model.native.forwardPacked(packed!.ints, packed!.floats);
  return [viaObject, viaPacked];
}

/** How a call ends: its results, or its error's message (a synchronous throw counts as an error too). */
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
    // Model.forward (which packs) returns the object path's results, one object per sequence
    await clearCopyTarget();
    const viaModel = await model.forward(fullBatch());
    viaModel.forEach((r, i) => {
      expect(r.token).toBe(a.tokens[i]);
      expect(r.logprob).toBe(a.logprobs[i]);
      for (const [k, v] of Object.entries(a.extras[i] ?? {}))
        expect((r as unknown as Record<string, unknown>)[k]).toEqual(v);
    });
  });

  it("carry every forward the engine makes (none falls back to the object path unnoticed)", async () => {
    const engineModel = await loadModel(await fixtureDir("llama", "f32"), { device, kvPages: 64, pageSize: PAGE });
    const native = engineModel.native;
    const calls = { packed: 0, object: 0 };
    const forward = (b: NativeForwardBatch) => (calls.object++, native.forward(b));
    const forwardPacked = (i: Int32Array, f: Float32Array) => (calls.packed++, native.forwardPacked(i, f));
    const counting = new Proxy(native, {
      get: (target, key) => {
        if (key === "forward") return forward;
        if (key === "forwardPacked") return forwardPacked;
        const v: unknown = Reflect.get(target, key, target);
        return typeof v === "function" ? v.bind(target) : v;
      },
    });
    Object.defineProperty(engineModel, "native", { get: () => counting });
    const engine = new Engine({ models: { name: "m", model: engineModel } });
    try {
      // sampled with n = 2 (forked samples), top logprobs, greedy, and a deterministic request (its verify rows)
      await Promise.all([
        ...[1, 2, 3].map(
          (i) =>
            engine.submit({ prompt: [3, 4, 5, 6 + i], maxTokens: 12, n: 2, temperature: 0.7, seed: i, logprobs: 2 })
              .result,
        ),
        engine.submit({ prompt: [7, 8, 9], maxTokens: 12 }).result,
        engine.submit({ prompt: [3, 4, 5], maxTokens: 8, deterministic: true }).result,
      ]);
    } finally {
      await engine.dispose();
      engineModel.dispose();
    }
    expect(calls.packed).toBeGreaterThan(10);
    expect(calls.object).toBe(0);
  });

  it("catch each field packed wrong (the full batch is sensitive to every one)", async () => {
    const packed = packForward(fullBatch())!;
    await clearCopyTarget();
    const right = await model.native.forwardPacked(packed.ints, packed.floats);
    // ints of the header, then of the sequences (layout in addonTypes.ts), and the floats: change one at a time
    const seqAt: number[] = [];
    for (let at = 6 + 2 * packed.ints[5], i = 0; i < packed.ints[0]; i++) {
      seqAt.push(at);
      at += 10 + packed.ints[at] + packed.ints[at + 2] + packed.ints[at + 7];
      if (packed.ints[seqAt[i]! + 5]! & 8) at += 1 + packed.ints[at]!; // allowedTokens: its count, then its words
    }
    const maskAt = (i: number) =>
      seqAt[i]! + 10 + packed.ints[seqAt[i]!]! + packed.ints[seqAt[i]! + 2]! + packed.ints[seqAt[i]! + 7]! + 1;
    const wrongs: Array<[string, (ints: Int32Array, floats: Float32Array) => void]> = [
      ["gemmSplitK", (x) => (x[1] = 1)],
      ["kvSplits", (x) => (x[2] = 1)],
      ["fixedGemmSplitK", (x) => (x[3] = 1)],
      ["returnLogits", (x) => (x[4] &= ~1)],
      ["copy destination", (x) => (x[7] = 24)],
      ["startPos", (x) => (x[seqAt[4] + 1] = 5)],
      ["numTopLogprobs", (x) => (x[seqAt[0] + 3] = 2)],
      ["confidenceTopK", (x) => (x[seqAt[0] + 4] = 3)],
      ["emitToken", (x) => (x[seqAt[1] + 5] |= 1)],
      ["fixedSchedule", (x) => (x[seqAt[3] + 5] &= ~4)],
      ["allowedTokens of a row", (x) => (x[maskAt(0) + 2] = ~x[maskAt(0) + 2]!)],
      ["allowedTokens of an emitAll row", (x) => (x[maskAt(3) + W() + 1] = 0)],
      ["topK", (x) => (x[seqAt[0] + 6] = 0)],
      ["seed low", (x) => (x[seqAt[0] + 8] ^= 1)],
      ["seed high", (x) => (x[seqAt[2] + 9] ^= 1)],
      ["temperature", (_, f) => (f[2 * 2] = 0)],
      [
        "topP",
        (_, f) => {
          for (let i = 7; i < 11; i++) f[2 * i + 1] = 1;
        },
      ],
    ];
    for (const [what, wrong] of wrongs) {
      const ints = packed.ints.slice(),
        floats = packed.floats.slice();
      wrong(ints, floats);
      await clearCopyTarget();
      const got = await outcome(() => model.native.forwardPacked(ints, floats));
      expect(got, what).not.toEqual({ ok: right });
    }
  });

  it("grow their buffers for large batches and reuse them for small ones", async () => {
    // 100 four-token chunks: 1 506 ints and 200 floats, past the buffers' first 1 024 and 64
    const big: NativeForwardBatch = {
      gemmSplitK: 1,
      kvSplits: 1,
      sequences: Array.from({ length: 100 }, (_, i) => ({
        tokens: Int32Array.from([1 + (i % 9), 2, 3, 4]),
        startPos: 0,
        blockTable: pages(40 + i),
        sampling: { temperature: 0.5, seed: i },
      })),
    };
    for (const batch of [big, fullBatch(), big]) {
      const [a, b] = await bothPaths(batch);
      expect(b).toEqual(a);
    }
  });

  it("leave what the arrays cannot hold exactly to the object path, which names it", async () => {
    const ok: NativeForwardSequence = { tokens: Int32Array.from([1, 2, 3]), startPos: 0, blockTable: pages(0) };
    // a real Int32Array whose prototype lies about its length
    const lying = Object.setPrototypeOf(
      Int32Array.of(2),
      Object.create(Int32Array.prototype, { length: { get: () => 3 } }),
    ) as Int32Array;
    const cases: Array<[string, NativeForwardBatch]> = [
      [
        "tokens an Array",
        { gemmSplitK: 1, kvSplits: 1, sequences: [ok, { ...ok, tokens: [1, 2] as unknown as Int32Array }] },
      ],
      [
        "tokens inheriting from Int32Array",
        { gemmSplitK: 1, kvSplits: 1, sequences: [{ ...ok, tokens: Object.create(Int32Array.prototype) }] },
      ],
      [
        "tokens a Proxy",
        { gemmSplitK: 1, kvSplits: 1, sequences: [{ ...ok, tokens: new Proxy(Int32Array.of(2), {}) }] },
      ],
      ["a length that lies", { gemmSplitK: 1, kvSplits: 1, sequences: [{ ...ok, tokens: lying }] }],
      ["sequences a Proxy", { gemmSplitK: 1, kvSplits: 1, sequences: new Proxy([ok], {}) }],
      ["startPos 1.5", { gemmSplitK: 1, kvSplits: 1, sequences: [{ ...ok, startPos: 1.5 }] }],
      [
        "startPos missing",
        { gemmSplitK: 1, kvSplits: 1, sequences: [{ ...ok, startPos: undefined as unknown as number }] },
      ],
      [
        "emitToken a string",
        { gemmSplitK: 1, kvSplits: 1, sequences: [{ ...ok, emitToken: "yes" as unknown as boolean }] },
      ],
      ["one capture index", { gemmSplitK: 1, kvSplits: 1, sequences: [{ ...ok, captureHiddenLayer: 99 }] }],
      ["seed -1", { gemmSplitK: 1, kvSplits: 1, sequences: [{ ...ok, sampling: { seed: -1 } }] }],
      ["seed 2^64", { gemmSplitK: 1, kvSplits: 1, sequences: [{ ...ok, sampling: { seed: 2n ** 64n } }] }],
      [
        "temperature a string",
        { gemmSplitK: 1, kvSplits: 1, sequences: [{ ...ok, sampling: { temperature: "hot" as unknown as number } }] },
      ],
      ["kvSplits 2^40", { gemmSplitK: 1, kvSplits: 2 ** 40, sequences: [ok] }],
      ["gemmSplitK -0", { gemmSplitK: -0, kvSplits: 1, sequences: [ok] }],
      [
        "page copies of two lengths",
        { gemmSplitK: 1, kvSplits: 1, pageCopies: { src: pages(1), dst: pages() }, sequences: [ok] },
      ],
      ["no batch", null as unknown as NativeForwardBatch],
    ];
    for (const [what, batch] of cases) {
      expect(packForward(batch), what).toBeNull();
      // Model.forward ends as the object path does: the same error, or accepted (the lying length: the addon reads
      // the array's real length)
      const viaModel = (await outcome(() => model.forward(batch))) as { error?: string };
      const viaObject = (await outcome(() => model.native.forward(batch))) as { error?: string };
      expect(viaModel.error, what).toBe(viaObject.error);
      if (what !== "a length that lies") expect(viaObject.error, what).toBeDefined();
    }
    // a batch read while another is packed (a getter that packs) takes the object path, not the shared buffers
    let inner: ReturnType<typeof packForward> = null;
    const reentrant = {
      gemmSplitK: 1,
      kvSplits: 1,
      sequences: [
        {
          ...ok,
          get startPos() {
            inner = packForward({ gemmSplitK: 7, kvSplits: 3, sequences: [ok] });
            return 0;
          },
        },
      ],
    };
    const outer = packForward(reentrant);
    expect(inner).toBeNull();
    expect(Array.from(outer!.ints.subarray(0, 3))).toEqual([1, 1, 1]);
  });

  it("reject malformed packed arrays with an Error, never a crash", async () => {
    const cases: Array<[string, Int32Array, Float32Array]> = [
      ["2^28 sequences claimed by 6 ints", Int32Array.of(2 ** 28, 1, 1, 1, 0, 0), new Float32Array(2 ** 20)],
      ["a negative sequence count", Int32Array.of(-1, 1, 1, 1, 0, 0), new Float32Array(2)],
      ["a negative copy count", Int32Array.of(1, 1, 1, 1, 0, -4), new Float32Array(2)],
      ["truncated", Int32Array.of(1, 1, 1, 1, 0, 0, 1, 0), new Float32Array(2)],
      [
        "ints past the last sequence",
        Int32Array.of(1, 1, 1, 1, 0, 0, 1, 0, 1, 0, 0, 1, 0, 0, 0, 0, 3, 0, 99),
        new Float32Array(2),
      ],
      ["too few floats", Int32Array.of(1, 1, 1, 1, 0, 0, 1, 0, 1, 0, 0, 1, 0, 0, 0, 0, 3, 0), new Float32Array(1)],
    ];
    for (const [what, ints, floats] of cases)
      await expect(model.native.forwardPacked(ints, floats), what).rejects.toThrow(/^forward/);
  });

  // Integer fields take any int32 into the arrays; the native side applies the object path's ranges to them.
  fcTest.prop(
    [
      fc.constantFrom(
        "startPos",
        "numTopLogprobs",
        "confidenceTopK",
        "topK",
        "gemmSplitK",
        "kvSplits",
        "fixedGemmSplitK",
      ),
      fc.oneof(fc.integer({ min: -3, max: 70 }), fc.integer({ min: -(2 ** 31), max: 2 ** 31 - 1 })),
    ],
    { numRuns: 60 },
  )("reject and accept integer fields as the object path does, with its words", async (field, value) => {
    const seq: NativeForwardSequence = {
      tokens: Int32Array.of(2),
      startPos: 1,
      blockTable: pages(9),
      sampling: { temperature: 0.7, seed: 7 },
    };
    const batch: NativeForwardBatch = { gemmSplitK: 1, kvSplits: 1, sequences: [seq] };
    if (field === "topK") seq.sampling!.topK = value;
    else if (field === "startPos" || field === "numTopLogprobs" || field === "confidenceTopK") seq[field] = value;
    else batch[field] = value;
    expect(packForward(batch)).not.toBeNull();
    const a = await outcome(() => model.native.forward(batch));
    const b = await outcome(() => model.forward(batch).then(() => model.native.forward(batch)));
    expect(b).toEqual(a);
    const c = await outcome(() => {
      const { ints, floats } = packForward(batch)!;
      return model.native.forwardPacked(ints, floats);
    });
    expect(c).toEqual(a);
  });

  // Floats and seeds: whatever packs must give the object path's outcome (bytes or words), the rest falls back.
  const float = fc.oneof(
    fc.double({ noDefaultInfinity: true }),
    fc.constantFrom(NaN, -NaN, Infinity, -Infinity, -0, 0, 1e-50, -1e-50, 1e39, 0.5, 1, 2, 0.3),
  );
  const seed = fc.oneof(
    fc.integer({ min: -2, max: 2 ** 31 }),
    fc.constantFrom(2 ** 32, 2 ** 53 - 1, 2 ** 53, -0, 1.5),
    fc.bigInt({ min: -1n, max: 2n ** 64n }),
  );
  fcTest.prop([float, float, seed], { numRuns: 60 })(
    "take temperature, topP and the seed as the object path does",
    async (temperature, topP, s) => {
      const batch: NativeForwardBatch = {
        gemmSplitK: 1,
        kvSplits: 1,
        sequences: [
          { tokens: Int32Array.of(3), startPos: 1, blockTable: pages(9), sampling: { temperature, topP, seed: s } },
        ],
      };
      const a = await outcome(() => model.native.forward(batch));
      const packed = packForward(batch);
      const b = await outcome(() =>
        packed === null ? model.native.forward(batch) : model.native.forwardPacked(packed.ints, packed.floats),
      );
      expect(b).toEqual(a);
    },
  );
});
