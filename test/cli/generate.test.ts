// `deliberate generate` end to end: spawns the CLI on a fixture model.
import { execFile } from "node:child_process";
import { promisify } from "node:util";
import { describe, expect, it } from "vitest";
import { fixtureDir } from "../model/fixtureCache.js";
import { ReferenceModel } from "../model/reference.js";

const run = promisify(execFile);
const cli = (args: string[]) =>
  run("npx", ["tsx", "ts/cli/main.ts", ...args], { cwd: process.cwd(), timeout: 120_000 });

describe("deliberate generate", () => {
  it("--json prints the generated token ids and text; greedy ids match the reference", async () => {
    const dir = await fixtureDir("qwen2", "f32");
    const prompt = [5, 17, 300, 42, 9];
    const { stdout } = await cli([
      "generate",
      "--model",
      dir,
      "--prompt-ids",
      prompt.join(","),
      "--max-tokens",
      "6",
      "--temperature",
      "0",
      "--json",
    ]);
    const out = JSON.parse(stdout) as { tokens: number[]; text: string; finishReason: string };
    const ref = (await ReferenceModel.load(dir)).greedy(prompt, 6);
    // Generation may end early at an eos; compare up to there and up to the first near-tie of the reference.
    expect(out.tokens.length).toBeGreaterThan(0);
    const tie = ref.margins.findIndex((m) => m < 1e-3);
    const n = Math.min(out.tokens.length, tie < 0 ? Infinity : tie);
    expect(out.tokens.slice(0, n)).toEqual(ref.tokens.slice(0, n));
    expect(typeof out.text).toBe("string");
  });

  it("--quantize int8 / int4 load the linear weights quantized: greedy ids match the dequantized reference; others are refused by name", async () => {
    const dir = await fixtureDir("qwen2", "f32");
    const prompt = [5, 17, 300, 42, 9];
    const args = [
      "generate",
      "--model",
      dir,
      "--prompt-ids",
      prompt.join(","),
      "--max-tokens",
      "6",
      "--temperature",
      "0",
    ];
    const { stdout } = await cli([...args, "--json", "--quantize", "int8"]);
    const out = JSON.parse(stdout) as { tokens: number[] };
    const ref = (await ReferenceModel.load(dir, { quantizeInt8: true })).greedy(prompt, 6);
    const tie = ref.margins.findIndex((m) => m < 1e-3);
    const n = Math.min(out.tokens.length, tie < 0 ? Infinity : tie);
    expect(n).toBeGreaterThan(0);
    expect(out.tokens.slice(0, n)).toEqual(ref.tokens.slice(0, n));
    const int4 = JSON.parse((await cli([...args, "--json", "--quantize", "int4"])).stdout) as { tokens: number[] };
    const ref4 = (await ReferenceModel.load(dir, { quantizeInt4Group: 32 })).greedy(prompt, 6);
    const tie4 = ref4.margins.findIndex((m) => m < 1e-3);
    const n4 = Math.min(int4.tokens.length, tie4 < 0 ? Infinity : tie4);
    expect(n4).toBeGreaterThan(0);
    expect(int4.tokens.slice(0, n4)).toEqual(ref4.tokens.slice(0, n4));
    await expect(cli([...args, "--quantize", "int2"])).rejects.toMatchObject({
      stderr: expect.stringMatching(/--quantize must be int8, int4 or fp8, got 'int2'/),
    });
  });

  it("streams text for --prompt and fails with a clear message on bad flags", async () => {
    const dir = await fixtureDir("qwen2", "f32");
    const { stdout } = await cli(["generate", "--model", dir, "--prompt", "Hello", "--max-tokens", "3", "--seed", "1"]);
    expect(stdout.endsWith("\n")).toBe(true);
    await expect(cli(["generate", "--model", dir])).rejects.toThrow(/exactly one of --prompt TEXT or --prompt-ids/);
    await expect(cli(["generate", "--model", dir, "--prompt-ids", "1,x"])).rejects.toThrow(
      /--prompt-ids entry 1 is 'x'/,
    );
    await expect(cli(["generate", "--model", "/nonexistent", "--prompt", "a"])).rejects.toThrow(
      /nonexistent: model folder not found/,
    );
  });

  it("defaults to the bundled model and asks --prompt as a chat (--raw sends it as is)", async () => {
    const chat = await cli(["generate", "--prompt", "What is 3+4?", "--temperature", "0", "--json"]);
    expect((JSON.parse(chat.stdout) as { text: string }).text).toMatch(/\\boxed\{7\}$/);
    const raw = await cli([
      "generate",
      "--prompt",
      "What is 3+4?",
      "--raw",
      "--temperature",
      "0",
      "--max-tokens",
      "8",
      "--json",
    ]);
    expect((JSON.parse(raw.stdout) as { text: string }).text).not.toMatch(/\\boxed\{7\}/);
    await expect(cli(["generate", "--model", "models/tiny-reasonr", "--prompt", "a"])).rejects.toThrow(
      /models\/tiny-reasonr resolved against /,
    );
  });
});
