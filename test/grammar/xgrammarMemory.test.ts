// Which memory nextTokenBitmaskNow reads bitmasks from (xgrammar.ts identifyMemory), when another module is
// instantiated while XGrammar's runtime starts (Node's fetch does so with undici's llhttp on its first use) and its
// memory holds, at the vector's address, the very words XGrammar's does: the reads must still come from XGrammar's
// memory, and follow it when it grows. Its own file: the runtime starts once per process. A toy vocabulary, real
// XGrammar.
import { expect, it } from "vitest";
import { bitmaskReadMode, loadXGrammar, nextTokenBitmaskNow } from "../../ts/grammar/xgrammar.js";

interface Memory {
  readonly buffer: ArrayBuffer;
  grow(pages: number): number;
}
interface Wasm {
  instantiate: (...args: unknown[]) => Promise<{ instance: { exports: Record<string, unknown> } }>;
  Memory: abstract new (...args: never[]) => Memory;
}
interface VectorHandle {
  size(): number;
  get(i: number): number;
  delete(): void;
  $$: { ptr: number };
}

/** A module that exports one page of memory as "memory" and nothing else. */
const DECOY = new Uint8Array([
  0x00, 0x61, 0x73, 0x6d, 0x01, 0x00, 0x00, 0x00, 0x05, 0x03, 0x01, 0x00, 0x01, 0x07, 0x0a, 0x01, 0x06, 0x6d, 0x65,
  0x6d, 0x6f, 0x72, 0x79, 0x02, 0x00,
]);

it("reads XGrammar's memory, not another module's instantiated meanwhile with the same words, and after it grows", async () => {
  const wasm = (globalThis as unknown as { WebAssembly: Wasm }).WebAssembly;
  const original = wasm.instantiate;
  let decoy: Memory | null = null;
  let real: Memory | null = null;
  // Wraps instantiate before XGrammar starts: XGrammar's instantiation first makes another module (through whatever
  // wraps instantiate by then, so it resolves first), then its own, whose memory the test keeps to forge the decoy.
  const before = async function (this: unknown, ...args: unknown[]) {
    if (args[0] === DECOY) return original.apply(this, args);
    decoy ??= (await wasm.instantiate(DECOY)).instance.exports.memory as Memory;
    const r = await original.apply(this, args);
    real ??= Object.values(r.instance.exports).find((v) => v instanceof wasm.Memory) as Memory;
    return r;
  };
  wasm.instantiate = before;
  let xg;
  try {
    xg = await loadXGrammar();
    expect(wasm.instantiate).toBe(before); // put back as it was found
  } finally {
    wasm.instantiate = original;
  }
  expect(decoy).not.toBeNull();
  expect(real).not.toBeNull();

  const vocab = ["<eos>", "{", "}", '"', "a", "b", ":", ",", " ", "1", "2", "true", "null", "ab", '":'];
  const info = await xg.TokenizerInfo.createTokenizerInfo(vocab, "raw", false, vocab.length, [0]);
  const compiler = await xg.GrammarCompiler.createGrammarCompiler(info);
  const schema = { type: "object", properties: { a: { type: "integer" }, b: { type: "boolean" } }, required: ["a"] };
  const compiled = await compiler.compileJSONSchema(JSON.stringify(schema), false, -1);
  const m = await xg.GrammarMatcher.createGrammarMatcher(compiled);
  const handle = (m as unknown as { handle: { GetNextTokenBitmask(n: number): VectorHandle } }).handle;

  // The decoy forged: at the address of the bitmask vector embind hands out next, libc++'s begin / end and the words,
  // as XGrammar's memory holds them. Past the first call, the allocator hands out two placements in turn (each call
  // frees its vector and its words): the test's reads take one, nextTokenBitmaskNow's the other.
  const where = () => {
    const v = handle.GetNextTokenBitmask(vocab.length);
    const heap = new Int32Array(real!.buffer);
    const ptr = v.$$.ptr;
    const at = {
      ptr,
      begin: heap[ptr >> 2],
      end: heap[(ptr >> 2) + 1],
      words: Array.from({ length: v.size() }, (_, i) => v.get(i)),
    };
    v.delete();
    return at;
  };
  where();
  const first = where();
  const at = where();
  expect(where()).toEqual(first);
  // Everywhere else, the decoy looks like a one-word vector at every 8-aligned address (where malloc puts one), its
  // word 0x80008, which no mask of this vocabulary has: a read from it past the forged placement gives that word.
  const pages = Math.ceil(Math.max(at.ptr + 8, at.end, 0x100000) / 65536) - decoy!.buffer.byteLength / 65536;
  if (pages > 0) decoy!.grow(pages);
  const fake = new Int32Array(decoy!.buffer);
  for (let i = 0; i < fake.length; i += 2) {
    fake[i] = 0x80004;
    fake[i + 1] = 0x80008;
  }
  fake[at.ptr >> 2] = at.begin;
  fake[(at.ptr >> 2) + 1] = at.end;
  fake.set(at.words, at.begin >> 2);

  // A walk through the object: every read gives getNextTokenBitmask's words.
  const walk = async (tokens: string[]) => {
    for (const t of tokens) {
      expect(Array.from(nextTokenBitmaskNow(m, vocab.length))).toEqual(Array.from(await m.getNextTokenBitmask()));
      expect(m.acceptToken(vocab.indexOf(t))).toBe(true);
    }
  };
  await walk(["{", '"', "a", '":', " ", "1"]);
  expect(bitmaskReadMode()).toBe("on");

  // XGrammar's memory grows (a large vocabulary's tokenizer info): its buffer is replaced, the reads follow it.
  const size = real!.buffer.byteLength;
  const infos = [];
  while (real!.buffer.byteLength === size && infos.length < 20)
    infos.push(
      await xg.TokenizerInfo.createTokenizerInfo(
        Array.from({ length: 50_000 }, (_, i) => `token${i}`),
        "raw",
        false,
        50_000,
        [0],
      ),
    );
  expect(real!.buffer.byteLength).toBeGreaterThan(size);
  await walk(["2", ",", " ", '"', "b", '":', " ", "true", "}"]);
  expect(m.acceptToken(0)).toBe(true);
  for (const i of infos) i.dispose();
  m.dispose();
  compiled.dispose();
  compiler.dispose();
  info.dispose();
});
