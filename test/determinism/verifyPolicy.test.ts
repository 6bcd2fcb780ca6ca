// The pure rules of when decode-verify-rollback's fixed-schedule work rides in a step (ts/engine/verifier/policy.ts).
import { describe, expect, it } from "vitest";
import { exactDecodesFree, fusedRowCount, type FusedStep } from "../../ts/engine/verifier/policy.js";

const rows = (n: number, rowTokens = 8, readySince = 10) =>
  Array.from({ length: n }, () => ({ rowTokens, readySince }));
// CUDA-like fast schedule: split K up to 64 tokens (4 here; CUDA's is 8), 1 beyond.
const cudaSplitK = (scheduled: number) => (extra: number) => (scheduled + extra <= 64 ? 4 : 1);
const step = (over: Partial<FusedStep> = {}): FusedStep => ({
  ready: rows(3),
  scheduledTokens: 10,
  tokenBudget: 2048,
  gemmSplitKWith: cudaSplitK(10),
  othersDecoding: true,
  group: 4,
  maxWaitSteps: 8,
  step: 12,
  ...over,
});

describe("fusedRowCount", () => {
  it("rides every ready row at once when the step's GEMMs run splitK 1 anyway, within the token budget", () => {
    expect(fusedRowCount(step({ scheduledTokens: 100, gemmSplitKWith: cudaSplitK(100) }))).toBe(3);
    expect(
      fusedRowCount(
        step({ ready: rows(10, 32), scheduledTokens: 100, gemmSplitKWith: cudaSplitK(100), tokenBudget: 200 }),
      ),
    ).toBe(3);
    // At least one row even when the scheduled tokens fill the budget.
    expect(fusedRowCount(step({ ready: rows(2, 32), scheduledTokens: 2048, gemmSplitKWith: cudaSplitK(2048) }))).toBe(
      1,
    );
  });

  it("rides rows that push the step past the split-K range themselves", () => {
    expect(fusedRowCount(step({ ready: rows(2, 32), scheduledTokens: 10 }))).toBe(2); // 74 tokens: splitK 1
  });

  it("on a split-K step waits for a group, unless nothing else decodes, nothing else is scheduled, or the oldest waited", () => {
    expect(fusedRowCount(step())).toBe(0);
    expect(fusedRowCount(step({ ready: rows(4) }))).toBe(4);
    expect(fusedRowCount(step({ othersDecoding: false }))).toBe(3);
    expect(fusedRowCount(step({ scheduledTokens: 0, gemmSplitKWith: cudaSplitK(0) }))).toBe(3);
    expect(fusedRowCount(step({ step: 18 }))).toBe(3);
    expect(fusedRowCount(step({ ready: [] }))).toBe(0);
  });
});

describe("exactDecodesFree", () => {
  it("is free on a splitK-1 step anywhere, and on an all-deterministic step only off the GPU", () => {
    expect(exactDecodesFree(1, false, "cuda")).toBe(true);
    expect(exactDecodesFree(4, true, "cuda")).toBe(false);
    expect(exactDecodesFree(4, true, "cpu")).toBe(true);
    expect(exactDecodesFree(2, false, "cpu")).toBe(false);
    expect(exactDecodesFree(2, true, undefined)).toBe(true);
  });
});
