// Dynasor-CoT probing on the real engine: probes fork the thinking branch at fixed lengths, never disturb it, free
// their pages, and the program exits exactly when the probe rule says so.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Engine } from "../../ts/engine/engine.js";
import { loadModel, type Model } from "../../ts/model/model.js";
import { shouldExitOnProbes } from "../../ts/certaindex/probe.js";
import { CotProbe } from "../../ts/programs/cotProbe.js";
import { ProgramRuntime } from "../../ts/programs/runtime.js";
import { bundledModelDir } from "../../ts/bundledModel.js";
import { fixtureDir, randomTokens } from "../model/fixtureCache.js";

let model: Model;
let V: number;
beforeAll(async () => {
  model = await loadModel(await fixtureDir("llama", "f32", { layers: 2 }), { kvPages: 256, pageSize: 16 });
  V = model.config.vocabSize;
});
afterAll(() => model?.dispose());

const engineOf = (): Engine => new Engine({ models: { model }, kernelMode: "batch-invariant" });
const usedPages = (e: Engine): number => e.metrics().models[0].kvPagesUsed;

describe("CotProbe", () => {
  it("probes every interval without touching the main branch, and frees every probe's pages", async () => {
    const prompt = randomTokens(30, V, 21);
    const base = { prompt, interval: 8, maxTokens: 48, seed: 3, temperature: 0.7 };
    let plain: CotProbe;
    {
      await using engine = engineOf();
      plain = new CotProbe({ ...base, probe: false });
      await new ProgramRuntime(engine).run(plain, { policy: { kind: "baseline-even" } });
    }
    await using engine = engineOf();
    const probed = new CotProbe({ ...base, probeSuffix: " </think> \\boxed{" });
    let maxPages = 0;
    const r = await new ProgramRuntime(engine).run(probed, {
      policy: { kind: "baseline-even" },
      onRound: () => (maxPages = Math.max(maxPages, usedPages(engine))),
    });
    expect(probed.state.mainText).toBe(plain.state.mainText); // the main branch is untouched by its probes
    const steps = Math.floor(probed.state.mainTokens / 8);
    expect(steps).toBeGreaterThan(1);
    expect(probed.state.probeAt).toEqual(Array.from({ length: steps }, (_, i) => (i + 1) * 8));
    expect(r.tokensByPurpose.probe).toBeGreaterThan(0);
    expect(r.tokensUsed).toBe(r.tokensByPurpose.generate + r.tokensByPurpose.probe);
    expect(maxPages).toBeGreaterThan(0);
    expect(usedPages(engine)).toBe(0); // probes and main freed
    expect(r.stopReason === "done" || r.stopReason === "cap").toBe(true);
  });

  it("a probe's answer depends only on the cut length, not on how far the main branch ran", async () => {
    await using engine = engineOf();
    const prompt = randomTokens(25, V, 22);
    const suffix = " </think> \\boxed{";
    const p = new CotProbe({ prompt, interval: 6, maxTokens: 30, seed: 9, temperature: 0.9, probeSuffix: suffix });
    await new ProgramRuntime(engine).run(p, { policy: { kind: "baseline-even" } });
    expect(p.state.probes.length).toBeGreaterThan(1);
    // Re-probe each cut of a finished copy of the main branch (same seed: same tokens).
    const main = engine.submit({ prompt, maxTokens: 30, seed: 9, temperature: 0.9 });
    await main.result;
    for (const [i, at] of p.state.probeAt.entries()) {
      const again = await engine.fork(main, {
        length: prompt.length + at,
        append: suffix,
        maxTokens: 20,
        temperature: 0,
        stop: ["}"],
      }).result;
      expect(p.state.probes[i]).toBe(again.text.trim());
    }
  });

  it("exits exactly when `agree` of the last `window` probes are confident and equal to the latest", async () => {
    await using engine = engineOf();
    // window 2 (agree = window: two in a row) and window 3 with agree 2 (two of the last three).
    for (const rule of [
      { window: 2, hesitationWords: ["wait"] },
      { window: 3, agree: 2, hesitationWords: ["wait"] },
    ]) {
      let exits = 0;
      for (const seed of [1, 2, 3, 4, 5, 6]) {
        const p = new CotProbe({
          prompt: randomTokens(16, V, 30 + seed),
          interval: 4,
          maxTokens: 64,
          seed,
          temperature: 0,
          rule,
          probeMaxTokens: 2,
        });
        const r = await new ProgramRuntime(engine).run(p);
        const exitAt = p.state.probes.findIndex((_, i) => shouldExitOnProbes(p.state.probes.slice(0, i + 1), rule));
        if (exitAt >= 0) {
          expect(r.stopReason).toBe("certain");
          expect(p.state.probes.length).toBe(exitAt + 1);
          expect(r.answer).toBe(p.state.probes[exitAt]);
          expect(r.certaindex).toBe(1);
          exits++;
        } else {
          expect(r.stopReason).not.toBe("certain");
          expect(r.certaindex).toBeLessThan(1);
        }
      }
      expect(exits, `rule ${JSON.stringify(rule)}`).toBeGreaterThan(0); // the exit path ran
    }
    expect(usedPages(engine)).toBe(0);
    expect(() => new CotProbe({ prompt: [1, 2], rule: { window: 2, agree: 3, hesitationWords: [] } })).toThrow(
      /agree must be an integer in \[1, window = 2\]/,
    );
  });

  it("makes no probe once the main branch is writing its answer (the bundled reasoner's `\\boxed{` tail)", async () => {
    const reasoner = await loadModel(bundledModelDir);
    try {
      await using engine = new Engine({ models: { model: reasoner } });
      const prompt = reasoner.tokenizer.encodeChat([{ role: "user", content: "What is 96-81+7?" }]);
      const c = new CotProbe({ prompt, interval: 2, maxTokens: 120 });
      await new ProgramRuntime(engine).run(c, { policy: { kind: "baseline-even" } });
      expect(c.state.mainText).toContain("\\boxed{");
      expect(c.state.probes.length).toBeGreaterThan(2);
      for (const at of c.state.probeAt) expect(c.thoughtAt(at)).not.toContain("\\boxed{");
      // The last probe point before the answer: the next one would have been inside it.
      const last = c.state.probeAt[c.state.probeAt.length - 1];
      expect(c.thoughtAt(Math.min(last + 2, c.state.mainTokens))).toContain("\\boxed{");
      expect(() => c.thoughtAt(c.state.mainTokens + 1)).toThrow(RangeError);
    } finally {
      reasoner.dispose();
    }
  });
});
