// Decode steps padded to their batch-size bucket (model_forward.cc decodeBucket; on by default on CUDA with graphs,
// forced here by DL_PAD_DECODE=1): the real rows' tokens, logprobs and top logprobs are bitwise those of the
// unpadded steps, over several steps (so their KV is untouched by the padding rows), and the pool keeps its size.
// The CPU runs it here (f32 fixture); padDecode.cuda.test.ts runs it on CUDA with bf16 weights (tensor-core GEMMs).
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { NativeForwardResult } from "../../ts/native/addonTypes.js";
import { loadModel, type Model } from "../../ts/model/model.js";
import type { FixtureDType } from "../../scripts/make-fixture.js";
import { fixtureDir, randomTokens } from "./fixtureCache.js";

export function padDecodeSuite(device: "cpu" | "cuda", dtype: FixtureDType): void {
  describe(`decode steps padded to a batch-size bucket (${device}, ${dtype})`, () => {
    let model: Model;
    beforeAll(async () => {
      model = await loadModel(await fixtureDir("llama", dtype), { device, kvPages: 128, pageSize: 4 });
    });
    afterAll(() => {
      delete process.env.DL_PAD_DECODE;
      model?.dispose();
    });

    async function run(B: number, pad: boolean): Promise<NativeForwardResult[][]> {
      process.env.DL_PAD_DECODE = pad ? "1" : "0";
      const V = model.config.vocabSize;
      const prompts = Array.from({ length: B }, (_, b) => randomTokens(2 + ((3 * b) % 7), V, 50 + b));
      const tables = prompts.map((_, b) => Int32Array.from({ length: 6 }, (_, i) => 6 * b + i));
      await model.forward({
        gemmSplitK: 1,
        kvSplits: 1,
        sequences: prompts.map((p, b) => ({
          tokens: Int32Array.from(p.slice(0, -1)),
          startPos: 0,
          blockTable: tables[b]!,
          emitToken: false,
        })),
      });
      let next = prompts.map((p) => p[p.length - 1]!);
      const steps: NativeForwardResult[][] = [];
      for (let s = 0; s < 5; s++) {
        const out = await model.forward({
          gemmSplitK: 2,
          kvSplits: 2,
          sequences: prompts.map((p, b) => ({
            tokens: Int32Array.of(next[b]!),
            startPos: p.length - 1 + s,
            blockTable: tables[b]!,
            numTopLogprobs: 3,
            sampling: { temperature: b % 2 ? 0.8 : 0, topK: 0, topP: 1, seed: 9 + b },
          })),
        });
        expect(out.length).toBe(B);
        next = out.map((r) => r.token);
        steps.push(out);
      }
      return steps;
    }

    it("changes no real row's bits, step after step, for batches between buckets", async () => {
      for (const B of [3, 5, 11, 17]) {
        const plain = await run(B, false);
        const padded = await run(B, true);
        padded.forEach((step, s) =>
          step.forEach((r, b) => {
            const p = plain[s]![b]!;
            const tag = `B=${B} step ${s} row ${b}`;
            expect(r.token, tag).toBe(p.token);
            expect(Object.is(r.logprob, p.logprob), tag).toBe(true);
            expect(Array.from(r.topIds!), tag).toEqual(Array.from(p.topIds!));
            expect(Array.from(r.topLogprobs!), tag).toEqual(Array.from(p.topLogprobs!));
          }),
        );
      }
    });

    it("keeps the scratch page out of the pool the caller sees", () => {
      expect(model.native.info.numPages).toBe(128);
      expect(model.native.info.kvBytesPerPage * 128).toBe(model.native.info.kvBytes);
    });
  });
}
