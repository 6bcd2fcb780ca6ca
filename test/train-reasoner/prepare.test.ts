// Training data: every problem's full thought with the loss on the assistant turn, and probe examples (thought cut
// inside its checks, the probe suffix CotProbe appends, loss on the answer only).
import { mkdtempSync, readFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { loadChatTokenizer } from "../../scripts/train-reasoner/chatTokenizer.js";
import { prepareSet, probeCompletion } from "../../scripts/train-reasoner/prepare.js";
import { modelRecipe } from "../../scripts/train-reasoner/recipe.js";
import { writeModelFiles } from "../../scripts/train-reasoner/writeModelFiles.js";
import { defaultProbeSuffix } from "../../ts/programs/answers.js";
import { problemFromExpression, problemSet, renderThought, thoughtLines } from "../../ts/tasks/arith/index.js";
import { Rng } from "../../ts/tasks/arith/rng.js";

const dir = mkdtempSync(join(tmpdir(), "tiny-reasoner-prep-"));
writeModelFiles(dir, modelRecipe);
const tok = loadChatTokenizer(dir);

describe("probe examples", () => {
  it("cut the thought at or after the step that yields the answer, then CotProbe's suffix and the answer", () => {
    const rng = new Rng(3);
    let midLine = 0;
    for (const p of [problemFromExpression("12*(7+5)-9", 3), ...problemSet({ split: "train", n: 200, seed: 5 })]) {
      const lines = thoughtLines(p, rng);
      const head = renderThought({ steps: lines.steps, checks: [] });
      const full = renderThought(lines);
      const c = probeCompletion(p, lines, rng);
      const pre = c.slice(0, c.indexOf("</think>"));
      // The cut is `pre`, or `pre` less the newline the suffix adds to a cut inside a line.
      const cut = [pre, pre.replace(/\n$/, "")].find(
        (x) => full.startsWith(x) && x.length >= head.length && x + defaultProbeSuffix(x) + `${p.answer}}` === c,
      );
      expect(cut, c).toBeDefined();
      if (!cut!.endsWith("\n")) midLine++;
    }
    expect(midLine).toBeGreaterThan(50);
  });
});

describe("prepareSet", () => {
  it("writes full thoughts with the loss on the assistant turn and probe examples with the loss on the answer", () => {
    const path = join(dir, "set.bin");
    const r = prepareSet(tok, "train", 300, 1, modelRecipe.maxPos, path, 0.5);
    expect(r.probes).toBeGreaterThan(100);
    expect(r.probes).toBeLessThan(200);
    expect(r.sequences).toBe(300 + r.probes);
    const b = readFileSync(path);
    expect(b.toString("ascii", 0, 4)).toBe("TRD1");
    expect(b.readUInt32LE(4)).toBe(r.sequences);
    let o = 8;
    let probes = 0;
    for (let i = 0; i < r.sequences; i++) {
      const n = b.readUInt16LE(o);
      const lossFrom = b.readUInt16LE(o + 2);
      const ids = Array.from({ length: n }, (_, k) => b.readUInt16LE(o + 4 + 2 * k));
      o += 4 + 2 * n;
      const before = tok.decode(ids.slice(0, lossFrom));
      const trained = tok.decode(ids.slice(lossFrom));
      if (before.includes("<think>")) {
        probes++;
        expect(before.endsWith("</think> \\boxed{")).toBe(true);
        expect(trained).toMatch(/^-?\d+\}<\|eos\|>$/);
      } else {
        expect(before.endsWith("<|assistant|>")).toBe(true);
        expect(trained).toMatch(/^<think>(.+\n)+<\/think> \\boxed\{-?\d+\}<\|eos\|>$/);
      }
    }
    expect(probes).toBe(r.probes);
    expect(o).toBe(b.length);
  });

  it("cuts a share of the problems after their steps: no check lines, no answer, no eos", () => {
    const path = join(dir, "steps.bin");
    const full = prepareSet(tok, "train", 300, 1, modelRecipe.maxPos, join(dir, "full.bin"));
    const r = prepareSet(tok, "train", 300, 1, modelRecipe.maxPos, path, 0, 0.5);
    expect(r.sequences).toBe(300);
    expect(r.tokens).toBeLessThan(full.tokens);
    const b = readFileSync(path);
    let o = 8;
    let cut = 0;
    for (let i = 0; i < r.sequences; i++) {
      const n = b.readUInt16LE(o);
      const ids = Array.from({ length: n }, (_, k) => b.readUInt16LE(o + 4 + 2 * k));
      const trained = tok.decode(ids.slice(b.readUInt16LE(o + 2)));
      o += 4 + 2 * n;
      if (trained.includes("</think>")) expect(trained).toMatch(/^<think>(.+\n)+<\/think> \\boxed\{-?\d+\}<\|eos\|>$/);
      else {
        cut++;
        expect(trained).toMatch(/^<think>([^\n]+=-?\d+\n)+$/);
        expect(trained).not.toContain("check");
      }
    }
    expect(cut).toBeGreaterThan(100);
    expect(cut).toBeLessThan(200);
  });
});
