// A user-written program (the example of docs/programs.md, kept identical to it by the last test) on the real engine.
import { readFileSync } from "node:fs";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Engine } from "../../ts/engine/engine.js";
import { loadModel, type Model } from "../../ts/model/model.js";
import { fixtureDir, randomTokens } from "../model/fixtureCache.js";
// --- example start
import { clusterAnswers, ProgramRuntime, type Program, type ProgramContext } from "../../ts/index.js";

/** Samples one answer per round until `k` answers agree (certaindex = largest agreeing group / k). */
class UntilKAgree implements Program {
  readonly name = "until-k-agree";
  certaindex = 0;
  readonly knob = { used: 0, max: 0 };
  readonly done = false;
  readonly tokenBudget: number;
  readonly defaultPolicy = { kind: "threshold", threshold: 1, detectAt: 1 } as const;
  readonly answers: Array<string | null> = [];

  constructor(
    private readonly prompt: string | number[],
    private readonly k: number,
    maxSamples: number,
    private readonly maxTokens = 64,
    private readonly extract: (text: string) => string | null = (t) => t.match(/-?\d+/g)?.pop() ?? null,
  ) {
    this.knob.max = maxSamples;
    this.tokenBudget = maxSamples * maxTokens;
  }

  async execute(ctx: ProgramContext): Promise<void> {
    const seed = this.knob.used; // sample i uses seed i: reproducible
    const out = await ctx.submit({ prompt: this.prompt, maxTokens: this.maxTokens, temperature: 0.8, seed }).result;
    this.answers.push(this.extract(out.text));
    this.knob.used++;
  }

  updateCertaindex(): number {
    const top = clusterAnswers(this.answers)[0]?.count ?? 0;
    this.certaindex = Math.min(1, top / this.k);
    return this.certaindex;
  }

  answer(): string | null {
    return clusterAnswers(this.answers)[0]?.answer ?? null;
  }
}

// Usage: const result = await new ProgramRuntime(engine).run(new UntilKAgree(prompt, 3, 12));
// --- example end

let model: Model;
let V: number;
beforeAll(async () => {
  model = await loadModel(await fixtureDir("llama", "f32", { layers: 2 }), { kvPages: 128, pageSize: 16 });
  V = model.config.vocabSize;
});
afterAll(() => model?.dispose());

describe("a custom program", () => {
  it("runs on the runtime, stops when k answers agree, and reports its rounds and tokens", async () => {
    await using engine = new Engine({ models: { model } });
    const firstCharClass = (t: string): string | null => (t === "" ? null : String(t.codePointAt(0)! % 2));
    const p = new UntilKAgree(randomTokens(16, V, 77), 3, 12, 6, firstCharClass);
    const r = await new ProgramRuntime(engine).run(p);
    expect(r.program).toBe("until-k-agree");
    const agreeAt = p.answers.findIndex((_, i) => (clusterAnswers(p.answers.slice(0, i + 1))[0]?.count ?? 0) >= 3);
    expect(agreeAt).toBeGreaterThanOrEqual(0); // two classes: 3 agree within 5 samples
    expect(r.rounds).toBe(agreeAt + 1);
    expect(r.stopReason).toBe("certain");
    expect(r.certaindex).toBe(1);
    expect(r.history.map((h) => h.knobUsed)).toEqual(Array.from({ length: r.rounds }, (_, i) => i + 1));
    expect(r.tokensUsed).toBeGreaterThan(0);
    expect(r.tokensUsed).toBeLessThanOrEqual(r.rounds * 6);
  });

  it("is the example printed in docs/programs.md", () => {
    const test = readFileSync(new URL(import.meta.url), "utf8");
    const example = test
      .slice(test.indexOf("// --- example start\n") + 22, test.indexOf("// --- example end"))
      .replace("../../ts/index.js", "deliberate");
    const docs = readFileSync(new URL("../../docs/programs.md", import.meta.url), "utf8");
    expect(docs).toContain(example.trim());
    expect(example.trim().split("\n").length).toBeLessThanOrEqual(55);
  });
});
