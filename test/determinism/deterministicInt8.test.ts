// `deterministic: true` on an int8-quantized model (loadModel quantize: "int8"): the near-tie model's deterministic
// outputs are bitwise the batch-invariant outputs of the same requests, beside plain fast-path companions, since the
// int8 GEMM keeps the dense schedule (a row's bits depend on K and splitK only).
import { afterAll, beforeAll, expect, it } from "vitest";
import { Engine } from "../../ts/engine/engine.js";
import type { GenerationOutput } from "../../ts/engine/outputs.js";
import type { GenerateRequest } from "../../ts/engine/request.js";
import { loadModel, type Model } from "../../ts/model/model.js";
import { randomTokens } from "../model/fixtureCache.js";
import { nearTieModelDir } from "./nearTieModel.js";

const PAGE = 4;
let model: Model;
let refModel: Model;
let requests: GenerateRequest[];
const reference: GenerationOutput[] = [];

beforeAll(async () => {
  const dir = await nearTieModelDir(4);
  model = await loadModel(dir, { kvPages: 256, pageSize: PAGE, quantize: "int8" });
  refModel = await loadModel(dir, { kvPages: 256, pageSize: PAGE, quantize: "int8" });
  const V = model.config.vocabSize;
  requests = Array.from({ length: 4 }, (_, i) => ({
    prompt: randomTokens(5 + 4 * i, V, 10 + i),
    maxTokens: 24,
    ignoreEos: true,
    temperature: i % 2 ? 0.8 : 0,
    seed: 3 + i,
  }));
  await using bi = new Engine({ models: { model: refModel }, kernelMode: "batch-invariant" });
  for (const r of requests) reference.push(await bi.submit(r).result);
});
afterAll(() => {
  model?.dispose();
  refModel?.dispose();
});

it("commits exactly the batch-invariant tokens of an int8 model beside plain requests", async () => {
  await using engine = new Engine({ models: { model }, verifyWindow: 8, verifyGroup: 4 });
  const V = model.config.vocabSize;
  const companions = Array.from({ length: 6 }, (_, i) => ({
    prompt: randomTokens(3 + ((i * 7) % 13), V, 900 + i),
    maxTokens: 10 + i,
    ignoreEos: true,
  }));
  const outs = await Promise.all(
    [...requests.map((r) => ({ ...r, deterministic: true })), ...companions].map((r) => engine.submit(r).result),
  );
  requests.forEach((_, i) => {
    expect(outs[i].tokens, `request ${i}`).toEqual(reference[i].tokens);
    expect(outs[i].determinism).toBeDefined();
  });
});
