// XGrammar (the grammar engine of vLLM, SGLang and TensorRT-LLM) as WebAssembly: npm @mlc-ai/web-xgrammar. Its
// bundle is UMD under "type": "module": its factory reads `require` and `__filename` as globals when the wasm runtime
// starts (the first API call) and publishes the API on globalThis.xgrammar. This module is the one place that knows:
// it sets the two globals where absent, imports the bundle, starts the runtime, and removes what it set.
//
// XGrammar aborts its wasm runtime on bad input (an EBNF syntax error, an unsupported schema type) after printing
// "[FATAL] ...". The abort throws, but leaves the instance's stack and heap as they were mid-call; so this instance
// (the engine thread's, which holds the grammars that compile fast and their matchers: host.ts LocalHost) only ever
// sees input that a throwaway instance in a worker thread (sandbox.ts) has parsed and a grammar host has compiled.
import { createRequire } from "node:module";
import type * as XG from "@mlc-ai/web-xgrammar";

export type XGrammar = typeof XG;

let loading: Promise<XGrammar> | null = null;

/** The XGrammar API, its runtime started (once per process). */
export function loadXGrammar(): Promise<XGrammar> {
  return (loading ??= load());
}

async function load(): Promise<XGrammar> {
  const g = globalThis as Record<string, unknown>;
  const set: string[] = [];
  if (g.require === undefined) {
    g.require = createRequire(import.meta.url);
    set.push("require");
  }
  if (g.__filename === undefined) {
    g.__filename = createRequire(import.meta.url).resolve("@mlc-ai/web-xgrammar");
    set.push("__filename");
  }
  try {
    await import("@mlc-ai/web-xgrammar");
    const api = g.xgrammar as XGrammar | undefined;
    if (api === undefined || typeof api.GrammarCompiler !== "function")
      throw new Error("@mlc-ai/web-xgrammar did not publish its API on globalThis.xgrammar");
    // The runtime starts on the first call (it reads the globals then): start it now, while they exist.
    (await api.Grammar.builtinJSONGrammar()).dispose();
    return api;
  } finally {
    for (const k of set) delete g[k];
  }
}

/** Masks of at most this many words (1,024 ids) are read synchronously (nextTokenBitmaskNow); larger ones are not. */
export const SYNC_MASK_WORDS = 32;

/** The embind handle of a GrammarMatcher, as web-xgrammar 0.1.27 holds it (its `handle` field, private in its types). */
interface MatcherHandle {
  GetNextTokenBitmask(vocabSize: number): { size(): number; get(i: number): number; delete(): void };
}

const handleOf = (matcher: XG.GrammarMatcher): Partial<MatcherHandle> | undefined =>
  (matcher as unknown as { handle?: Partial<MatcherHandle> }).handle;

/**
 * Whether nextTokenBitmaskNow can read this matcher's bitmask: at most SYNC_MASK_WORDS words, and the handle of the
 * shape this version has (a new web-xgrammar may differ: the caller then awaits getNextTokenBitmask()).
 */
export function bitmaskReadableNow(matcher: XG.GrammarMatcher, vocabSize: number): boolean {
  return Math.ceil(vocabSize / 32) <= SYNC_MASK_WORDS && typeof handleOf(matcher)?.GetNextTokenBitmask === "function";
}

/**
 * The matcher's next-token bitmask without a turn of the event loop (where bitmaskReadableNow). getNextTokenBitmask()
 * is async only to await the runtime's start (loadXGrammar has) before it calls the embind method; here the same
 * method is called and its vector read word by word (an embind call a word: cheap for a few words; the async one
 * reads a large mask as a memory view). The same words (test/grammar/xgrammar.test.ts).
 */
export function nextTokenBitmaskNow(matcher: XG.GrammarMatcher, vocabSize: number): Int32Array {
  const words = Math.ceil(vocabSize / 32);
  const v = (handleOf(matcher) as MatcherHandle).GetNextTokenBitmask(vocabSize);
  try {
    if (v.size() !== words) throw new Error(`XGrammar's bitmask has ${v.size()} words, expected ${words}`);
    const out = new Int32Array(words);
    for (let i = 0; i < words; i++) out[i] = v.get(i);
    return out;
  } finally {
    v.delete();
  }
}
