// Short-m@k on the real engine over the bundled tiny reasoner: k branches start together, the program stops as the
// m-th finishes, the rest are aborted (pages freed), and the vote is over exactly those m answers.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Engine } from "../../ts/engine/engine.js";
import type { GenerationOutput } from "../../ts/engine/outputs.js";
import type { GenerateRequest } from "../../ts/engine/request.js";
import { loadModel, type Model } from "../../ts/model/model.js";
import { bundledModelDir } from "../../ts/bundledModel.js";
import { entropyCertaindex, majorityVote } from "../../ts/certaindex/signals.js";
import { boxedAnswers } from "../../ts/programs/answers.js";
import { ProgramRuntime } from "../../ts/programs/runtime.js";
import { ShortMK } from "../../ts/programs/shortMK.js";

let model: Model;
beforeAll(async () => {
  model = await loadModel(bundledModelDir);
});
afterAll(() => model?.dispose());

// Fixed-schedule kernels: a sample's tokens do not depend on what it is batched with, so the full run below is the
// same k branches carried to their ends.
const engineOf = (): Engine => new Engine({ models: { model }, kernelMode: "batch-invariant" });

const eq = (a: string, b: string): boolean => boxedAnswers.equivalent(a, b);

/** Runs the same k = 8 branches to their ends (`full`) and as Short-3@8 (`out`: its one request's output). */
async function runBoth(engine: Engine, question: string, seed: number) {
  const prompt = model.tokenizer.encodeChat([{ role: "user", content: question }]);
  const full = await engine.submit({ prompt, n: 8, maxTokens: 200, temperature: 1, seed }).result;
  const outputs: Promise<GenerationOutput>[] = [];
  const submit = engine.submit.bind(engine);
  engine.submit = (request: GenerateRequest) => {
    const handle = submit(request);
    outputs.push(handle.result);
    return handle;
  };
  const p = new ShortMK({ prompt, k: 8, m: 3, maxTokens: 200, temperature: 1, seed });
  const r = await new ProgramRuntime(engine).run(p);
  engine.submit = submit;
  expect(outputs).toHaveLength(1); // one request with n = 8
  const out = await outputs[0];
  expect(out.samples).toHaveLength(8);
  const fullLengths = full.samples.map((s) => s.tokens.length);
  const byLength = fullLengths.map((n, i) => ({ n, i })).sort((a, b) => a.n - b.n || a.i - b.i);
  return { p, r, out, full, fullLengths, byLength };
}

describe("ShortMK", () => {
  it("stops when the first m of k branches finish, aborts the others and frees their pages", async () => {
    await using engine = engineOf();
    // Seed 0: the branches run 72, 72, 81, 84, 84, 136, 136, 136 tokens; the third ends alone at 81.
    const { p, r, out, full, fullLengths, byLength } = await runBoth(engine, "What is 12*(7+5)-9?", 0);
    expect(r.program).toBe("short-m@k");
    expect(r.rounds).toBe(1);
    expect(r.stopReason).toBe("done");
    expect(r.knob).toEqual({ used: 8, max: 8 });
    const mth = byLength[2].n;
    expect(byLength[3].n).toBeGreaterThan(mth); // there is something to cut

    // The m chosen are the m shortest branches of the full run, with the texts they had there.
    expect(p.state.finished).toHaveLength(3);
    expect(p.state.finished.map((b) => b.tokens)).toEqual(byLength.slice(0, 3).map((x) => x.n));
    for (const b of p.state.finished) {
      expect(b.finishReason).not.toBe("aborted");
      expect(b.text).toBe(full.samples[b.index].text);
    }
    // Every branch longer than the m-th was aborted right after the m-th finished, not at its own end.
    const longer = fullLengths.map((n, i) => ({ n, i })).filter((x) => x.n > mth);
    expect(longer).toHaveLength(5);
    for (const { n, i } of longer) {
      expect(out.samples[i].finishReason).toBe("aborted");
      expect(out.samples[i].tokens.length).toBeGreaterThanOrEqual(mth);
      expect(out.samples[i].tokens.length).toBeLessThanOrEqual(mth + 1);
      expect(out.samples[i].tokens.length).toBeLessThan(n);
    }
    expect(p.state.aborted).toBe(5);
    expect(r.tokensUsed).toBe(out.usage.generatedTokens);
    expect(r.tokensUsed).toBeLessThan(full.usage.generatedTokens);
    expect(engine.metrics().models[0].kvPagesUsed).toBe(0); // the aborted branches' pages are free

    // The vote and certaindex are over the three answers, the tie going to the shortest branch.
    const answers = p.state.finished.map((b) => boxedAnswers.extractAnswer(b.text));
    expect(p.state.finished.map((b) => b.answer)).toEqual(answers);
    expect(r.answer).toBe(majorityVote(answers, eq).answer);
    expect(r.certaindex).toBeCloseTo(entropyCertaindex(answers, eq), 12);
    expect(r.tokenBudget).toBe(8 * 200);
  });

  it("votes over exactly m answers when more than m branches end on the same step", async () => {
    await using engine = engineOf();
    // Seed 0: six branches end together at 70 tokens with five different answers, two run to 130.
    const { p, r, out, byLength } = await runBoth(engine, "What is 68*23+5?", 0);
    expect(byLength[5].n).toBe(byLength[0].n);
    expect(out.samples.filter((s) => s.finishReason !== "aborted")).toHaveLength(6);
    expect(p.state.aborted).toBe(2);
    expect(p.state.finished).toHaveLength(3);
    const answers = p.state.finished.map((b) => b.answer);
    expect(r.certaindex).toBeCloseTo(entropyCertaindex(answers, eq), 12);
    expect(r.answer).toBe(majorityVote(answers, eq).answer);
    // Over all six finished answers the certaindex would differ (n enters H̃'s normalisation).
    const six = out.samples.filter((s) => s.finishReason !== "aborted").map((s) => boxedAnswers.extractAnswer(s.text));
    expect(entropyCertaindex(six, eq)).not.toBeCloseTo(r.certaindex, 6);
    expect(engine.metrics().models[0].kvPagesUsed).toBe(0);
  });

  it("breaks a tie by the shortest branch among the tied answers", () => {
    const p = new ShortMK({ prompt: [1], k: 4, m: 3 });
    const branch = (index: number, answer: string | null, tokens: number) => ({
      index,
      text: "",
      answer,
      tokens,
      finishReason: "stop" as const,
    });
    // Finishing order is not length order here (the vote must not rely on it): 9 has the shortest branch.
    p.state.finished = [branch(0, "7", 50), branch(1, "8", 45), branch(2, "9", 40)];
    expect(p.answer()).toBe("9");
    p.state.finished = [branch(0, "7", 50), branch(1, "7", 60), branch(2, "9", 40)];
    expect(p.answer()).toBe("7"); // a majority beats a shorter branch
    p.state.finished = [branch(0, null, 10), branch(1, "8", 45), branch(2, "9", 40)];
    expect(p.answer()).toBe("9"); // a branch without an answer has no vote
  });

  it("checks k and m", () => {
    expect(() => new ShortMK({ prompt: [1], k: 2, m: 3 })).toThrow(/m must be an integer in \[1, k = 2\], got 3/);
    expect(() => new ShortMK({ prompt: [1], k: 0 })).toThrow(/k must be an integer ≥ 1/);
    expect(new ShortMK({ prompt: [1] }).knob).toEqual({ used: 0, max: 8 });
  });
});
