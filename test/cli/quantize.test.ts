// --quantize / --quantize-group where a command or a bench loads a model (issue 47): one definition of the flags
// (ts/cli/quantizeOption.ts) checked before anything loads; run --kv-budget, probe train and serve on the bundled
// models quantized at load; the benches' argument parsing only (benchmarks are not run here).
import { execFile, spawn } from "node:child_process";
import { existsSync, mkdtempSync, readdirSync, readFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import { describe, expect, it } from "vitest";
import { bundledModelDir } from "../../ts/index.js";
import { quantizeOptions } from "../../ts/cli/quantizeOption.js";

const exec = promisify(execFile);
const tsx = (file: string, args: string[], env: NodeJS.ProcessEnv = process.env) =>
  exec("npx", ["tsx", file, ...args], { cwd: process.cwd(), timeout: 120_000, env });
const cli = (args: string[], env?: NodeJS.ProcessEnv) => tsx("ts/cli/main.ts", args, env);
const bundled = existsSync(join(bundledModelDir, "config.json"));

describe("quantizeOptions (the one rule of --quantize / --quantize-group)", () => {
  it("maps the flags to loadModel's options and refuses a wrong value naming the flag", () => {
    expect(quantizeOptions(undefined, undefined)).toEqual({});
    expect(quantizeOptions("int8", undefined)).toEqual({ quantize: "int8" });
    expect(quantizeOptions("int4", "64")).toEqual({ quantize: "int4", quantizeGroupSize: 64 });
    expect(quantizeOptions("fp8", undefined)).toEqual({ quantize: "fp8" });
    expect(() => quantizeOptions("fp4", undefined)).toThrow(/--quantize must be int8, int4 or fp8, got 'fp4'/);
    expect(() => quantizeOptions("fp8", "128")).toThrow(/--quantize-group is for --quantize int4 only/);
    expect(() => quantizeOptions("int8", "32")).toThrow(/--quantize-group is for --quantize int4 only/);
    expect(() => quantizeOptions(undefined, "32")).toThrow(/--quantize-group is for --quantize int4 only/);
    expect(() => quantizeOptions("int4", "48")).toThrow(/--quantize-group must be one of 32, 64, 128, got '48'/);
    expect(() => quantizeOptions("int4", "")).toThrow(/--quantize-group must be one of 32, 64, 128, got ''/);
  });
});

describe("the benches' --quantize / --quantize-group", () => {
  // A wrong value fails at parsing, before a checkpoint is written or a model loaded: each bench names the flag.
  const benches = ["throughput", "tts", "certaindex", "certaindexEffort", "duchess", "determinism", "decode"];
  it.each(benches)("bench %s refuses a wrong --quantize / --quantize-group by name", async (b) => {
    const file = `scripts/bench/${b}.ts`;
    await expect(tsx(file, ["--quantize", "int9"])).rejects.toMatchObject({
      stderr: expect.stringMatching(/--quantize must be int8, int4 or fp8, got 'int9'/),
    });
    await expect(tsx(file, ["--quantize", "int4", "--quantize-group", "24"])).rejects.toMatchObject({
      stderr: expect.stringMatching(/--quantize-group must be one of 32, 64, 128, got '24'/),
    });
  });

  it("a quantized --calibrate / --tune must name its output (the model's own files are for the weights as stored)", async () => {
    for (const [file, args, flag] of [
      ["certaindex", ["--calibrate"], /--calibrate with --quantize .* --calibration-out FILE/],
      ["certaindexEffort", ["--calibrate"], /--calibrate with --quantize .* --calibration FILE/],
      ["duchess", ["--tune", "10"], /--tune with --quantize .* --probe DIR/],
    ] as const)
      await expect(tsx(`scripts/bench/${file}.ts`, [...args, "--quantize", "int8"])).rejects.toMatchObject({
        stderr: expect.stringMatching(flag),
      });
  });
});

describe.skipIf(!bundled)("commands on the bundled models quantized at load", () => {
  it("run --kv-budget with --quantize: the split loads both models quantized (auto and fixed fractions)", async () => {
    const cacheDir = mkdtempSync(join(tmpdir(), "deliberate-quantize-cli-"));
    const env = { ...process.env, DELIBERATE_CACHE_DIR: cacheDir };
    const base = ["run", "What is 7+5?", "--program", "beam", "--cap", "4", "--beam-width", "2", "--kv-budget", "4"];
    const auto = JSON.parse((await cli([...base, "--quantize", "int8", "--json"], env)).stdout) as { answer: string };
    expect(auto.answer).toMatch(/^-?\d+$/);
    // The auto split profiled the quantized models: their cached profiles are named by the resident weight bytes, so
    // the folders' profiles as stored are not reused for them.
    const profiles = readdirSync(join(cacheDir, "roofline"));
    expect(profiles.length).toBeGreaterThan(0);
    for (const p of profiles) expect(p).toMatch(/-cpu-p\d+-w\d+\.json$/);
    const fixed = JSON.parse(
      (await cli([...base, "--kv-split", "0.7,0.3", "--quantize", "int4", "--quantize-group", "64", "--json"], env))
        .stdout,
    ) as { answer: string };
    expect(fixed.answer).toMatch(/^-?\d+$/);
    await expect(cli([...base, "--quantize", "int4", "--quantize-group", "100"], env)).rejects.toMatchObject({
      stderr: expect.stringMatching(/--quantize-group must be one of 32, 64, 128, got '100'/),
    });
  });

  it("probe train --quantize int8 trains on the quantized model; without --out it is refused", async () => {
    const out = mkdtempSync(join(tmpdir(), "deliberate-quantize-probe-"));
    const small = ["--train", "12", "--validation", "6", "--test", "6", "--branches", "2", "--epochs", "2"];
    const { stdout } = await cli([
      "probe",
      "train",
      ...small,
      "--max-tokens",
      "128",
      "--quantize",
      "int8",
      "--out",
      out,
      "--json",
    ]);
    const r = JSON.parse(stdout) as { out: string; meta: { model: { name: string } } };
    expect(r.out).toBe(out);
    expect(r.meta.model.name).toMatch(/\(int8 weights\)$/);
    const meta = JSON.parse(readFileSync(join(out, "probe.json"), "utf8")) as { model: { name: string } };
    expect(meta.model.name).toBe(r.meta.model.name);
    expect(existsSync(join(out, "probe.safetensors"))).toBe(true);
    await expect(cli(["probe", "train", ...small, "--quantize", "int8"])).rejects.toMatchObject({
      stderr: expect.stringMatching(
        /--quantize trains the probe on the quantized model; name where it goes with --out DIR/,
      ),
    });
  });

  it("serve logs the loaded model's weights report (formats, resident bytes) as devices --model prints it", async () => {
    const args = ["--model", bundledModelDir, "--quantize", "int4", "--quantize-group", "64"];
    const devices = (await cli(["devices", ...args])).stdout;
    const report = devices.slice(devices.indexOf("model "));
    expect(report).toMatch(/int4 \(quantized at load\)/);
    // The tsx CLI runs the server as a child of its own: a process group of its own (detached), killed as a group.
    const tsxCli = join(process.cwd(), "node_modules/tsx/dist/cli.mjs");
    const child = spawn(process.execPath, [tsxCli, "ts/cli/main.ts", "serve", "--port", "0", ...args], {
      cwd: process.cwd(),
      stdio: ["ignore", "ignore", "pipe"],
      detached: true,
    });
    let stderr = "";
    try {
      await new Promise<void>((resolve, reject) => {
        const timer = setTimeout(() => reject(new Error(`serve printed no weights report: ${stderr}`)), 60_000);
        child.stderr.on("data", (d: Buffer) => {
          stderr += d.toString();
          if (stderr.includes("int4 (quantized at load)") && stderr.includes("serving ")) {
            clearTimeout(timer);
            resolve();
          }
        });
        child.on("exit", (code) => reject(new Error(`serve exited ${code}: ${stderr}`)));
      });
    } finally {
      if (child.exitCode === null && child.signalCode === null) {
        const exited = new Promise((resolve) => child.once("exit", resolve));
        process.kill(-child.pid!, "SIGTERM");
        await exited;
      }
    }
    // The same lines devices --model prints for the same folder and options (the report's head and each format).
    for (const line of report.trimEnd().split("\n")) expect(stderr).toContain(line);
  });
});
