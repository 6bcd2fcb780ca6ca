// nextTokenBitmaskNow where the runtime's memory cannot be identified (xgrammar.ts identifyMemory): here embind's
// vector `set` throws, as a build whose handles differ might. The first read and every later one give
// getNextTokenBitmask's words, through embind; the direct read stays off. Its own file: the memory is identified once
// per process. A toy vocabulary, real XGrammar.
import { expect, it } from "vitest";
import { bitmaskReadMode, loadXGrammar, nextTokenBitmaskNow } from "../../ts/grammar/xgrammar.js";

it("a vector handle without a working set(): the words still come, through embind", async () => {
  const xg = await loadXGrammar();
  const vocab = ["<eos>", "{", "}", '"', "a", ":", " ", "1"];
  const info = await xg.TokenizerInfo.createTokenizerInfo(vocab, "raw", false, vocab.length, [0]);
  const compiler = await xg.GrammarCompiler.createGrammarCompiler(info);
  const compiled = await compiler.compileJSONSchema(
    JSON.stringify({ type: "object", properties: { a: { type: "integer" } }, required: ["a"] }),
    false,
    -1,
  );
  const m = await xg.GrammarMatcher.createGrammarMatcher(compiled);
  const handle = (m as unknown as { handle: { GetNextTokenBitmask(n: number): { delete(): void } } }).handle;
  const v = handle.GetNextTokenBitmask(vocab.length);
  const proto = Object.getPrototypeOf(v) as { set: unknown };
  v.delete();
  const set = proto.set;
  proto.set = () => {
    throw new Error("no set in this build");
  };
  try {
    for (const t of ["{", '"', "a", '"', ":", " ", "1", "}"]) {
      expect(Array.from(nextTokenBitmaskNow(m, vocab.length))).toEqual(Array.from(await m.getNextTokenBitmask()));
      expect(bitmaskReadMode()).toBe("off");
      expect(m.acceptToken(vocab.indexOf(t))).toBe(true);
    }
    expect(m.acceptToken(0)).toBe(true);
  } finally {
    proto.set = set;
    m.dispose();
    compiled.dispose();
    compiler.dispose();
    info.dispose();
  }
});
