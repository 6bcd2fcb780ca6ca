// Model.forward (one native call per step) against the float64 reference, the suite both backends run:
// forward.test.ts on the CPU, forward.cuda.test.ts on CUDA. Logits after prefill and at every decode step (KV reused
// across steps; split-K GEMMs and split KV too), chunked prefill, batch invariance under a fixed schedule,
// copy-on-write pages and boundary errors. What only one backend checks stays in its own file.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { NativeForwardBatch, NativeForwardResult, NativeForwardSequence } from "../../ts/native/addonTypes.js";
import { loadModel, type Model } from "../../ts/model/model.js";
import type { FixtureArch, FixtureDType, FixtureOptions } from "../../scripts/make-fixture.js";
import { fixtureDir, randomTokens, relL2 } from "./fixtureCache.js";
import { ReferenceModel } from "./reference.js";

export const PAGE = 4; // small pages so every prompt spans several, with partial last pages
export const FIXED = { gemmSplitK: 1, kvSplits: 1 };

/** Runs `tokens` in chunks of the given sizes on fresh pages; returns the logits after each chunk. */
export async function runChunks(
  model: Model,
  tokens: number[],
  chunks: number[],
  firstPage: number,
  schedule = FIXED,
): Promise<Float32Array[]> {
  const pages = Int32Array.from({ length: Math.ceil(tokens.length / PAGE) }, (_, i) => firstPage + i);
  const out: Float32Array[] = [];
  let pos = 0;
  for (const n of chunks) {
    const [r] = await model.forward({
      ...schedule,
      returnLogits: true,
      sequences: [{ tokens: Int32Array.from(tokens.slice(pos, pos + n)), startPos: pos, blockTable: pages }],
    });
    out.push(r.logits!);
    pos += n;
  }
  return out;
}

/** A fixture model; `what` names what sets it apart in the test titles. */
export interface FixtureCase {
  arch: FixtureArch;
  dtype: FixtureDType;
  extra?: Partial<FixtureOptions>;
  what?: string;
}

/** A fixture's loaded model and reference, for the tests a backend adds to that fixture's describe block. */
export interface LoadedCase {
  model: Model;
  ref: ReferenceModel;
  /** The backend's relL2 bound against the reference for this fixture's weights. */
  tolerance: number;
}

export interface ForwardBackend {
  device: "cpu" | "cuda";
  /** The fixtures compared with the reference. */
  cases: readonly FixtureCase[];
  /** relL2 bound between a backend's logits and the reference for a weight dtype. */
  tolerance(dtype: FixtureDType): number;
  /** relL2 bound between a prompt prefilled in chunks and the same prompt in one step. */
  chunkedTolerance: number;
  /** Prompt lengths prefilled in one step before three decode steps. */
  prefillLengths: readonly number[];
  /** The fixture of the batch-invariance, copy-on-write and boundary-error tests. */
  batchFixture: FixtureCase;
  /** The backend's own tests on each case's model, run inside that case's describe block. */
  caseTests?(loaded: () => LoadedCase): void;
}

const title = (c: FixtureCase): string => `${c.arch} ${c.dtype}${c.what ? ` (${c.what})` : ""}`;

export function forwardSuite(backend: ForwardBackend): void {
  const { device } = backend;
  for (const c of backend.cases) referenceCase(backend, c);

  describe(`batched forward on ${device} (${title(backend.batchFixture)})`, () => {
    let model: Model;
    beforeAll(async () => {
      const { arch, dtype, extra } = backend.batchFixture;
      model = await loadModel(await fixtureDir(arch, dtype, extra), { device, kvPages: 256, pageSize: PAGE });
    });
    afterAll(() => model?.dispose());

    it("gives each sequence bitwise the result it gets alone under the same fixed schedule", async () => {
      const V = model.config.vocabSize;
      const L = model.config.numLayers;
      const schedule = { gemmSplitK: 2, kvSplits: 2 };
      const prompts = [
        randomTokens(7, V, 21),
        randomTokens(18, V, 22),
        randomTokens(1, V, 23),
        randomTokens(12, V, 24),
      ];
      // Sequences 2 and 3 decode one token after a cached prefix; 0 and 1 are prefill chunks.
      const prefixes = [[], [], randomTokens(9, V, 25), randomTokens(30, V, 26)];
      const table = (i: number) => Int32Array.from({ length: 12 }, (_, j) => i * 12 + j);
      const setup = async () => {
        for (const i of [2, 3]) {
          await model.forward({
            ...schedule,
            sequences: [{ tokens: Int32Array.from(prefixes[i]), startPos: 0, blockTable: table(i), emitToken: false }],
          });
        }
      };
      // Even sequences sample from the whole vocabulary and capture one layer; odd ones sample under top-k / top-p and
      // capture several layers, the final norm's output (L) and input (L + 1) included.
      const seq = (i: number): NativeForwardSequence => ({
        tokens: Int32Array.from(prompts[i]),
        startPos: prefixes[i].length,
        blockTable: table(i),
        numTopLogprobs: 3,
        ...(i % 2 === 0
          ? { sampling: { temperature: 0.9, seed: 1000 + i }, captureHiddenLayer: 1 }
          : {
              sampling: { temperature: 0.9, seed: 1000 + i, topK: 50, topP: 0.9 },
              captureHiddenLayers: Int32Array.from([0, 1, L, L + 1]),
            }),
      });
      await setup();
      const alone: NativeForwardResult[] = [];
      for (let i = 0; i < 4; i++)
        alone.push((await model.forward({ ...schedule, returnLogits: true, sequences: [seq(i)] }))[0]);
      await setup();
      const batch: NativeForwardBatch = {
        ...schedule,
        returnLogits: true,
        sequences: [seq(3), seq(0), seq(2), seq(1)],
      };
      const together = await model.forward(batch);
      [3, 0, 2, 1].forEach((i, k) => {
        expect(together[k].token).toBe(alone[i].token);
        expect(together[k].logprob).toBe(alone[i].logprob);
        expect(Array.from(together[k].logits!)).toEqual(Array.from(alone[i].logits!));
        expect(Array.from(together[k].hidden!)).toEqual(Array.from(alone[i].hidden!));
        expect(Array.from(together[k].topIds!)).toEqual(Array.from(alone[i].topIds!));
      });
      if (device === "cpu") {
        // fastSplitK (the engine's fast mode) caps splitK per GEMM only on CUDA, where a GEMM's grid can fill the SMs:
        // the same bytes on the CPU.
        await setup();
        const capped = await model.forward({ ...batch, fastSplitK: true });
        capped.forEach((r, k) => expect(Array.from(r.logits!)).toEqual(Array.from(together[k].logits!)));
      }
    });

    it("copies pages (copy-on-write) so a forked sequence continues from the same state", async () => {
      const V = model.config.vocabSize;
      const prefix = randomTokens(6, V, 31); // pages 100, 101 (2 of 4 used)
      const next = randomTokens(1, V, 32);
      await model.forward({
        ...FIXED,
        sequences: [
          { tokens: Int32Array.from(prefix), startPos: 0, blockTable: Int32Array.from([100, 101]), emitToken: false },
        ],
      });
      await model.copyPages(Int32Array.from([101]), Int32Array.from([102]));
      const run = (last: number) =>
        model.forward({
          ...FIXED,
          returnLogits: true,
          sequences: [{ tokens: Int32Array.from(next), startPos: 6, blockTable: Int32Array.from([100, last]) }],
        });
      const [a] = await run(101);
      const [b] = await run(102);
      expect(Array.from(b.logits!)).toEqual(Array.from(a.logits!));
      // The same through a forward's pageCopies: the copy happens before the step writes its KV.
      const [c] = await model.forward({
        ...FIXED,
        returnLogits: true,
        pageCopies: { src: Int32Array.from([101]), dst: Int32Array.from([103]) },
        sequences: [{ tokens: Int32Array.from(next), startPos: 6, blockTable: Int32Array.from([100, 103]) }],
      });
      expect(Array.from(c.logits!)).toEqual(Array.from(a.logits!));
    });

    it("rejects bad input with an Error naming the sequence and the field", async () => {
      const V = model.config.vocabSize;
      const ok = { tokens: Int32Array.from([1, 2, 3]), startPos: 0, blockTable: Int32Array.from([0]) };
      const fwd = (s: Partial<NativeForwardSequence>, extra: Partial<NativeForwardBatch> = {}) =>
        model.forward({ ...FIXED, ...extra, sequences: [ok, { ...ok, ...s }] });
      await expect(fwd({ startPos: 2 })).rejects.toThrow(/sequence 1: blockTable holds 1 pages .* needs 2 pages/);
      await expect(fwd({ blockTable: Int32Array.from([256]) })).rejects.toThrow(
        /sequence 1: blockTable\[0\] = 256 is not a page id in \[0, 256\)/,
      );
      await expect(fwd({ tokens: Int32Array.from([1, V]) })).rejects.toThrow(
        new RegExp(`sequence 1: token id ${V} at index 1 is out of range`),
      );
      await expect(fwd({ tokens: new Int32Array(0) })).rejects.toThrow(/sequence 1: tokens is empty/);
      await expect(fwd({ sampling: { temperature: -1 } })).rejects.toThrow(/sequence 1: temperature/);
      await expect(fwd({ sampling: { topP: 0 } })).rejects.toThrow(/sequence 1: topP/);
      await expect(fwd({ captureHiddenLayer: 99 })).rejects.toThrow(/captureHiddenLayer/);
      await expect(fwd({ tokens: [1, 2] as unknown as Int32Array })).rejects.toThrow(/'tokens' must be an Int32Array/);
      await expect(fwd({}, { kvSplits: 0 })).rejects.toThrow(/kvSplits/);
      await expect(model.copyPages(Int32Array.from([0]), Int32Array.from([999]))).rejects.toThrow(
        /not a pair of page ids/,
      );
    });
  });
}

/** One fixture against the reference: logits through prefill and decode, and chunked prefill. */
function referenceCase(backend: ForwardBackend, c: FixtureCase): void {
  const tolerance = backend.tolerance(c.dtype);
  describe(`${title(c)} forward on ${backend.device} vs float64 reference`, () => {
    let model: Model;
    let ref: ReferenceModel;
    beforeAll(async () => {
      const dir = await fixtureDir(c.arch, c.dtype, c.extra);
      model = await loadModel(dir, { device: backend.device, kvPages: 256, pageSize: PAGE });
      ref = await ReferenceModel.load(dir);
    });
    afterAll(() => model?.dispose());

    it("gives the reference logits after prefill and at every decode step (KV reused across steps)", async () => {
      const V = model.config.vocabSize;
      for (const [k, len] of backend.prefillLengths.entries()) {
        const tokens = randomTokens(len + 3, V, k + 1);
        const want = ref.logits(tokens);
        // Prefill the first `len` tokens in one step, then decode three tokens one by one.
        const got = await runChunks(model, tokens, [len, 1, 1, 1], 0);
        got.forEach((g, i) => {
          expect(g.length).toBe(V);
          expect(relL2(g, want[len - 1 + i])).toBeLessThan(tolerance);
        });
        // kvSplits 2 and split-K GEMMs compute the same function (other bits, same tolerance).
        const split = await runChunks(model, tokens, [len, 1], 0, { gemmSplitK: 2, kvSplits: 2 });
        expect(relL2(split[1], want[len])).toBeLessThan(tolerance);
      }
    });

    it("gives the same logits for a prompt prefilled in chunks as in one step", async () => {
      const tokens = randomTokens(29, model.config.vocabSize, 7);
      const [whole] = await runChunks(model, tokens, [29], 0);
      const chunked = await runChunks(model, tokens, [10, 12, 7], 16);
      expect(relL2(chunked[2], whole)).toBeLessThan(backend.chunkedTolerance);
      const want = ref.logits(tokens);
      expect(relL2(chunked[0], want[9])).toBeLessThan(tolerance);
      expect(relL2(chunked[1], want[21])).toBeLessThan(tolerance);
    });

    backend.caseTests?.(() => ({ model, ref, tolerance }));
  });
}
