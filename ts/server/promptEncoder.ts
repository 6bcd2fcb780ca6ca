// Prompts tokenized off the event loop. Encoding is linear in the text (0.8 s a million characters with the bundled
// tokenizer, more with a large BPE vocabulary), so a body at the size limit would hold the loop, and with it /health
// and every stream, for a second or more. Texts past OFF_THREAD_CHARS go to a worker thread holding its own copy of
// the model's tokenizer (tokenizer.json and tokenizer_config.json through @huggingface/tokenizers, built as
// ModelTokenizer builds it, and checked against it on a probe text before first use); shorter ones encode in place.
import { createRequire } from "node:module";
import { Worker } from "node:worker_threads";
import type { ModelTokenizer } from "../model/tokenizer.js";

/** Characters (all of a request's texts together) past which encoding moves to the worker: ~6 ms in place. */
export const OFF_THREAD_CHARS = 8192;

/** Special tokens, digits, whitespace runs and multi-byte characters: a copy that disagrees here is not used. */
const PROBE = "Probe: 7*(8+5)-19 = 72.\n\t  <think>café 漢字 🙂</think> \\boxed{72}<|eos|>";

// CommonJS, evaluated in the worker: no file to ship beside the compiled code, and no TypeScript loader needed.
// In: {id, texts, addSpecialTokens}. Out: {id, ids: Int32Array[] (transferred)} or {id, error}.
const WORKER_SOURCE = `
const { parentPort, workerData } = require("node:worker_threads");
const { existsSync, readFileSync } = require("node:fs");
const { join } = require("node:path");
const { Tokenizer } = require(workerData.tokenizersPath);
const json = JSON.parse(readFileSync(join(workerData.modelDir, "tokenizer.json"), "utf8"));
const configFile = join(workerData.modelDir, "tokenizer_config.json");
const config = existsSync(configFile) ? JSON.parse(readFileSync(configFile, "utf8")) : {};
const tokenizer = new Tokenizer(json, config);
parentPort.on("message", ({ id, texts, addSpecialTokens }) => {
  try {
    const ids = texts.map((t) => Int32Array.from(tokenizer.encode(t, { add_special_tokens: addSpecialTokens }).ids));
    parentPort.postMessage({ id, ids }, ids.map((a) => a.buffer));
  } catch (e) {
    parentPort.postMessage({ id, error: e instanceof Error ? e.message : String(e) });
  }
});
`;

interface Pending {
  resolve: (ids: number[][]) => void;
  reject: (e: Error) => void;
}

/** One worker thread and the requests it owes an answer. */
class TokenizerThread {
  private readonly worker: Worker;
  private readonly pending = new Map<number, Pending>();
  private nextId = 0;
  /** Set when the thread died: its callers fall back to encoding in place. */
  failure: Error | null = null;

  constructor(modelDir: string) {
    const tokenizersPath = createRequire(import.meta.url).resolve("@huggingface/tokenizers");
    this.worker = new Worker(WORKER_SOURCE, { eval: true, workerData: { modelDir, tokenizersPath } });
    this.worker.unref(); // a server that is done exits without closing it
    this.worker.on("message", (m: { id: number; ids?: Int32Array[]; error?: string }) => {
      const p = this.pending.get(m.id);
      this.pending.delete(m.id);
      if (m.error !== undefined) p?.reject(new Error(`tokenizer thread: ${m.error}`));
      else p?.resolve(m.ids!.map((a) => Array.from(a)));
    });
    const fail = (e: Error): void => {
      this.failure ??= e;
      for (const p of this.pending.values()) p.reject(e);
      this.pending.clear();
    };
    this.worker.on("error", fail);
    this.worker.on("exit", (code) => fail(new Error(`tokenizer thread exited (code ${code})`)));
  }

  encode(texts: string[], addSpecialTokens: boolean): Promise<number[][]> {
    if (this.failure !== null) return Promise.reject(this.failure);
    const id = this.nextId++;
    return new Promise((resolve, reject) => {
      this.pending.set(id, { resolve, reject });
      this.worker.postMessage({ id, texts, addSpecialTokens });
    });
  }

  async terminate(): Promise<void> {
    await this.worker.terminate();
  }
}

/** Encodes a request's prompt texts: in place when short, on the tokenizer thread when long. */
export class PromptEncoder {
  private thread: Promise<TokenizerThread | null> | null = null;

  constructor(
    private readonly tokenizer: ModelTokenizer,
    /** The folder the tokenizer was loaded from: the thread loads its copy from there. */
    private readonly modelDir: string,
  ) {}

  /** Token ids of each text (`addSpecialTokens`: the tokenizer's post-processor, e.g. a bos). */
  async encode(texts: string[], addSpecialTokens: boolean): Promise<number[][]> {
    let chars = 0;
    for (const t of texts) chars += t.length;
    if (chars > OFF_THREAD_CHARS) {
      const thread = await (this.thread ??= this.start());
      if (thread !== null && thread.failure === null) return thread.encode(texts, addSpecialTokens);
    }
    return texts.map((t) => this.tokenizer.encode(t, { addSpecialTokens }));
  }

  /** Stops the thread (the encoder still works, in place, until a long text starts a new one). */
  async close(): Promise<void> {
    const thread = await this.thread;
    this.thread = null;
    await thread?.terminate();
  }

  /** A thread whose tokenizer agrees with the model's on the probe, else null (every text then encodes in place). */
  private async start(): Promise<TokenizerThread | null> {
    let thread: TokenizerThread | null = null;
    try {
      thread = new TokenizerThread(this.modelDir);
      const [ids] = await thread.encode([PROBE], true);
      const expected = this.tokenizer.encode(PROBE, { addSpecialTokens: true });
      if (ids.length === expected.length && ids.every((id, i) => id === expected[i])) return thread;
    } catch {
      // no tokenizer.json in modelDir, or it does not load: encode in place
    }
    await thread?.terminate();
    return null;
  }
}
