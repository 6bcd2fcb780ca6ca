// Structured outputs through the engine on the bundled tiny reasoner (real native forward, real XGrammar): the thought
// stays free, the answer after `</think>` is the format's, every answer is checked by a validator nobody here wrote
// (ajv), and the format works with n > 1, forks, deterministic requests and the token budget.
import { Ajv } from "ajv";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { bundledModelDir } from "../../ts/bundledModel.js";
import { Engine } from "../../ts/engine/engine.js";
import type { GenerationOutput } from "../../ts/engine/outputs.js";
import type { GenerateRequest } from "../../ts/engine/request.js";
import { InvalidOptionError } from "../../ts/errors/index.js";
import { SequenceConstraint } from "../../ts/grammar/constraint.js";
import { GrammarSet } from "../../ts/grammar/grammars.js";
import { loadModel, type Model } from "../../ts/model/model.js";

let model: Model;
let engine: Engine;
let thinkStart: number;
let thinkEnd: number;

beforeAll(async () => {
  model = await loadModel(bundledModelDir, { kvPages: 256 });
  engine = new Engine({ models: { model } });
  thinkStart = model.tokenizer.tokenToId("<think>")!;
  thinkEnd = model.tokenizer.tokenToId("</think>")!;
});
afterAll(async () => {
  await engine?.dispose();
  model?.dispose();
});

const SCHEMA = {
  type: "object",
  properties: {
    answer: { type: "integer", minimum: 0, maximum: 999 }, // the tiny model would write digits to the budget
    unit: { type: "string", enum: ["apples", "pears"] },
    steps: { type: "array", items: { type: "integer", minimum: 0, maximum: 99 }, minItems: 1, maxItems: 3 },
    note: { anyOf: [{ type: "string", maxLength: 12 }, { type: "null" }] },
  },
  required: ["answer", "unit", "steps", "note"],
  additionalProperties: false,
} as const;

const prompt = (q: string): string => model.tokenizer.applyChatTemplate([{ role: "user", content: q }]);

/** The answer's text: what follows the thought's `</think>` (all of it without one), eos dropped. */
function answerOf(out: GenerationOutput, sample = 0): { thought: number[]; answer: string } {
  const tokens = out.samples[sample].tokens;
  const end = tokens.indexOf(thinkEnd);
  const body = (end < 0 ? tokens : tokens.slice(end + 1)).filter((t) => !model.tokenizer.eosTokenIds.includes(t));
  return {
    thought: end < 0 ? [] : tokens.slice(0, end + 1),
    answer: model.tokenizer.decode(body, { skipSpecialTokens: true }),
  };
}

describe("structured outputs in the engine", () => {
  it("a JSON Schema answer after a free thought validates (ajv), greedy and sampled, with n = 4", async () => {
    const validate = new Ajv().compile(SCHEMA);
    const req: GenerateRequest = {
      prompt: prompt("What is 17 + 25?"),
      maxTokens: 160,
      structured: { type: "json_schema", schema: SCHEMA },
    };
    const greedy = await engine.submit(req).result;
    const g = answerOf(greedy);
    expect(g.thought[0]).toBe(thinkStart); // the model thought first, unconstrained
    expect(greedy.samples[0].finishReason).toBe("stop");
    expect(validate(JSON.parse(g.answer)), g.answer).toBe(true);

    const sampled = await engine.submit({ ...req, n: 4, temperature: 1, seed: 11 }).result;
    for (let i = 0; i < 4; i++) {
      const a = answerOf(sampled, i).answer;
      expect(sampled.samples[i].finishReason).toBe("stop");
      expect(validate(JSON.parse(a)), a).toBe(true);
    }
  });

  it("a sample never ends inside its free thought: eos is masked until `</think>`", async () => {
    const out = await engine.submit({
      prompt: prompt("Hi"),
      maxTokens: 120,
      n: 12,
      temperature: 2.5,
      seed: 4,
      structured: { type: "choice", choices: ["hello"] },
    }).result;
    for (const s of out.samples) {
      if (s.finishReason !== "stop") continue;
      if (s.tokens[0] === thinkStart) expect(s.tokens).toContain(thinkEnd); // it may also answer at once
      expect(answerOf(out, out.samples.indexOf(s)).answer).toBe("hello");
    }
  });

  it("the unconstrained run differs: the format, not the model, makes the answer JSON", async () => {
    const free = await engine.submit({ prompt: prompt("What is 17 + 25?"), maxTokens: 160 }).result;
    expect(() => JSON.parse(answerOf(free).answer)).toThrow();
  });

  it("choice, regex, EBNF grammar and json_object formats", async () => {
    const base = { prompt: prompt("What is 3 + 4?"), maxTokens: 120 };
    const choice = await engine.submit({ ...base, structured: { type: "choice", choices: ["seven", "eight"] } }).result;
    expect(["seven", "eight"]).toContain(answerOf(choice).answer);
    const regex = await engine.submit({ ...base, structured: { type: "regex", pattern: "[0-9]{1,3}-[a-c]+" } }).result;
    expect(answerOf(regex).answer).toMatch(/^[0-9]{1,3}-[a-c]+$/);
    const ebnf = await engine.submit({
      ...base,
      structured: { type: "grammar", grammar: 'root ::= "x=" [0-9]+ ";"' },
    }).result;
    expect(answerOf(ebnf).answer).toMatch(/^x=[0-9]+;$/);
    const obj = await engine.submit({ ...base, structured: { type: "json_object" } }).result;
    const parsed = JSON.parse(answerOf(obj).answer) as unknown;
    expect(typeof parsed === "object" && parsed !== null && !Array.isArray(parsed)).toBe(true);
  });

  it("number ranges XGrammar gets wrong (zod's positive(), a negative fractional range) compile as EBNF and mask", async () => {
    // The tiny model writes digits to its budget (a range bounds no fraction's length), so the answers are prefixes
    // of the range's texts: no "-" for a positive number; "-", then 0 (-0.25 > t: "-0." and a digit from 2 on) to 10
    // (-10.5 <= t: "-10." and a digit up to 5) for the other.
    const object = (x: unknown) => ({
      type: "object",
      properties: { x },
      required: ["x"],
      additionalProperties: false,
    });
    const cases: Array<[unknown, RegExp]> = [
      [{ type: "number", exclusiveMinimum: 0 }, /^\{"x": (0(\.0*([1-9][0-9]*)?)?|[1-9][0-9]*(\.[0-9]*)?)(\}|$)/],
      [
        { type: "number", minimum: -10.5, exclusiveMaximum: -0.25 },
        /^\{"x": -(0(\.(2[5-9]?[0-9]*|2|[3-9][0-9]*)?)?|[1-9](\.[0-9]*)?|10(\.([0-4][0-9]*|50*)?)?)?(\}|$)/,
      ],
    ];
    for (const [x, prefix] of cases) {
      const format = { type: "json_schema", schema: object(x), thought: "none" } as const;
      await engine.prepareStructured(format);
      const out = await engine.submit({
        prompt: prompt("Give a number."),
        maxTokens: 10,
        n: 8,
        temperature: 1.5,
        seed: 5,
        structured: format,
      }).result;
      const validate = new Ajv().compile(object(x));
      for (let i = 0; i < out.samples.length; i++) {
        const a = answerOf(out, i).answer;
        expect(a).toMatch(prefix);
        if (out.samples[i].finishReason === "stop") expect(validate(JSON.parse(a)), a).toBe(true);
      }
    }
  });

  it('thought "none" constrains from the first token', async () => {
    const out = await engine.submit({
      prompt: prompt("What is 3 + 4?"),
      maxTokens: 40,
      structured: { type: "choice", choices: ["yes", "no"], thought: "none" },
    }).result;
    expect(out.samples[0].tokens).not.toContain(thinkStart);
    expect(["yes", "no"]).toContain(answerOf(out).answer);
  });

  it("logprobs and DeepConf confidence stay finite on masked rows: top lists name only allowed tokens", async () => {
    const out = await engine.submit({
      prompt: prompt("What is 3 + 4?"),
      maxTokens: 40,
      logprobs: 5,
      confidence: { window: 4 },
      structured: { type: "choice", choices: ["seven", "eight"], thought: "none" },
    }).result;
    const s = out.samples[0];
    expect(["seven", "eight"]).toContain(answerOf(out).answer);
    for (const lp of s.logprobs!) {
      expect(Number.isFinite(lp.logprob)).toBe(true);
      for (const t of lp.top) expect(Number.isFinite(t.logprob)).toBe(true);
    }
    expect(s.logprobs![0].top.length).toBeLessThan(5); // "seven" / "eight" share few first tokens
    expect(JSON.stringify(s.confidence ?? {})).not.toMatch(/null|Infinity/); // no window of finite values: no report
  });

  it("an open thought is closed in time for the answer: `</think>` by maxTokens - answerTokens", async () => {
    const out = await engine.submit({
      prompt: prompt("What is 123 * 456 + 789 * 321 - 55?"),
      maxTokens: 40,
      structured: { type: "choice", choices: ["done"], answerTokens: 8 },
    }).result;
    const tokens = out.samples[0].tokens;
    const end = tokens.indexOf(thinkEnd);
    expect(end).toBeGreaterThanOrEqual(0);
    expect(end).toBeLessThanOrEqual(40 - 8);
    expect(answerOf(out).answer).toBe("done");
  });

  it("a budget too small for the format ends with finishReason length, the answer cut, not presented as complete", async () => {
    const out = await engine.submit({
      prompt: prompt("What is 3 + 4?"),
      maxTokens: 3,
      structured: { type: "json_schema", schema: SCHEMA, thought: "none" },
    }).result;
    expect(out.samples[0].finishReason).toBe("length");
    expect(() => JSON.parse(answerOf(out).answer)).toThrow();
  });

  it("a value whose last token is the last maxTokens allows ends stop; one that could go on ends length", async () => {
    for (const deterministic of [false, true]) {
      const base = { prompt: prompt("Is 3 + 4 seven?"), deterministic, temperature: 0, logprobs: 2 };
      const choice = { ...base, structured: { type: "choice", choices: ["yes", "no"], thought: "none" } } as const;
      const free = await engine.submit({ ...choice, maxTokens: 20 }).result;
      expect(free.samples[0].finishReason).toBe("stop");
      const value = free.samples[0].tokens.filter((t) => !model.tokenizer.eosTokenIds.includes(t));
      expect(value.length).toBeLessThan(free.samples[0].tokens.length); // it ended at eos
      const exact = await engine.submit({ ...choice, maxTokens: value.length }).result;
      expect(exact.samples[0].tokens).toEqual(value);
      expect(exact.samples[0].finishReason, `deterministic ${deterministic}`).toBe("stop");
      // The value's last token is text, no stop token: its text and logprob are output, whole and streamed.
      expect(["yes", "no"]).toContain(free.samples[0].text);
      expect(exact.samples[0].text).toBe(free.samples[0].text);
      expect(exact.samples[0].stoppedBy).toBeUndefined();
      expect(exact.samples[0].logprobs?.map((l) => l.token)).toEqual(value);
      const streamed = engine.submit({ ...choice, maxTokens: value.length });
      let text = "";
      for await (const d of streamed) text += d.text;
      expect(text).toBe(free.samples[0].text);
      // A regex that allows more digits after the budget's last one: cut, so "length".
      const digits = { ...base, structured: { type: "regex", pattern: "[0-9]{1,40}", thought: "none" } } as const;
      const cut = await engine.submit({ ...digits, maxTokens: 2 }).result;
      expect(cut.samples[0].tokens.length).toBe(2);
      expect(cut.samples[0].finishReason).toBe("length");
    }
  });

  it("deterministic: true gives the same bytes alone and beside other traffic (the verify replay sees the same masks)", async () => {
    const req: GenerateRequest = {
      prompt: prompt("What is 12 + 30?"),
      maxTokens: 120,
      temperature: 0.9,
      seed: 5,
      deterministic: true,
      structured: { type: "json_schema", schema: SCHEMA },
    };
    const alone = await engine.submit(req).result;
    const noise = Array.from(
      { length: 6 },
      (_, i) =>
        engine.submit({ prompt: prompt(`What is ${i} + ${i * 7}?`), maxTokens: 90, temperature: 1, seed: i }).result,
    );
    const busy = await engine.submit(req).result;
    await Promise.all(noise);
    expect(busy.samples[0].tokens).toEqual(alone.samples[0].tokens);
    expect(new Ajv().compile(SCHEMA)(JSON.parse(answerOf(busy).answer))).toBe(true);
  });

  it("a fork inherits the format: closing a running thought by appending `</think>` gets a constrained answer", async () => {
    const parent = engine.submit({
      prompt: prompt("What is 40 + 2?"),
      maxTokens: 200,
      structured: { type: "regex", pattern: "[0-9]+" },
    });
    const first = await parent.result;
    const cut = first.samples[0].tokens.indexOf(thinkEnd);
    expect(cut).toBeGreaterThan(2);
    const promptLen = model.tokenizer.encode(prompt("What is 40 + 2?"), { addSpecialTokens: true }).length;
    const child = await engine.fork(parent, { length: promptLen + 2, append: [thinkEnd], maxTokens: 10 }).result;
    expect(child.samples[0].text.length).toBeGreaterThan(0);
    expect(
      model.tokenizer.decode(child.samples[0].tokens.filter((t) => !model.tokenizer.eosTokenIds.includes(t))),
    ).toMatch(/^[0-9]+$/);
  });

  it("finished sequences free their matchers, and the grammar cache stays bounded, sparing grammars in use", async () => {
    await engine.submit({
      prompt: prompt("What is 2 + 2?"),
      maxTokens: 60,
      n: 3,
      temperature: 1,
      structured: { type: "choice", choices: ["four", "five"] },
    }).result;
    expect(SequenceConstraint.liveMatchers).toBe(0);

    const set = new GrammarSet(model.tokenizer.grammarVocab(), model.config.vocabSize, model.tokenizer.eosTokenIds, 2);
    const choice = (c: string) => ({ type: "choice" as const, choices: [c] });
    const held = set.acquire(choice("a"), "t");
    await held.compiled;
    for (const c of ["b", "c", "d"]) {
      const g = set.acquire(choice(c), "t");
      await g.compiled;
      g.release();
    }
    expect(set.size).toBe(2);
    expect(set.stats.evictions).toBe(2);
    set.compile(choice("a"), "t"); // still cached: held all along
    expect(set.stats.compiles).toBe(4);
    held.release();
  });

  it("a format the vocabulary cannot continue fails its own request only; maxTokens 1 works", async () => {
    const innocent = engine.submit({ prompt: prompt("What is 2 + 2?"), maxTokens: 20, ignoreEos: true }).result;
    const stuck = engine.submit({
      prompt: prompt("What is 2 + 2?"),
      maxTokens: 20,
      structured: { type: "choice", choices: ["日本"], thought: "none" }, // no token of the tiny vocabulary spells it
    }).result;
    await expect(stuck).rejects.toThrow(/no token of the model's vocabulary is allowed next/);
    expect((await innocent).samples[0].tokens).toHaveLength(20);
    const one = await engine.submit({
      prompt: prompt("What is 2 + 2?"),
      maxTokens: 1,
      structured: { type: "choice", choices: ["4"], thought: "none" },
    }).result;
    expect(one.samples[0].tokens).toHaveLength(1);
  });

  it("a bad schema or grammar is an InvalidOptionError naming XGrammar's complaint; the engine carries on", async () => {
    const bad = { type: "json_schema", schema: { type: "object", properties: { a: { type: "frobnicate" } } } } as const;
    await expect(engine.prepareStructured(bad)).rejects.toThrow(InvalidOptionError);
    await expect(engine.prepareStructured(bad)).rejects.toThrow(/frobnicate/);
    await expect(engine.prepareStructured({ type: "grammar", grammar: 'root ::= "a" |' })).rejects.toThrow(
      /request\.structured: XGrammar cannot use this grammar: EBNF parser error/,
    );
    const failed = engine.submit({ prompt: prompt("hi"), maxTokens: 8, structured: bad }).result;
    await expect(failed).rejects.toThrow(InvalidOptionError);
    expect(() => engine.submit({ prompt: prompt("hi"), structured: { type: "choice", choices: [] } as never })).toThrow(
      /request.structured/,
    );
    // A keyword XGrammar would ignore (the answer could break it): refused by its path before anything runs.
    const not = { type: "object", properties: { x: { type: "integer", not: { const: 3 } } }, required: ["x"] };
    expect(() => engine.submit({ prompt: prompt("hi"), structured: { type: "json_schema", schema: not } })).toThrow(
      /^request\.structured\.schema\.properties\.x\.not XGrammar cannot exclude values/,
    );
    await expect(engine.prepareStructured({ type: "json_schema", schema: not })).rejects.toThrow(InvalidOptionError);
    const ok = await engine.submit({
      prompt: prompt("What is 1 + 1?"),
      maxTokens: 60,
      structured: { type: "choice", choices: ["two"] },
    }).result;
    expect(answerOf(ok).answer).toBe("two");
  });
});

describe("structured outputs on a Qwen3 fixture (byte-level vocabulary, its thinking switch)", () => {
  let qwen: Model;
  let qe: Engine;
  beforeAll(async () => {
    const { fixtureDir } = await import("../model/fixtureCache.js");
    qwen = await loadModel(await fixtureDir("qwen3", "bf16", { headDim: 32 }));
    qe = new Engine({ models: { model: qwen } });
  }, 120_000);
  afterAll(async () => {
    await qe?.dispose();
    qwen?.dispose();
  });
  const SMALL = {
    type: "object",
    properties: { ok: { type: "boolean" }, n: { type: "integer", minimum: 0, maximum: 9 } },
    required: ["ok", "n"],
    additionalProperties: false,
  };
  const render = (enable_thinking: boolean, history = false): string =>
    qwen.tokenizer.applyChatTemplate(
      [
        ...(history
          ? [
              { role: "user" as const, content: "Hi" },
              { role: "assistant" as const, content: "<think>\nhm\n</think>\n\nHello" },
            ]
          : []),
        { role: "user", content: "Answer in JSON." },
      ],
      { addGenerationPrompt: true, variables: { enable_thinking } },
    );

  it("thinking off: the prompt's closed thought makes the first generated token the format's", async () => {
    const p = render(false);
    expect(p).toContain("</think>");
    const out = await qe.submit({
      prompt: p,
      maxTokens: 60,
      temperature: 1,
      seed: 3,
      structured: { type: "json_schema", schema: SMALL },
    }).result;
    const text = qwen.tokenizer.decode(out.samples[0].tokens, { skipSpecialTokens: true });
    expect(out.samples[0].finishReason).toBe("stop");
    expect(new Ajv().compile(SMALL)(JSON.parse(text)), text).toBe(true);
  });

  it("the first position's mask: thinking on (after a turn with a closed thought) allows <think>, thinking off does not", async () => {
    const vocab = qwen.tokenizer.grammarVocab();
    expect(vocab.vocabType).toBe("byte_level");
    const grammars = new GrammarSet(vocab, qwen.config.vocabSize, qwen.tokenizer.eosTokenIds);
    const firstMask = async (p: string): Promise<Int32Array> => {
      const ids = qwen.tokenizer.encode(p, { addSpecialTokens: false });
      const c = new SequenceConstraint(grammars.acquire({ type: "json_schema", schema: SMALL }, "t"), grammars, {
        thought: "free",
        origin: ids.length,
        end: ids.length + 100,
        answerTokens: 50,
        keepMasks: 0,
        field: "t",
      });
      await c.prepare(ids);
      const mask = c.maskAt(ids.length)!;
      c.dispose();
      return mask;
    };
    const allows = (m: Int32Array, t: number): boolean => ((m[t >> 5] >>> (t & 31)) & 1) === 1;
    const think = vocab.think!.start;
    const brace = qwen.tokenizer.encode("{", { addSpecialTokens: false });
    expect(brace).toHaveLength(1);
    const on = await firstMask(render(true, true));
    expect(allows(on, think)).toBe(true);
    expect(allows(on, brace[0])).toBe(true);
    const off = await firstMask(render(false, true));
    expect(allows(off, think)).toBe(false);
    expect(allows(off, brace[0])).toBe(true);
  });
});
