// maskLogits (constrained decoding's token bitmask, kernels.h) on one device against the plain rule of reference.ts:
// exactly the disallowed ids of the masked rows become -inf and every other bit is kept (NaN, +-inf and -0 included,
// bits past V ignored); the sampler then draws from the constrained distribution (greedy, temperature, top-k wider
// than the allowed set, top-p), its logprobs the log-softmax over the allowed ids; bad rows and shapes reject and the
// op works afterwards. maskLogits.test.ts runs it on the CPU, maskLogits.cuda.test.ts on CUDA.
import { describe, expect, it } from "vitest";
import { loadAddon } from "../../ts/native/loadAddon.js";
import type { DeviceKind, NativeTensor } from "../../ts/native/addonTypes.js";
import {
  bitmaskAllows,
  makeRng,
  randomF32,
  rankByLogit,
  refLogSoftmax,
  refMaskLogits,
  refSample,
  seedOf,
  tokenBitmask,
  worstViolation,
} from "./reference.js";
import { bitsOf, disposeAll, readI32, tensorOf } from "./tensors.js";

const addon = loadAddon();

/** R random mask rows of W words: whole words allowed (-1) or not (0) among random ones, bits past V set at random. */
function randomMask(rng: () => number, R: number, W: number): Int32Array {
  return Int32Array.from({ length: R * W }, () => {
    const u = rng();
    return u < 0.25 ? -1 : u < 0.4 ? 0 : Math.floor(rng() * 2 ** 32) | 0;
  });
}

export function maskLogitsSuite(device: DeviceKind, seed: number): void {
  const rng = makeRng(seed);
  const live: NativeTensor[] = [];
  const t = (dtype: "f32" | "i32", shape: number[], values: ArrayLike<number>) => {
    const x = tensorOf(addon, device, dtype, shape, values);
    live.push(x);
    return x;
  };
  const cleanup = () => disposeAll(...live.splice(0));

  describe(`maskLogits (${device})`, () => {
    it("sets exactly the disallowed ids of the masked rows to -inf and keeps every other bit", async () => {
      try {
        // V: a partial last word (1000 = 31 words + 8 ids), whole words, one id, and a partial word alone
        for (const V of [1000, 4096, 1, 31, 32 * 70 + 1]) {
          const W = Math.ceil(V / 32),
            R = 3,
            rowOf = [2, -1, 0, 1, -1, 2]; // a mask row used twice, unmasked rows between
          const B = rowOf.length;
          const logits = randomF32(rng, B * V, 4);
          for (const [i, v] of [
            [3, NaN],
            [V + 1, Infinity],
            [2 * V - 1, -0],
            [4 * V, -Infinity],
          ] as const)
            if (i < B * V) logits[i] = v;
          const mask = randomMask(rng, R, W);
          const x = t("f32", [B, V], logits);
          await addon.ops.maskLogits({ logits: x, mask: t("i32", [R, W], mask), rowOf: t("i32", [B], rowOf) });
          const want = refMaskLogits(logits, V, mask, rowOf);
          const got = x.readF32();
          const a = bitsOf(got),
            b = bitsOf(want);
          const diff = a.findIndex((v, i) => v !== b[i]);
          expect(diff, `V=${V}: first difference at ${diff} (row ${Math.floor(diff / V)})`).toBe(-1);
          // the unmasked rows are the input, bit for bit
          for (const r of [1, 4]) expect(bitsOf(got, r * V, V)).toEqual(bitsOf(logits, r * V, V));
        }
      } finally {
        cleanup();
      }
    });

    it("leaves the sampler the constrained distribution: tokens, logprobs and top logprobs", async () => {
      try {
        const V = 777,
          numTop = 6;
        // per row: allowed ids, then sampling (temperature, topK, topP); top-k and the top logprobs reach past the
        // allowed set, so the -inf ids must rank last (ties by lower id) and never be drawn
        const rows: Array<{ allowed: number[]; temperature: number; topK: number; topP: number }> = [
          { allowed: [5, 700, 31, 32, 776], temperature: 0, topK: 0, topP: 1 },
          { allowed: [0], temperature: 1, topK: 0, topP: 1 },
          { allowed: [100, 101, 102, 640], temperature: 1.5, topK: 50, topP: 1 },
          { allowed: [9, 19, 29, 39, 49, 59, 69, 79], temperature: 0.8, topK: 0, topP: 0.7 },
          { allowed: [3, 333], temperature: 2, topK: 40, topP: 0.95 },
        ];
        const B = rows.length;
        const logits = randomF32(rng, B * V, 3);
        const mask = tokenBitmask(
          V,
          rows.map((r) => r.allowed),
        );
        const rowOf = rows.map((_, b) => b);
        const x = t("f32", [B, V], logits);
        await addon.ops.maskLogits({
          logits: x,
          mask: t("i32", [B, Math.ceil(V / 32)], mask),
          rowOf: t("i32", [B], rowOf),
        });
        const args = {
          logits: x,
          temperature: t(
            "f32",
            [B],
            rows.map((r) => r.temperature),
          ),
          topK: t(
            "i32",
            [B],
            rows.map((r) => r.topK),
          ),
          topP: t(
            "f32",
            [B],
            rows.map((r) => r.topP),
          ),
          seeds: t(
            "i32",
            [B, 2],
            rows.flatMap((_, b) => [1000 + b, 7]),
          ),
          positions: t(
            "i32",
            [B],
            rows.map((_, b) => 40 + b),
          ),
          tokens: t("i32", [B], new Int32Array(B).fill(-7)),
          logprobs: t("f32", [B], new Float32Array(B).fill(NaN)),
          topIds: t("i32", [B, numTop], new Int32Array(B * numTop).fill(-7)),
          topLogprobs: t("f32", [B, numTop], new Float32Array(B * numTop).fill(NaN)),
        };
        await addon.ops.sample(args);
        const tokens = readI32(args.tokens),
          logprobs = args.logprobs.readF32(),
          topIds = readI32(args.topIds),
          topLogprobs = args.topLogprobs.readF32();
        const masked = refMaskLogits(logits, V, mask, rowOf);
        for (let b = 0; b < B; b++) {
          const row = masked.subarray(b * V, (b + 1) * V);
          const { allowed, ...sampling } = rows[b]!;
          const tag = `row ${b} ${JSON.stringify(rows[b])}`;
          expect(allowed, tag).toContain(tokens[b]);
          expect(tokens[b], tag).toBe(refSample(row, { ...sampling, seed: seedOf(1000 + b, 7), position: 40 + b }));
          // log-softmax over the allowed ids only
          const raw = logits.subarray(b * V, (b + 1) * V);
          const lpAllowed = refLogSoftmax(allowed.map((id) => raw[id]!));
          const lp = lpAllowed[allowed.indexOf(tokens[b]!)]!;
          expect(worstViolation([logprobs[b]!], [lp], 1e-5, 1e-6), tag).toBeUndefined();
          const top = rankByLogit(row).slice(0, numTop);
          expect(Array.from(topIds.subarray(b * numTop, (b + 1) * numTop)), tag).toEqual(top);
          const lpRow = refLogSoftmax(row);
          top.forEach((id, j) => {
            const got = topLogprobs[b * numTop + j]!;
            if (lpRow[id] === -Infinity) expect(got, `${tag} top ${j}`).toBe(-Infinity);
            else expect(worstViolation([got], [lpRow[id]!], 1e-5, 1e-6), `${tag} top ${j}`).toBeUndefined();
          });
        }
      } finally {
        cleanup();
      }
    });

    // The sampler's own masks (sample({mask, maskRowOf}), what the CPU forward runs): the outputs of maskLogits then
    // sample, bit for bit, with the logits left unwritten and the unmasked rows as without any mask.
    it("sample with a mask: maskLogits then sample, bit for bit, logits unwritten, unmasked rows unchanged", async () => {
      try {
        // V: a partial last word, whole words only, fewer ids than a word, a 150k-like odd width
        for (const V of [1000, 4096, 20, 32 * 37 + 5]) {
          const W = Math.ceil(V / 32);
          // mask rows: mixed words; a few ids (a JSON structure token's); all but a few; every id; one id (the last)
          const few = tokenBitmask(V, [[3, 40, V - 1, Math.floor(V / 2), Math.floor(V / 2) + 1]]);
          const most = new Int32Array(W).fill(-1);
          for (const t of [0, 31, 32, 33, V - 2]) if (t >= 0 && t < V) most[t >> 5] &= ~(1 << (t & 31));
          const mask = Int32Array.of(
            ...randomMask(rng, 1, W),
            ...few,
            ...most,
            ...new Int32Array(W).fill(-1),
            ...tokenBitmask(V, [[V - 1]]),
          );
          const R = mask.length / W;
          const rowOf = [0, -1, 1, 2, 3, -1, 4, 1, 0, 2, 1];
          const B = rowOf.length;
          // logits on a coarse grid (ties at the max and in the top logprobs), NaN, +-inf and -0 among them
          const logits = Float32Array.from({ length: B * V }, () => Math.round((rng() * 2 - 1) * 12) / 4);
          for (let b = 0; b < B; b++)
            for (const [at, v] of [
              [7, NaN],
              [19, -Infinity],
              [V - 3, -0],
              [Math.floor(V / 2), NaN],
            ] as const)
              if (at < V && at >= 0 && (b + at) % 3 !== 0) logits[b * V + at] = v;
          const numTop = Math.min(12, V);
          const params = rowOf.map(
            (_, b) =>
              [
                [0, 0, 1],
                [1, 0, 1],
                [0.7, 5, 1],
                [1.3, 0, 0.8],
                [2, 50, 0.95],
              ][b % 5]!,
          );
          const args = (x: NativeTensor, masked: boolean) => ({
            logits: x,
            temperature: t(
              "f32",
              [B],
              params.map((p) => p[0]!),
            ),
            topK: t(
              "i32",
              [B],
              params.map((p) => p[1]!),
            ),
            topP: t(
              "f32",
              [B],
              params.map((p) => p[2]!),
            ),
            seeds: t(
              "i32",
              [B, 2],
              rowOf.flatMap((_, b) => [77 + b, 3]),
            ),
            positions: t(
              "i32",
              [B],
              rowOf.map((_, b) => 9 + b),
            ),
            tokens: t("i32", [B], new Int32Array(B).fill(-7)),
            logprobs: t("f32", [B], new Float32Array(B).fill(NaN)),
            topIds: t("i32", [B, numTop], new Int32Array(B * numTop).fill(-7)),
            topLogprobs: t("f32", [B, numTop], new Float32Array(B * numTop).fill(NaN)),
            ...(masked ? { mask: t("i32", [R, W], mask), maskRowOf: t("i32", [B], rowOf) } : {}),
          });
          /** Row b's outputs, floats as bits. */
          const outputs = (a: ReturnType<typeof args>) => {
            const tokens = readI32(a.tokens),
              logprobs = bitsOf(a.logprobs.readF32()),
              topIds = readI32(a.topIds),
              topLogprobs = bitsOf(a.topLogprobs.readF32());
            return rowOf.map((_, b) => ({
              token: tokens[b],
              logprob: logprobs[b],
              topIds: Array.from(topIds.subarray(b * numTop, (b + 1) * numTop)),
              topLogprobs: Array.from(topLogprobs.subarray(b * numTop, (b + 1) * numTop)),
            }));
          };
          // reference path: maskLogits, then sample without a mask
          const x1 = t("f32", [B, V], logits);
          await addon.ops.maskLogits({ logits: x1, mask: t("i32", [R, W], mask), rowOf: t("i32", [B], rowOf) });
          const a1 = args(x1, false);
          await addon.ops.sample(a1);
          // the sampler's masks
          const x2 = t("f32", [B, V], logits);
          const a2 = args(x2, true);
          await addon.ops.sample(a2);
          const o1 = outputs(a1),
            o2 = outputs(a2);
          // the masked rows, as reference.ts's rule writes them (NaN as -inf)
          const masked = refMaskLogits(logits, V, mask, rowOf).map((v) => (Number.isNaN(v) ? -Infinity : v));
          /** Every id of row b at -inf: maskLogits then sample takes id 0 there, the sampler's masks the first allowed. */
          const degenerate = (b: number) => masked.subarray(b * V, (b + 1) * V).every((v) => v === -Infinity);
          let compared = 0;
          for (let b = 0; b < B; b++) {
            const tag = `V=${V} row ${b} ${JSON.stringify(params[b])}`;
            if (!degenerate(b)) {
              expect(o2[b], tag).toEqual(o1[b]);
              compared++;
            } else expect(bitmaskAllows(mask, W, rowOf[b]!, o2[b]!.token!), tag).toBe(true);
          }
          expect(compared).toBeGreaterThan(B - 3);
          expect(bitsOf(x2.readF32()), `V=${V}: logits unwritten`).toEqual(bitsOf(logits));
          // unmasked rows: as a sample call with no mask at all
          const x3 = t("f32", [B, V], logits);
          const a3 = args(x3, false);
          await addon.ops.sample(a3);
          const o3 = outputs(a3);
          for (let b = 0; b < B; b++) if (rowOf[b] === -1) expect(o2[b], `V=${V} row ${b}`).toEqual(o3[b]);
          // and against the float64 reference: each masked row's token is the reference sampler's on its masked row
          for (let b = 0; b < B; b++) {
            if (degenerate(b)) continue;
            const [temperature, topK, topP] = params[b]!;
            const row = masked.subarray(b * V, (b + 1) * V);
            const want = refSample(row, { temperature, topK, topP, seed: seedOf(77 + b, 3), position: 9 + b });
            expect(o2[b]!.token, `V=${V} row ${b} ${JSON.stringify(params[b])}`).toBe(want);
          }
        }
      } finally {
        cleanup();
      }
    });

    it("sample with a mask: a row whose allowed logits are all NaN or -inf takes its first allowed id", async () => {
      try {
        const V = 300,
          W = Math.ceil(V / 32);
        const logits = randomF32(rng, 3 * V, 2);
        for (const t of [70, 71, 299]) logits[t] = NaN;
        logits[V + 70] = -Infinity;
        logits[V + 299] = NaN;
        const mask = tokenBitmask(V, [
          [70, 71, 299],
          [70, 299],
        ]);
        for (const temperature of [0, 1]) {
          const a = {
            logits: t("f32", [3, V], logits),
            temperature: t("f32", [3], [temperature, temperature, temperature]),
            topK: t("i32", [3], [0, 0, 0]),
            topP: t("f32", [3], [1, 1, 1]),
            seeds: t("i32", [3, 2], [1, 0, 2, 0, 3, 0]),
            positions: t("i32", [3], [0, 0, 0]),
            tokens: t("i32", [3], [-7, -7, -7]),
            logprobs: t("f32", [3], [0, 0, 0]),
            mask: t("i32", [2, W], mask),
            maskRowOf: t("i32", [3], [0, 1, -1]),
          };
          await addon.ops.sample(a);
          expect(Array.from(readI32(a.tokens)).slice(0, 2), `temperature ${temperature}`).toEqual([70, 70]);
          const lp = a.logprobs.readF32();
          expect(Number.isNaN(lp[0]!) && Number.isNaN(lp[1]!)).toBe(true);
        }
      } finally {
        cleanup();
      }
    });

    it("rejects a row outside the mask and a mask of the wrong width, then works again", async () => {
      try {
        const V = 100,
          W = 4;
        const logits = randomF32(rng, 3 * V, 2);
        const mask = tokenBitmask(V, [[1, 2], [99]]);
        const run = (rowOf: number[], m: Int32Array = mask, width = W) =>
          addon.ops.maskLogits({
            logits: t("f32", [3, V], logits),
            mask: t("i32", [m.length / width, width], m),
            rowOf: t("i32", [3], rowOf),
          });
        await expect(run([0, 2, -1])).rejects.toThrow(/^maskLogits: rowOf.* 2,? (is )?not a mask row in \[0, 2\)/);
        await expect(run([0, -2, -1])).rejects.toThrow(/^maskLogits: rowOf/);
        await expect(run([0, 1, -1], new Int32Array(6), 3)).rejects.toThrow(
          /^maskLogits: 'mask' must be \(R, ceil\(V \/ 32\) = 4\) i32 for V = 100/,
        );
        await expect(
          addon.ops.maskLogits({
            logits: t("f32", [3, V], logits),
            mask: t("i32", [2, W], mask),
            rowOf: t("i32", [2], [0, 1]),
          }),
        ).rejects.toThrow(/^maskLogits: 'rowOf' must be 3 i32 values/);
        // sample's mask and maskRowOf, by the same rule
        const sampleWith = (extra: { mask?: NativeTensor; maskRowOf?: NativeTensor }) =>
          addon.ops.sample({
            logits: t("f32", [3, V], logits),
            temperature: t("f32", [3], [0, 0, 0]),
            topK: t("i32", [3], [0, 0, 0]),
            topP: t("f32", [3], [1, 1, 1]),
            seeds: t("i32", [3, 2], [0, 0, 0, 0, 0, 0]),
            positions: t("i32", [3], [0, 0, 0]),
            tokens: t("i32", [3], [0, 0, 0]),
            logprobs: t("f32", [3], [0, 0, 0]),
            ...extra,
          });
        await expect(sampleWith({ mask: t("i32", [2, W], mask) })).rejects.toThrow(
          /^sample: give both mask and maskRowOf, or neither/,
        );
        await expect(
          sampleWith({ mask: t("i32", [2, W], mask), maskRowOf: t("i32", [3], [0, 2, -1]) }),
        ).rejects.toThrow(/^sample: maskRowOf.* 2,? (is )?not a mask row in \[0, 2\)/);
        await expect(
          sampleWith({ mask: t("i32", [2, 3], new Int32Array(6)), maskRowOf: t("i32", [3], [0, 1, -1]) }),
        ).rejects.toThrow(/^sample: 'mask' must be \(R, ceil\(V \/ 32\) = 4\) i32 for V = 100/);
        await expect(sampleWith({ mask: t("i32", [2, W], mask), maskRowOf: t("i32", [2], [0, 1]) })).rejects.toThrow(
          /^sample: 'maskRowOf' must be 3 i32 values/,
        );
        const x = t("f32", [3, V], logits);
        await addon.ops.maskLogits({ logits: x, mask: t("i32", [2, W], mask), rowOf: t("i32", [3], [1, -1, 0]) });
        expect(bitsOf(x.readF32())).toEqual(bitsOf(refMaskLogits(logits, V, mask, [1, -1, 0])));
      } finally {
        cleanup();
      }
    });
  });
}
