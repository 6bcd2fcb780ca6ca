// The C++ trainer's self-tests: every parameter's backward pass against finite differences (double build), and
// the packed AVX2 GEMM against a double reference. Compiling both variants takes most of this file's time.
import { execFile } from "node:child_process";
import { promisify } from "node:util";
import { beforeAll, describe, expect, it } from "vitest";
import { buildTrainerAsync } from "../../scripts/train-reasoner/buildTrainer.js";
import { loadChatTokenizer } from "../../scripts/train-reasoner/chatTokenizer.js";
import { generateWithTrainer, recipeOfConfig } from "../../scripts/train-reasoner/trainerCli.js";
import { bundledModelDir } from "../../ts/bundledModel.js";

const run = promisify(execFile);
let f64 = "";
let f32 = "";

beforeAll(async () => {
  [f64, f32] = await Promise.all([buildTrainerAsync("test-f64"), buildTrainerAsync("test-f32")]);
}, 600_000); // two -O3 compiles; slow on a busy 2-core CI box

describe("tiny-reasoner trainer", () => {
  it("backward passes match central finite differences for every tensor", async () => {
    const { stdout } = await run(f64, ["gradcheck", "--threads", "2"]);
    expect(stdout).toMatch(/gradcheck: 1592 parameters, worst relative error .*PASS/);
    // Every tensor is covered (a zero gradient would pass a relative check vacuously; gradcheck rejects it).
    expect(stdout.match(/ ok$/gm)?.length).toBe(21);
  }, 600_000);

  it("GEMM and SwiGLU match double references (all transposes, ragged shapes, K chunks, saturated sigmoids)", async () => {
    const { stdout } = await run(f32, ["kernelcheck", "--threads", "2"]);
    expect(stdout).toContain("gemmcheck: PASS");
    expect(stdout).toMatch(/swiglucheck: .* PASS/);
  });

  it("samples within the nucleus: a tiny top-p is greedy, top-p 1 is plain temperature sampling", async () => {
    const tok = loadChatTokenizer(bundledModelDir);
    const m = recipeOfConfig(bundledModelDir);
    const prompts = ["What is 37*(4+15)-8?", "What is 906-(52+7)*3?"].map((q) =>
      tok.encodeChat([{ role: "user", content: q }] as never, true),
    );
    const o = { samples: 8, seed: 3, maxNew: 96, eos: tok.tokenId("<|eos|>") };
    const greedy = await generateWithTrainer(f32, bundledModelDir, m, prompts, { ...o, samples: 1, temperature: 0 });
    const nucleus = await generateWithTrainer(f32, bundledModelDir, m, prompts, { ...o, temperature: 2, topP: 1e-6 });
    nucleus.forEach((ids, i) => expect(ids).toEqual(greedy[Math.floor(i / o.samples)]));
    const plain = await generateWithTrainer(f32, bundledModelDir, m, prompts, { ...o, temperature: 2 });
    expect(plain.some((ids, i) => ids.join() !== greedy[Math.floor(i / o.samples)].join())).toBe(true);
  });

  it("reports a bad invocation as an error, not a crash", async () => {
    await expect(
      run(f32, [
        "train",
        "--data",
        "/nonexistent.bin",
        "--val",
        "/nonexistent.bin",
        "--out",
        "/tmp/x",
        "--vocab",
        "8",
        "--hidden",
        "8",
        "--layers",
        "1",
        "--heads",
        "2",
        "--kv-heads",
        "1",
        "--head-dim",
        "4",
        "--ffn",
        "8",
      ]),
    ).rejects.toThrow(/cannot open dataset/);
  });
});
