// Where decode-verify-rollback's fixed-schedule work runs (verifier/verifier.ts): fused, verify rows and
// deterministic prefill chunks ride in the step's one forward beside the fast rows, unpadded and flagged
// fixedSchedule; not fused, they are forwards of their own. On the paged reference model (no native build), whose
// outputs are checked against the unpaged computation.
import { describe, expect, it } from "vitest";
import { Engine } from "../../ts/engine/engine.js";
import type { ForwardBatch } from "../../ts/engine/modelTypes.js";
import { makeRng } from "../helpers/prng.js";
import { PagedToyModel, toyCodec, toyReference } from "../helpers/pagedToyModel.js";

const WINDOW = 8;

function randomPrompt(seed: number, length: number): number[] {
  const rng = makeRng(seed);
  return Array.from({ length }, () => rng.int(1, 63));
}

/** 3 deterministic and 5 plain requests at once (or `aligned`: 6 deterministic ones that become ready together
 *  and 2 plain); returns the model's forward calls and checks every output. */
async function run(fuseVerify: boolean, maxBatchTokens?: number, aligned = false): Promise<ForwardBatch[]> {
  const model = new PagedToyModel(256, 4);
  await using engine = new Engine({
    models: { model, tokenizer: toyCodec },
    verifyWindow: WINDOW,
    verifyGroup: 2,
    fuseVerify,
    maxBatchTokens,
  });
  const reqs = Array.from({ length: 8 }, (_, i) => ({
    prompt: randomPrompt(i, aligned ? 4 : 5 + 3 * i),
    maxTokens: 20 + i,
    ignoreEos: true,
    temperature: i % 2 ? 0.9 : 0,
    seed: i,
    deterministic: aligned ? i < 6 : i % 3 === 0,
  }));
  const outs = await Promise.all(reqs.map((r) => engine.submit(r).result));
  outs.forEach((o, i) => {
    expect(o.tokens, `request ${i}`).toEqual(toyReference(reqs[i].prompt, reqs[i].maxTokens, reqs[i], false));
    if (reqs[i].deterministic) expect(o.determinism!.verifyPasses).toBeGreaterThanOrEqual(2);
  });
  return model.calls;
}

const isVerifyRow = (s: ForwardBatch["sequences"][number]): boolean => s.emitAll === true;

describe("decode-verify-rollback: where the verify rows run", () => {
  it("fused: verify rows and deterministic prefill ride in the step's forward, unpadded, on the fixed schedule", async () => {
    const calls = await run(true);
    const rows = calls.flatMap((c) => c.sequences.filter(isVerifyRow));
    expect(rows.length).toBeGreaterThan(0);
    for (const r of rows) {
      expect(r.fixedSchedule).toBe(true);
      expect(r.tokens.length).toBeLessThanOrEqual(WINDOW);
    }
    // Verify rows share forwards with fast rows.
    expect(calls.some((c) => c.sequences.some(isVerifyRow) && c.sequences.some((s) => !s.fixedSchedule))).toBe(true);
    // Deterministic prompts (requests 0, 3, 6: 5, 14, 23 tokens) prefill on the fixed schedule in the shared step.
    const fixedPrefill = calls.flatMap((c) =>
      c.sequences.filter((s) => s.fixedSchedule && !isVerifyRow(s) && s.startPos === 0),
    );
    expect(fixedPrefill.map((s) => s.tokens.length).sort((a, b) => a - b)).toEqual([5, 14, 23]);
    for (const c of calls) if (c.sequences.some((s) => s.fixedSchedule)) expect(c.fixedGemmSplitK).toBe(1);
  });

  it("fused: verify rows share the step's token budget with the fast rows, at least one row per step", async () => {
    const calls = await run(true, 24, true);
    const tokens = (c: ForwardBatch) => c.sequences.reduce((n, s) => n + s.tokens.length, 0);
    expect(calls.some((c) => c.sequences.filter(isVerifyRow).length > 1)).toBe(true);
    for (const c of calls) if (c.sequences.filter(isVerifyRow).length > 1) expect(tokens(c)).toBeLessThanOrEqual(24);
  });

  it("fused: where the rows would cost a second pass over the weights (split-K fast steps), they go as a group", async () => {
    // A CUDA-like model: fast steps of <= 64 tokens split K (8 on CUDA), so verify rows (splitK 1) cannot share their GEMMs.
    const model = Object.assign(new PagedToyModel(256, 4), { device: "cuda" as const });
    await using engine = new Engine({ models: { model, tokenizer: toyCodec }, verifyWindow: 32, verifyGroup: 4 });
    const plain = engine.submit({ prompt: randomPrompt(50, 6), maxTokens: 150, ignoreEos: true });
    const stream = plain[Symbol.asyncIterator]();
    const dets = [];
    for (let i = 0; i < 4; i++) {
      for (let k = 0; k < 3; k++) await stream.next(); // deterministic requests start 3 steps apart
      dets.push(
        engine.submit({ prompt: randomPrompt(60 + i, 5), maxTokens: 60, ignoreEos: true, deterministic: true }).result,
      );
    }
    for (let r = await stream.next(); !r.done; r = await stream.next());
    const outs = await Promise.all(dets);
    outs.forEach((o, i) =>
      expect(o.tokens).toEqual(toyReference(randomPrompt(60 + i, 5), 60, { temperature: 0, seed: 0 }, false)),
    );
    const carrying = model.calls.filter((c) => c.sequences.some(isVerifyRow));
    const rows = carrying.reduce((n, c) => n + c.sequences.filter(isVerifyRow).length, 0);
    expect(rows).toBeGreaterThanOrEqual(8); // 4 requests x 2 windows
    // Staggered rows, one per call if each rode at once; grouped, far fewer calls carry them.
    expect(carrying.length).toBeLessThanOrEqual(rows / 2);
  });

  it("fused: aborting a deterministic request mid-stream frees its pages and leaves the others exact", async () => {
    const model = new PagedToyModel(64, 4);
    await using engine = new Engine({ models: { model, tokenizer: toyCodec }, verifyWindow: WINDOW });
    const controller = new AbortController();
    const other = engine.submit({ prompt: randomPrompt(8, 9), maxTokens: 40, ignoreEos: true, deterministic: true });
    // A plain companion keeps the steps mixed, so the deterministic tokens are candidates with verify rows.
    const plain = engine.submit({ prompt: randomPrompt(9, 5), maxTokens: 80, ignoreEos: true });
    const victim = engine.submit({
      prompt: randomPrompt(7, 9),
      maxTokens: 1000,
      ignoreEos: true,
      deterministic: true,
      signal: controller.signal,
    });
    let n = 0;
    for await (const d of victim) {
      n += d.tokens.length;
      if (n >= WINDOW) controller.abort(); // after its first verified window, with candidates in flight
    }
    const out = await victim.result;
    expect(out.finishReason).toBe("aborted");
    expect(out.tokens.length).toBeLessThan(4 * WINDOW);
    const otherOut = await other.result;
    expect(otherOut.tokens).toEqual(toyReference(randomPrompt(8, 9), 40, { temperature: 0, seed: 0 }, false));
    expect(otherOut.determinism!.verifyPasses).toBeGreaterThan(0);
    await plain.result;
    expect(engine.metrics().models[0].kvPagesUsed).toBe(0);
  });

  it("not fused: verify passes and deterministic prefill are forwards of their own", async () => {
    const calls = await run(false);
    const separate = calls.filter((c) => c.sequences.some(isVerifyRow));
    expect(separate.length).toBeGreaterThan(0);
    for (const c of separate) expect(c.sequences.every(isVerifyRow)).toBe(true);
    // Deterministic prefill chunks are forwards of their own (fixed rows, alone).
    for (const c of calls)
      if (c.sequences.some((s) => s.fixedSchedule && !isVerifyRow(s) && s.tokens.length > 1))
        expect(c.sequences).toHaveLength(1);
    // More forwards than fused for the same work.
    expect(calls.length).toBeGreaterThan((await run(true)).length);
  });
});
