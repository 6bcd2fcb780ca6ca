// Structured outputs over an engine's life, on the bundled tiny reasoner (real native forward, real XGrammar): what a
// disposed engine frees (compiled grammars, their compiler and tokenizer info live on XGrammar's wasm heap, which no
// garbage collector frees) and what it answers afterwards.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { bundledModelDir } from "../../ts/bundledModel.js";
import { Engine } from "../../ts/engine/engine.js";
import { DisposedError, GrammarHostError } from "../../ts/errors/index.js";
import { SequenceConstraint } from "../../ts/grammar/constraint.js";
import { GrammarSet, grammarSetDefaults, liveXGrammar } from "../../ts/grammar/grammars.js";
import { liveGrammarHosts } from "../../ts/grammar/host.js";
import { loadModel, type Model } from "../../ts/model/model.js";

let model: Model;

beforeAll(async () => {
  model = await loadModel(bundledModelDir, { kvPages: 256 });
});
afterAll(() => model?.dispose());

const prompt = (q: string): string => model.tokenizer.applyChatTemplate([{ role: "user", content: q }]);

describe("structured outputs: an engine's dispose", () => {
  it("frees the model's compiled grammars, compiler and tokenizer info; later structured calls are DisposedErrors", async () => {
    const before = { ...liveXGrammar };
    const engine = new Engine({ models: { model } });
    const done = await engine.submit({
      prompt: prompt("What is 2 + 2?"),
      maxTokens: 40,
      structured: { type: "choice", choices: ["four", "five"] },
    }).result;
    expect(done.samples[0].finishReason).not.toBe("aborted");
    await engine.prepareStructured({ type: "grammar", grammar: 'root ::= "x" [0-9]+' });
    expect(liveXGrammar.compilers).toBe(before.compilers + 2); // a host thread, and this thread's instance
    expect(liveXGrammar.grammars).toBe(before.grammars + 2);

    // In flight at dispose: a request that is running, and a compile of a schema the engine has not seen.
    const running = engine.submit({
      prompt: prompt("What is 3 + 4?"),
      maxTokens: 200,
      structured: { type: "regex", pattern: "[0-9]+" },
    }).result;
    const compiling = engine.prepareStructured({
      type: "json_schema",
      schema: { type: "object", properties: { late: { type: "boolean" } }, required: ["late"] },
    });
    await engine.dispose();
    expect((await running).samples[0].finishReason).toBe("aborted");
    await expect(compiling).rejects.toThrow(DisposedError);
    expect(liveXGrammar).toEqual(before);
    expect(SequenceConstraint.liveMatchers).toBe(0);

    const format = { type: "choice", choices: ["a"] } as const;
    await expect(engine.prepareStructured(format)).rejects.toThrow(DisposedError);
    expect(() => engine.submit({ prompt: prompt("hi"), structured: format })).toThrow(DisposedError);
  });

  it("a GrammarSet's dispose: a grammar compiling rejects with a DisposedError and is freed; held grants stay safe", async () => {
    const before = { ...liveXGrammar };
    const set = new GrammarSet(model.tokenizer.grammarVocab(), model.config.vocabSize, model.tokenizer.eosTokenIds);
    const held = set.acquire({ type: "choice", choices: ["yes"] }, "t");
    await held.compiled;
    const late = set.compile({ type: "choice", choices: ["late"] }, "t");
    set.dispose();
    await expect(late).rejects.toThrow(DisposedError);
    held.release(); // after the set is gone: nothing to free twice
    set.dispose();
    await new Promise((r) => setImmediate(r));
    expect(liveXGrammar).toEqual(before);
    expect(() => set.acquire({ type: "choice", choices: ["no"] }, "request.structured")).toThrow(
      /request\.structured: the model's grammars are disposed/,
    );
  });

  it("a constraint on a compiled grammar is ready at once: a fork's, an n-sample's, a cache hit's", async () => {
    const set = new GrammarSet(model.tokenizer.grammarVocab(), model.config.vocabSize, model.tokenizer.eosTokenIds);
    const format = { type: "choice" as const, choices: ["ready"] };
    const options = { thought: "none" as const, origin: 3, end: 40, answerTokens: 5, keepMasks: 0, field: "t" };
    const first = new SequenceConstraint(set.acquire(format, "t"), set, options);
    expect(first.compiling).toBe(true);
    await first.whenSettled();
    expect(first.compiling).toBe(false);
    // No turn of the event loop in between: the scheduler may see them in the same step.
    const forked = first.fork(50);
    const hit = new SequenceConstraint(set.acquire(format, "t"), set, options);
    expect(forked.compiling).toBe(false);
    expect(hit.compiling).toBe(false);
    await hit.prepare([1, 2, 3]);
    expect(hit.maskAt(3)).toBeInstanceOf(Int32Array);
    for (const c of [first, forked, hit]) c.dispose();
    set.dispose();
  });

  it("matchers on a host thread and on the engine's thread give the same masks, through rollback and the format's end", async () => {
    const vocab = model.tokenizer.grammarVocab();
    const local = new GrammarSet(vocab, model.config.vocabSize, model.tokenizer.eosTokenIds);
    const hosted = new GrammarSet(vocab, model.config.vocabSize, model.tokenizer.eosTokenIds, 8, 2, -1);
    const format = { type: "regex" as const, pattern: "[0-9]{1,3}-[a-c]{1,2}" };
    const options = { thought: "none" as const, origin: 2, end: 40, answerTokens: 5, keepMasks: 0, field: "t" };
    const a = new SequenceConstraint(local.acquire(format, "t"), local, options);
    const b = new SequenceConstraint(hosted.acquire(format, "t"), hosted, options);
    const allowed = (m: Int32Array): number[] => {
      const out: number[] = [];
      for (let t = 0; t < model.config.vocabSize; t++) if ((m[t >> 5] >>> (t & 31)) & 1) out.push(t);
      return out;
    };
    const tokens = [1, 2];
    let cut = Number.POSITIVE_INFINITY;
    let now = 0;
    let steps = 0;
    for (let step = 0; step < 14; step++) {
      steps++;
      // The engine's thread answers at once once the matcher exists (prepareNow); a host thread never does.
      if (a.prepareNow(tokens, cut)) now++;
      else await a.prepare(tokens);
      expect(b.prepareNow(tokens, cut)).toBe(false);
      await b.prepare(tokens);
      cut = Number.POSITIVE_INFINITY;
      const ma = allowed(a.maskAt(tokens.length)!);
      expect(allowed(b.maskAt(tokens.length)!)).toEqual(ma);
      if (step === 5) {
        tokens.length -= 2; // a verifier's rollback: two tokens back
        cut = tokens.length;
        continue;
      }
      const eos = model.tokenizer.eosTokenIds.find((t) => ma.includes(t));
      if (eos !== undefined && a.ends(eos, tokens.length)) break; // the format is complete
      tokens.push(ma[(step * 7) % ma.length]);
    }
    expect(model.tokenizer.decode(tokens.slice(2))).toMatch(/^[0-9]{1,3}(-[a-c]{0,2})?$/);
    expect(steps).toBeGreaterThan(5);
    expect(now).toBe(steps - 1); // all but the first call (XGrammar makes a matcher asynchronously)
    a.dispose();
    b.dispose();
    local.dispose();
    hosted.dispose();
  });

  it("a grammar host that dies fails its requests with a GrammarHostError; the engine serves the rest, a new host the format", async () => {
    const saved = grammarSetDefaults.localCompileMs;
    grammarSetDefaults.localCompileMs = -1; // every grammar stays on its host thread (read when the engine makes its set)
    const engine = new Engine({ models: { model } });
    try {
      const format = { type: "regex", pattern: "[a-z ]{150,300}", thought: "none" } as const; // no early end
      const ask = (maxTokens: number) => ({ prompt: prompt("Say something long."), maxTokens, structured: format });
      const doomed = engine.submit(ask(250));
      const free = engine.submit({ prompt: prompt("Say something."), maxTokens: 60, ignoreEos: true });
      // Read a few deltas (no break out of a for-await: that would abort the request): its matcher is on a host now.
      const deltas = doomed[Symbol.asyncIterator]();
      for (let seen = 0; seen < 3;) seen += (await deltas.next()).value!.tokens.length;
      const hosts = [...liveGrammarHosts].filter((h) => h.matchers > 0);
      expect(hosts.length).toBe(1);
      hosts[0].terminate(); // as a crash would: the thread ends with its grammars and matchers
      const error = await doomed.result.then(
        () => null,
        (e: unknown) => e,
      );
      expect(error).toBeInstanceOf(GrammarHostError);
      expect((error as GrammarHostError).code).toBe("grammar_host");
      expect((error as GrammarHostError).field).toBe("request.structured");
      expect((error as Error).message).toMatch(/grammar host .* exited .* send it again/);
      // The unconstrained request beside it is untouched; the same format runs again, on a new host.
      expect((await free.result).samples[0].finishReason).toBe("length");
      const again = await engine.submit(ask(20)).result;
      expect(again.samples[0].finishReason).not.toBe("aborted");
      const text = model.tokenizer.decode(again.samples[0].tokens, { skipSpecialTokens: true });
      expect(text).toMatch(/^[a-z ]+$/);
      expect(liveGrammarHosts.size).toBeGreaterThan(0);
    } finally {
      grammarSetDefaults.localCompileMs = saved;
      await engine.dispose();
    }
    expect(SequenceConstraint.liveMatchers).toBe(0);
  });
});
