// Qwen3-MoE under the engine on the CPU: the mixture's promise that a token's output never depends on its batch.
// Batch-invariant kernel mode gives each request bitwise the tokens and logprobs it gets alone, beside any load; and
// `deterministic: true` commits exactly those bytes while the fast path runs the MoE layers on split-K schedules
// picked from the batch shape (decode-verify-rollback over the moe op).
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Engine } from "../../ts/engine/engine.js";
import type { GenerationOutput } from "../../ts/engine/outputs.js";
import type { GenerateRequest } from "../../ts/engine/request.js";
import { shuffled } from "../../ts/determinism/report.js";
import { loadModel, type Model } from "../../ts/model/model.js";
import { fixtureDir, randomTokens } from "./fixtureCache.js";
import { MOE_EXTRA } from "./moeFixture.js";

const PAGE = 4;
let model: Model;
let refModel: Model; // the reference engine's own KV pool
let V: number;
let requests: GenerateRequest[];
let alone: GenerationOutput[];

const together = (engine: Engine, reqs: GenerateRequest[]): Promise<GenerationOutput[]> =>
  Promise.all(reqs.map((r) => engine.submit(r).result));

const companions = (n: number, seed: number): GenerateRequest[] =>
  Array.from({ length: n }, (_, i) => ({
    prompt: randomTokens(3 + ((i * 7) % 13), V, seed + i),
    maxTokens: 6 + (i % 9),
    ignoreEos: true,
    temperature: i % 2 ? 0.7 : 0,
    seed: i,
  }));

function expectAlone(out: GenerationOutput, i: number): void {
  expect(out.tokens, `request ${i}`).toEqual(alone[i].tokens);
  expect(out.logprobs, `request ${i} logprobs`).toEqual(alone[i].logprobs);
}

beforeAll(async () => {
  const dir = await fixtureDir("qwen3moe", "bf16", MOE_EXTRA);
  model = await loadModel(dir, { kvPages: 512, pageSize: PAGE });
  refModel = await loadModel(dir, { kvPages: 512, pageSize: PAGE });
  V = model.config.vocabSize;
  requests = Array.from({ length: 4 }, (_, i) => ({
    prompt: randomTokens(5 + 6 * i, V, 40 + i),
    maxTokens: 20,
    ignoreEos: true,
    temperature: i % 2 ? 0.8 : 0,
    seed: 7 + i,
    logprobs: 2,
  }));
  await using bi = new Engine({ models: { model: refModel }, kernelMode: "batch-invariant" });
  alone = [];
  for (const r of requests) alone.push(await bi.submit(r).result);
});
afterAll(() => {
  model?.dispose();
  refModel?.dispose();
});

describe("Qwen3-MoE batch invariance and determinism on cpu", () => {
  it("batch-invariant mode: each request's tokens and logprobs bitwise as alone, in mixed batches of any size", async () => {
    await using engine = new Engine({ models: { model }, kernelMode: "batch-invariant" });
    for (const [load, seed] of [
      [2, 1],
      [10, 2],
    ] as const) {
      const order = shuffled(
        [...requests.map((r, i) => ({ r, i })), ...companions(load, 50 * seed).map((r) => ({ r, i: -1 }))],
        seed,
      );
      const outs = await together(
        engine,
        order.map((x) => x.r),
      );
      order.forEach(({ i }, k) => i >= 0 && expectAlone(outs[k], i));
    }
  });

  it("deterministic: true under load commits the batch-invariant bytes (fast path on batch-shaped split-K)", async () => {
    await using engine = new Engine({ models: { model }, verifyWindow: 8, verifyGroup: 4 });
    for (const [load, seed] of [
      [4, 3],
      [16, 4],
    ] as const) {
      const order = shuffled(
        [
          ...requests.map((r, i) => ({ r: { ...r, deterministic: true }, i })),
          ...companions(load, 70 * seed).map((r) => ({ r, i: -1 })),
        ],
        seed,
      );
      const outs = await together(
        engine,
        order.map((x) => x.r),
      );
      order.forEach(({ i }, k) => {
        if (i < 0) return;
        expectAlone(outs[k], i);
        expect(outs[k].determinism).toBeDefined();
      });
      // The same requests without the flag, under the same load: the fast path's batch-shaped split K moves their
      // logprobs' bits (so the equality above is the verifier's doing, not the absence of drift).
      const plain = await together(
        engine,
        order.map((x) => ({ ...x.r, deterministic: false })),
      );
      const drifted = order.filter(
        ({ i }, k) => i >= 0 && JSON.stringify(plain[k].logprobs) !== JSON.stringify(alone[i].logprobs),
      );
      expect(drifted.length).toBeGreaterThan(0);
    }
  });
});
