// reasoning_effort's early exit as a library piece (ts/programs/effort.ts) on the bundled tiny reasoner: a
// ThoughtProbe driven by a caller's own stream probes at the lengths it names, decides by the level's policy, and the
// levels come from the calibration file's effort section (else the documented fallback). ProgramResult.usage: tokens
// saved estimated from the rounds not taken, branches started and pruned.
import { readFileSync } from "node:fs";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { BUNDLED_CALIBRATION_FILE, parseCalibration } from "../../ts/certaindex/calibrationFile.js";
import { Engine } from "../../ts/engine/engine.js";
import { bundledModelDir } from "../../ts/bundledModel.js";
import { loadModel, type Model } from "../../ts/model/model.js";
import { EFFORT_LEVELS, FALLBACK_EFFORT, resolveEffort, ThoughtProbe } from "../../ts/programs/effort.js";
import { ProgramRuntime } from "../../ts/programs/runtime.js";
import { SelfConsistency } from "../../ts/programs/selfConsistency.js";
import { estimateTokensSaved } from "../../ts/programs/usage.js";

let model: Model;
beforeAll(async () => {
  model = await loadModel(bundledModelDir, { kvPages: 512, pageSize: 16 });
});
afterAll(() => model?.dispose());

/** A question whose greedy thought settles on its (right) answer well before it ends: 215, thought ~100 tokens. */
const QUESTION = "What is 92+41*3?";
const bundled = parseCalibration(readFileSync(BUNDLED_CALIBRATION_FILE, "utf8"), BUNDLED_CALIBRATION_FILE);

describe("effort levels", () => {
  it("come from the calibration's effort section, else the fallback (high: no probing)", () => {
    for (const level of EFFORT_LEVELS) {
      const c = bundled.effort![level]!;
      const r = resolveEffort(level, bundled);
      expect(r.source).toBe("calibration");
      expect(r.effort.interval).toBe(c.settings.interval);
      expect(r.effort.policy).toEqual(c.policy);
      expect(resolveEffort(level, null)).toEqual({ effort: FALLBACK_EFFORT[level], source: "fallback" });
    }
    expect(resolveEffort("high", bundled).effort.interval).toBe(0);
    expect(new ThoughtProbe({ effort: FALLBACK_EFFORT.high, cap: 400 }).nextProbeAt).toBeNull();
    // The levels are ordered: low probes no later and agrees no more than medium.
    const low = resolveEffort("low", bundled).effort;
    const medium = resolveEffort("medium", bundled).effort;
    expect(bundled.effort!.low!.validation.meanTokens).toBeLessThan(bundled.effort!.medium!.validation.meanTokens);
    expect(low.interval).toBeGreaterThan(0);
    expect(medium.interval).toBeGreaterThan(0);
  });

  it("a calibration's effort section is checked by name", () => {
    const text = readFileSync(BUNDLED_CALIBRATION_FILE, "utf8");
    const withEffort = (effort: unknown): string => JSON.stringify({ ...JSON.parse(text), effort });
    const low = bundled.effort!.low!;
    expect(() => parseCalibration(withEffort({ extreme: low }), "f")).toThrow(/effort\.extreme is not an effort level/);
    expect(() =>
      parseCalibration(withEffort({ low: { ...low, settings: { ...low.settings, interval: -1 } } }), "f"),
    ).toThrow(/effort\.low\.settings\.interval must be an integer ≥ 0/);
    expect(() =>
      parseCalibration(
        withEffort({ low: { ...low, settings: { ...low.settings, probeWindow: 2, probeAgree: 3 } } }),
        "f",
      ),
    ).toThrow(/probeAgree must be at most probeWindow/);
    expect(() => parseCalibration(withEffort({ low: { ...low, programs: { sc: { kind: "always" } } } }), "f")).toThrow(
      /effort\.low\.programs\.sc: kind "always" is unknown/,
    );
  });
});

describe("ThoughtProbe on a stream the caller drives", () => {
  it("probes where it is told, counts probe tokens, and says exit once the probes agree", async () => {
    await using engine = new Engine({ models: { model } });
    const prompt = model.tokenizer.encodeChat([{ role: "user", content: QUESTION }]);
    const effort = { interval: 16, window: 2, policy: { kind: "threshold" as const, threshold: 1, detectAt: 2 } };
    const probe = new ThoughtProbe({ effort, cap: 300 });
    const main = engine.submit({ prompt, maxTokens: 300, temperature: 0 });
    const ids: number[] = [];
    let exitAt: number | null = null;
    for await (const d of main) {
      ids.push(...d.tokens);
      const due = probe.nextProbeAt;
      if (exitAt === null && due !== null && ids.length >= due) {
        const thought = model.tokenizer.decode(ids, { skipSpecialTokens: true });
        // The caller waits for the verdict here; the engine keeps decoding the main stream meanwhile.
        if (
          await probe.probe(engine, main, {
            sample: 0,
            length: prompt.length + ids.length,
            thought,
            thoughtTokens: ids.length,
          })
        )
          exitAt = ids.length;
      }
    }
    await main.result;
    expect(probe.probes.length).toBeGreaterThanOrEqual(2);
    expect(probe.probeAt[0]).toBe(16);
    expect(probe.probeTokens).toBeGreaterThan(0);
    expect(probe.exit).toBe("certain");
    expect(probe.certaindex).toBe(1);
    expect(probe.answer).toBe("215");
    // It stopped before the thought did: the saving an exit is for.
    const thoughtEnd = ids.indexOf(model.tokenizer.thinkTokens()!.end);
    expect(exitAt!).toBeLessThan(thoughtEnd);
    expect(probe.nextProbeAt).toBeNull(); // no probe after an exit
  });
});

describe("ProgramResult.usage", () => {
  it("an early exit saves the rounds not taken at the mean cost of the rounds taken; run to the cap saves nothing", async () => {
    await using engine = new Engine({ models: { model } });
    const prompt = model.tokenizer.encodeChat([{ role: "user", content: "What is 5+1?" }]);
    const sc = (): SelfConsistency =>
      new SelfConsistency({ prompt, maxBranches: 8, branchesPerRound: 2, maxTokens: 120, temperature: 0.8, seed: 1 });
    const early = await new ProgramRuntime(engine).run(sc(), {
      policy: { kind: "threshold", threshold: 0.5, detectAt: 1 },
    });
    expect(early.stopReason).toBe("certain");
    expect(early.knob.used).toBeLessThan(8);
    expect(early.usage.tokensSaved).toBe(
      Math.round(((early.knob.max - early.knob.used) * early.tokensUsed) / early.knob.used),
    );
    expect(early.usage.tokensSaved).toBeGreaterThan(0);
    expect(early.usage.reasoningTokens).toBe(early.tokensUsed);
    expect(early.usage.branchesStarted).toBe(early.knob.used);
    expect(early.usage.certaindexAtExit).toBe(early.certaindex);
    const full = await new ProgramRuntime(engine).run(sc(), { policy: { kind: "baseline-even" } });
    expect(full.stopReason).toBe("cap");
    expect(full.usage).toMatchObject({ tokensSaved: 0, branchesStarted: 8, branchesPruned: 0 });
    // The estimate against what running to the cap really cost: same seeds, so the first rounds are the same.
    expect(early.tokensUsed + early.usage.tokensSaved).toBeGreaterThan(0.5 * full.tokensUsed);
    expect(early.tokensUsed + early.usage.tokensSaved).toBeLessThan(2 * full.tokensUsed);
  });

  it("estimateTokensSaved: only a policy stop saves", () => {
    const knob = { used: 2, max: 8 };
    expect(estimateTokensSaved({ stopReason: "certain", knob, tokensUsed: 100 })).toBe(300);
    expect(estimateTokensSaved({ stopReason: "curve", knob, tokensUsed: 100 })).toBe(300);
    for (const stopReason of ["cap", "done", "aborted"] as const)
      expect(estimateTokensSaved({ stopReason, knob, tokensUsed: 100 })).toBe(0);
    expect(estimateTokensSaved({ stopReason: "certain", knob: { used: 0, max: 8 }, tokensUsed: 0 })).toBe(0);
  });
});
