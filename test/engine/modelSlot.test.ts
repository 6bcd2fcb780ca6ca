// ModelSlot.step() on bare sequences, with no request, tracker or stepper: the model step alone schedules, pages,
// preempts, appends tokens and ends sequences at a stop id or their token limit, bitwise what the reference gives.
import { describe, expect, it } from "vitest";
import { ModelSlot, type SamplingOf, type SequenceOutput, type SlotStep } from "../../ts/engine/modelSlot.js";
import { Sequence } from "../../ts/engine/sequence.js";
import { PagedToyModel, TOY_EOS, toyReference } from "../helpers/pagedToyModel.js";

const greedy: SamplingOf = () => ({
  sampling: { temperature: 0, topK: 0, topP: 1, seed: 0 },
  numTopLogprobs: 0,
  captureHiddenLayers: null,
  confidenceTopK: 0,
  needsLogits: false,
});

function slotOf(numPages: number, maxBatchTokens = 64): ModelSlot {
  const scheduler = { maxBatchTokens, maxBatchSeqs: 16, policy: "fcfs" as const, agingTokensPerSecond: 0 };
  return new ModelSlot("toy", new PagedToyModel(numPages, 4), null, "fast", scheduler, {
    verifyWindow: 8,
    verifyGroup: 2,
  });
}

function sequence(id: number, prompt: number[], maxTokens: number, stopIds: number[] = []): Sequence {
  const seq = new Sequence(id, prompt, prompt.length, 4, id);
  seq.maxCompletionTokens = maxTokens;
  seq.stopIds = new Set(stopIds);
  return seq;
}

/** A step's final tokens per sequence, decodes and commits alike. */
function outputsOf(out: SlotStep): SequenceOutput[] {
  const { seqs, tokens, ends } = out.decoded;
  return [...seqs.map((seq, i) => ({ seq, tokens: [tokens[i]], end: ends[i] })), ...out.committed];
}

/** Steps until no sequence is left, finishing each as the step says; returns every output per sequence id. */
async function drain(slot: ModelSlot): Promise<{ outputs: Map<number, SequenceOutput[]>; preempted: number }> {
  const outputs = new Map<number, SequenceOutput[]>();
  for (let step = 0; slot.hasWork; step++) {
    if (step > 10_000) throw new Error("no progress");
    const out = await slot.step(step, step, greedy);
    expect(out.failed).toEqual([]);
    for (const o of outputsOf(out)) {
      outputs.set(o.seq.id, [...(outputs.get(o.seq.id) ?? []), o]);
      if (o.end !== null) slot.finish(o.seq);
    }
  }
  return { outputs, preempted: slot.metrics().preemptions };
}

describe("ModelSlot.step without requests", () => {
  it("appends each sequence's tokens and ends it at its limit ('length') or a stop id ('stop')", async () => {
    const slot = slotOf(64);
    const prompts = [[5, 6, 7], [9, 10, 11, 12, 13], [20]];
    const want = prompts.map((p) => toyReference(p, 12, { temperature: 0, seed: 0 }, false));
    // The third stops at the first token its reference makes after the third: that token is its stop id.
    const stopId = want[2][3];
    const seqs = [sequence(1, prompts[0], 12), sequence(2, prompts[1], 12), sequence(3, prompts[2], 12, [stopId])];
    for (const s of seqs) slot.addWaiting(s);
    const { outputs } = await drain(slot);
    for (const [i, seq] of seqs.entries()) {
      const outs = outputs.get(seq.id)!;
      const tokens = outs.flatMap((o) => o.tokens.map((t) => t.token));
      expect(seq.tokens.slice(seq.numPromptTokens)).toEqual(tokens);
      expect(outs.at(-1)!.end).toBe(i === 2 ? "stop" : "length");
      expect(outs.slice(0, -1).every((o) => o.end === null)).toBe(true);
      const stopAt = want[i].indexOf(stopId);
      expect(tokens).toEqual(i === 2 ? want[i].slice(0, stopAt + 1) : want[i]);
      expect(seq.status).toBe("finished");
    }
    expect(slot.metrics().kvPagesUsed).toBe(0);
  });

  it("preempts under a small pool and recomputes: every sequence still gets exactly its reference", async () => {
    const slot = slotOf(10, 16); // 40 KV slots for 4 sequences of up to 3 + 14 tokens
    const prompts = [
      [1, 2, 3],
      [4, 5, 6],
      [7, 8, 9],
      [10, 11, 12],
    ];
    const seqs = prompts.map((p, i) => sequence(i + 1, p, 14, [TOY_EOS]));
    for (const s of seqs) slot.addWaiting(s);
    const { outputs, preempted } = await drain(slot);
    expect(preempted).toBeGreaterThan(0);
    for (const [i, seq] of seqs.entries()) {
      const tokens = outputs.get(seq.id)!.flatMap((o) => o.tokens.map((t) => t.token));
      expect(tokens).toEqual(toyReference(prompts[i], 14, { temperature: 0, seed: 0 }));
    }
  });

  it("reports a sequence whose shared prompt is computed (computeLimit) once, and gives it no token before", async () => {
    const slot = slotOf(64);
    const seq = sequence(1, [3, 4, 5, 6, 7], 4);
    seq.computeLimit = 4;
    slot.addWaiting(seq);
    const first = await slot.step(0, 0, greedy);
    expect(outputsOf(first)).toEqual([]);
    expect(first.prefilled).toEqual([seq]);
    expect(seq.numComputedTokens).toBe(4);
    const second = await slot.step(1, 1, greedy);
    expect(second.prefilled).toEqual([]);
    expect(outputsOf(second).map((o) => o.seq)).toEqual([seq]);
  });

  it("a cancelled sequence takes no more tokens", async () => {
    const slot = slotOf(64);
    const seq = sequence(1, [3, 4], 8);
    slot.addWaiting(seq);
    await slot.step(0, 0, greedy);
    seq.cancelled = true;
    const out = await slot.step(1, 1, greedy);
    expect(outputsOf(out)).toEqual([]);
    expect(seq.numTokens).toBe(3);
  });
});
