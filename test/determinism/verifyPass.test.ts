// The verify pass's fixed shape (pure functions, no model): always `group` rows of exactly `window` tokens on the
// fixed schedule; pads and dummy rows only ever touch scratch pages; the accepted prefix stops at the first mismatch.
import { describe, expect, it } from "vitest";
import { FIXED_SCHEDULE } from "../../ts/engine/kernelSchedule.js";
import { acceptedCandidates, buildVerifyBatch, PAD_TOKEN, scratchPagesPerRow } from "../../ts/engine/verifier/pass.js";

const g = { window: 8, group: 3, pageSize: 4 };
const sampling = { temperature: 0, topK: 0, topP: 1, seed: 1 };
const scratch = [
  [100, 101, 102],
  [103, 104, 105],
  [106, 107, 108],
];

describe("verify pass shape", () => {
  it("pads every row to the window and fills the group with dummy rows on scratch pages", () => {
    expect(scratchPagesPerRow(g)).toBe(3);
    // A row of 3 tokens from position 9 (pages 0..2 cover positions 0..11): pads at 12..16 go to scratch.
    const one = buildVerifyBatch(
      g,
      [{ tokens: [5, 6, 7], startPos: 9, blockTable: [10, 11, 12], sampling, numTopLogprobs: 2 }],
      scratch,
    );
    expect(one.gemmSplitK).toBe(FIXED_SCHEDULE.gemmSplitK);
    expect(one.kvSplits).toBe(FIXED_SCHEDULE.kvSplits);
    expect(one.sequences).toHaveLength(3);
    for (const s of one.sequences) {
      expect(s.tokens).toHaveLength(8);
      expect(s.emitAll).toBe(true);
      expect(s.emitToken).toBe(true);
      expect(s.fixedSchedule).toBe(true);
    }
    expect([...one.sequences[0].tokens]).toEqual([5, 6, 7, PAD_TOKEN, PAD_TOKEN, PAD_TOKEN, PAD_TOKEN, PAD_TOKEN]);
    expect([...one.sequences[0].blockTable]).toEqual([10, 11, 12, 100, 101]); // positions 9..16
    expect(one.sequences[1].startPos).toBe(0);
    expect([...one.sequences[1].blockTable]).toEqual([103, 104, 105]);
    expect([...one.sequences[2].blockTable]).toEqual([106, 107, 108]);
    // A full row needs no scratch; the token count of the pass never changes.
    const full = buildVerifyBatch(
      g,
      [0, 1, 2].map((r) => ({
        tokens: [1, 2, 3, 4, 5, 6, 7, 8],
        startPos: 3,
        blockTable: [r, r + 10, r + 20],
        sampling,
        numTopLogprobs: 0,
      })),
      scratch,
    );
    expect(full.sequences.map((s) => s.tokens.length)).toEqual([8, 8, 8]);
    expect([...full.sequences[2].blockTable]).toEqual([2, 12, 22]);
    expect(() => buildVerifyBatch(g, [], scratch)).toThrow(/0 rows/);
  });

  it("builds only the real rows and tokens when the backend does not need the fixed shape (CPU)", () => {
    const rows = [
      { tokens: [5, 6, 7], startPos: 9, blockTable: [10, 11, 12], sampling, numTopLogprobs: 2 },
      { tokens: [1, 2, 3, 4, 5, 6, 7, 8], startPos: 3, blockTable: [20, 21, 22], sampling, numTopLogprobs: 0 },
    ];
    const b = buildVerifyBatch(g, rows, scratch, undefined, false);
    expect(b.gemmSplitK).toBe(FIXED_SCHEDULE.gemmSplitK);
    expect(b.kvSplits).toBe(FIXED_SCHEDULE.kvSplits);
    expect(b.sequences.map((s) => [...s.tokens])).toEqual([
      [5, 6, 7],
      [1, 2, 3, 4, 5, 6, 7, 8],
    ]);
    expect(b.sequences.map((s) => [...s.blockTable])).toEqual([
      [10, 11, 12],
      [20, 21, 22],
    ]); // no scratch pages
    expect(b.sequences.every((s) => s.emitAll && s.emitToken)).toBe(true);
  });

  it("accepts candidates up to the first mismatch", () => {
    expect(acceptedCandidates([4, 5, 6], Int32Array.of(4, 5, 6, 9))).toBe(3);
    expect(acceptedCandidates([4, 5, 6], Int32Array.of(4, 7, 6, 9))).toBe(1);
    expect(acceptedCandidates([4], Int32Array.of(3, 0))).toBe(0);
    expect(acceptedCandidates([], Int32Array.of(3))).toBe(0);
  });
});
