// The engine thread's XGrammar host (host.ts LocalHost): a matcher whose sequence ends while XGrammar is still making
// it (a late mask's prepare in flight when its step failed, ModelSlot.fillLateMasks) is freed once made, not kept for
// good in the wasm heap; the same when the host is terminated meanwhile. A step's accepts stop at the format's end (a
// stop token) and at a token outside it, as XGrammar's own isTerminated says. A toy vocabulary, real XGrammar.
import { describe, expect, it } from "vitest";
import { grammarSource } from "../../ts/grammar/grammars.js";
import { LocalHost } from "../../ts/grammar/host.js";
import { toolCallFormat } from "../../ts/grammar/toolGrammar.js";
import type { StructuredFormat } from "../../ts/grammar/types.js";

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

// Every kind of format the engine compiles, on a vocabulary of one token per printable character, newline and eos
// (the last): a random walk of steps (allowed tokens, a stop where allowed, a refused token, runs past a stop,
// rollbacks and resets) keeps LocalHost's own record of each matcher's end equal to XGrammar's isTerminated.
describe("LocalHost's record of a matcher's end, for every kind of format", () => {
  const TOKENS: string[] = [];
  for (let c = 32; c < 127; c++) TOKENS.push(String.fromCharCode(c));
  TOKENS.push("\n", "");
  const EOS = TOKENS.length - 1;
  const ARGS = { type: "object", properties: { a: { type: "integer" } }, required: ["a"], additionalProperties: false };
  const formats: Array<[string, () => Promise<StructuredFormat>]> = [
    [
      "json_schema",
      async () => ({ type: "json_schema", schema: { ...ARGS, properties: { a: { enum: ["x", "y"] } } } }),
    ],
    ["json_object", async () => ({ type: "json_object" })],
    ["regex", async () => ({ type: "regex", pattern: "(ab|c)+d?" })],
    ["choice", async () => ({ type: "choice", choices: ["yes", "no", "n"] })],
    ["grammar", async () => ({ type: "grammar", grammar: 'root ::= "a" root | "b"' })],
    [
      "tool calls (auto: free text or a call, hermes)",
      () =>
        toolCallFormat({
          syntax: "hermes",
          choice: "auto",
          parallel: true,
          openerWritable: true,
          tools: [{ name: "f", parameters: ARGS, field: "tools[0].function.parameters" }],
        }),
    ],
    [
      "a forced tool call (mistral)",
      () =>
        toolCallFormat({
          syntax: "mistral",
          choice: "forced",
          parallel: false,
          openerWritable: true,
          tools: [{ name: "f", parameters: ARGS, field: "tools[0].function.parameters" }],
        }),
    ],
  ];

  it.each(formats)("%s", async (_, make) => {
    const host = new LocalHost({ tokens: TOKENS, vocabType: "raw", prependSpace: false, think: null }, TOKENS.length, [
      EOS,
    ]);
    const matchers = (host as unknown as { matcherById: Map<number, { isTerminated(): boolean }> }).matcherById;
    try {
      await host.compile(1, grammarSource(await make(), "request.structured"));
      let seed = 7;
      const rand = (n: number) => {
        // mulberry32
        let t = (seed = (seed + 0x6d2b79f5) | 0);
        t = Math.imul(t ^ (t >>> 15), t | 1);
        t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
        return ((((t ^ (t >>> 14)) >>> 0) / 4294967296) * n) | 0;
      };
      const allowed = (mask: Int32Array) => TOKENS.map((_, t) => t).filter((t) => (mask[t >> 5] >>> (t & 31)) & 1);
      let r = await host.step({ mid: 1, gid: 1, reset: false, rollback: 0, accept: [], mask: true });
      let taken = 0; // tokens the matcher holds since its last reset (a rollback may undo as many)
      let stops = 0;
      for (let i = 0; i < 600; i++) {
        const op = { mid: 1, gid: 1, reset: false, rollback: 0, accept: [] as number[], mask: true };
        const roll = rand(40);
        // Past the end only a rollback or a reset goes on; after a refused token the next step asks for the mask.
        if (roll === 0 || (r.terminated && roll < 20)) op.reset = true;
        else if ((roll === 1 && taken > 0) || r.terminated) op.rollback = 1 + rand(Math.min(taken, 3));
        else if (r.mask !== null) {
          const ok = allowed(r.mask);
          // Toward the end half the time (eos, else a closing character), so the walk ends the format often.
          const closing = [EOS, ...["}", "]", '"'].map((c) => TOKENS.indexOf(c))].filter((t) => ok.includes(t));
          op.accept.push(closing.length > 0 && rand(2) === 0 ? closing[0] : ok[rand(ok.length)]);
          // Sometimes more after it: a refused token, or tokens past a stop, which are not taken.
          if (rand(8) === 0) op.accept.push(rand(TOKENS.length), rand(TOKENS.length));
        }
        r = host.stepNow(op)!;
        expect(r.terminated, `step ${i}`).toBe(matchers.get(1)!.isTerminated());
        taken = (op.reset ? 0 : taken - op.rollback) + r.accepted;
        if (r.terminated) stops++;
      }
      expect(stops).toBeGreaterThan(3); // the walk reached the format's end, more than once
    } finally {
      host.terminate();
    }
  });
});
