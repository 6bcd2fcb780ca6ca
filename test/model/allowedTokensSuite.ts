// Constrained decoding in the native forward (NativeForwardSequence.allowedTokens, XGrammar's token bitmask): a
// masked row samples only allowed ids, its logprobs / top logprobs / confidence / logits are the constrained
// distribution's, an emitAll row takes one mask row per position, the rows without a mask keep their bits, a
// repeated step shape (on CUDA a replayed graph) reads each step's masks, and every malformed mask rejects by name
// with the addon working afterwards. allowedTokens.test.ts runs it on the CPU (f32), allowedTokens.cuda.test.ts on
// CUDA (bf16).
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { NativeForwardBatch, NativeForwardResult, NativeForwardSequence } from "../../ts/native/addonTypes.js";
import { loadModel, type Model } from "../../ts/model/model.js";
import { packForward } from "../../ts/model/packForward.js";
import type { FixtureDType } from "../../scripts/make-fixture.js";
import { rankByLogit, refLogSoftmax, tokenBitmask } from "../kernels/reference.js";
import { bitsOf } from "../kernels/tensors.js";
import { fixtureDir, randomTokens } from "./fixtureCache.js";

const PAGE = 4;

/** The float values' bits, or undefined for an absent array (exact comparison, -0 and NaN included). */
const bits = (a: Float32Array | undefined) => (a === undefined ? undefined : Array.from(bitsOf(a)));

/** Everything a row returns, floats as bits: equal only when every output is bitwise the same. */
function exact(r: NativeForwardResult) {
  return {
    token: r.token,
    logprob: bits(Float32Array.of(r.logprob)),
    tokens: r.tokens && Array.from(r.tokens),
    logprobs: bits(r.logprobs),
    topIds: r.topIds && Array.from(r.topIds),
    topLogprobs: bits(r.topLogprobs),
    confidence: r.confidence === undefined ? undefined : bits(Float32Array.of(r.confidence)),
    confidences: bits(r.confidences),
    logits: bits(r.logits),
  };
}

export function allowedTokensSuite(device: "cpu" | "cuda", dtype: FixtureDType): void {
  describe(`allowedTokens: constrained decoding in the forward (${device}, ${dtype})`, () => {
    let model: Model;
    let V: number, W: number;
    const tables = new Map<number, Int32Array>();
    /** Sequence k's pages: 6 of its own (24 tokens). */
    const table = (k: number) => {
      if (!tables.has(k))
        tables.set(
          k,
          Int32Array.from({ length: 6 }, (_, i) => 6 * k + i),
        );
      return tables.get(k)!;
    };
    const prompt = (k: number, n = 7) => Int32Array.from(randomTokens(n, V, 100 + k));

    beforeAll(async () => {
      model = await loadModel(await fixtureDir("llama", dtype), { device, kvPages: 96, pageSize: PAGE });
      V = model.config.vocabSize;
      W = Math.ceil(V / 32);
      // KV of every prompt but its last token (sequences 0..11)
      await model.forward({
        gemmSplitK: 1,
        kvSplits: 1,
        sequences: Array.from({ length: 12 }, (_, k) => ({
          tokens: prompt(k).subarray(0, -1),
          startPos: 0,
          blockTable: table(k),
          emitToken: false,
        })),
      });
    });
    afterAll(() => model?.dispose());

    /** Sequence k's decode step after its prompt (the same position every time it runs: its KV is rewritten as is). */
    const decode = (k: number, extra: Partial<NativeForwardSequence> = {}): NativeForwardSequence => ({
      tokens: prompt(k).subarray(-1),
      startPos: prompt(k).length - 1,
      blockTable: table(k),
      ...extra,
    });
    const step = (sequences: NativeForwardSequence[], extra: Partial<NativeForwardBatch> = {}) =>
      model.forward({ gemmSplitK: 1, kvSplits: 1, sequences, ...extra });
    /** Sequence k's raw logits at its decode step (alone in the step). */
    const rawLogits = async (k: number) => (await step([decode(k)], { returnLogits: true }))[0]!.logits!;

    it("greedy with one allowed id returns that id, logprob 0", async () => {
      const raw = await rawLogits(0);
      const least = rankByLogit(raw).at(-1)!; // the least likely id
      const out = await step([
        decode(0, { allowedTokens: tokenBitmask(V, [[least]]) }),
        decode(1, { allowedTokens: tokenBitmask(V, [[V - 1]]) }), // the last id, in the partial last word
        decode(2, { allowedTokens: tokenBitmask(V, [[0]]) }),
      ]);
      expect(out.map((r) => r.token)).toEqual([least, V - 1, 0]);
      for (const r of out) expect(r.logprob).toBe(0); // the only allowed id holds all the mass
    });

    it("temperature sampling with {a, b} allowed only ever returns a or b, both over many seeds", async () => {
      const ranked = rankByLogit(await rawLogits(3));
      const [a, b] = [ranked[10]!, ranked[11]!]; // neighbours in rank: both likely within the pair
      const allowedTokens = tokenBitmask(V, [[a, b]]);
      const seen = new Map<number, number>();
      for (let seed = 0; seed < 48; seed++) {
        const sampling = [
          { temperature: 1, topK: 0, topP: 1, seed },
          { temperature: 2, topK: 20, topP: 1, seed },
          { temperature: 0.8, topK: 0, topP: 0.9, seed },
        ][seed % 3]!;
        const [r] = await step([decode(3, { sampling, allowedTokens })]);
        seen.set(r!.token, (seen.get(r!.token) ?? 0) + 1);
      }
      expect([...seen.keys()].sort((x, y) => x - y)).toEqual([a, b].sort((x, y) => x - y));
      // top-k 1 keeps the better of the two
      const [r] = await step([decode(3, { sampling: { temperature: 1, topK: 1, seed: 5 }, allowedTokens })]);
      expect(r!.token).toBe(a);
    });

    it("a masked row's logprobs, top logprobs, confidence and logits are the constrained distribution's", async () => {
      const raw = await rawLogits(4);
      const allowed = [0, 31, 32, 200, rankByLogit(raw)[0]!, V - 1].filter((x, i, all) => all.indexOf(x) === i);
      const numTop = allowed.length + 3;
      const [r] = await step(
        [
          decode(4, {
            sampling: { temperature: 0.7, seed: 5 },
            numTopLogprobs: numTop,
            confidenceTopK: 3,
            allowedTokens: tokenBitmask(V, [allowed]),
          }),
        ],
        { returnLogits: true },
      );
      // logits: the raw ones (bitwise) at allowed ids, -inf elsewhere
      const want = raw.map((l, t) => (allowed.includes(t) ? l : -Infinity));
      expect(bits(r!.logits)).toEqual(bits(want));
      expect(allowed).toContain(r!.token);
      // logprobs: log-softmax over the allowed ids only
      const lpAllowed = refLogSoftmax(allowed.map((t) => raw[t]!));
      const lp = (t: number) => (allowed.includes(t) ? lpAllowed[allowed.indexOf(t)]! : -Infinity);
      expect(Math.abs(r!.logprob - lp(r!.token))).toBeLessThan(1e-5);
      // top logprobs: the allowed ids by logit, then disallowed ones at -inf (ties by lower id)
      const top = rankByLogit(want).slice(0, numTop);
      expect(Array.from(r!.topIds!)).toEqual(top);
      top.forEach((t, j) => {
        const got = r!.topLogprobs![j]!;
        if (lp(t) === -Infinity) expect(got).toBe(-Infinity);
        else expect(Math.abs(got - lp(t)), `top ${j}`).toBeLessThan(1e-5);
      });
      expect(top.slice(allowed.length).every((t) => !allowed.includes(t))).toBe(true);
      const conf = -(lp(top[0]!) + lp(top[1]!) + lp(top[2]!)) / 3;
      expect(Math.abs(r!.confidence! - conf)).toBeLessThan(1e-5);
    });

    it("a masked row's outputs are the same bits whether the step returns its logits or not", async () => {
      // Without returned logits the CPU sampler reads the masks itself; with them the logits are masked first.
      const raw = await rawLogits(4);
      const ranked = rankByLogit(raw);
      const rows = [
        [ranked[0]!, ranked[5]!, 0, V - 1], // a few ids
        Array.from({ length: V }, (_, t) => t).filter((t) => t % 7 !== 3 && t !== ranked[0]), // most ids
        [ranked[ranked.length - 1]!], // one id, the least likely
      ];
      const samplings = [
        { temperature: 0 },
        { temperature: 0.9, seed: 11 },
        { temperature: 1.2, topK: 3, topP: 0.9, seed: 12 },
      ];
      const sequences = rows.flatMap((allowed, r) =>
        samplings.map((sampling, j) =>
          decode(r * 3 + j, {
            sampling,
            numTopLogprobs: 6,
            confidenceTopK: 4,
            allowedTokens: tokenBitmask(V, [allowed]),
          }),
        ),
      );
      sequences.push(decode(9, { numTopLogprobs: 6, confidenceTopK: 4 })); // unmasked
      const withLogits = await step(sequences, { returnLogits: true });
      const without = await step(sequences);
      without.forEach((r, k) => {
        expect({ ...exact(r), logits: undefined }, `row ${k}`).toEqual({ ...exact(withLogits[k]!), logits: undefined });
        if (k < 9) expect(rows[Math.floor(k / 3)]!, `row ${k}`).toContain(r.token);
      });
    });

    it("an emitAll row takes one mask row per position", async () => {
      const p = prompt(5, 10);
      const seq = (extra: Partial<NativeForwardSequence>): NativeForwardSequence => ({
        tokens: p.subarray(6),
        startPos: 6,
        blockTable: table(5),
        emitAll: true,
        fixedSchedule: true,
        ...extra,
      });
      await step([{ tokens: p.subarray(0, 6), startPos: 0, blockTable: table(5), emitToken: false }]);
      const [plain] = await step([seq({})], { returnLogits: true });
      // one allowed id per position: each row returns it, with all the mass
      const forced = [3, 70, V - 1, 12];
      const [one] = await step([
        seq({
          allowedTokens: tokenBitmask(
            V,
            forced.map((t) => [t]),
          ),
        }),
      ]);
      expect(Array.from(one!.tokens!)).toEqual(forced);
      expect(Array.from(one!.logprobs!)).toEqual([0, 0, 0, 0]);
      expect(one!.token).toBe(forced[3]);
      // rows of two ids, and a row of all-ones words (allows every id: that row keeps its bits)
      const pairs: Array<number[] | null> = [[5, 6], [100, 400], null, [0, V - 1]];
      const mask = tokenBitmask(
        V,
        pairs.map((x) => x ?? []),
      );
      mask.fill(-1, 2 * W, 3 * W);
      const [two] = await step([seq({ allowedTokens: mask, numTopLogprobs: 2 })], { returnLogits: true });
      pairs.forEach((pair, j) => {
        const rawRow = plain!.logits!.subarray(j * V, (j + 1) * V);
        const want = pair === null ? rawRow : rawRow.map((l, t) => (pair.includes(t) ? l : -Infinity));
        expect(bits(two!.logits!.subarray(j * V, (j + 1) * V)), `row ${j}`).toEqual(bits(want));
        expect(two!.tokens![j], `row ${j}`).toBe(rankByLogit(want)[0]); // greedy
      });
      expect(two!.logprobs![2]).toBe(plain!.logprobs![2]);
    });

    it("leaves every output of the unmasked rows bitwise as without masks, on both input paths", async () => {
      const p = prompt(6, 12);
      await step([{ tokens: p.subarray(0, 4), startPos: 0, blockTable: table(6), emitToken: false }]);
      const batch = (masked: boolean): NativeForwardBatch => ({
        gemmSplitK: 2,
        kvSplits: 2,
        returnLogits: true,
        sequences: [
          decode(7, { numTopLogprobs: 4, confidenceTopK: 2 }),
          decode(8, {
            sampling: { temperature: 0.9, seed: 3 },
            numTopLogprobs: 4,
            allowedTokens: masked ? tokenBitmask(V, [randomTokens(10, V, 8)]) : undefined,
          }),
          decode(9, { sampling: { temperature: 0.9, seed: 4 }, numTopLogprobs: 4, confidenceTopK: 4 }),
          { ...decode(10), tokens: prompt(10).subarray(-3), startPos: 4, emitAll: true, fixedSchedule: true },
          // a prompt's last chunk, masked
          {
            tokens: p.subarray(4, 9),
            startPos: 4,
            blockTable: table(6),
            sampling: { temperature: 0.5, seed: 1 },
            allowedTokens: masked ? tokenBitmask(V, [[1, 2, 3]]) : undefined,
          },
          { tokens: prompt(11).subarray(0, -1), startPos: 0, blockTable: table(11), emitToken: false },
        ],
      });
      const plain = await model.forward(batch(false));
      const masked = await model.forward(batch(true));
      for (const k of [0, 2, 3, 5]) expect(exact(masked[k]!), `row ${k}`).toEqual(exact(plain[k]!));
      expect([1, 2, 3]).toContain(masked[4]!.token);
      expect(randomTokens(10, V, 8)).toContain(masked[1]!.token);
      // the object path and the packed one (Model.forward packs) return the same bytes
      const packed = packForward(batch(true));
      expect(packed).not.toBeNull();
      const viaObject = await model.native.forward(batch(true));
      const viaPacked = await model.native.forwardPacked(packed!.ints, packed!.floats);
      expect(viaPacked).toEqual(viaObject);
      expect(Array.from(viaObject.tokens)).toEqual(masked.map((r) => r.token));
    });

    it("reads each step's masks when the same step shape repeats (on CUDA: a replayed graph)", async () => {
      // decode rows only, no logits asked: the step CUDA captures once and replays (padded to its bucket)
      for (let s = 0; s < 6; s++) {
        const want = [7 + s, 50 + 3 * s, V - 1 - s];
        const maskedRows = s < 4 ? [0, 1, 2] : s === 4 ? [1] : [0, 2]; // the masked-row count changes at the end
        const out = await step(
          [0, 1, 2].map((k) =>
            decode(k, {
              sampling: { temperature: 1, seed: s },
              allowedTokens: maskedRows.includes(k) ? tokenBitmask(V, [[want[k]!]]) : undefined,
            }),
          ),
        );
        maskedRows.forEach((k) => expect(out[k]!.token, `step ${s} row ${k}`).toBe(want[k]));
      }
    });

    it("rejects each malformed mask by name, on both input paths, and keeps working", async () => {
      const before = await step([
        decode(0, { numTopLogprobs: 3 }),
        decode(1, { allowedTokens: tokenBitmask(V, [[9]]) }),
      ]);
      const lastWordBitPastV =
        V % 32
          ? (() => {
              const m = new Int32Array(W);
              m[W - 1] = 1 << (V % 32); // the id V: ignored, so the row allows nothing
              return m;
            })()
          : undefined;
      const cases: Array<[string, NativeForwardSequence[], RegExp]> = [
        [
          "one word too many",
          [decode(0, { allowedTokens: new Int32Array(W + 1).fill(-1) })],
          new RegExp(
            `^forward: sequence 0: allowedTokens holds ${W + 1} int32 words, expected ${W} = 1 row x ceil\\(vocab ${V} / 32\\) = ${W} words$`,
          ),
        ],
        [
          "emitAll rows short",
          [
            decode(0),
            {
              ...decode(1),
              tokens: prompt(1).subarray(-3),
              startPos: 4,
              emitAll: true,
              allowedTokens: new Int32Array(2 * W).fill(-1),
            },
          ],
          new RegExp(
            `^forward: sequence 1: allowedTokens holds ${2 * W} int32 words, expected ${3 * W} = 3 rows \\(tokens.length, emitAll\\)`,
          ),
        ],
        [
          "on a sequence that does not emit",
          [{ ...decode(0), emitToken: false, allowedTokens: new Int32Array(W).fill(-1) }],
          /^forward: sequence 0: allowedTokens is given but emitToken is false/,
        ],
        [
          "a row allowing nothing",
          [decode(0, { allowedTokens: new Int32Array(W) })],
          /^forward: allowedTokens row 0 of sequence 0 allows no token; the engine must end such a sequence instead/,
        ],
        [
          "an emitAll row allowing nothing",
          [
            decode(0),
            {
              ...decode(1),
              tokens: prompt(1).subarray(-3),
              startPos: 4,
              emitAll: true,
              allowedTokens: tokenBitmask(V, [[1], [], [2]]),
            },
          ],
          /^forward: allowedTokens row 1 of sequence 1 allows no token; the engine must end such a sequence instead/,
        ],
        [
          "not an Int32Array",
          [decode(0, { allowedTokens: new Uint32Array(W).fill(1) as unknown as Int32Array })],
          /^forward: sequence 0: 'allowedTokens' must be an Int32Array/,
        ],
      ];
      if (lastWordBitPastV)
        cases.push([
          "only a bit past the vocabulary",
          [decode(0, { allowedTokens: lastWordBitPastV })],
          /^forward: allowedTokens row 0 of sequence 0 allows no token/,
        ]);
      for (const [what, sequences, message] of cases) {
        await expect(step(sequences), `${what} (Model.forward)`).rejects.toThrow(message);
        await expect(
          model.native.forward({ gemmSplitK: 1, kvSplits: 1, sequences }),
          `${what} (object path)`,
        ).rejects.toThrow(message);
        const packed = packForward({ gemmSplitK: 1, kvSplits: 1, sequences });
        if (packed)
          await expect(model.native.forwardPacked(packed.ints, packed.floats), `${what} (packed)`).rejects.toThrow(
            message,
          );
        else expect(what).toBe("not an Int32Array"); // the only case the arrays cannot hold
      }
      // a packed count that is negative or runs past the arrays
      const packed = packForward({
        gemmSplitK: 1,
        kvSplits: 1,
        sequences: [decode(0, { allowedTokens: tokenBitmask(V, [[1]]) })],
      })!;
      const countAt = packed.ints.length - W - 1;
      expect(packed.ints[countAt]).toBe(W);
      for (const [count, message] of [
        [-1, /^forwardPacked: negative allowedTokens length in sequence 0/],
        [W + 1, /^forwardPacked: the packed batch is truncated/],
      ] as const) {
        const ints = packed.ints.slice();
        ints[countAt] = count;
        await expect(model.native.forwardPacked(ints, packed.floats.slice())).rejects.toThrow(message);
      }
      const after = await step([
        decode(0, { numTopLogprobs: 3 }),
        decode(1, { allowedTokens: tokenBitmask(V, [[9]]) }),
      ]);
      expect(after.map(exact)).toEqual(before.map(exact));
      expect(after[1]!.token).toBe(9);
    });
  });
}
