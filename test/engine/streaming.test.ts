// Streaming: when consumers see a step's deltas: by default after the engine has dispatched the next step's forward (their
// work overlaps the native step), with eagerDeltas before the next step is scheduled (a program steering from
// deltas acts in the very next step). Either way every delta arrives, in order, and the last ones arrive at once.
import { describe, expect, it } from "vitest";
import { Engine } from "../../ts/engine/engine.js";
import { streamableEnd } from "../../ts/engine/sampleTracker.js";
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
    seen.forEach((s, i) =>
      expect(s === Math.min(i + 2, 6) || s === i + 1, `delta ${i} seen after ${s} forwards`).toBe(true),
    );
    expect(seen.slice(0, 5).filter((s, i) => s === i + 2).length).toBeGreaterThan(0);
    expect(seen[5]).toBe(6);
  });

  it("eagerDeltas: before the next step is scheduled", async () => {
    const { seen, tokens } = await forwardsSeenAt(true);
    expect(tokens).toEqual(toyReference([5, 9, 11], 6, { temperature: 0, seed: 0 }, false));
    expect(seen).toEqual([1, 2, 3, 4, 5, 6]);
  });
});

describe("streaming text with stop strings", () => {
  it("never splits a surrogate pair (an emoji) between two deltas, in the engine and in the shared rule", async () => {
    // A codec whose every token is an emoji (two UTF-16 code units) or a letter; stop "zz" holds back one unit.
    const EMOJI = ["😀", "🎉", "🚀", "a", "b"];
    const codec = {
      encode: (t: string) => [...t].map((c) => Math.max(0, EMOJI.indexOf(c))),
      createDetokenizer: () => ({ push: (id: number) => EMOJI[id % EMOJI.length], flush: () => "" }),
    };
    const model = new PagedToyModel(64, 4);
    const engine = new Engine({ models: { model, tokenizer: codec } });
    try {
      for (let seed = 0; seed < 8; seed++) {
        const h = engine.submit({
          prompt: [1, 2, 3],
          maxTokens: 24,
          temperature: 1,
          seed,
          ignoreEos: true,
          stop: "zz",
        });
        let text = "";
        for await (const d of h) {
          expect(/[\ud800-\udbff]$/.test(d.text), `delta ends inside a surrogate pair: ${JSON.stringify(d.text)}`).toBe(
            false,
          );
          expect(
            /^[\udc00-\udfff]/.test(d.text),
            `delta starts inside a surrogate pair: ${JSON.stringify(d.text)}`,
          ).toBe(false);
          text += d.text;
        }
        expect(text).toBe((await h.result).text);
      }
    } finally {
      await engine.dispose();
    }
    expect(streamableEnd("a😀", 1)).toBe(1); // cutting at 2 would split the emoji
    expect(streamableEnd("a😀b", 1)).toBe(3);
    expect(streamableEnd("a😀", 0)).toBe(3);
  });
});
