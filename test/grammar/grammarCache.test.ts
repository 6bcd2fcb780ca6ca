// GrammarSet's cache of compiled formats, as requests reach it: a format equal to one compiled before (a new object
// of the same JSON, as a server parses each request's schema) is a hit without recompiling; the same object changed
// between requests is a new grammar; a malformed format is refused every time, never cached. A toy vocabulary, real
// XGrammar (sandbox and host threads).
import { describe, expect, it } from "vitest";
import { InvalidOptionError } from "../../ts/errors/index.js";
import { GrammarSet, grammarSetDefaults } from "../../ts/grammar/grammars.js";
import type { StructuredFormat } from "../../ts/grammar/types.js";

const VOCAB = ["<eos>", "{", "}", '"', "a", ":", "1", "2", ","];

describe("GrammarSet: the cache by format", () => {
  it("equal formats hit, a changed one compiles, a malformed one is refused each time", async () => {
    const set = new GrammarSet(
      { tokens: VOCAB, vocabType: "raw", prependSpace: false, think: null },
      VOCAB.length,
      [0],
    );
    try {
      const schema = {
        type: "object",
        properties: { a: { type: "integer", minimum: 0, maximum: 9 } },
        required: ["a"],
        additionalProperties: false,
      };
      const first = await set.compile({ type: "json_schema", schema }, "request.structured");
      const again = await set.compile({ type: "json_schema", schema: structuredClone(schema) }, "request.structured");
      expect(again).toBe(first);
      expect(set.stats).toMatchObject({ compiles: 1, cacheHits: 1 });
      schema.properties.a.maximum = 5; // the same object, another format
      const changed = await set.compile({ type: "json_schema", schema }, "request.structured");
      expect(changed).not.toBe(first);
      expect(set.stats).toMatchObject({ compiles: 2, cacheHits: 1 });
      // The schema as JSON text is the same format as the object.
      await set.compile({ type: "json_schema", schema: JSON.stringify(schema) }, "request.structured");
      expect(set.stats).toMatchObject({ compiles: 2, cacheHits: 2 });
      for (let i = 0; i < 2; i++)
        expect(() => set.compile({ type: "choice", choices: [] }, "request.structured")).toThrow(InvalidOptionError);
      // An array whose toJSON says other than its items: its own format, not the one its text names.
      class Spelled extends Array<string> {
        toJSON() {
          return ["a"];
        }
      }
      const plainA = await set.compile({ type: "choice", choices: ["a"] }, "request.structured");
      const spelled = await set.compile({ type: "choice", choices: Spelled.from(["1"]) }, "request.structured");
      expect(spelled).not.toBe(plainA);
      // Not plain JSON data (a NaN bound): refused by the schema check each time, as before any cache.
      const nan = { type: "object", properties: { a: { type: "integer", minimum: Number.NaN } } };
      for (let i = 0; i < 2; i++)
        expect(() => set.compile({ type: "json_schema", schema: nan }, "request.structured")).toThrow(
          /minimum is null; expected a finite number/,
        );
    } finally {
      set.dispose();
    }
  });

  it("remembers formats' texts least recently used first, within maxEntries and keyTextChars", async () => {
    const saved = grammarSetDefaults.keyTextChars;
    grammarSetDefaults.keyTextChars = 200; // read when a set is made
    const set = new GrammarSet(
      { tokens: VOCAB, vocabType: "raw", prependSpace: false, think: null },
      VOCAB.length,
      [0],
      3,
    );
    grammarSetDefaults.keyTextChars = saved;
    const known = (set as unknown as { keyOfText: Map<string, string> }).keyOfText;
    const choice = (...choices: string[]): StructuredFormat => ({ type: "choice", choices });
    const remembered = (...formats: StructuredFormat[]) => formats.map((f) => known.has(JSON.stringify(f)));
    try {
      const [a, b, c, d] = [choice("a"), choice("1"), choice("2"), choice("a", "1")]; // ~55 characters each
      for (const f of [a, b, a, c]) await set.compile(f, "request.structured");
      expect(remembered(a, b, c)).toEqual([true, true, true]);
      // A fourth: past maxEntries (3) and past 200 characters; b is the least recently used (a was asked again).
      await set.compile(d, "request.structured");
      expect(remembered(a, b, c, d)).toEqual([true, false, true, true]);
      // A format longer than the whole bound is not remembered (walked each time), and pushes nothing out.
      const long = choice("a".repeat(300));
      await set.compile(long, "request.structured");
      expect(remembered(long, a, c, d)).toEqual([false, true, true, true]);
      set.dispose();
      expect(known.size).toBe(0);
    } finally {
      set.dispose();
    }
  });
});
