// bench:throughput against llama.cpp's batched decoding (issue 47): how a round's arrival times split into prefill
// and decode rates (scripts/bench/tokenTimes.ts), the flags refused by name, and the bench end to end on a tiny
// generated checkpoint with the peer on: the GGUF export, one node-llama-cpp context of N sequences, every sequence
// delivering its tokens, rows with both sides and the ratio. No speed is asserted: figures belong to benchmarks.
import { execFile } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import { afterAll, describe, expect, it } from "vitest";
import { roundSample } from "../../scripts/bench/tokenTimes.js";
import { fixtureDir } from "../model/fixtureCache.js";

const exec = promisify(execFile);
const bench = (args: string[], env: NodeJS.ProcessEnv = process.env) =>
  exec("npx", ["tsx", "scripts/bench/throughput.ts", ...args], { cwd: process.cwd(), timeout: 240_000, env });

describe("roundSample", () => {
  it("times decode from the last stream's first token and counts only the tokens after it", () => {
    // stream A: first token at 10 ms, then 20 (while B still prefills), 50; stream B: first at 30, then 40, 50
    const s = roundSample(
      2,
      4,
      3,
      { firstAt: [10, 30], firstCpuSeconds: [1.01, 1.02], tokenAt: [10, 20, 30, 40, 50, 50] },
      { start: 0, end: 50, cpuStart: 1, cpuEnd: 1.05 },
    );
    expect(s.prefillTokensPerSecond).toBeCloseTo((2 * 4) / 0.03);
    // A's token at 20 ms came before the window: 3 tokens (40, 50, 50) in the 20 ms after B's first
    expect(s.decodeTokensPerSecond).toBeCloseTo(3 / 0.02);
    expect(s.decodeTokensPerCpuSecond).toBeCloseTo(3 / 0.03);
    expect(s.tokensPerSecond).toBeCloseTo(6 / 0.05);
    expect(s.tokensPerCpuSecond).toBeCloseTo(6 / 0.05);
  });

  it("refuses a round where a stream came up short", () => {
    expect(() =>
      roundSample(
        2,
        4,
        3,
        { firstAt: [10, 30], firstCpuSeconds: [0, 0], tokenAt: [10, 20, 30, 40, 50] },
        {
          start: 0,
          end: 50,
          cpuStart: 0,
          cpuEnd: 1,
        },
      ),
    ).toThrow(/2 first tokens, 5 tokens \(expected 6\)/);
  });
});

describe("bench:throughput's peer", () => {
  // the GGUF cache goes under the child's temp dir, removed afterwards
  const tmp = mkdtempSync(join(tmpdir(), "deliberate-throughput-peer-"));
  afterAll(() => rmSync(tmp, { recursive: true, force: true }));

  it("refuses contradictory or meaningless flags by name before loading anything", async () => {
    for (const [args, msg] of [
      [["--peer", "--no-peer"], /--peer and --no-peer: give one/],
      [["--peer", "--device", "cuda"], /--peer with --device cuda/],
      [["--max-tokens", "1"], /--max-tokens 1: expected an integer >= 2/],
      [["--threads", "0"], /--threads 0: expected an integer >= 1/],
      [["--batches", "16,x"], /--batches x: expected an integer >= 1/],
    ] as const)
      await expect(bench([...args])).rejects.toMatchObject({ stderr: expect.stringMatching(msg) });
  });

  it("runs ours and llama.cpp's batched sequences on a tiny checkpoint and reports both with the ratio", async () => {
    const dir = await fixtureDir("llama", "f32");
    const { stdout } = await bench(
      [
        ...["--model", dir, "--batches", "1,3", "--prompt-tokens", "5", "--max-tokens", "4"],
        ...["--repeats", "2", "--threads", "1", "--peer", "--json"],
      ],
      { ...process.env, TMPDIR: tmp },
    );
    const rows = stdout
      .trim()
      .split("\n")
      .map((l) => JSON.parse(l));
    expect(rows.map((r) => r.batch)).toEqual([1, 3]);
    for (const r of rows) {
      expect(r).toMatchObject({ threads: 1, promptTokens: 5, maxTokens: 4, repeats: 2 });
      expect(r.peer).toMatchObject({ engine: "llama.cpp (node-llama-cpp, CPU)", weights: "as stored" });
      for (const side of [r, r.peer])
        for (const k of ["tokensPerSecond", "prefillTokensPerSecond", "decodeTokensPerSecond"])
          expect(side[k]).toBeGreaterThan(0);
      expect(r.decodeRatio).toBeCloseTo(r.decodeTokensPerSecond / r.peer.decodeTokensPerSecond, 2);
      expect(r.decodeRatioRange[0]).toBeLessThanOrEqual(r.decodeRatioRange[1]);
    }
  }, 240_000);
});
