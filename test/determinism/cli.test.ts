// `deliberate determinism` end to end on a 30-layer (SmolLM-135M depth) near-tie model: deterministic decoding
// gives identical outputs alone and under load (exit 0, golden record/check round trip), while plain decoding
// under load diverges and the command says so with exit status 1.
import { execFile } from "node:child_process";
import { mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { GoldenFile } from "../../ts/determinism/golden.js";
import type { DeterminismSummary } from "../../ts/determinism/report.js";
import { randomTokens } from "../model/fixtureCache.js";
import { nearTieModelDir } from "./nearTieModel.js";

const exec = promisify(execFile);
interface CliRun {
  code: number;
  stdout: string;
  stderr: string;
}
async function cli(args: string[], env: NodeJS.ProcessEnv = process.env): Promise<CliRun> {
  try {
    const { stdout, stderr } = await exec("npx", ["tsx", "ts/cli/main.ts", "determinism", ...args], {
      cwd: process.cwd(),
      timeout: 120_000,
      env,
    });
    return { code: 0, stdout, stderr };
  } catch (e) {
    const err = e as { code?: number; stdout?: string; stderr?: string };
    if (typeof err.code !== "number") throw e;
    return { code: err.code, stdout: err.stdout ?? "", stderr: err.stderr ?? "" };
  }
}
const lastLine = (s: string): DeterminismSummary => JSON.parse(s.trim().split("\n").at(-1)!) as DeterminismSummary;

let dir: string;
let model: string;
/** Another model of the same shape family, for a golden recorded on one and checked on the other. */
let tinyModel: string;
let prompts: string;
let common: string[];

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), "deliberate-determinism-cli-"));
  model = await nearTieModelDir(30);
  tinyModel = await nearTieModelDir(4);
  prompts = join(dir, "prompts.jsonl");
  const lines = Array.from({ length: 6 }, (_, i) =>
    JSON.stringify({ promptIds: randomTokens(4 + 3 * i, 512, 20 + i) }),
  );
  await writeFile(prompts, lines.join("\n") + "\n");
  common = [
    "--model",
    model,
    "--prompts",
    prompts,
    "--load",
    "1,6",
    "--max-tokens",
    "24",
    "--verify-window",
    "8",
    "--verify-group",
    "4",
  ];
}, 60_000);
afterAll(() => rm(dir, { recursive: true, force: true }));

describe("deliberate determinism", () => {
  it("deterministic: no divergence alone vs under load (exit 0); --record then --check round-trips", async () => {
    const golden = join(dir, "golden.json");
    const recorded = await cli([...common, "--json", "--record", golden]);
    expect(recorded.code, recorded.stderr).toBe(0);
    const summary = lastLine(recorded.stdout);
    expect(summary).toMatchObject({ prompts: 6, runs: 12, divergences: 0 });
    expect(summary.rollbacks).toBeGreaterThan(0); // the fast path did flip; the verifier hid it
    const g = JSON.parse(await readFile(golden, "utf8")) as GoldenFile;
    expect(g.outputs).toHaveLength(6);
    // The golden says what it was recorded on: the weights, the device, the kernel configuration, the verify settings.
    expect(g.version).toBe(3);
    expect(g.provenance.modelHash).toMatch(/^[0-9a-f]{64}$/);
    expect(g.provenance.device).toMatch(/^cpu (avx2|avx512|avx512-bf16)$/);
    expect(g.provenance.kernels).toEqual({
      kernelMode: "fast",
      fixedGemmSplitK: 1,
      fixedKvSplits: 1,
      kvDtype: "f32",
      pageSize: 16,
    }); // no DL_* knob on the CPU
    expect(g.provenance.verify).toEqual({ verifyWindow: 8, verifyGroup: 4, fuseVerify: true });

    const checked = await cli([...common, "--load", "1,3", "--check", golden]);
    expect(checked.code, checked.stderr).toBe(0);
    expect(checked.stdout).toMatch(/6 prompts, 12 runs: 0 diverge/);
    // Verify rows in passes of their own commit the same bytes as rows fused into the steps (the default).
    const separate = await cli([...common, "--load", "1,6", "--separate-verify", "--check", golden]);
    expect(separate.code, separate.stderr).toBe(0);
    expect(separate.stdout).toMatch(/6 prompts, 12 runs: 0 diverge/);

    // The DL_* knobs choose CUDA kernels: on the CPU a knob set differently checks as usual.
    const knobbed = await cli([...common, "--load", "1", "--check", golden], {
      ...process.env,
      DL_PREFILL_MMA: "0",
      DL_DECODE_MERGE: "kernel",
    });
    expect(knobbed.code, knobbed.stderr).toBe(0);
    expect(knobbed.stderr).not.toMatch(/comparing across/);
    // Recorded under another kernel configuration: refused before the run, naming the setting and both values, unless
    // --allow-device-change (which says what it compares across).
    const other = join(dir, "golden-bf16-kv.json");
    await writeFile(
      other,
      JSON.stringify({ ...g, provenance: { ...g.provenance, kernels: { ...g.provenance.kernels, kvDtype: "bf16" } } }),
    );
    const refused = await cli([...common, "--load", "1", "--check", other]);
    expect(refused.code).toBe(1);
    expect(refused.stderr).toMatch(
      /recorded under another device or kernel configuration: kvDtype: recorded "bf16", now "f32".*--allow-device-change/,
    );
    expect(refused.stderr).not.toMatch(/\[determinism\] run 1/);
    const allowed = await cli([...common, "--load", "1", "--check", other, "--allow-device-change"]);
    expect(allowed.code, allowed.stderr).toBe(0); // the outputs were really recorded with an f32 KV: same bytes
    expect(allowed.stderr).toMatch(/--allow-device-change: comparing across kvDtype: recorded "bf16", now "f32"/);
    // A golden of another model is refused whatever the flags.
    const otherModel = await cli([
      ...common.map((a) => (a === model ? tinyModel : a)),
      "--load",
      "1",
      "--check",
      golden,
      "--allow-device-change",
    ]);
    expect(otherModel.code).toBe(1);
    expect(otherModel.stderr).toMatch(/was recorded with another model \(weights hash [0-9a-f]{12}…/);

    g.outputs[2].hash = "0".repeat(64); // a golden file from some other build
    await writeFile(golden, JSON.stringify(g));
    const mismatch = await cli([...common, "--load", "1", "--check", golden]);
    expect(mismatch.code).toBe(1);
    expect(mismatch.stdout).toMatch(/prompt 2: DIVERGES/);
  }, 120_000);

  it("--no-deterministic: the fast path diverges under load on a model of realistic depth (exit 1)", async () => {
    const plain = await cli([...common, "--no-deterministic", "--json"]);
    expect(plain.code).toBe(1);
    const summary = lastLine(plain.stdout);
    expect(summary.divergences).toBeGreaterThan(0);
    expect(summary.rollbacks).toBe(0);
  }, 120_000);

  it("rejects bad flags and missing files with a clear message", async () => {
    const r = await cli([...common, "--load", "1,x"]);
    expect(r.code).toBe(1);
    expect(r.stderr).toMatch(/--load entry 1 is 'x'/);
    const missing = await cli([...common.map((a) => (a === prompts ? "missing.txt" : a))]);
    expect(missing.code).toBe(1);
    expect(missing.stderr).toMatch(/--prompts \/\S+\/missing\.txt: file not found; give one prompt per line, or JSONL/);
    expect(missing.stderr).not.toMatch(/ENOENT/);
  }, 60_000);
});
