// Tokens per engine step (vLLM's iteration_tokens_total): StepTokenCounts' power-of-two bins against the plain rule,
// and a model step counting exactly its forward's rows (prompt tokens computed plus tokens sampled).
import { describe, expect, it } from "vitest";
import { StepTokenCounts } from "../../ts/engine/metrics.js";
import { ModelSlot, type SamplingOf } from "../../ts/engine/modelSlot.js";
import { Sequence } from "../../ts/engine/sequence.js";
import { PagedToyModel } from "../helpers/pagedToyModel.js";

/** The bin of a step of `tokens` tokens, written plainly: the least k with tokens <= 2^k. */
function plainBin(tokens: number): number {
  let k = 0;
  while (2 ** k < tokens) k++;
  return k;
}

function binsOf(steps: readonly number[]): number[] {
  const bins: number[] = [];
  for (const t of steps.filter((t) => t > 0)) {
    const k = plainBin(t);
    while (bins.length <= k) bins.push(0);
    bins[k]++;
  }
  return bins;
}

const greedy: SamplingOf = () => ({
  sampling: { temperature: 0, topK: 0, topP: 1, seed: 0 },
  numTopLogprobs: 0,
  captureHiddenLayers: null,
  confidenceTopK: 0,
  needsLogits: false,
});

describe("StepTokenCounts", () => {
  it("bins steps by the least power of two at or above their tokens; a step of none is not a step", () => {
    const steps = [1, 2, 3, 4, 5, 8, 9, 16, 17, 1000, 1024, 1025, 0];
    const c = new StepTokenCounts();
    for (const t of steps) c.record(t);
    expect(c.bins).toEqual(binsOf(steps));
    expect(c.bins.slice(0, 6)).toEqual([1, 1, 2, 2, 2, 1]); // 1 | 2 | 3,4 | 5,8 | 9,16 | 17
    expect(c.sum).toBe(steps.reduce((a, b) => a + b, 0));
  });

  it("a model step counts its forward's rows: prompt tokens computed plus tokens sampled", async () => {
    const scheduler = { maxBatchTokens: 8, maxBatchSeqs: 16, policy: "fcfs" as const, agingTokensPerSecond: 0 };
    const slot = new ModelSlot("toy", new PagedToyModel(64, 4), null, "fast", scheduler, {
      verifyWindow: 8,
      verifyGroup: 2,
    });
    const prompts = [[5, 6, 7, 8, 9, 10, 11], [9, 10, 11], [20]]; // 11 prompt tokens over 8-token steps: chunked
    for (const [i, p] of prompts.entries()) {
      const seq = new Sequence(i + 1, p, p.length, 4, i + 1);
      seq.maxCompletionTokens = 6;
      slot.addWaiting(seq);
    }
    const perStep: number[] = [];
    for (let step = 0; slot.hasWork; step++) {
      const out = await slot.step(step, step, greedy);
      perStep.push(out.promptTokens + out.decoded.seqs.length);
      for (let i = 0; i < out.decoded.seqs.length; i++)
        if (out.decoded.ends[i] !== null) slot.finish(out.decoded.seqs[i]);
    }
    const m = slot.metrics();
    expect(m.stepTokenBins).toEqual(binsOf(perStep));
    // The forwards' rows: the 11 prompt positions, and each sequence's generated tokens but the 6th (never fed back).
    expect(m.stepTokensSum).toBe(11 + 3 * 5);
  });
});
