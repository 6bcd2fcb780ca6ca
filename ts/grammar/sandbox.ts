// A throwaway XGrammar instance in a worker thread that parses every user grammar before the engine's instance sees
// it (xgrammar.ts: XGrammar aborts its wasm runtime on bad input, leaving that instance's stack and heap mid-call).
// A parse that aborts costs only this worker: it reports the error (XGrammar's "[FATAL]" line, which it would have
// printed) and exits, and the next check starts a fresh one.
import { createRequire } from "node:module";
import { Worker } from "node:worker_threads";

/** What the sandbox parses: XGrammar's four grammar sources (a regex travels as a structural tag). */
export type GrammarSource =
  | {
      kind: "json_schema";
      text: string;
      /** EBNF expressions of the schema's number placeholders (numberRange.ts), in order; absent: none. */
      numbers?: string[];
    }
  | { kind: "ebnf"; text: string }
  | { kind: "structural_tag"; text: string }
  | { kind: "builtin_json" };

// CommonJS, evaluated in the worker. In: {id, source, text}. Out: {id, error: string | null, text: the grammar's EBNF
// when asked and parsed}; after an abort the worker exits (its instance is no longer trusted).
const WORKER_SOURCE = `
const { parentPort, workerData } = require("node:worker_threads");
const { pathToFileURL } = require("node:url");
let fatal = "";
const quiet = (...args) => {
  const line = args.map(String).join(" ");
  const m = /\\[FATAL\\][^:]*:\\d+: (.*)/s.exec(line);
  if (m) fatal = m[1].trim();
};
console.error = quiet;
console.log = quiet;
console.warn = quiet;
globalThis.require = require;
globalThis.__filename = workerData.path;
// An eval'd worker has CommonJS \`module\` and \`exports\` as globals, so the UMD bundle takes its CommonJS branch
// and fills this worker's exports (not globalThis.xgrammar).
const ready = import(pathToFileURL(workerData.path).href).then(() => globalThis.xgrammar ?? module.exports);
parentPort.on("message", async ({ id, source, text }) => {
  const xg = await ready;
  fatal = "";
  try {
    let g;
    if (source.kind === "json_schema") g = await xg.Grammar.fromJSONSchema(source.text, false, -1);
    else if (source.kind === "ebnf") g = await xg.Grammar.fromEBNF(source.text);
    else if (source.kind === "structural_tag") g = await xg.Grammar.fromStructuralTag(source.text);
    else g = await xg.Grammar.builtinJSONGrammar();
    const ebnf = text ? g.toString() : null;
    g.dispose();
    parentPort.postMessage({ id, error: null, text: ebnf });
  } catch (e) {
    const aborted = e instanceof WebAssembly.RuntimeError || /Aborted/.test(String(e));
    parentPort.postMessage({ id, error: fatal || (e instanceof Error ? e.message : String(e)) });
    if (aborted) process.exit(0);
  }
});
`;

interface Pending {
  resolve: (reply: SandboxReply) => void;
  reject: (e: Error) => void;
}

class SandboxThread {
  private readonly worker: Worker;
  private readonly pending = new Map<number, Pending>();
  private nextId = 0;
  exited = false;

  constructor() {
    const path = createRequire(import.meta.url).resolve("@mlc-ai/web-xgrammar");
    this.worker = new Worker(WORKER_SOURCE, { eval: true, workerData: { path } });
    this.worker.on("message", (m: { id: number } & SandboxReply) => {
      const p = this.pending.get(m.id);
      this.pending.delete(m.id);
      if (this.pending.size === 0) this.worker.unref();
      p?.resolve(m);
    });
    const gone = (e: Error): void => {
      this.exited = true;
      for (const p of this.pending.values()) p.reject(e);
      this.pending.clear();
    };
    this.worker.on("error", gone);
    this.worker.on("exit", () => gone(new Error("the grammar sandbox thread exited")));
    // An idle sandbox must not keep the process alive; one with a check in flight must (ref'd in check()). After the
    // listeners, since adding a "message" listener refs the worker's port again.
    this.worker.unref();
  }

  check(source: GrammarSource, text: boolean): Promise<SandboxReply> {
    const id = this.nextId++;
    return new Promise((resolve, reject) => {
      if (this.pending.size === 0) this.worker.ref();
      this.pending.set(id, { resolve, reject });
      this.worker.postMessage({ id, source, text });
    });
  }
}

let thread: SandboxThread | null = null;
/** Checks run one at a time: an abort ends the thread, and a check queued behind it must not be lost with it. */
let queue: Promise<unknown> = Promise.resolve();

/** Parses `source` in the sandbox: null when XGrammar accepts it, else XGrammar's error message. */
export async function checkGrammar(source: GrammarSource): Promise<string | null> {
  return (await sandboxed(source, false)).error;
}

/** Parses `source` in the sandbox and, when XGrammar accepts it, gives its grammar as EBNF text. */
export function grammarText(source: GrammarSource): Promise<SandboxReply> {
  return sandboxed(source, true);
}

interface SandboxReply {
  error: string | null;
  text: string | null;
}

function sandboxed(source: GrammarSource, text: boolean): Promise<SandboxReply> {
  const run = async (): Promise<SandboxReply> => {
    for (let attempt = 0; ; attempt++) {
      if (thread === null || thread.exited) thread = new SandboxThread();
      try {
        return await thread.check(source, text);
      } catch (e) {
        thread = null;
        if (attempt > 0) throw e; // a fresh thread that dies too: something other than the input is wrong
      }
    }
  };
  const result = queue.then(run, run);
  queue = result.catch(() => undefined);
  return result;
}
