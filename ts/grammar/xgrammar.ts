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
 * The runtime's linear memory, caught as it is instantiated (load), so that nextTokenBitmaskNow reads a bitmask's
 * words from it directly instead of one embind call each; null where it was not found (then it does not).
 */
let wasmMemory: WasmMemory | null = null;

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
/** Whether the direct read gave the embind read's words on its first use (checked once; off for good if not). */
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
    // The runtime starts on the first call (it reads the globals then): start it now, while they exist. Its
    // instantiation is watched for the memory it exports or imports (wasmMemory).
    const wasm = (globalThis as unknown as { WebAssembly: WasmApi }).WebAssembly;
    const instantiate = wasm.instantiate;
    wasm.instantiate = async function (this: unknown, ...args: unknown[]) {
      const r = await instantiate.apply(this, args);
      const instance = r instanceof wasm.Instance ? r : (r as { instance: WasmInstance }).instance;
      const imports = (args[1] ?? {}) as Record<string, Record<string, unknown>>;
      const found = [...Object.values(instance.exports), ...Object.values(imports).flatMap((m) => Object.values(m))];
      wasmMemory ??= (found.find((v) => v instanceof wasm.Memory) as WasmMemory | undefined) ?? null;
      return r;
    };
    try {
      (await api.Grammar.builtinJSONGrammar()).dispose();
    } finally {
      wasm.instantiate = instantiate;
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
 * first direct read is checked against the embind read; where the memory was not found or they differ (another
 * build), every read goes word by word. The same words either way (test/grammar/xgrammar.test.ts).
 */
export function nextTokenBitmaskNow(matcher: XG.GrammarMatcher, vocabSize: number): Int32Array {
  const words = Math.ceil(vocabSize / 32);
  const v = (handleOf(matcher) as MatcherHandle).GetNextTokenBitmask(vocabSize);
  try {
    const out = new Int32Array(words);
    if (directRead !== "off" && readDirect(v, out)) {
      if (directRead === "on") return out;
      directRead = Array.from(out).every((w, i) => w === v.get(i)) && v.size() === words ? "on" : "off";
      if (directRead === "on") return out;
    }
    if (v.size() !== words) throw new Error(`XGrammar's bitmask has ${v.size()} words, expected ${words}`);
    for (let i = 0; i < words; i++) out[i] = v.get(i);
    return out;
  } finally {
    v.delete();
  }
}

let heap: Int32Array | null = null;

/** Reads vector `v`'s words into `out` from the runtime's memory: false (nothing read) if it cannot be done here. */
function readDirect(v: VectorHandle, out: Int32Array): boolean {
  const ptr = v.$$?.ptr;
  if (wasmMemory === null || typeof ptr !== "number" || (ptr & 3) !== 0) return false;
  if (heap === null || heap.buffer !== wasmMemory.buffer) heap = new Int32Array(wasmMemory.buffer); // after a growth
  const begin = heap[ptr >> 2] >>> 0;
  const end = heap[(ptr >> 2) + 1] >>> 0;
  if ((begin & 3) !== 0 || end - begin !== 4 * out.length || end > heap.byteLength) return false;
  for (let i = 0, at = begin >> 2; i < out.length; i++) out[i] = heap[at + i];
  return true;
}

/** How nextTokenBitmaskNow reads (for tests): "on" once a direct read matched the embind read. */
export function bitmaskReadMode(): "unchecked" | "on" | "off" {
  return directRead;
}
