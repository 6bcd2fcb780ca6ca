// `deterministic: true` (decode-verify-rollback) on a near-tie model where fast-path drift flips greedy tokens
// within a few steps: every deterministic output must be bitwise the batch-invariant output of the same request,
// whatever the batch, the prefill chunking, the prefix cache, preemption or the thread count, while the fast path
// alone really does diverge (rollbacks happen; plain requests differ).
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Engine, type EngineOptions } from "../../ts/engine/engine.js";
import type { GenerationOutput } from "../../ts/engine/outputs.js";
import type { GenerateRequest } from "../../ts/engine/request.js";
import { shuffled } from "../../ts/determinism/report.js";
import { loadModel, type Model } from "../../ts/model/model.js";
import { loadAddon } from "../../ts/native/loadAddon.js";
import { randomTokens } from "../model/fixtureCache.js";
import { nearTieModelDir } from "./nearTieModel.js";

const PAGE = 4;
let model: Model;
/** A second copy for batch-invariant reference engines: engines sharing one model would share (and clobber) its KV pool. */
let refModel: Model;
let V: number;
let requests: GenerateRequest[];
let reference: GenerationOutput[];

const det = (r: GenerateRequest): GenerateRequest => ({ ...r, deterministic: true });

/** Runs requests concurrently on `engine`; returns their outputs in input order. */
const together = (engine: Engine, reqs: GenerateRequest[]): Promise<GenerationOutput[]> =>
  Promise.all(reqs.map((r) => engine.submit(r).result));

function expectSameAsReference(out: GenerationOutput, i: number): void {
  expect(out.tokens, `request ${i}`).toEqual(reference[i].tokens);
  expect(out.logprobs, `request ${i} logprobs`).toEqual(reference[i].logprobs);
}

/** Plain fast-path companions with their own prompts. */
const companions = (n: number, seed: number): GenerateRequest[] =>
  Array.from({ length: n }, (_, i) => ({
    prompt: randomTokens(3 + ((i * 7) % 13), V, seed + i),
    maxTokens: 8 + (i % 9),
    ignoreEos: true,
    temperature: i % 2 ? 0.7 : 0,
    seed: i,
  }));

beforeAll(async () => {
  model = await loadModel(await nearTieModelDir(4), { kvPages: 256, pageSize: PAGE });
  refModel = await loadModel(await nearTieModelDir(4), { kvPages: 256, pageSize: PAGE });
  V = model.config.vocabSize;
  requests = Array.from({ length: 6 }, (_, i) => ({
    prompt: randomTokens(5 + 4 * i, V, 10 + i),
    maxTokens: 24,
    ignoreEos: true,
    temperature: i % 3 === 2 ? 0.8 : 0,
    seed: 3 + i,
    logprobs: i % 2,
  }));
  // The definition of the right answer: batch-invariant mode, each request alone.
  await using bi = new Engine({ models: { model: refModel }, kernelMode: "batch-invariant" });
  reference = [];
  for (const r of requests) reference.push(await bi.submit(r).result);
});
afterAll(() => {
  model?.dispose();
  refModel?.dispose();
});

// Both placements of the verify rows: fused into the steps' forwards (the default) and passes of their own.
describe.each([{ fuseVerify: true }, { fuseVerify: false }])("deterministic: true (%o)", ({ fuseVerify }) => {
  const DVR = { verifyWindow: 8, verifyGroup: 4, fuseVerify };
  const engineWith = (options: Partial<EngineOptions> = {}): Engine =>
    new Engine({ models: { model }, ...DVR, ...options });

  it("commits exactly the batch-invariant tokens beside a plain request, rolling back the fast path's flips", async () => {
    await using engine = engineWith();
    let rollbacks = 0;
    let plainDiffers = 0;
    for (const [i, r] of requests.entries()) {
      // One plain companion keeps the steps mixed and small (split K): the deterministic tokens are candidates.
      const [out] = await together(engine, [
        det(r),
        { prompt: randomTokens(6, V, 900 + i), maxTokens: 30, ignoreEos: true },
      ]);
      expectSameAsReference(out, i);
      expect(out.determinism!.verifyPasses).toBeGreaterThanOrEqual(Math.ceil((24 - 1) / DVR.verifyWindow));
      rollbacks += out.determinism!.rollbacks;
      expect(out.determinism!.recomputedTokens).toBeGreaterThanOrEqual(out.determinism!.rollbacks);
      const plain = await engine.submit(r).result;
      if (JSON.stringify(plain.tokens) !== JSON.stringify(reference[i].tokens)) plainDiffers++;
      expect(plain.determinism).toBeUndefined();
    }
    expect(rollbacks).toBeGreaterThan(0); // the verifier really caught fast-path flips
    expect(plainDiffers).toBeGreaterThan(0); // and without it they reach the output
  });

  it("alone on the CPU every row is deterministic, so every decode is exact: batch-invariant bytes, no verify pass", async () => {
    await using engine = engineWith();
    for (const [i, r] of requests.entries()) {
      const out = await engine.submit(det(r)).result;
      expectSameAsReference(out, i);
      expect(out.determinism).toMatchObject({ verifyPasses: 0, rollbacks: 0, exactTokens: out.tokens.length - 1 });
    }
  });

  it("holds across batch size, composition and position in the batch", async () => {
    await using engine = engineWith();
    for (const [load, seed] of [
      [3, 1],
      [12, 2],
      [30, 3],
    ] as const) {
      const tagged = [
        ...requests.map((r, i) => ({ r: det(r), i })),
        ...companions(load, 100 * seed).map((r) => ({ r, i: -1 })),
      ];
      const order = shuffled(tagged, seed);
      const outs = await together(
        engine,
        order.map((x) => x.r),
      );
      order.forEach(({ i }, k) => {
        if (i >= 0) expectSameAsReference(outs[k], i);
      });
    }
  });

  it("holds with the default window and group, and for n samples (each sample streamed only as committed)", async () => {
    await using engine = new Engine({ models: { model }, fuseVerify });
    await using bi = new Engine({ models: { model: refModel }, kernelMode: "batch-invariant" });
    const req: GenerateRequest = { ...requests[1], n: 3, temperature: 0, maxTokens: 40 }; // greedy: near ties flip
    const want = await bi.submit(req).result;
    const handle = engine.submit(det(req));
    const plain = engine.submit({ prompt: randomTokens(5, V, 77), maxTokens: 60, ignoreEos: true }); // mixed steps: candidates
    const streamed: number[][] = [[], [], []];
    for await (const d of handle) streamed[d.sample].push(...d.tokens);
    const out = await handle.result;
    await plain.result;
    expect(out.samples.map((s) => s.tokens)).toEqual(want.samples.map((s) => s.tokens));
    expect(streamed).toEqual(want.samples.map((s) => s.tokens));
    expect(out.determinism!.verifyPasses).toBeGreaterThanOrEqual(3);
  });

  it("commits without verify passes where the step runs the fixed schedule anyway (CPU, 16+ decoding sequences)", async () => {
    await using engine = engineWith();
    const reqs = Array.from({ length: 18 }, (_, i) => det(requests[i % 6]));
    const plain = companions(4, 500).map((r) => ({ ...r, maxTokens: 30 }));
    const outs = (await together(engine, [...reqs, ...plain])).slice(0, reqs.length);
    outs.forEach((o, i) => expectSameAsReference(o, i % 6));
    // 22 sequences decode in lockstep: every fast step is splitK 1, so each deterministic token is already final.
    expect(outs.reduce((n, o) => n + o.determinism!.verifyPasses, 0)).toBe(0);
    // Every token after the prefill's (which the fixed prefill commits) was an exact decode.
    outs.forEach((o) => expect(o.determinism!.exactTokens).toBe(o.tokens.length - 1));
    // Beside one plain request the fast schedule splits K: those tokens are candidates and get verified.
    const [mixed] = await together(engine, [
      reqs[0],
      { prompt: randomTokens(6, V, 901), maxTokens: 30, ignoreEos: true },
    ]);
    expect(mixed.determinism!.verifyPasses).toBeGreaterThan(0);
  });

  it("holds for chunked vs whole prefill", async () => {
    await using chunked = engineWith({ maxBatchTokens: 5 });
    const outs = await together(chunked, [...requests.map(det), ...companions(4, 7)]);
    requests.forEach((_, i) => expectSameAsReference(outs[i], i));
  });

  it("holds for prefix-cache hits, and never reuses fast-path KV", async () => {
    await using engine = engineWith();
    // Each deterministic request runs beside plain companions, so its fast-path tokens would drift (alone on the CPU
    // every decode is exact and would match without any verifier).
    const withLoad = async (req: GenerateRequest, seed: number): Promise<GenerationOutput> =>
      (await together(engine, [req, ...companions(4, seed)]))[0];
    const r = requests[4]; // greedy, a 21-token prompt: 5 full pages
    const plain = await engine.submit(r).result; // fills the default namespace with fast-schedule KV
    expect(plain.usage.cachedTokens).toBe(0);
    const miss = await withLoad(det(r), 21);
    expect(miss.usage.cachedTokens).toBe(0);
    const hit = await withLoad(det(r), 31);
    expect(hit.usage.cachedTokens).toBe(20);
    expectSameAsReference(miss, 4);
    expectSameAsReference(hit, 4);
    // A prompt extending a deterministic output: its verified pages are hits too.
    const extended = { ...r, prompt: [...(r.prompt as number[]), ...miss.tokens.slice(0, 12)], maxTokens: 10 };
    await using bi = new Engine({ models: { model: refModel }, kernelMode: "batch-invariant" });
    const want = await bi.submit(extended).result;
    const got = await withLoad(det(extended), 41);
    expect(got.usage.cachedTokens).toBeGreaterThan(20);
    expect(got.tokens).toEqual(want.tokens);
  });

  it("has a verifier only while deterministic sequences run: it goes with the last, and its pages with it", async () => {
    await using engine = engineWith();
    const verifying = (): number => engine.metrics().models[0].verifyingSequences;
    const plain = engine.submit(companions(1, 71)[0]);
    await plain.result;
    expect(verifying()).toBe(0);
    const handles = requests.slice(0, 3).map((r) => engine.submit(det(r)));
    expect(verifying()).toBe(3);
    const outs = await Promise.all(handles.map((h) => h.result));
    outs.forEach((out, i) => expectSameAsReference(out, i));
    expect(verifying()).toBe(0);
    const m = engine.metrics().models[0];
    expect(m.kvPagesUsed).toBe(0); // verify rows' and (separate passes on a GPU) scratch pages all returned
    // A new deterministic request after the verifier went gets a fresh one and the same bytes.
    const again = engine.submit(det(requests[1]));
    expect(verifying()).toBe(1);
    expectSameAsReference(await again.result, 1);
    expect(verifying()).toBe(0);
  });

  it("holds through preemption and recompute under a tiny KV pool", async () => {
    const small = await loadModel(await nearTieModelDir(4), { kvPages: 40, pageSize: PAGE });
    try {
      await using engine = new Engine({ models: { model: small }, ...DVR });
      const outs = await together(engine, [...requests.map(det), ...companions(4, 9)]);
      expect(engine.metrics().preemptions).toBeGreaterThan(0);
      requests.forEach((_, i) => expectSameAsReference(outs[i], i));
    } finally {
      small.dispose();
    }
  });

  it("holds whatever the CPU thread count", async () => {
    const addon = loadAddon();
    const before = addon.setThreads(0);
    try {
      addon.setThreads(1);
      await using engine = engineWith();
      const outs = await together(engine, [...requests.map(det), ...companions(5, 11)]);
      requests.forEach((_, i) => expectSameAsReference(outs[i], i));
    } finally {
      addon.setThreads(before);
    }
  });

  it("forks from committed tokens only, and a deterministic fork continues deterministically", async () => {
    await using engine = engineWith();
    await using bi = new Engine({ models: { model: refModel }, kernelMode: "batch-invariant" });
    const parentReq: GenerateRequest = { ...requests[2], temperature: 0, maxTokens: 20 };
    // Beside plain companions, so the fast path would drift (alone on the CPU every decode is exact).
    const parent = engine.submit(det(parentReq));
    const biParent = bi.submit(parentReq);
    await Promise.all([parent.result, biParent.result, together(engine, companions(5, 51))]);
    expect((await parent.result).tokens).toEqual((await biParent.result).tokens);
    const fork = { append: [7, 8, 9], maxTokens: 12 };
    const [child] = await Promise.all([engine.fork(parent, fork).result, together(engine, companions(5, 61))]);
    const want = await bi.fork(biParent, fork).result;
    expect(child.promptTokens).toEqual(want.promptTokens);
    expect(child.tokens).toEqual(want.tokens);
    expect(child.determinism).toBeDefined();
  });

  it("costs nothing in batch-invariant mode, where every request is already deterministic", async () => {
    await using engine = new Engine({ models: { model }, kernelMode: "batch-invariant" });
    const out = await engine.submit(det(requests[0])).result;
    expectSameAsReference(out, 0);
    expect(out.determinism).toEqual({ verifyPasses: 0, rollbacks: 0, recomputedTokens: 0, exactTokens: 0 });
  });

  it("batch-invariant mode (the baseline) gives the same tokens under chunked prefill and load, with no verification", async () => {
    await using engine = new Engine({ models: { model }, kernelMode: "batch-invariant", maxBatchTokens: 5 });
    const order = shuffled([...requests.map((r, i) => ({ r, i })), ...companions(8, 13).map((r) => ({ r, i: -1 }))], 5);
    const outs = await together(
      engine,
      order.map((x) => x.r),
    );
    order.forEach(({ i }, k) => {
      if (i >= 0) expectSameAsReference(outs[k], i);
    });
  });

  it("rejects bad flags at the boundary", async () => {
    await using engine = engineWith();
    expect(() => engine.submit({ prompt: [1, 2], deterministic: "yes" as unknown as boolean })).toThrow(
      /request.deterministic is "yes"/,
    );
    expect(() => new Engine({ models: { model }, verifyWindow: 1 })).toThrow(/verifyWindow is 1/);
    expect(() => new Engine({ models: { model }, fuseVerify: "yes" as unknown as boolean })).toThrow(
      /options.fuseVerify is "yes"; expected true or false/,
    );
  });
});
