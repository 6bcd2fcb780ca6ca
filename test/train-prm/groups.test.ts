// The within-question ranking data and loss (scripts/train-prm/groups.ts, the trainer's TRD4 Bradley-Terry term):
// which groups are kept and how, the TRD4 layout, the trainer training on it (the pairwise term moves the right
// solution's score above the wrong one's), and the weighted vote the pick evaluation uses.
import { execFile } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { buildTrainerAsync } from "../../scripts/train-reasoner/buildTrainer.js";
import { loadChatTokenizer } from "../../scripts/train-reasoner/chatTokenizer.js";
import { modelFlags, recipeOfConfig } from "../../scripts/train-reasoner/trainerCli.js";
import { mixedGroups, votePick, writeGroupSet, type Group } from "../../scripts/train-prm/groups.js";
import { TINY_PRM } from "../../scripts/train-prm/train.js";
import { bundledModelDir } from "../../ts/bundledModel.js";

const run = promisify(execFile);
const tok = loadChatTokenizer(bundledModelDir);
const m = recipeOfConfig(bundledModelDir);
let bin = "";
const dir = mkdtempSync(join(tmpdir(), "prm-groups-"));

beforeAll(async () => {
  bin = await buildTrainerAsync("test-f32");
}, 600_000);
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const sample = (text: string, answer: string, correct: boolean) => ({ text, answer, correct });
const groups: Group[] = [
  {
    question: "What is 2+3*4?",
    answer: "14",
    level: 1,
    samples: [
      sample("3*4=12\n2+12=14\n\\boxed{14}", "14", true),
      sample("3*4=12\n2+12=14\n\\boxed{14}", "14", true), // a duplicate: kept once
      sample("2+3=5\n5*4=20\n\\boxed{20}", "20", false),
      sample("3*4=12\n12+2=14\n\\boxed{14}", "14", true),
    ],
  },
  // Only right answers: no pair, left out.
  { question: "What is 1+1?", answer: "2", level: 1, samples: [sample("1+1=2\n\\boxed{2}", "2", true)] },
  {
    question: "What is 9-5*2?",
    answer: "-1",
    level: 1,
    samples: [sample("5*2=10\n9-10=-1\n\\boxed{-1}", "-1", true), sample("9-5=4\n4*2=8\n\\boxed{8}", "8", false)],
  },
];

describe("within-question ranking groups (TRD4)", () => {
  it("keeps the questions with both outcomes, distinct solutions, right and wrong alternating up to the cap", () => {
    const g = mixedGroups(groups, 16);
    expect(g.map((x) => x.question)).toEqual(["What is 2+3*4?", "What is 9-5*2?"]);
    expect(g[0].solutions.map((s) => s.correct)).toEqual([true, false, true]);
    expect(g[0].solutions[0].steps).toEqual(["3*4=12", "2+12=14", "\\boxed{14}"]);
    // Checker labels ride along as the auxiliary targets.
    expect(g[0].solutions[1].labels).toEqual([true, true, true]);
    expect(mixedGroups(groups, 2)[0].solutions.map((s) => s.correct)).toEqual([true, false]);
  });

  it("writes each solution's group, last tag, good / bad ids and outcome after its TRD2 record", () => {
    const path = join(dir, "layout.bin");
    const w = writeGroupSet(tok, TINY_PRM, mixedGroups(groups, 16), m.maxPos, path);
    expect(w).toMatchObject({ groups: 2, sequences: 5, pairs: 2 + 1 });
    const b = readFileSync(path);
    expect(b.subarray(0, 4).toString("ascii")).toBe("TRD4");
    expect(b.readUInt32LE(4)).toBe(5);
    const tag = tok.tokenId(TINY_PRM.stepTag);
    let o = 8;
    const tail: Array<{ group: number; pos: number; outcome: number }> = [];
    for (let i = 0; i < 5; i++) {
      const len = b.readUInt16LE(o);
      const ids = Array.from({ length: len }, (_, j) => b.readUInt16LE(o + 4 + 2 * j));
      o += 4 + 2 * len;
      const n = b.readUInt16LE(o);
      o += 2 + 4 * n;
      const pos = b.readUInt16LE(o + 4);
      expect(ids[pos]).toBe(tag);
      expect(ids.lastIndexOf(tag)).toBe(pos);
      expect(b.readUInt16LE(o + 6)).toBe(tok.tokenId("+"));
      expect(b.readUInt16LE(o + 8)).toBe(tok.tokenId("-"));
      tail.push({ group: b.readUInt32LE(o), pos, outcome: b.readUInt16LE(o + 10) });
      o += 12;
    }
    expect(o).toBe(b.length);
    expect(tail.map((t) => t.group)).toEqual([0, 0, 0, 1, 1]);
    expect(tail.map((t) => t.outcome)).toEqual([1, 0, 1, 1, 0]);
  });

  it("the trainer's pairwise term orders a group's right solution above its wrong one", async () => {
    const data = join(dir, "train.bin");
    writeGroupSet(tok, TINY_PRM, mixedGroups(groups, 16), m.maxPos, data);
    const train = async (pairWeight: number) => {
      const out = join(dir, `w${pairWeight}.safetensors`);
      const { stdout } = await run(bin, [
        "train",
        ...["--data", data, "--val", data, "--out", out, "--init", join(bundledModelDir, "model.safetensors")],
        ...modelFlags(m),
        ...["--steps", "20", "--batch", "5", "--lr", "3e-3", "--warmup", "1", "--seed", "1", "--threads", "2"],
        ...["--val-seqs", "5", "--eval-every", "20", "--log-every", "20"],
        ...["--pair-weight", String(pairWeight), "--target-weight", "0"],
      ]);
      return { weights: readFileSync(out), stdout };
    };
    const ranked = await train(1);
    // All 3 pairs ordered right after 20 steps on them alone, the validation loss (the pairwise term alone: target
    // weight 0) near 0; the first step's pairwise loss (the reasoner's weights) was not.
    expect(ranked.stdout).toMatch(/val pairs ordered 1\.000/);
    expect(ranked.stdout).toMatch(/val 0\.0[0-4]/);
    expect(Number(/pairwise (\d+\.\d+)/.exec(ranked.stdout)?.[1])).toBeGreaterThan(0.1);
  }, 120_000);

  it("a grouped training set needs a grouped validation set (refused by name)", async () => {
    const data = join(dir, "train.bin");
    writeGroupSet(tok, TINY_PRM, mixedGroups(groups, 16), m.maxPos, data);
    const plain = join(dir, "plain.bin");
    const { writePrmSet } = await import("../../scripts/train-prm/data.js");
    writePrmSet(tok, TINY_PRM, mixedGroups(groups, 16)[0].solutions, m.maxPos, plain);
    await expect(
      run(bin, ["train", "--data", data, "--val", plain, "--out", join(dir, "x.safetensors"), ...modelFlags(m)]),
    ).rejects.toThrow(/both be grouped/);
  });

  it("votes by summed weight per answer: majority, score-weighted, best-of-N", () => {
    const sols = [
      { answer: "14", correct: true, score: 0.9 },
      { answer: "20", correct: false, score: 0.3 },
      { answer: "20", correct: false, score: 0.35 },
      { answer: null, correct: false, score: 1 },
    ];
    expect(votePick(sols, () => 1)).toBe(false);
    expect(votePick(sols, (s) => s)).toBe(true); // 0.9 > 0.65
    expect(votePick(sols, (s) => s ** 1000)).toBe(true);
    expect(votePick([], () => 1)).toBe(false);
  });
});
