// SampleTracker's text bookkeeping: the streamed deltas and the final text agree, stop strings that span tokens are
// cut (never streamed), and a long output (tracked as streamed pieces plus an unstreamed tail) comes out whole.
import { describe, expect, it } from "vitest";
import type { ResolvedParams } from "../../ts/engine/request.js";
import { SampleTracker } from "../../ts/engine/sampleTracker.js";
import { makeRng } from "../helpers/prng.js";

const params = (stop: string[], maxTokens = 1 << 20): ResolvedParams =>
  ({
    temperature: 0,
    topK: 0,
    topP: 1,
    seed: 0,
    maxTokens,
    stop,
    stopTokenIds: new Set<number>(),
    ignoreEos: true,
    logprobs: null,
    tokenLogprobs: null,
    captureHiddenLayer: null,
    probe: null,
    confidence: null,
    deterministic: false,
    structured: null,
  }) satisfies ResolvedParams;

/** A detokenizer that turns token id i into pieces[i]. */
const detok = (pieces: string[]) => ({ push: (id: number) => pieces[id]!, flush: () => "" });

describe("SampleTracker", () => {
  it("streams exactly the final text, cutting a stop string that spans tokens, for random pieces and stops", () => {
    const rng = makeRng(3);
    const alphabet = ["a", "b", "</", "ans", "wer>", "</answer>", " ", "xy", "é", "🙂", ""];
    for (let round = 0; round < 400; round++) {
      const stop = rng.next() < 0.5 ? ["</answer>"] : ["</answer>", "xyx", "b a"];
      const maxTokens = rng.int(1, 200);
      const t = new SampleTracker(0, params(stop, maxTokens), detok(alphabet));
      const deltas: string[] = [];
      let full = "";
      for (let n = 1; !t.finished; n++) {
        const id = rng.int(0, alphabet.length - 1);
        full += alphabet[id];
        deltas.push(t.add({ token: id, logprob: 0 }, n >= maxTokens ? "length" : null).text);
      }
      const out = t.output();
      expect(deltas.join(""), `round ${round}`).toBe(out.text);
      // The text is the generated text up to the earliest stop string, if one occurred.
      const cuts = stop.map((s) => full.indexOf(s)).filter((i) => i >= 0);
      const want = out.finishReason === "stop" ? full.slice(0, Math.min(...cuts)) : full;
      expect(out.text, `round ${round}`).toBe(want);
      for (const s of stop) expect(out.text.includes(s)).toBe(false);
    }
  });

  it("keeps a long output whole (50k tokens streamed in pieces) and still stops at the end", () => {
    const t = new SampleTracker(0, params(["</answer>"]), detok(["word ", "</ans", "wer>"]));
    let streamed = "";
    for (let i = 0; i < 50_000; i++) streamed += t.add({ token: 0, logprob: 0 }, null).text;
    streamed += t.add({ token: 1, logprob: 0 }, null).text + t.add({ token: 2, logprob: 0 }, null).text;
    expect(t.output().finishReason).toBe("stop");
    expect(t.output().text).toBe("word ".repeat(50_000));
    expect(streamed).toBe(t.output().text);
  });
});
