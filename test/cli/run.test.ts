// `deliberate run` end to end: spawns the CLI on a fixture model (and on the bundled tiny reasoner when present).
import { execFile } from "node:child_process";
import { existsSync } from "node:fs";
import { promisify } from "node:util";
import { describe, expect, it } from "vitest";
import { DEFAULT_MODEL_DIR } from "../../ts/cli/commands/run.js";
import { fixtureDir } from "../model/fixtureCache.js";

const run = promisify(execFile);
const cli = (args: string[]) => run("npx", ["tsx", "ts/cli/main.ts", ...args], { cwd: process.cwd(), timeout: 120_000 });

describe("deliberate run", () => {
  it("--json reports the answer, certaindex, rounds and tokens against the budget", async () => {
    const dir = await fixtureDir("llama", "f32");
    const { stdout } = await cli(["run", "What is 12*(7+5)-9?", "--model", dir, "--max-tokens", "12", "--cap", "8", "--policy", "baseline-even", "--json"]);
    const r = JSON.parse(stdout) as Record<string, unknown> & { history: unknown[]; knob: { used: number; max: number } };
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
    const { stdout } = await cli(["run", "What is 2+3?", "--model", dir, "--program", "cot-probe", "--max-tokens", "40"]);
    expect(stdout).toMatch(/^answer: /m);
    expect(stdout).toMatch(/^certaindex: +\d\.\d{3} +\(stopped: (certain|cap|done)\)/m);
    expect(stdout).toMatch(/^tokens: +\d+ \/ \d+ budget/m);
    await expect(cli(["run", "q", "--model", dir, "--program", "beam"])).rejects.toThrow(/program "beam" is unknown; expected one of sc, cot-probe, rebase, mcts/);
  });

  it("defaults to the bundled tiny reasoner", async () => {
    // The README's main job, with no flag: the bundled model ships with the package.
    expect(existsSync(DEFAULT_MODEL_DIR)).toBe(true);
    const { stdout } = await cli(["run", "What is 12*(7+5)-9?", "--json"]);
    const r = JSON.parse(stdout) as { answer: string | null; model: string; tokensUsed: number; tokenBudget: number };
    expect(r.model).toBe(DEFAULT_MODEL_DIR);
    expect(r.answer).toMatch(/^-?\d+$/);
    expect(r.tokensUsed).toBeLessThanOrEqual(r.tokenBudget);
  });
});
