// XGrammar (wasm) as the engine uses it: a bad grammar is an error from the sandbox, not an abort of the engine's
// instance; and the upstream enum bug that grammars.ts works around (enumsAsPatterns), pinned on a toy vocabulary so
// a new @mlc-ai/web-xgrammar that fixes it shows here.
import { describe, expect, it } from "vitest";
import { enumsAsPatterns, grammarSource } from "../../ts/grammar/grammars.js";
import { checkGrammar } from "../../ts/grammar/sandbox.js";
import {
  bitmaskReadableNow,
  bitmaskReadMode,
  loadXGrammar,
  nextTokenBitmaskNow,
  SYNC_MASK_WORDS,
} from "../../ts/grammar/xgrammar.js";

const VOCAB = ["<eos>", '"', "i", "a", "b"];

async function accepts(schema: unknown, text: string): Promise<boolean> {
  const xg = await loadXGrammar();
  const info = await xg.TokenizerInfo.createTokenizerInfo(VOCAB, "raw", false, VOCAB.length, [0]);
  const compiled = await (
    await xg.GrammarCompiler.createGrammarCompiler(info)
  ).compileJSONSchema(JSON.stringify(schema), false, -1);
  const m = await xg.GrammarMatcher.createGrammarMatcher(compiled);
  for (const ch of text) if (!m.acceptToken(VOCAB.indexOf(ch))) return false;
  return m.acceptToken(0);
}

describe("XGrammar as the engine uses it", () => {
  it("upstream accepts a non-member of a string enum whose values share a prefix; the pattern rewrite does not", async () => {
    const schema = { enum: ["ia", "i"] };
    expect(await accepts(schema, '"iaa"')).toBe(true); // the upstream bug: when this fails, drop enumsAsPatterns
    const rewritten = enumsAsPatterns(schema);
    expect(rewritten).toEqual({ type: "string", pattern: "^(ia|i)$" });
    expect(await accepts(rewritten, '"iaa"')).toBe(false);
    expect(await accepts(rewritten, '"ia"')).toBe(true);
    expect(await accepts(rewritten, '"i"')).toBe(true);
  });

  it("enumsAsPatterns rewrites string enums and consts anywhere, escapes regex characters, and leaves the rest", () => {
    const schema = {
      type: "object",
      properties: {
        a: { enum: ["x.y", "(z)"] },
        b: { const: "c|d" },
        c: { enum: [1, "two"] },
        d: { enum: ['say "hi"'] },
        enum: { type: "string", default: { enum: ["kept"] } },
      },
    };
    expect(enumsAsPatterns(schema)).toEqual({
      type: "object",
      properties: {
        a: { type: "string", pattern: "^(x\\.y|\\(z\\))$" },
        b: { type: "string", pattern: "^(c\\|d)$" },
        c: { enum: [1, "two"] },
        d: { enum: ['say "hi"'] },
        enum: { type: "string", default: { enum: ["kept"] } },
      },
    });
  });

  it("the sandbox reports XGrammar's message for bad input and keeps working after the abort", async () => {
    expect(await checkGrammar({ kind: "ebnf", text: 'root ::= "a" |' })).toMatch(/EBNF parser error/);
    expect(await checkGrammar({ kind: "json_schema", text: '{"type":"frobnicate"}' })).toMatch(/frobnicate/);
    expect(await checkGrammar({ kind: "ebnf", text: 'root ::= "a" | "b"' })).toBeNull();
    expect(await checkGrammar(grammarSource({ type: "regex", pattern: "[0-9]+" }, "request.structured"))).toBeNull();
  });
});

describe("XGrammar's errors as the engine reports them", () => {
  it("a structural tag XGrammar refuses without a message gets one naming what to check", async () => {
    const { GrammarSet } = await import("../../ts/grammar/grammars.js");
    const set = new GrammarSet(
      { tokens: VOCAB, vocabType: "raw", prependSpace: false, think: null },
      VOCAB.length,
      [0],
    );
    const bad = { type: "structural_tag", format: { type: "const_string", value: "" } };
    await expect(set.compile({ type: "structural_tag", structuralTag: bad }, "request.structured")).rejects.toThrow(
      /request\.structured: XGrammar cannot use this structural_tag: (it was refused without a message|.*[a-z])/,
    );
  });
});

describe("the matcher's bitmask read at once (nextTokenBitmaskNow)", () => {
  it("gives getNextTokenBitmask's words along a walk through a grammar; a large vocabulary is left to the async read", async () => {
    const xg = await loadXGrammar();
    const vocab = ["<eos>", "{", "}", '"', "a", "b", ":", ",", " ", "1", "2", "true", "null", "ab", '":'];
    const info = await xg.TokenizerInfo.createTokenizerInfo(vocab, "raw", false, vocab.length, [0]);
    const compiler = await xg.GrammarCompiler.createGrammarCompiler(info);
    const schema = {
      type: "object",
      properties: { a: { type: "integer" }, b: { type: "boolean" } },
      required: ["a", "b"],
    };
    const compiled = await compiler.compileJSONSchema(JSON.stringify(schema), false, -1);
    const m = await xg.GrammarMatcher.createGrammarMatcher(compiled);
    expect(bitmaskReadableNow(m, vocab.length)).toBe(true);
    const allowed = (mask: Int32Array): string[] => vocab.filter((_, t) => (mask[t >> 5] >>> (t & 31)) & 1);
    // A walk choosing among the allowed tokens (eos last), through the object to its end.
    let steps = 0;
    while (!m.isTerminated() && steps < 60) {
      const now = nextTokenBitmaskNow(m, vocab.length);
      const later = await m.getNextTokenBitmask();
      expect(Array.from(now)).toEqual(Array.from(later));
      const ok = allowed(now);
      expect(ok.length).toBeGreaterThan(0);
      const pick = ok.length === 1 ? ok[0] : ok.filter((t) => t !== "<eos>")[(steps * 5) % (ok.length - 1)];
      expect(m.acceptToken(vocab.indexOf(pick))).toBe(true);
      steps++;
    }
    expect(steps).toBeGreaterThan(3);
    // The words were read from the runtime's memory (its first read checked against embind's, word by word).
    expect(bitmaskReadMode()).toBe("on");
    expect(bitmaskReadableNow(m, SYNC_MASK_WORDS * 32)).toBe(true);
    expect(bitmaskReadableNow(m, SYNC_MASK_WORDS * 32 + 1)).toBe(false);
    m.dispose();
    compiled.dispose();
    compiler.dispose();
    info.dispose();
  });
});
