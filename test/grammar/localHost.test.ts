// The engine thread's XGrammar host (host.ts LocalHost): a matcher whose sequence ends while XGrammar is still making
// it (a late mask's prepare in flight when its step failed, ModelSlot.fillLateMasks) is freed once made, not kept for
// good in the wasm heap; the same when the host is terminated meanwhile. A step's accepts stop at the format's end (a
// stop token) and at a token outside it, as XGrammar's own isTerminated says. A toy vocabulary, real XGrammar.
import { describe, expect, it } from "vitest";
import { LocalHost } from "../../ts/grammar/host.js";

const VOCAB = ["<eos>", "{", "}", '"', "a", ":", "1"];
const vocab = { tokens: VOCAB, vocabType: "raw" as const, prependSpace: false, think: null };
const schema = { kind: "json_schema" as const, text: JSON.stringify({ type: "object" }) };
const op = (mid: number, accept: number[] = [], extra: { rollback?: number; reset?: boolean } = {}) => ({
  mid,
  gid: 1,
  reset: false,
  rollback: 0,
  accept,
  mask: true,
  ...extra,
});
const id = (t: string) => VOCAB.indexOf(t);

describe("LocalHost: matchers and the sequences that own them", () => {
  it("a matcher made normally is held until freed", async () => {
    const host = new LocalHost(vocab, VOCAB.length, [0]);
    try {
      await host.compile(1, schema);
      const r = await host.step(op(1));
      expect(r.mask).not.toBeNull();
      expect(host.matchersHeld).toBe(1);
      host.freeMatcher(1);
      expect(host.matchersHeld).toBe(0);
    } finally {
      host.terminate();
    }
  });

  it("freed while being made: the step rejects and nothing is held", async () => {
    const host = new LocalHost(vocab, VOCAB.length, [0]);
    try {
      await host.compile(1, schema);
      const step = host.step(op(2));
      host.freeMatcher(2); // the sequence ended before XGrammar answered
      await expect(step).rejects.toThrow(/freed while it was being made/);
      expect(host.matchersHeld).toBe(0);
      // A later matcher of the same grammar is unaffected.
      await host.step(op(3));
      expect(host.matchersHeld).toBe(1);
    } finally {
      host.terminate();
    }
  });

  it("terminated while being made: the step rejects and nothing is held", async () => {
    const host = new LocalHost(vocab, VOCAB.length, [0]);
    await host.compile(1, schema);
    const step = host.step(op(4));
    host.terminate(); // its grammars go too: XGrammar refuses the freed grammar, or the made matcher is freed
    await expect(step).rejects.toThrow();
    expect(host.matchersHeld).toBe(0);
  });

  it("accepts stop at the format's end and at a token outside it, at once and through a promise alike", async () => {
    const host = new LocalHost(vocab, VOCAB.length, [0]);
    // The host keeps whether each matcher terminated instead of asking XGrammar: it must agree with XGrammar's own.
    const matchers = (host as unknown as { matcherById: Map<number, { isTerminated(): boolean }> }).matcherById;
    const stepNow = (o: ReturnType<typeof op>) => {
      const r = host.stepNow(o)!;
      expect(r.terminated).toBe(matchers.get(o.mid)!.isTerminated());
      return r;
    };
    try {
      await host.compile(1, schema);
      // Made (step), then answered at once (stepNow): `{}` then the stop token ends the format; the `{` after it is
      // not taken, and is no refusal.
      expect((await host.step(op(5))).terminated).toBe(false);
      const done = stepNow(op(5, [id("{"), id("}"), 0, id("{")]));
      expect(done).toMatchObject({ accepted: 3, rejected: false, terminated: true, mask: null });
      expect(stepNow(op(5, [id("{")]))).toMatchObject({ accepted: 0, rejected: false, terminated: true, mask: null });
      // Rolled back over the stop token: open again, and a second stop token is refused by nothing.
      const back = stepNow(op(5, [], { rollback: 1 }));
      expect(back).toMatchObject({ accepted: 0, rejected: false, terminated: false });
      expect(back.mask).not.toBeNull();
      expect(stepNow(op(5, [0, 0]))).toMatchObject({ accepted: 1, rejected: false, terminated: true });
      // A token outside the format: refused, not terminated; what came before it was taken.
      const bad = await host.step(op(6, [id("{"), id("1")]));
      expect(bad).toMatchObject({ accepted: 1, rejected: true, terminated: false });
      // After a reset the matcher starts over.
      expect(stepNow(op(6, [id("{"), id("}")], { reset: true }))).toMatchObject({
        accepted: 2,
        rejected: false,
        terminated: false,
      });
    } finally {
      host.terminate();
    }
  });
});
