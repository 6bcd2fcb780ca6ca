// Deterministic probe captures on the GPU (issue 49): with `deterministic: true` a probe's activations come from
// fixed-schedule rows of verified tokens only, so each request's tokens and captures are bitwise the same alone and
// beside 5 or 80 plain requests (light load: the fast steps split K and the candidates are verified; heavy: decodes are
// exact), fused and separate verification. On the near-tie model. Skipped, with the reason printed, where no GPU is
// usable.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Engine } from "../../ts/engine/engine.js";
import type { GenerationOutput } from "../../ts/engine/outputs.js";
import type { GenerateRequest } from "../../ts/engine/request.js";
import { loadModel, type Model } from "../../ts/model/model.js";
import { cudaUnavailable } from "../kernels/cudaReference.js";
import { randomTokens } from "../model/fixtureCache.js";
import { nearTieModelDir } from "./nearTieModel.js";

const bytes = (a: Float32Array): string => Buffer.from(a.buffer, a.byteOffset, a.byteLength).toString("hex");
const replay = (o: GenerationOutput): string =>
  JSON.stringify({ tokens: o.tokens, probes: (o.probes ?? []).map((p) => [p.tokens, bytes(p.hidden)]) });

describe.skipIf(!!cudaUnavailable)("deterministic probe captures on cuda", () => {
  let model: Model;
  beforeAll(async () => {
    model = await loadModel(await nearTieModelDir(4), { device: "cuda", kvPages: 1024, pageSize: 16 });
  });
  afterAll(() => model?.dispose());

  for (const fuseVerify of [true, false]) {
    it(`gives each request the same tokens and captures alone and beside 5 and 80 (fuseVerify ${fuseVerify})`, async () => {
      const V = model.config.vocabSize;
      const options = { models: { model }, verifyWindow: 8, verifyGroup: 4, fuseVerify };
      const dets: GenerateRequest[] = Array.from({ length: 3 }, (_, i) => ({
        prompt: randomTokens(5 + 6 * i, V, 700 + i),
        maxTokens: 40,
        ignoreEos: true,
        temperature: i % 2 ? 0.8 : 0,
        seed: 21 + i,
        probe: { layer: i % 2 ? [0, -1] : -1, every: 3 + i },
        deterministic: true,
      }));
      const alone: string[] = [];
      for (const r of dets) {
        await using engine = new Engine(options);
        alone.push(replay(await engine.submit(r).result));
      }
      for (const load of [5, 80]) {
        await using engine = new Engine(options);
        const plain = Array.from(
          { length: load },
          (_, i) =>
            engine.submit({
              prompt: randomTokens(3 + (i % 17), V, 900 + i),
              maxTokens: 10 + (i % 23),
              ignoreEos: true,
              temperature: i % 3 ? 0.7 : 0,
              seed: i,
            }).result,
        );
        const outs = await Promise.all(dets.map((r) => engine.submit(r).result));
        await Promise.all(plain);
        outs.forEach((o, i) => {
          expect(o.probes!.length, `request ${i} under ${load}`).toBeGreaterThan(3);
          expect(replay(o), `request ${i} under ${load}`).toBe(alone[i]);
        });
      }
    }, 120_000);
  }
});
