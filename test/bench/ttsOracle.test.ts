// The oracle replay's exact "right prefix" on the arithmetic task (scripts/bench/ttsOracle.ts): right arithmetic on a
// value the question's own solution computes is on track; right arithmetic on the wrong sub-expression is not.
import { describe, expect, it } from "vitest";
import { summarizeReplays } from "../../scripts/bench/ttsOracle.js";
import { legitimateValues, lineOnTrack, onTrackLabels, pathOnTrack } from "../../ts/tasks/arith/onTrack.js";

describe("tts oracle replay", () => {
  const legit = legitimateValues("12*(7+5)-9");
  it("takes every step's result and its partial products / sums, either operand order", () => {
    for (const v of [12, 144, 135]) expect(legit.has(v)).toBe(true);
    // 12*12 as partial products over the right operand's place: 12*10=120, 12*2=24.
    for (const v of [120, 24]) expect(legit.has(v)).toBe(true);
    expect(legit.has(84)).toBe(false); // 12*7: the wrong sub-expression
  });
  it("reads lines: wrong arithmetic, wrong sub-expression and a wrong boxed answer are off track", () => {
    expect(lineOnTrack("<think>7+5=12", legit, "135")).toBe(true);
    expect(lineOnTrack("7+5=13", legit, "135")).toBe(false);
    expect(lineOnTrack("12*7=84", legit, "135")).toBe(false);
    expect(lineOnTrack("check: 135+9=144", legit, "135")).toBe(true);
    expect(lineOnTrack("check: 135+9=145", legit, "135")).toBe(false);
    expect(lineOnTrack("</think> \\boxed{135}", legit, "135")).toBe(true);
    expect(lineOnTrack("</think> \\boxed{136}", legit, "135")).toBe(false);
    expect(lineOnTrack("", legit, "135")).toBe(true);
    expect(pathOnTrack(["7+5=12", "12*12=144", "144-9=135"], legit, "135")).toBe(true);
    expect(pathOnTrack(["7+5=12", "12*7=84"], legit, "135")).toBe(false);
  });
  it("labels a solution's steps for a PRM: the prefix on track, the answer line by the answer alone", () => {
    // a detour off track, then back: the steps after the detour stay bad, the right answer is good
    expect(
      onTrackLabels(["7+5=12", "12*7=84", "12*12=144", "144-9=135", "</think> \\boxed{135}"], legit, "135"),
    ).toEqual([true, false, false, false, true]);
    expect(onTrackLabels(["7+5=12", "12*12=144", "check: 144+1=146", "</think> \\boxed{136}"], legit, "135")).toEqual([
      true,
      true,
      false,
      false,
    ]);
    expect(onTrackLabels(["7+5=12", "12*12=144", "144-9=135", "</think> \\boxed{135}"], legit, "135")).toEqual([
      true,
      true,
      true,
      true,
    ]);
  });
  it("summarizes outcomes and where the last right prefix was pruned", () => {
    const base = { finished: 4, distinct: 2, oracle: false, majority: false };
    const s = summarizeReplays([
      { ...base, outcome: "right", lostAt: null, oracle: true, majority: true },
      { ...base, outcome: "pick", lostAt: null, oracle: true },
      { ...base, outcome: "pruned", lostAt: 3 },
      { ...base, outcome: "pruned", lostAt: 3 },
    ]);
    expect(s.picked).toBe(0.25);
    expect(s.oracle).toBe(0.5);
    expect(s.majority).toBe(0.25);
    expect(s.outcomes.pruned).toBe(0.5);
    expect(s.lostAt).toEqual({ 3: 2 });
  });
});
