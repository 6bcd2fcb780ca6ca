// The certaindex calibration file: parsing with clear errors, per-program / per-cap lookup, where it is found, and
// the stale check against the model's weights.
import { copyFileSync, mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import {
  CALIBRATION_FORMAT,
  defaultCalibrationOut,
  findCalibrationFile,
  loadCalibration,
  modelFingerprint,
  parseCalibration,
  programCalibration,
  type CalibrationFile,
  type ProgramCalibration,
} from "../../ts/certaindex/calibrationFile.js";
import { fixtureDir } from "../model/fixtureCache.js";

const outcome = {
  n: 10,
  accuracy: 0.8,
  meanTokens: 50,
  baselineAccuracy: 0.8,
  baselineMeanTokens: 100,
  tokenSavings: 0.5,
};
const entry = (policy: ProgramCalibration["policy"], settings: Record<string, number>): ProgramCalibration => ({
  policy,
  settings,
  validation: outcome,
});

function sampleCalibration(sha256: string): CalibrationFile {
  return {
    format: CALIBRATION_FORMAT,
    version: 1,
    createdAt: "2026-11-23T00:00:00.000Z",
    command: "test",
    model: { path: "m", sha256 },
    split: "validation",
    programs: {
      sc: entry({ kind: "threshold", threshold: 0.5, detectAt: 4 }, { maxBranches: 16, branchesPerRound: 4 }),
      "cot-probe": entry({ kind: "threshold", threshold: 2 / 3, detectAt: 2 }, { interval: 8, probeWindow: 3 }),
      mcts: entry({ kind: "threshold", threshold: 0.7, detectAt: 8 }, { maxSimulations: 32, simulationsPerRound: 4 }),
    },
    scByCap: { "4": entry({ kind: "threshold", threshold: 1, detectAt: 2 }, { maxBranches: 4, branchesPerRound: 1 }) },
  };
}

describe("calibration file", () => {
  it("parses a valid file and looks programs up per cap", () => {
    const c = parseCalibration(JSON.stringify(sampleCalibration("abc")));
    expect(programCalibration(c, "sc")?.policy).toEqual({ kind: "threshold", threshold: 0.5, detectAt: 4 });
    expect(programCalibration(c, "sc", 4)?.settings.branchesPerRound).toBe(1); // the per-cap entry
    expect(programCalibration(c, "sc", 16)?.settings.maxBranches).toBe(16); // the default entry's own cap
    expect(programCalibration(c, "sc", 8)).toBeUndefined(); // calibrated for neither
    expect(programCalibration(c, "mcts", 32)?.policy.kind).toBe("threshold");
    expect(programCalibration(c, "mcts", 12)).toBeUndefined();
    expect(programCalibration(c, "rebase")).toBeUndefined();
    expect(programCalibration(c, "cot-probe")?.settings.interval).toBe(8);
  });

  it("rejects malformed files with the file and field named", () => {
    const good = sampleCalibration("abc");
    expect(() => parseCalibration("{", "f.json")).toThrow(/f\.json: not JSON/);
    expect(() => parseCalibration(JSON.stringify({ ...good, format: "x" }), "f.json")).toThrow(
      /f\.json: not a certaindex calibration/,
    );
    expect(() => parseCalibration(JSON.stringify({ ...good, version: 2 }), "f.json")).toThrow(
      /version 2 is not supported/,
    );
    const badPolicy = { ...good, programs: { sc: entry({ kind: "threshold", threshold: 1.5, detectAt: 1 }, {}) } };
    expect(() => parseCalibration(JSON.stringify(badPolicy), "f.json")).toThrow(
      /programs\.sc\.policy: policy threshold: threshold must be in \[0, 1\], got 1\.5/,
    );
    const badKind = { ...good, programs: { beam: good.programs.sc } };
    expect(() => parseCalibration(JSON.stringify(badKind), "f.json")).toThrow(/programs\.beam is not a program/);
    const badSetting = { ...good, programs: { sc: { ...good.programs.sc, settings: { maxBranches: "16" } } } };
    expect(() => parseCalibration(JSON.stringify(badSetting), "f.json")).toThrow(
      /settings\.maxBranches must be a number/,
    );
  });

  it("prefers the model's own certaindex.json, knows the bundled default, and flags other weights as stale", async () => {
    const src = await fixtureDir("llama", "f32");
    const dir = mkdtempSync(join(tmpdir(), "deliberate-cal-"));
    for (const f of ["config.json", "model.safetensors"]) copyFileSync(join(src, f), join(dir, f));
    expect(findCalibrationFile(dir)).toBeNull();
    expect(loadCalibration(dir)).toBeNull();
    expect(defaultCalibrationOut(dir)).toBe(join(dir, "certaindex.json"));
    expect(defaultCalibrationOut(dir, dir)).toMatch(/calibration[/\\]tiny-reasoner\.json$/); // the bundled model's
    writeFileSync(join(dir, "certaindex.json"), JSON.stringify(sampleCalibration(modelFingerprint(dir))));
    expect(findCalibrationFile(dir, dir)).toBe(join(dir, "certaindex.json"));
    const fresh = loadCalibration(dir)!;
    expect(fresh.stale).toBe(false);
    expect(fresh.calibration.programs.sc?.settings.maxBranches).toBe(16);
    writeFileSync(join(dir, "other.json"), JSON.stringify(sampleCalibration("0".repeat(64))));
    expect(loadCalibration(dir, { file: join(dir, "other.json") })!.stale).toBe(true);
    expect(() => loadCalibration(dir, { file: join(dir, "missing.json") })).toThrow(/missing\.json not found/);
  });
});
