// When consumers see a step's deltas: by default after the engine has dispatched the next step's forward (their
// work overlaps the native step), with eagerDeltas before the next step is scheduled (a program steering from
// deltas acts in the very next step). Either way every delta arrives, in order, and the last ones arrive at once.
import { describe, expect, it } from "vitest";
import { Engine } from "../../ts/engine/engine.js";
import { PagedToyModel, toyCodec, toyReference } from "../helpers/pagedToyModel.js";

async function forwardsSeenAt(eagerDeltas: boolean): Promise<{ seen: number[]; tokens: number[]; total: number }> {
  const model = new PagedToyModel(64, 4);
  const engine = new Engine({ models: { model, tokenizer: toyCodec } });
  try {
    const h = engine.submit({ prompt: [5, 9, 11], maxTokens: 6, temperature: 0, ignoreEos: true, eagerDeltas });
    const seen: number[] = [];
    const tokens: number[] = [];
    for await (const d of h) {
      seen.push(model.calls.length); // forwards dispatched when this delta reached its consumer
      tokens.push(...d.tokens);
    }
    return { seen, tokens, total: model.calls.length };
  } finally {
    await engine.dispose();
  }
}

describe("delta delivery", () => {
  it("default: a step's deltas reach consumers once the next forward is dispatched; the last at once", async () => {
    const { seen, tokens, total } = await forwardsSeenAt(false);
    expect(tokens).toEqual(toyReference([5, 9, 11], 6, { temperature: 0, seed: 0 }, false));
    expect(total).toBe(6); // one prefill step that samples the first token, then 5 decode steps
    // The delta of step k (1-based) is seen after forward k+1 started (the last step has none: it is seen at once);
    // a fallback timer delivers it earlier if the next dispatch is slow in coming (a busy machine), never later.
    seen.forEach((s, i) => expect(s === Math.min(i + 2, 6) || s === i + 1, `delta ${i} seen after ${s} forwards`).toBe(true));
    expect(seen.slice(0, 5).filter((s, i) => s === i + 2).length).toBeGreaterThan(0);
    expect(seen[5]).toBe(6);
  });

  it("eagerDeltas: before the next step is scheduled", async () => {
    const { seen, tokens } = await forwardsSeenAt(true);
    expect(tokens).toEqual(toyReference([5, 9, 11], 6, { temperature: 0, seed: 0 }, false));
    expect(seen).toEqual([1, 2, 3, 4, 5, 6]);
  });
});
