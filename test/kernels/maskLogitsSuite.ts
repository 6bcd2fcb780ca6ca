// maskLogits (constrained decoding's token bitmask, kernels.h) on one device against the plain rule of reference.ts:
// exactly the disallowed ids of the masked rows become -inf and every other bit is kept (NaN, +-inf and -0 included,
// bits past V ignored); the sampler then draws from the constrained distribution (greedy, temperature, top-k wider
// than the allowed set, top-p), its logprobs the log-softmax over the allowed ids; bad rows and shapes reject and the
// op works afterwards. maskLogits.test.ts runs it on the CPU, maskLogits.cuda.test.ts on CUDA.
import { describe, expect, it } from "vitest";
import { loadAddon } from "../../ts/native/loadAddon.js";
import type { DeviceKind, NativeTensor } from "../../ts/native/addonTypes.js";
import {
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
        const x = t("f32", [3, V], logits);
        await addon.ops.maskLogits({ logits: x, mask: t("i32", [2, W], mask), rowOf: t("i32", [3], [1, -1, 0]) });
        expect(bitsOf(x.readF32())).toEqual(bitsOf(refMaskLogits(logits, V, mask, [1, -1, 0])));
      } finally {
        cleanup();
      }
    });
  });
}
