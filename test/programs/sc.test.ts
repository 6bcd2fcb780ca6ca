// Self-consistency on the real engine over a tiny generated model: rounds of n samples sharing the prompt's KV,
// majority vote, entropy certaindex, policy stops, and seeds that make a short run a prefix of a long one.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Engine } from "../../ts/engine/engine.js";
import type { GenerationOutput } from "../../ts/engine/outputs.js";
import type { GenerateRequest } from "../../ts/engine/request.js";
import { loadModel, type Model } from "../../ts/model/model.js";
import { entropyCertaindex, clusterAnswers } from "../../ts/certaindex/signals.js";
import { ProgramRuntime } from "../../ts/programs/runtime.js";
import { SelfConsistency } from "../../ts/programs/selfConsistency.js";
import { fixtureDir, randomTokens } from "../model/fixtureCache.js";

let model: Model;
let V: number;
beforeAll(async () => {
  model = await loadModel(await fixtureDir("llama", "f32", { layers: 2 }), { kvPages: 256, pageSize: 16 });
  V = model.config.vocabSize;
});
afterAll(() => model?.dispose());

const engineOf = (): Engine => new Engine({ models: { model }, kernelMode: "batch-invariant" });
/** A coarse answer so that random branches collide: the first generated character's code mod 3. */
const firstCharClass = (text: string): string | null => (text.length === 0 ? null : String(text.codePointAt(0)! % 3));

describe("SelfConsistency", () => {
  it("runs to its cap under baseline-even, votes the majority, and reports tokens and certaindex history", async () => {
    await using engine = engineOf();
    const prompt = randomTokens(40, V, 3);
    const sc = new SelfConsistency({
      prompt,
      maxBranches: 8,
      branchesPerRound: 4,
      maxTokens: 12,
      temperature: 1,
      seed: 5,
      extractAnswer: firstCharClass,
    });
    const r = await new ProgramRuntime(engine).run(sc, { policy: { kind: "baseline-even" } });
    expect(r.stopReason).toBe("cap");
    expect(r.rounds).toBe(2);
    expect(r.knob).toEqual({ used: 8, max: 8 });
    const branches = sc.state.branches;
    expect(branches).toHaveLength(8);
    expect(r.tokensUsed).toBe(branches.reduce((s, b) => s + b.tokens, 0));
    expect(r.tokenBudget).toBe(8 * 12);
    const answers = branches.map((b) => b.answer);
    expect(r.answer).toBe(clusterAnswers(answers)[0].answer);
    expect(r.certaindex).toBeCloseTo(entropyCertaindex(answers), 12);
    expect(r.history.map((h) => h.knobUsed)).toEqual([4, 8]);
    expect(r.history[0].certaindex).toBeCloseTo(entropyCertaindex(answers.slice(0, 4)), 12);
    // The prompt was computed once: round 2 and the n samples share its KV (prefix cache, fork).
    const m = engine.metrics();
    expect(m.promptTokensComputed).toBeLessThan(2 * prompt.length);
    expect(m.models[0].kvPagesUsed).toBe(0);
  });

  it("stops as soon as the branches agree (threshold policy) and spends fewer tokens", async () => {
    await using engine = engineOf();
    const sc = new SelfConsistency({
      prompt: randomTokens(20, V, 4),
      maxBranches: 16,
      branchesPerRound: 4,
      maxTokens: 8,
      temperature: 1,
      extractAnswer: () => "42",
    });
    const r = await new ProgramRuntime(engine).run(sc, { policy: { kind: "threshold", threshold: 0.9, detectAt: 4 } });
    expect(r.stopReason).toBe("certain");
    expect(r.rounds).toBe(1);
    expect(r.certaindex).toBe(1);
    expect(r.answer).toBe("42");
    expect(r.tokensUsed).toBeLessThanOrEqual(4 * 8);
  });

  it("branch i uses seed + i: a capped run is a prefix of a longer run", async () => {
    await using engine = engineOf();
    const prompt = randomTokens(24, V, 6);
    const opts = { prompt, maxTokens: 10, temperature: 1, seed: 11, extractAnswer: firstCharClass };
    const short = new SelfConsistency({ ...opts, maxBranches: 3, branchesPerRound: 3 });
    const long = new SelfConsistency({ ...opts, maxBranches: 6, branchesPerRound: 2 });
    const rt = new ProgramRuntime(engine);
    await rt.run(short, { policy: { kind: "baseline-even" } });
    await rt.run(long, { policy: { kind: "baseline-even" } });
    expect(long.state.branches.slice(0, 3).map((b) => b.text)).toEqual(short.state.branches.map((b) => b.text));
  });

  it("tags requests with the program's metadata; aborting stops its running requests at the next step", async () => {
    await using engine = engineOf();
    const ac = new AbortController();
    const sc = new SelfConsistency({
      prompt: randomTokens(20, V, 8),
      maxBranches: 64,
      branchesPerRound: 4,
      maxTokens: 200,
      temperature: 1,
      extractAnswer: firstCharClass,
    });
    // Abort from the first delta of the first request (not a timer: the outcome must not depend on machine speed).
    // The engine yields to the event loop between steps, so the abort lands before the step after that delta.
    const submitted: { request: GenerateRequest; output: Promise<GenerationOutput> }[] = [];
    const submit = engine.submit.bind(engine);
    engine.submit = (request: GenerateRequest) => {
      const handle = submit(request);
      submitted.push({ request, output: handle.result });
      void (async () => {
        for await (const _ of handle) return ac.abort();
      })();
      return handle;
    };
    const r = await new ProgramRuntime(engine).run(sc, {
      policy: { kind: "baseline-even" },
      signal: ac.signal,
      programId: "prog-x",
    });
    expect(r.stopReason).toBe("aborted");
    expect(r.programId).toBe("prog-x");
    // One request (the first round's 4 samples), tagged with the program; no round completed, no vote was cast.
    expect(submitted).toHaveLength(1);
    expect(submitted[0].request.metadata).toMatchObject({ programId: "prog-x", remainingKnob: 64 });
    expect(submitted[0].request.signal?.aborted).toBe(true);
    const out = await submitted[0].output;
    expect(out.samples.map((s) => [s.finishReason, s.tokens.length])).toEqual(
      Array.from({ length: 4 }, () => ["aborted", 1]),
    );
    expect(r.rounds).toBe(0);
    expect(sc.state.branches).toHaveLength(0);
    expect(r.tokensUsed).toBe(4);
    expect(r.answer).toBeNull();
    expect(engine.metrics().models[0].kvPagesUsed).toBe(0);
  });
});
