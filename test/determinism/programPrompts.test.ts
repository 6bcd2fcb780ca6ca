// Program prompts of the determinism check (issue 49): a JSONL line naming a program runs it (deterministic as the
// check is) and is compared by its replayable report; goldens holding program reports are version 4, goldens without
// stay version 3 (what earlier builds read and wrote); every program is built (and a refusal raised) before anything runs.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Engine } from "../../ts/engine/engine.js";
import { bundledModelDir } from "../../ts/bundledModel.js";
import { checkGolden, makeGolden, parseGolden } from "../../ts/determinism/golden.js";
import { parsePromptsFile } from "../../ts/determinism/prompts.js";
import type { Provenance } from "../../ts/determinism/provenance.js";
import { runDeterminismCheck, type CheckParams } from "../../ts/determinism/runner.js";
import { loadModel, type Model } from "../../ts/model/model.js";

const PROMPTS = [
  JSON.stringify({ prompt: "What is 12+30?" }),
  JSON.stringify({ prompt: "What is 96-81+7?", program: "sc", programOptions: { cap: 4 } }),
  JSON.stringify({ prompt: "What is 9*8-5?", program: "cot-probe", programOptions: { interval: 8, maxTokens: 64 } }),
  JSON.stringify({ prompt: "What is 3+4*5?", program: "short-m@k", programOptions: { cap: 4, shortM: 2 } }),
].join("\n");

describe("program prompts in prompts files", () => {
  it("parses a program line with its options, and names the line of a bad one", () => {
    const specs = parsePromptsFile(PROMPTS);
    expect(specs[0].program).toBeUndefined();
    expect(specs[1]).toEqual({ text: "What is 96-81+7?", program: { kind: "sc", options: { cap: 4 } } });
    expect(specs[3].program).toEqual({ kind: "short-m@k", options: { cap: 4, shortM: 2 } });
    expect(() => parsePromptsFile(`{"prompt": "x", "program": "nope"}`, "p.jsonl")).toThrow(
      /p.jsonl line 1: program "nope" is unknown; expected one of sc, cot-probe/,
    );
    expect(() => parsePromptsFile(`{"prompt": "x", "program": "sc", "programOptions": {"cap": 0}}`, "p.jsonl")).toThrow(
      /p.jsonl line 1: programOptions.cap is 0; expected an integer >= 1/,
    );
    expect(() =>
      parsePromptsFile(`{"prompt": "x", "program": "sc", "programOptions": {"width": 2}}`, "p.jsonl"),
    ).toThrow(/programOptions.width is unknown/);
    expect(() => parsePromptsFile(`plain\n{"prompt": "x", "program": "sc"}`, "p.txt")).toThrow(
      /p.txt line 2 names a program, but other lines are plain text/,
    );
    expect(() => parsePromptsFile(`{"prompt": "x", "programOptions": {"cap": 2}}`, "p.jsonl")).toThrow(
      /programOptions without "program"/,
    );
  });
});

describe("runDeterminismCheck with program prompts", () => {
  let model: Model;
  beforeAll(async () => {
    model = await loadModel(bundledModelDir);
  });
  afterAll(() => model?.dispose());
  const params: CheckParams = { maxTokens: 32, temperature: 0.8, seed: 3, deterministic: true };
  const prov = { modelHash: "h", device: "cpu", kernels: { kernelMode: "fast" } } as unknown as Provenance;

  it("runs programs alone and under load, agrees, and records version 4 goldens that check", async () => {
    await using engine = new Engine({ models: { model }, verifyWindow: 8, verifyGroup: 4 });
    const prompts = parsePromptsFile(PROMPTS);
    const r = await runDeterminismCheck(engine, prompts, { ...params, loads: [4, 32], runs: 1 });
    expect(r.reports.map((x) => x.agree)).toEqual([true, true, true, true]);
    expect(r.reports.every((x) => x.runs === 3 && x.distinct === 1)).toBe(true);
    expect(Array.isArray(r.baseOutputs[0])).toBe(true);
    for (const i of [1, 2, 3]) {
      const report = JSON.parse(r.baseOutputs[i] as string);
      expect(Object.keys(report)).toEqual([
        "answer",
        "certaindex",
        "rounds",
        "knob",
        "stopReason",
        "tokensUsed",
        "tokensByPurpose",
        "history",
      ]);
      expect(report.tokensUsed).toBeGreaterThan(0);
      expect(r.reports[i].generatedTokens).toBe(3 * report.tokensUsed);
    }
    const g = parseGolden(JSON.stringify(makeGolden("m", prov, { ...params }, r.baseOutputs)), "g.json");
    expect(g.version).toBe(4);
    expect(checkGolden(g, prov, { ...params }, r.baseOutputs, "g.json")).toEqual([]);
    // A changed program report is a divergence at its first differing character.
    const changed = [...r.baseOutputs];
    changed[1] = (changed[1] as string).replace('"answer":', '"answer" :');
    const [bad] = checkGolden(g, prov, { ...params }, changed, "g.json");
    expect(bad.index).toBe(1);
    expect(bad.firstDivergence).toBe('{"answer"'.length);
    // Without program prompts the golden is version 3, as before.
    expect(makeGolden("m", prov, {}, [[1, 2]]).version).toBe(3);
  }, 120_000);

  it("builds every program before anything runs: a duchess line without a trained probe fails first", async () => {
    await using engine = new Engine({ models: { model } });
    const prompts = parsePromptsFile(
      [JSON.stringify({ prompt: "What is 1+1?" }), JSON.stringify({ prompt: "What is 2+2?", program: "duchess" })].join(
        "\n",
      ),
    );
    const err = await runDeterminismCheck(engine, prompts, { ...params, loads: [], runs: 1 }).catch((e: unknown) => e);
    expect((err as Error).message).toMatch(/program duchess needs a trained probe/);
    expect(engine.metrics().steps).toBe(0);
  });
});
