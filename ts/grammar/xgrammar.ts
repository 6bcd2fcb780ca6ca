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

/**
 * The runtime's linear memory, so that nextTokenBitmaskNow reads a bitmask's words from it directly instead of one
 * embind call each: found among `seenMemories` by the first read (identifyMemory); null until then, and for good where
 * none is the runtime's (then every read goes through embind).
 */
let wasmMemory: WasmMemory | null = null;

/**
 * Every memory a WebAssembly.instantiate exported or imported while the runtime started (load). The runtime's is one
 * of them, but not necessarily the first: anything else in the process may instantiate a module in that window (Node's
 * fetch starts undici's llhttp wasm on its first use, with a memory of its own). Held weakly: the runtime holds its
 * own, and another module's is not kept alive by this (a large vocabulary never reads a mask here, so never looks).
 */
let seenMemories: Array<WeakRef<WasmMemory>> = [];

/** What this module uses of the WebAssembly global (its types are not in this build's libs: no DOM lib). */
interface WasmMemory {
  readonly buffer: ArrayBuffer;
}
interface WasmInstance {
  readonly exports: Record<string, unknown>;
}
interface WasmApi {
  instantiate: (...args: unknown[]) => Promise<WasmInstance | { instance: WasmInstance }>;
  Instance: abstract new (...args: never[]) => WasmInstance;
  Memory: abstract new (...args: never[]) => WasmMemory;
}
/** Whether bitmasks are read from wasmMemory: decided by the first read (identifyMemory); off for good if not found. */
let directRead: "unchecked" | "on" | "off" = "unchecked";

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
    // The runtime starts on the first call (it reads the globals then): start it now, while they exist. The
    // instantiations meanwhile are watched for the memories they export or import (seenMemories), whoever made them:
    // which one is the runtime's is found by the first bitmask read (identifyMemory).
    const wasm = (globalThis as unknown as { WebAssembly: WasmApi }).WebAssembly;
    const instantiate = wasm.instantiate;
    let watching = true;
    const watched = async function (this: unknown, ...args: unknown[]) {
      const r = await instantiate.apply(this, args);
      if (watching)
        try {
          const instance = r instanceof wasm.Instance ? r : (r as { instance: WasmInstance }).instance;
          const imports = (args[1] ?? {}) as Record<string, Record<string, unknown>>;
          const found = [
            ...Object.values(instance.exports),
            ...Object.values(imports).flatMap((m) => Object.values(m)),
          ];
          for (const v of found)
            if (v instanceof wasm.Memory && !seenMemories.some((r) => r.deref() === v))
              seenMemories.push(new WeakRef(v as WasmMemory));
        } catch {
          // Another module's instantiation is never failed by this watch: its memory is just not seen.
        }
      return r;
    };
    wasm.instantiate = watched;
    try {
      (await api.Grammar.builtinJSONGrammar()).dispose();
    } finally {
      // Inert from here (no memory is kept past the start); put back unless someone wrapped it after us meanwhile.
      watching = false;
      if (wasm.instantiate === watched) wasm.instantiate = instantiate;
    }
    return api;
  } finally {
    for (const k of set) delete g[k];
  }
}

/** Masks of at most this many words (1,024 ids) are read synchronously (nextTokenBitmaskNow); larger ones are not. */
export const SYNC_MASK_WORDS = 32;

/** An embind std::vector<int32_t> handle; `$$.ptr` is the vector's address in the runtime's memory (embind's own). */
interface VectorHandle {
  size(): number;
  get(i: number): number;
  set?(i: number, value: number): unknown;
  delete(): void;
  $$?: { ptr?: number };
}

/** The embind handle of a GrammarMatcher, as web-xgrammar 0.1.27 holds it (its `handle` field, private in its types). */
interface MatcherHandle {
  GetNextTokenBitmask(vocabSize: number): VectorHandle;
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
 * method is called and its vector's words read straight from the runtime's memory (the vector's data pointer and end,
 * libc++'s layout, at the address embind holds), as getNextTokenBitmask's memory view does: each embind call costs
 * ~0.5 us through web-xgrammar's generic invoker, and a word by word read made 2 + words of them a row a step. The
 * first read finds which memory is the runtime's (identifyMemory); where none is, or the layout is not libc++'s
 * (another build), every read goes word by word. The same words either way (test/grammar/xgrammar.test.ts,
 * xgrammarMemory.test.ts).
 */
export function nextTokenBitmaskNow(matcher: XG.GrammarMatcher, vocabSize: number): Int32Array {
  const words = Math.ceil(vocabSize / 32);
  const v = (handleOf(matcher) as MatcherHandle).GetNextTokenBitmask(vocabSize);
  try {
    const out = new Int32Array(words);
    if (directRead === "on" && readDirect(v, out)) return out;
    if (v.size() !== words) throw new Error(`XGrammar's bitmask has ${v.size()} words, expected ${words}`);
    for (let i = 0; i < words; i++) out[i] = v.get(i);
    // After the words are read: what identifyMemory writes into the vector (or fails to) reaches no mask.
    if (directRead === "unchecked") directRead = identifyMemory(v, out) ? "on" : "off";
    return out;
  } finally {
    v.delete();
  }
}

let heap: Int32Array | null = null;

/** Reads vector `v`'s words into `out` from the runtime's memory: false (nothing read) if it cannot be done here. */
function readDirect(v: VectorHandle, out: Int32Array): boolean {
  if (wasmMemory === null) return false;
  if (heap === null || heap.buffer !== wasmMemory.buffer) heap = new Int32Array(wasmMemory.buffer); // after a growth
  const at = wordsAt(heap, v, out.length);
  if (at < 0) return false;
  for (let i = 0; i < out.length; i++) out[i] = heap[at + i];
  return true;
}

/**
 * Where vector `v`'s `words` words start in `memory` (an index into it), read as libc++ lays a vector out (its data
 * pointer, then its end, at the address embind holds); -1 where that does not fit a vector of `words` words there.
 */
function wordsAt(memory: Int32Array, v: VectorHandle, words: number): number {
  const ptr = v.$$?.ptr;
  if (typeof ptr !== "number" || ptr < 0 || (ptr & 3) !== 0 || ptr + 8 > memory.byteLength) return -1;
  const begin = memory[ptr >> 2] >>> 0;
  const end = memory[(ptr >> 2) + 1] >>> 0;
  if ((begin & 3) !== 0 || end - begin !== 4 * words || end > memory.byteLength) return -1;
  return begin >> 2;
}

/** Two words written into a vector through embind to see where they land (identifyMemory); any two distinct values. */
const PROBES = [0x2545f491, -0x6b2fb645];

/**
 * Finds the runtime's memory among those seen while it started, with a bitmask vector `v` whose words (read through
 * embind) are `expected`: the one where the vector's words sit where libc++'s layout says, and where words written
 * through embind's own `set` appear there (two probe values, then the word put back). Reading alone could be fooled
 * (another module's memory holding, by chance or by the same allocations, the same bytes at that address); a write
 * through the runtime cannot. True when exactly one memory is the runtime's (then wasmMemory); false, never a throw,
 * where none is or the handle is not what this version's is (every read then goes through embind).
 */
function identifyMemory(v: VectorHandle, expected: Int32Array): boolean {
  const candidates = seenMemories.map((r) => r.deref()).filter((m) => m !== undefined);
  seenMemories = []; // looked at once
  try {
    const words = expected.length;
    const found = candidates.filter((memory) => {
      const view = new Int32Array(memory.buffer);
      const at = wordsAt(view, v, words);
      if (at < 0 || expected.some((w, i) => view[at + i] !== w)) return false;
      try {
        // A fresh view after each write: a call into the runtime may grow its memory (the old buffer then detached).
        return PROBES.every((p) => (v.set!(0, p), new Int32Array(memory.buffer)[at] === p));
      } finally {
        v.set!(0, expected[0]);
      }
    });
    wasmMemory = found.length === 1 ? found[0] : null;
  } catch {
    wasmMemory = null; // no `set`, or one that throws: another build
  }
  return wasmMemory !== null;
}

/** How nextTokenBitmaskNow reads (for tests): "on" once a direct read matched the embind read. */
export function bitmaskReadMode(): "unchecked" | "on" | "off" {
  return directRead;
}
