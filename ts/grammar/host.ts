// XGrammar instances in worker threads ("grammar hosts"), each holding a vocabulary's tokenizer info and compiler, the
// grammars compiled on it and their matchers. XGrammar's compile is one synchronous wasm call that takes seconds for a
// large vocabulary (a string with maxLength 100 over a 150k-token vocabulary: 23 s on this machine), and a compiled
// grammar cannot leave the instance that compiled it (web-xgrammar 0.1.27 has no serialization); so compiling on the
// engine's thread stalled every sequence of every model, and compiling anywhere else means matching there too.
// GrammarSet (grammars.ts) picks the host of each new grammar so that a compile does not run where other sequences'
// matchers wait for their masks (GrammarSet.pickHost).
//
// Calls are batched: every call made in one turn of the event loop travels in one message, and the host answers the
// batch in one message (masks transferred, not copied), so a step's constrained rows cost one round trip per host.
// Input reaches a host only after the sandbox (sandbox.ts) has parsed it: XGrammar aborts its wasm runtime on bad
// input, and a host that aborts anyway exits, failing what it held (its grammars are compiled afresh on another).
import { createRequire } from "node:module";
import { Worker } from "node:worker_threads";
import type * as XG from "@mlc-ai/web-xgrammar";
import { GrammarHostError } from "../errors/index.js";
import type { GrammarSource } from "./sandbox.js";
import type { GrammarVocab } from "./types.js";
import { bitmaskReadableNow, loadXGrammar, nextTokenBitmaskNow, type XGrammar } from "./xgrammar.js";

/** One op of a batch. `id` present: the host answers it. */
export type HostOp =
  | { op: "compile"; id: number; gid: number; source: GrammarSource }
  | { op: "freeGrammar"; gid: number }
  | {
      op: "step";
      id: number;
      /** The matcher (created on its first step, of grammar gid). */
      mid: number;
      gid: number;
      /** Back to the grammar's start first. */
      reset: boolean;
      /** Then roll back this many accepted tokens. */
      rollback: number;
      /** Then accept these, stopping at the first refused one or once the grammar has terminated. */
      accept: number[];
      /** Then the next token's bitmask (unless terminated). */
      mask: boolean;
    }
  | { op: "freeMatcher"; mid: number };

export interface StepReply {
  /** Tokens of `accept` accepted (fewer than sent: one was refused, or the grammar terminated before it). */
  accepted: number;
  /** The token after the accepted ones was refused. */
  rejected: boolean;
  terminated: boolean;
  mask: Int32Array | null;
}

// CommonJS, evaluated in the worker. In: an array of ops. Out: an array of {id, error?, ...reply} for ops with an id.
const WORKER_SOURCE = `
const { parentPort, workerData } = require("node:worker_threads");
const { pathToFileURL } = require("node:url");
let fatal = "";
const quiet = (...args) => {
  const m = /\\[FATAL\\][^:]*:\\d+: (.*)/s.exec(args.map(String).join(" "));
  if (m) fatal = m[1].trim();
};
console.error = quiet;
console.log = quiet;
console.warn = quiet;
globalThis.require = require;
globalThis.__filename = workerData.path;
const v = workerData.vocab;
const ready = import(pathToFileURL(workerData.path).href).then(async () => {
  const xg = globalThis.xgrammar ?? module.exports;
  const info = await xg.TokenizerInfo.createTokenizerInfo(v.tokens, v.vocabType, v.prependSpace, v.vocabSize, v.stopIds);
  const compiler = await xg.GrammarCompiler.createGrammarCompiler(info);
  return { xg, compiler };
});
const grammars = new Map();
const matchers = new Map();
async function run({ xg, compiler }, op) {
  switch (op.op) {
    case "compile": {
      const s = op.source;
      const t0 = performance.now();
      let g;
      if (s.kind === "json_schema") g = await compiler.compileJSONSchema(s.text, false, -1);
      else if (s.kind === "ebnf") {
        const parsed = await xg.Grammar.fromEBNF(s.text);
        try { g = await compiler.compileGrammar(parsed); } finally { parsed.dispose(); }
      } else if (s.kind === "structural_tag") g = await compiler.compileStructuralTag(s.text);
      else g = await compiler.compileBuiltinJSONGrammar();
      // createGrammarMatcher reads the size through tokenizerInfo(), a handle it never frees: answer it here.
      Object.defineProperty(g, "tokenizerInfo", { value: () => ({ getVocabSize: () => v.vocabSize }) });
      grammars.set(op.gid, g);
      return { ms: performance.now() - t0 };
    }
    case "freeGrammar":
      grammars.get(op.gid)?.dispose();
      grammars.delete(op.gid);
      return null;
    case "freeMatcher":
      matchers.get(op.mid)?.dispose();
      matchers.delete(op.mid);
      return null;
    case "step": {
      let m = matchers.get(op.mid);
      if (m === undefined) {
        const g = grammars.get(op.gid);
        if (g === undefined) throw new Error("grammar " + op.gid + " is not on this host");
        m = await xg.GrammarMatcher.createGrammarMatcher(g);
        matchers.set(op.mid, m);
      }
      if (op.reset) m.reset();
      if (op.rollback > 0) m.rollBack(op.rollback);
      let accepted = 0;
      let rejected = false;
      for (const t of op.accept) {
        if (m.isTerminated()) break;
        if (!m.acceptToken(t)) { rejected = true; break; }
        accepted++;
      }
      const terminated = m.isTerminated();
      const mask = op.mask && !terminated && !rejected ? await m.getNextTokenBitmask() : null;
      return { accepted, rejected, terminated, mask };
    }
  }
}
let queue = Promise.resolve();
parentPort.on("message", (batch) => {
  queue = queue.then(async () => {
    const replies = [];
    const transfer = [];
    let aborted = false;
    let api;
    try {
      api = await ready;
    } catch (e) {
      for (const op of batch) if (op.id !== undefined) replies.push({ id: op.id, error: fatal || String(e) });
      parentPort.postMessage(replies);
      process.exit(0);
    }
    for (const op of batch) {
      if (aborted) {
        if (op.id !== undefined) replies.push({ id: op.id, error: "the grammar host aborted on an earlier call" });
        continue;
      }
      fatal = "";
      try {
        const r = await run(api, op);
        if (op.id !== undefined) {
          replies.push({ id: op.id, ...r });
          if (r.mask) transfer.push(r.mask.buffer);
        }
      } catch (e) {
        aborted = e instanceof WebAssembly.RuntimeError || /Aborted/.test(String(e));
        if (op.id !== undefined) replies.push({ id: op.id, error: fatal || (e instanceof Error ? e.message : String(e)) });
      }
    }
    parentPort.postMessage(replies, transfer);
    if (aborted) process.exit(0);
  });
});
`;

interface Pending {
  resolve: (reply: Record<string, unknown>) => void;
  reject: (e: Error) => void;
}

/** Where a grammar's matchers live: a host thread (GrammarHost) or the engine's own thread (LocalHost). */
export interface MatcherHost {
  readonly dead: boolean;
  /** Its matchers live on the engine's thread (LocalHost): stepNow can answer, no message travels. */
  readonly onThisThread: boolean;
  /** Matchers created and not freed. */
  matchers: number;
  freeGrammar(gid: number): void;
  step(op: Omit<Extract<HostOp, { op: "step" }>, "id" | "op">): Promise<StepReply>;
  /**
   * step() answered at once, on the calling thread, or null when it cannot be (a host thread; a matcher not made
   * yet, which XGrammar makes asynchronously; a mask too large to read synchronously): nothing was done then. A
   * step's rows of a small vocabulary are answered without a promise each (ModelSlot.prepareConstraints).
   */
  stepNow(op: Omit<Extract<HostOp, { op: "step" }>, "id" | "op">): StepReply | null;
  freeMatcher(mid: number): void;
  terminate(): void;
}

/** Host threads started and not yet exited, across the process (tests end one to check what a crash does). */
export const liveGrammarHosts = new Set<GrammarHost>();

export class GrammarHost implements MatcherHost {
  readonly onThisThread = false;
  private readonly worker: Worker;
  private readonly pending = new Map<number, Pending>();
  private outbox: HostOp[] = [];
  private nextId = 0;
  /** The worker exited (aborted, terminated): every call fails. */
  dead = false;
  /** How it ended ("exited (code 1)"), once dead. */
  exitReason = "";
  /** Compiles sent and not answered. */
  compiling = 0;
  /** Matchers created and not freed. */
  matchers = 0;
  /** Grammars compiled here and not freed. */
  grammars = 0;

  constructor(vocab: GrammarVocab, vocabSize: number, stopTokenIds: readonly number[]) {
    const path = createRequire(import.meta.url).resolve("@mlc-ai/web-xgrammar");
    const tokens = vocab.tokens.slice(0, vocabSize);
    while (tokens.length < vocabSize) tokens.push(""); // embedding rows past the tokenizer: never allowed
    const workerData = {
      path,
      vocab: {
        tokens,
        vocabType: vocab.vocabType,
        prependSpace: vocab.prependSpace,
        vocabSize,
        stopIds: [...stopTokenIds],
      },
    };
    this.worker = new Worker(WORKER_SOURCE, { eval: true, workerData });
    this.worker.on("message", (replies: Array<{ id: number; error?: string }>) => {
      for (const r of replies) {
        const p = this.pending.get(r.id);
        this.pending.delete(r.id);
        if (r.error !== undefined) p?.reject(new Error(r.error));
        else p?.resolve(r);
      }
      if (this.pending.size === 0) this.worker.unref();
    });
    // A thread that ends (an XGrammar abort, a crash, terminate()) takes its grammars and matchers with it: what waits
    // on it fails with a GrammarHostError; GrammarSet starts a new host for the next compile (pickHost).
    const gone = (why: string, cause?: unknown): void => {
      liveGrammarHosts.delete(this);
      if (this.dead) return;
      this.dead = true;
      this.exitReason = why;
      const e = new GrammarHostError(`the grammar host thread ${why}`, { cause });
      for (const p of this.pending.values()) p.reject(e);
      this.pending.clear();
    };
    this.worker.on("error", (e) => gone(`failed (${e.message})`, e));
    this.worker.on("exit", (code) => gone(`exited (code ${code})`));
    liveGrammarHosts.add(this);
    // An idle host must not keep the process alive; one with a call in flight must (ref'd in call()).
    this.worker.unref();
  }

  /** Compiles `source` as grammar `gid`: the milliseconds XGrammar took; rejects with XGrammar's message. */
  async compile(gid: number, source: GrammarSource): Promise<number> {
    this.compiling++;
    try {
      const r = await this.call({ op: "compile", id: 0, gid, source });
      this.grammars++;
      return r.ms as number;
    } finally {
      this.compiling--;
    }
  }

  freeGrammar(gid: number): void {
    this.grammars--;
    this.send({ op: "freeGrammar", gid });
  }

  step(op: Omit<Extract<HostOp, { op: "step" }>, "id" | "op">): Promise<StepReply> {
    return this.call({ op: "step", id: 0, ...op }) as unknown as Promise<StepReply>;
  }

  /** Never at once: the matchers live on the thread. */
  stepNow(): null {
    return null;
  }

  freeMatcher(mid: number): void {
    this.send({ op: "freeMatcher", mid });
  }

  /** Ends the thread: its instance, grammars and matchers go with it. */
  terminate(): void {
    if (this.dead) return;
    void this.worker.terminate();
  }

  private call(op: HostOp): Promise<Record<string, unknown>> {
    if (this.dead) return Promise.reject(new GrammarHostError(`the grammar host thread ${this.exitReason}`));
    const id = ++this.nextId;
    return new Promise((resolve, reject) => {
      if (this.pending.size === 0) this.worker.ref();
      this.pending.set(id, { resolve, reject });
      this.send({ ...op, id } as HostOp);
    });
  }

  /** Queues an op; the batch goes at the end of this turn. */
  private send(op: HostOp): void {
    if (this.dead) return;
    if (this.outbox.length === 0)
      queueMicrotask(() => {
        const batch = this.outbox;
        this.outbox = [];
        if (!this.dead) this.worker.postMessage(batch);
      });
    this.outbox.push(op);
  }
}

/**
 * The engine thread's own XGrammar instance, for grammars a host compiled in a few milliseconds: compiled again here
 * (stalling the thread about as long), their matchers answer without a round trip to another thread, which costs more
 * than a cheap grammar's mask (a round trip waits for the host thread to be scheduled; on a busy machine a
 * millisecond). Same calls as GrammarHost's; input reaches it only after the sandbox parsed it and a host compiled it.
 */
export class LocalHost implements MatcherHost {
  readonly onThisThread = true;
  dead = false;
  matchers = 0;
  private readonly grammars = new Map<number, XG.CompiledGrammar>();
  private readonly matcherById = new Map<number, XG.GrammarMatcher>();
  /** Matchers being made (step() awaiting XGrammar); one freed meanwhile is taken out, and freed once made. */
  private readonly making = new Set<number>();
  private readonly stops: ReadonlySet<number>;
  /** Matchers that have terminated (accepted a stop token since their last reset or rollback). */
  private readonly ended = new Set<number>();
  private api: Promise<{ xg: XGrammar; compiler: XG.GrammarCompiler; info: XG.TokenizerInfo }> | null = null;

  constructor(
    private readonly vocab: GrammarVocab,
    private readonly vocabSize: number,
    private readonly stopTokenIds: readonly number[],
  ) {
    this.stops = new Set(stopTokenIds);
  }

  async compile(gid: number, source: GrammarSource): Promise<void> {
    const { xg, compiler } = await this.start();
    if (this.dead) throw new Error("the grammar host was terminated");
    let g: XG.CompiledGrammar;
    if (source.kind === "json_schema") g = await compiler.compileJSONSchema(source.text, false, -1);
    else if (source.kind === "ebnf") {
      // compileGrammar(text) would parse it into a Grammar it never frees: parse, compile, free.
      const parsed = await xg.Grammar.fromEBNF(source.text);
      try {
        g = await compiler.compileGrammar(parsed);
      } finally {
        parsed.dispose();
      }
    } else if (source.kind === "structural_tag") g = await compiler.compileStructuralTag(source.text);
    else g = await compiler.compileBuiltinJSONGrammar();
    if (this.dead) {
      g.dispose();
      throw new Error("the grammar host was terminated");
    }
    // createGrammarMatcher reads the size through tokenizerInfo(), a handle it never frees (each one pinning the
    // tokenizer info): answer it here.
    const vocabSize = this.vocabSize;
    Object.defineProperty(g, "tokenizerInfo", { value: () => ({ getVocabSize: () => vocabSize }) });
    this.grammars.set(gid, g);
  }

  freeGrammar(gid: number): void {
    this.grammars.get(gid)?.dispose();
    this.grammars.delete(gid);
  }

  async step(op: Omit<Extract<HostOp, { op: "step" }>, "id" | "op">): Promise<StepReply> {
    if (this.dead) throw new Error("the grammar host was terminated");
    let m = this.matcherById.get(op.mid);
    if (m === undefined) {
      const g = this.grammars.get(op.gid);
      if (g === undefined) throw new Error(`grammar ${op.gid} is not on this host`);
      this.making.add(op.mid);
      try {
        const { xg } = await this.start();
        m = await xg.GrammarMatcher.createGrammarMatcher(g);
      } catch (e) {
        this.making.delete(op.mid);
        throw e;
      }
      // Its sequence ended (freeMatcher) or the host was terminated while XGrammar made it: kept, nothing would ever
      // free it (a late mask's prepare may still be making it when its step has failed and its request gone).
      if (!this.making.delete(op.mid) || this.dead) {
        m.dispose();
        throw new Error("structured output: the matcher was freed while it was being made (the sequence ended)");
      }
      this.matcherById.set(op.mid, m);
    }
    const r = this.apply(m, op);
    if (r.mask === undefined) r.mask = await m.getNextTokenBitmask();
    return r as StepReply;
  }

  stepNow(op: Omit<Extract<HostOp, { op: "step" }>, "id" | "op">): StepReply | null {
    if (this.dead) throw new Error("the grammar host was terminated");
    const m = this.matcherById.get(op.mid);
    // Checked before anything changes the matcher: null leaves it as it was, for step() to do it all.
    if (m === undefined || (op.mask && !bitmaskReadableNow(m, this.vocabSize))) return null;
    const r = this.apply(m, op);
    if (r.mask === undefined) r.mask = nextTokenBitmaskNow(m, this.vocabSize);
    return r as StepReply;
  }

  /** The op's reset, rollback and accepts; mask undefined where the bitmask is still to be read (null: none). */
  private apply(
    m: XG.GrammarMatcher,
    op: Omit<Extract<HostOp, { op: "step" }>, "id" | "op">,
  ): Omit<StepReply, "mask"> & { mask: Int32Array | null | undefined } {
    if (op.reset) m.reset();
    if (op.rollback > 0) m.rollBack(op.rollback);
    let accepted = 0;
    let rejected = false;
    // Whether the matcher has terminated, kept here rather than asked (an embind call costs ~0.3 us through
    // web-xgrammar's generic invoker, and a step accepts a token a row): it terminates exactly when it accepts one of
    // its stop tokens (the tokenizer info's, which it was made with), and a reset or a rollback (over that token, the
    // last it took) opens it again. test/grammar/localHost.test.ts checks it against isTerminated along a walk.
    let terminated = op.reset || op.rollback > 0 ? false : this.ended.has(op.mid);
    for (const t of op.accept) {
      if (terminated) break;
      if (!m.acceptToken(t)) {
        rejected = true;
        break;
      }
      accepted++;
      terminated = this.stops.has(t);
    }
    if (terminated) this.ended.add(op.mid);
    else this.ended.delete(op.mid);
    return { accepted, rejected, terminated, mask: op.mask && !terminated && !rejected ? undefined : null };
  }

  freeMatcher(mid: number): void {
    this.making.delete(mid);
    this.ended.delete(mid);
    this.matcherById.get(mid)?.dispose();
    this.matcherById.delete(mid);
  }

  /** Matchers this host holds (made and not freed), for tests: each holds memory in XGrammar's wasm heap. */
  get matchersHeld(): number {
    return this.matcherById.size;
  }

  /** Frees every grammar and matcher, the compiler and the tokenizer info. */
  terminate(): void {
    if (this.dead) return;
    this.dead = true;
    for (const m of this.matcherById.values()) m.dispose();
    for (const g of this.grammars.values()) g.dispose();
    this.matcherById.clear();
    this.grammars.clear();
    this.api?.then(
      ({ compiler, info }) => {
        compiler.dispose();
        info.dispose();
      },
      () => undefined,
    );
  }

  private start(): Promise<{ xg: XGrammar; compiler: XG.GrammarCompiler; info: XG.TokenizerInfo }> {
    return (this.api ??= (async () => {
      const xg = await loadXGrammar();
      const tokens = this.vocab.tokens.slice(0, this.vocabSize);
      while (tokens.length < this.vocabSize) tokens.push("");
      const info = await xg.TokenizerInfo.createTokenizerInfo(
        tokens,
        this.vocab.vocabType,
        this.vocab.prependSpace,
        this.vocabSize,
        [...this.stopTokenIds],
      );
      return { xg, compiler: await xg.GrammarCompiler.createGrammarCompiler(info), info };
    })());
  }
}
