// `deliberate run` end to end: spawns the CLI on a fixture model (and on the bundled tiny reasoner when present).
import { execFile } from "node:child_process";
import { copyFileSync, existsSync, mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import { describe, expect, it } from "vitest";
import { CALIBRATION_FORMAT, modelFingerprint } from "../../ts/certaindex/calibrationFile.js";
import { bundledModelDir } from "../../ts/index.js";
import { fixtureDir } from "../model/fixtureCache.js";

const run = promisify(execFile);
const cli = (args: string[]) =>
  run("npx", ["tsx", "ts/cli/main.ts", ...args], { cwd: process.cwd(), timeout: 120_000 });

describe("deliberate run", () => {
  it("--json reports the answer, certaindex, rounds and tokens against the budget", async () => {
    const dir = await fixtureDir("llama", "f32");
    const { stdout } = await cli([
      "run",
      "What is 7*(8+5)-19?",
      "--model",
      dir,
      "--max-tokens",
      "12",
      "--cap",
      "8",
      "--policy",
      "baseline-even",
      "--json",
    ]);
    const r = JSON.parse(stdout) as Record<string, unknown> & {
      history: unknown[];
      knob: { used: number; max: number };
    };
    expect(r.program).toBe("sc");
    expect(r.stopReason).toBe("cap");
    expect(r.knob).toEqual({ used: 8, max: 8 });
    expect(r.rounds).toBe(2);
    expect(r.history).toHaveLength(2);
    expect(r.tokenBudget).toBe(8 * 12);
    expect(r.tokensUsed as number).toBeGreaterThan(0);
    expect(r.tokensUsed as number).toBeLessThanOrEqual(8 * 12);
    expect(typeof r.certaindex).toBe("number");
  });

  it("prints a human summary, runs cot-probe, and fails clearly on bad flags", async () => {
    const dir = await fixtureDir("llama", "f32");
    const { stdout } = await cli([
      "run",
      "What is 2+3?",
      "--model",
      dir,
      "--program",
      "cot-probe",
      "--max-tokens",
      "40",
    ]);
    expect(stdout).toMatch(/^answer: /m);
    expect(stdout).toMatch(
      /^certaindex: +\d\.\d{3} +\(how sure the program is, 0\.\.1 — certainty, not correctness; stopped: (certain|cap|done)\)/m,
    );
    expect(stdout).toMatch(/^tokens: +\d+ \/ \d+ budget/m);
    await expect(cli(["run", "q", "--model", dir, "--program", "beams"])).rejects.toThrow(
      /program "beams" is unknown; expected one of sc, cot-probe, rebase, mcts/,
    );
    await expect(cli(["run", "  ", "--model", dir])).rejects.toThrow(/the question is empty; ask one/);
  });

  it("defaults to the bundled tiny reasoner", async () => {
    // The README's main job, with no flag: the bundled model ships with the package.
    expect(existsSync(bundledModelDir)).toBe(true);
    const { stdout } = await cli(["run", "What is 7*(8+5)-19?", "--json"]);
    const r = JSON.parse(stdout) as { answer: string | null; model: string; tokensUsed: number; tokenBudget: number };
    expect(r.model).toBe(bundledModelDir);
    expect(r.answer).toMatch(/^-?\d+$/);
    expect(r.tokensUsed).toBeLessThanOrEqual(r.tokenBudget);
  });

  it('mcts on the bundled reasoner answers (it printed "(none)"), scored by the arith verifier by default', async () => {
    const { stdout } = await cli(["run", "What is 7*(8+5)-19?", "--program", "mcts", "--cap", "8", "--json"]);
    const r = JSON.parse(stdout) as {
      answer: string | null;
      reward: string;
      tokensUsed: number;
      tokenBudget: number;
      knob: { used: number };
    };
    expect(r.reward).toBe("arith-verifier");
    expect(r.answer).toMatch(/^-?\d+$/);
    expect(r.tokensUsed).toBeLessThanOrEqual(r.tokenBudget);
    const v = JSON.parse(
      (await cli(["run", "What is 7+5?", "--program", "rebase", "--verifier", "arith", "--cap", "2", "--json"])).stdout,
    ) as { reward: string; answer: string | null };
    expect(v.reward).toBe("arith-verifier");
    expect(v.answer).toMatch(/^-?\d+$/);
  });

  it("beam search on the bundled reasoner scores its steps with the bundled tiny PRM by default", async () => {
    const { stdout } = await cli([
      "run",
      "What is 7*(8+5)-19?",
      "--program",
      "beam",
      "--cap",
      "8",
      "--beam-width",
      "2",
      "--json",
    ]);
    const r = JSON.parse(stdout) as {
      answer: string | null;
      reward: string;
      program: string;
      tokensByPurpose: Record<string, number>;
      stopReason: string;
    };
    expect(r.program).toBe("beam");
    expect(r.reward).toBe("prm:prm");
    expect(r.answer).toMatch(/^-?\d+$/);
    expect(r.tokensByPurpose.reward).toBeGreaterThan(0);
    expect(r.stopReason).toBe("done");
    const k = JSON.parse(
      (
        await cli([
          "run",
          "What is 7+5?",
          "--program",
          "beam",
          "--cap",
          "4",
          "--beam-width",
          "2",
          "--kv-budget",
          "4",
          "--kv-split",
          "0.7,0.3",
          "--json",
        ])
      ).stdout,
    ) as { answer: string | null };
    expect(k.answer).toMatch(/^-?\d+$/);
    const s = JSON.parse(
      (
        await cli([
          "run",
          "What is 7+5?",
          "--program",
          "beam",
          "--cap",
          "4",
          "--beam-width",
          "2",
          "--speculative",
          "--speculative-rows",
          "2",
          "--json",
        ])
      ).stdout,
    ) as { answer: string | null };
    expect(s.answer).toMatch(/^-?\d+$/);
    await expect(cli(["run", "q", "--program", "beam", "--speculative-rows", "2"])).rejects.toThrow(
      /--speculative-rows caps speculative beam extension; give --speculative too/,
    );
    await expect(cli(["run", "q", "--program", "beam", "--kv-budget", "0.01"])).rejects.toThrow(
      /kvSplit: a KV budget of \d+ bytes holds no generator \/ verifier pair/,
    );
    await expect(cli(["run", "q", "--kv-budget", "4"])).rejects.toThrow(
      /--kv-budget splits the KV memory between the generator and a process reward model/,
    );
    const b = JSON.parse(
      (await cli(["run", "What is 7+5?", "--program", "best-of-n", "--cap", "4", "--verifier", "arith", "--json"]))
        .stdout,
    ) as { reward: string; answer: string | null };
    expect(b.reward).toBe("arith-verifier");
    expect(b.answer).toMatch(/^-?\d+$/);
  });

  it("--prm DIR scores rebase steps with a second model on the same engine", async () => {
    const dir = await fixtureDir("llama", "f32");
    const prm = await fixtureDir("llama", "f32", { layers: 1, seed: 7 });
    const { stdout } = await cli([
      "run",
      "What is 1+2?",
      "--model",
      dir,
      "--program",
      "rebase",
      "--prm",
      prm,
      "--cap",
      "2",
      "--max-tokens",
      "8",
      "--json",
    ]);
    const r = JSON.parse(stdout) as { reward: string; tokensByPurpose: Record<string, number>; tokensUsed: number };
    expect(r.reward).toBe("prm:prm");
    expect(r.tokensByPurpose.reward).toBeGreaterThan(0); // one token per scored step
    expect(r.tokensUsed).toBe(r.tokensByPurpose.generate + r.tokensByPurpose.reward);
  });

  it("rejects reward flags that do not apply or conflict", async () => {
    const dir = await fixtureDir("llama", "f32");
    await expect(cli(["run", "q", "--model", dir, "--prm", dir])).rejects.toThrow(
      /--prm scores the steps of rebase, mcts, beam, dvts, best-of-n; --program sc uses no reward source/,
    );
    await expect(cli(["run", "q", "--model", dir, "--beam-width", "2"])).rejects.toThrow(
      /--beam-width, .* are options of --program beam and dvts/,
    );
    await expect(
      cli(["run", "q", "--model", dir, "--program", "beam", "--cap", "8", "--beam-width", "3"]),
    ).rejects.toThrow(/beam.beamWidth must be an integer ≥ 1 dividing n \(8\)/);
    await expect(
      cli(["run", "q", "--model", dir, "--program", "mcts", "--prm", dir, "--verifier", "arith"]),
    ).rejects.toThrow(/--prm and --verifier both choose the reward source/);
    await expect(cli(["run", "q", "--model", dir, "--program", "mcts", "--verifier", "regex"])).rejects.toThrow(
      /verifier "regex" is unknown; expected one of arith/,
    );
    await expect(cli(["run", "q", "--model", dir, "--program", "rebase", "--prm", join(dir, "nope")])).rejects.toThrow(
      /--prm .*nope: folder not found/,
    );
    await expect(cli(["run", "q", "--model", dir, "--interval", "8"])).rejects.toThrow(
      /--interval sets the probe interval of cot-probe/,
    );
  });

  it("--task chooses how answers are read; tree search on a task without a step checker needs --prm", async () => {
    const dir = await fixtureDir("llama", "f32");
    const r = JSON.parse(
      (await cli(["run", "q", "--model", dir, "--task", "gsm8k", "--max-tokens", "8", "--cap", "4", "--json"])).stdout,
    ) as { task: string; answer: string | null };
    expect(r.task).toBe("gsm8k");
    if (r.answer !== null) expect(r.answer).toMatch(/^-?\d+(\.\d+)?$/); // gsm8k answers are normalized numbers
    await expect(cli(["run", "q", "--model", dir, "--task", "math500"])).rejects.toThrow(
      /unknown task 'math500'; known tasks: arith, gsm8k/,
    );
    await expect(cli(["run", "q", "--model", dir, "--task", "gsm8k", "--program", "rebase"])).rejects.toThrow(
      /task gsm8k has no step verifier: --program rebase needs --prm DIR/,
    );
  });

  it("applies the model's calibration (policy and settings), reports stale ones, and --no-calibration ignores it", async () => {
    const src = await fixtureDir("llama", "f32");
    const dir = mkdtempSync(join(tmpdir(), "deliberate-run-cal-"));
    for (const f of ["config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"])
      if (existsSync(join(src, f))) copyFileSync(join(src, f), join(dir, f));
    const outcome = { n: 1, accuracy: 1, meanTokens: 1, baselineAccuracy: 1, baselineMeanTokens: 2, tokenSavings: 0.5 };
    const cal = (sha256: string): string =>
      JSON.stringify({
        format: CALIBRATION_FORMAT,
        version: 1,
        createdAt: "2026-11-23T00:00:00.000Z",
        command: "test",
        model: { path: dir, sha256 },
        split: "validation",
        programs: {
          sc: {
            policy: { kind: "threshold", threshold: 0, detectAt: 2 },
            settings: { maxBranches: 6, branchesPerRound: 2 },
            validation: outcome,
          },
        },
      });
    writeFileSync(join(dir, "certaindex.json"), cal(modelFingerprint(dir)));
    const base = ["run", "What is 1+2?", "--model", dir, "--max-tokens", "6", "--json"];
    const r = JSON.parse((await cli(base)).stdout) as {
      policy: unknown;
      knob: { used: number; max: number };
      stopReason: string;
      calibration: { stale: boolean; applied: boolean };
    };
    expect(r.calibration).toMatchObject({ stale: false, applied: true });
    expect(r.policy).toEqual({ kind: "threshold", threshold: 0, detectAt: 2 });
    expect(r.knob).toEqual({ used: 2, max: 6 }); // calibrated cap 6, rounds of 2, stopped at the detection step
    expect(r.stopReason).toBe("certain");
    const off = JSON.parse((await cli([...base, "--no-calibration"])).stdout) as {
      calibration: unknown;
      knob: { max: number };
    };
    expect(off.calibration).toBeNull();
    expect(off.knob.max).toBe(16);
    writeFileSync(join(dir, "other.json"), cal("0".repeat(64)));
    const stale = await cli([...base, "--calibration", join(dir, "other.json")]);
    expect((JSON.parse(stale.stdout) as { calibration: { stale: boolean } }).calibration.stale).toBe(true);
    expect(stale.stderr).toMatch(/calibrated on other weights .*npm run bench:certaindex -- --calibrate/);
    writeFileSync(join(dir, "bad.json"), "{}");
    await expect(cli([...base, "--calibration", join(dir, "bad.json")])).rejects.toThrow(
      /bad\.json: not a certaindex calibration/,
    );
  });
});
