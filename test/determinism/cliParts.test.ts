import { describe, expect, it } from "vitest";
import { checkGolden, firstDivergence, hashTokens, makeGolden, parseGolden } from "../../ts/determinism/golden.js";
import { parsePromptsFile } from "../../ts/determinism/prompts.js";
import { comparePromptRuns, shuffled, summarize } from "../../ts/determinism/report.js";

describe("prompts file", () => {
  it("reads one prompt per line or JSONL with prompt / promptIds", () => {
    expect(parsePromptsFile("a b\n\nc\n")).toEqual([{ text: "a b" }, { text: "c" }]);
    expect(parsePromptsFile('{"prompt":"x"}\n{"promptIds":[1,2]}')).toEqual([{ text: "x" }, { promptIds: [1, 2] }]);
  });
  it("names the line of a malformed JSONL entry", () => {
    expect(() => parsePromptsFile('{"prompt":"x"}\n{"promptIds":[-1]}', "p.jsonl")).toThrow(/p.jsonl line 2: expected/);
    expect(() => parsePromptsFile('{"prompt":"x"}\n{oops', "p.jsonl")).toThrow(/p.jsonl line 2: invalid JSON/);
    expect(() => parsePromptsFile("\n \n", "p.txt")).toThrow(/p.txt has no prompts/);
  });
});

describe("hashes and golden files", () => {
  it("hashes token bytes and finds the first divergence", () => {
    expect(hashTokens([1, 2, 3])).toBe(hashTokens([1, 2, 3]));
    expect(hashTokens([1, 2, 3])).not.toBe(hashTokens([1, 2, 4]));
    expect(hashTokens([256])).not.toBe(hashTokens([1]));
    expect(firstDivergence([1, 2, 3], [1, 2, 3])).toBeNull();
    expect(firstDivergence([1, 2, 3], [1, 5, 3])).toBe(1);
    expect(firstDivergence([1, 2], [1, 2, 3])).toBe(2);
  });
  it("records and checks golden outputs, refusing mismatched parameters", () => {
    const params = { temperature: 0, maxTokens: 4 };
    const g = parseGolden(JSON.stringify(makeGolden("m", params, [[1, 2], [3]])), "g.json");
    expect(checkGolden(g, params, [[1, 2], [3]], "g.json")).toEqual([]);
    expect(checkGolden(g, params, [[1, 9], [3]], "g.json")).toEqual([{ index: 0, firstDivergence: 1 }]);
    expect(() => checkGolden(g, { temperature: 1, maxTokens: 4 }, [[1, 2], [3]], "g.json")).toThrow(/recorded with/);
    expect(() => parseGolden("nope", "g.json")).toThrow(/g.json: not a golden file/);
  });
});

describe("reports", () => {
  it("reports agreement, first divergence and summary stats", () => {
    const agree = comparePromptRuns(0, [
      { load: 1, tokens: [1, 2, 3], rollbacks: 0, recomputedTokens: 0 },
      { load: 8, tokens: [1, 2, 3], rollbacks: 1, recomputedTokens: 2, exactTokens: 1 },
    ]);
    const diverge = comparePromptRuns(1, [
      { load: 1, tokens: [4, 5, 6], rollbacks: 0, recomputedTokens: 0 },
      { load: 8, tokens: [4, 5, 7], rollbacks: 0, recomputedTokens: 0 },
      { load: 32, tokens: [4, 9, 7], rollbacks: 0, recomputedTokens: 0 },
    ]);
    expect(agree).toMatchObject({ agree: true, firstDivergence: null, distinct: 1, rollbacks: 1 });
    expect(diverge).toMatchObject({ agree: false, firstDivergence: 1, distinct: 3, divergentLoads: [8, 32] });
    expect(summarize([agree, diverge])).toEqual({ prompts: 2, runs: 5, divergences: 1, rollbacks: 1, recomputedTokens: 2, recomputedFraction: 2 / 15, exactFraction: 1 / 15 });
  });
  it("shuffles reproducibly", () => {
    const xs = Array.from({ length: 20 }, (_, i) => i);
    expect(shuffled(xs, 7)).toEqual(shuffled(xs, 7));
    expect(shuffled(xs, 7)).not.toEqual(xs);
    expect([...shuffled(xs, 7)].sort((a, b) => a - b)).toEqual(xs);
  });
});
