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
