// One sequence's constraint: which tokens each of its positions may take, derived from its token list alone (so
// preemption, forks, a verifier's rollback or a stop string's cut need no hook: the state follows the tokens).
//
// Phases, with the model's think tokens and thought "free": a thought the prompt left open ("thinking") is free until
// `</think>`; with no marker in the prompt the first token may open one ("opening": the format's first tokens or
// `<think>`); after the thought closes ("answer") every token is the format's. Near the end of the token budget an
// open thought is closed (`</think>` is the only token allowed) so the answer fits. With thought "none", or a model
// without think tokens, every generated token is the format's.
//
// Masks are XGrammar's bitmasks (ceil(V / 32) int32 words, bit t & 31 of word t >> 5 set = allowed), computed in
// prepare() (async: it may wait for the grammar's compile, and the matcher lives on the grammar's host thread,
// host.ts, which answers a step's calls in one batch) and then read synchronously by the forward's builders. They
// are kept by position for as long as a verify row may replay them (a deterministic request's replay sees the masks
// its candidates were sampled under).
import { DisposedError, GrammarHostError, InvalidOptionError } from "../errors/index.js";
import type { CompiledFormat, GrammarGrant, GrammarSet } from "./grammars.js";
import type { StepReply } from "./host.js";
import { SYNC_MASK_WORDS } from "./xgrammar.js";

type Phase = "opening" | "thinking" | "answer";

export interface ConstraintOptions {
  /** "free": the thought (if the model has think tokens) is unconstrained; "none": constrained from `origin`. */
  thought: "free" | "none";
  /** Position of the first generated token of the request the format belongs to (a fork keeps its root's). */
  origin: number;
  /** Position past the last token the sequence may have (its prompt + maxTokens). */
  end: number;
  /** Tokens kept for the answer: an open thought is closed when no more than this many positions are left. */
  answerTokens: number;
  /** Positions of masks kept behind the newest (a verify row replays up to a window of them); 0 keeps the newest. */
  keepMasks: number;
  /** Where the request named its format (error messages). */
  field: string;
}

interface PositionMask {
  phase: Phase;
  /** null: free (a thought's token). */
  mask: Int32Array | null;
}

export class SequenceConstraint {
  private static nextMatcherId = 0;
  private compiled: CompiledFormat | null = null;
  /** This sequence's matcher on the grammar's host (made by its first step call). */
  private readonly mid = ++SequenceConstraint.nextMatcherId;
  private matcherMade = false;
  /** Matcher calls folded since the last host call: sent with the next one. */
  private pending = { reset: false, rollback: 0, accept: [] as number[], positions: [] as number[] };
  /** Tokens of the sequence folded into the state so far (positions [0, seen.length)). */
  private readonly seen: number[] = [];
  /** Phase of the next position, seen.length. */
  private phase: Phase = "opening";
  /** Tokens the matcher accepted (the answer's so far). */
  private accepted = 0;
  private readonly masks = new Map<number, PositionMask>();
  private readonly words: number;
  private readonly stop: ReadonlySet<number>;
  /** The matcher accepted a stop token: the format is complete. */
  private done = false;

  /** Matchers alive (created and not disposed), for tests: each holds memory in XGrammar's wasm heap. */
  static liveMatchers = 0;
  private readonly grammar: Promise<CompiledFormat>;
  private disposed = false;

  constructor(
    private readonly grant: GrammarGrant,
    private readonly set: GrammarSet,
    readonly options: ConstraintOptions,
  ) {
    const grammar = (this.grammar = grant.compiled);
    this.words = Math.ceil(set.vocabSize / 32);
    this.stop = new Set(set.stopTokenIds);
    // A failure is reported by prepare(), never an unhandled rejection meanwhile.
    grammar.catch(() => undefined);
  }

  /**
   * The format is still compiling: the sequence should not sample yet (a failure counts as settled). Read from the
   * grant, so a fork or an n-sample of a compiled format is ready at once, not a turn of the event loop later.
   */
  get compiling(): boolean {
    return !this.grant.settled;
  }

  /**
   * Its masks come from the engine's thread without a wait (the grammar compiled, matched on this thread, a vocabulary
   * small enough to read masks at once): a step may start its forward first and compute them while it runs
   * (ModelSlot's late masks). A matcher not made yet is made in a few microtasks, which the forward waits out too.
   */
  get matchesHere(): boolean {
    const c = this.compiled ?? this.grant.value;
    return c !== null && c.host.onThisThread && this.words <= SYNC_MASK_WORDS;
  }

  /** Resolves once the format compiled or failed to. */
  whenSettled(): Promise<void> {
    return this.grammar.then(
      () => undefined,
      () => undefined,
    );
  }

  /** A fork's constraint: the same format and origin, over the child's own budget. */
  fork(end: number): SequenceConstraint {
    return new SequenceConstraint(this.grant.share(), this.set, { ...this.options, end });
  }

  /** Frees the matcher and gives the grammar back (the sequence ended). Idempotent. */
  dispose(): void {
    if (this.disposed) return;
    this.disposed = true;
    if (this.matcherMade) {
      this.compiled!.host.freeMatcher(this.mid);
      this.compiled!.host.matchers--;
      SequenceConstraint.liveMatchers--;
    }
    this.masks.clear();
    this.grant.release();
  }

  /**
   * Folds `tokens` (the sequence's, prompt and generated) into the state and computes the mask of the next position
   * (tokens.length). `cut`: the shortest length the tokens were cut to since the last call (Infinity: none), so only
   * what changed is folded again. Rejects with an InvalidOptionError when the grammar failed to compile or a token the
   * sequence holds does not fit the format (one appended by a fork, not sampled under a mask).
   */
  async prepare(tokens: readonly number[], cut = Number.POSITIVE_INFINITY): Promise<void> {
    if (this.prepareNow(tokens, cut)) return;
    // What prepareNow could not do at once: wait for the compile, then the host call (the tokens are folded).
    if (this.compiled === null) this.compiled = this.usable(await this.grammar);
    const p = tokens.length;
    this.setMask(p, await this.sync(this.wantsMask(p)));
  }

  /**
   * prepare() without a turn of the event loop, where it can be: the grammar compiled and its matchers on the
   * engine's thread (host.ts LocalHost) with a small vocabulary, or no matcher call needed (a free thought's token).
   * Returns true when the mask of tokens.length is ready; false when prepare() must finish the work (the tokens are
   * folded either way, so prepare() is then called with the same tokens). Throws what prepare() rejects with. A
   * step's constrained rows then cost no promise each (ModelSlot.prepareConstraints).
   */
  prepareNow(tokens: readonly number[], cut = Number.POSITIVE_INFINITY): boolean {
    const same = Math.min(cut, this.seen.length, tokens.length);
    if (same < this.seen.length) this.rewind(same);
    for (let i = this.seen.length; i < tokens.length; i++) this.fold(tokens[i], i);
    if (this.compiled === null) {
      const value = this.grant.value; // set once compiled; a failure is reported by prepare()
      if (value === null) return false;
      this.compiled = this.usable(value);
    }
    const p = tokens.length;
    const reply = this.syncNow(this.wantsMask(p));
    if (reply === undefined) return false;
    this.setMask(p, reply);
    return true;
  }

  /** The compiled grammar, checked usable: the set and this sequence are not disposed. */
  private usable(compiled: CompiledFormat): CompiledFormat {
    if (this.set.disposed)
      throw new DisposedError(`${this.options.field}: the model's grammars are disposed (its engine was disposed)`, {
        field: this.options.field,
      });
    if (this.disposed) throw new Error("structured output: the sequence has ended");
    return compiled;
  }

  /** Whether position p needs the matcher's bitmask (not computed yet, an answer's or an opening's position). */
  private wantsMask(p: number): boolean {
    return !this.masks.has(p) && p >= this.options.origin && this.phase !== "thinking";
  }

  /** Keeps the mask of position p (from the matcher's bitmask, or the phase's) and drops those past the window. */
  private setMask(p: number, fromMatcher: Int32Array | null): void {
    if (!this.masks.has(p)) this.masks.set(p, { phase: this.phase, mask: this.computeMask(p, fromMatcher) });
    const keepFrom = p - this.options.keepMasks;
    if (this.masks.size > 1) for (const k of this.masks.keys()) if (k < keepFrom) this.masks.delete(k);
  }

  /**
   * Sends the folded matcher calls (and, if `mask`, a request for the next token's bitmask) to the grammar's host and
   * takes in its answer: tokens accepted, whether the grammar terminated. Nothing to send: no call.
   */
  private async sync(mask: boolean): Promise<Int32Array | null> {
    const p = this.pending;
    if (!p.reset && p.rollback === 0 && p.accept.length === 0 && !mask) return null;
    this.pending = { reset: false, rollback: 0, accept: [], positions: [] };
    const { host, gid } = this.compiled!;
    if (!this.matcherMade) {
      this.matcherMade = true;
      host.matchers++;
      SequenceConstraint.liveMatchers++;
    }
    let r;
    try {
      r = await host.step({ mid: this.mid, gid, reset: p.reset, rollback: p.rollback, accept: p.accept, mask });
    } catch (e) {
      throw this.hostFailed(e);
    }
    return this.take(r, p);
  }

  /**
   * sync() answered at once (MatcherHost.stepNow), or undefined when the host cannot (nothing was sent then; the
   * folded calls stay for sync()). Nothing to send: null, no call.
   */
  private syncNow(mask: boolean): Int32Array | null | undefined {
    const p = this.pending;
    if (!p.reset && p.rollback === 0 && p.accept.length === 0 && !mask) return null;
    if (!this.matcherMade) return undefined; // XGrammar makes a matcher asynchronously: sync() makes it
    const { host, gid } = this.compiled!;
    let r: StepReply | null;
    try {
      r = host.stepNow({ mid: this.mid, gid, reset: p.reset, rollback: p.rollback, accept: p.accept, mask });
    } catch (e) {
      throw this.hostFailed(e);
    }
    if (r === null) return undefined;
    // Sent and answered at once: the same record is emptied for the next calls (no new arrays a row a step).
    try {
      return this.take(r, p);
    } finally {
      p.reset = false;
      p.rollback = 0;
      p.accept.length = 0;
      p.positions.length = 0;
    }
  }

  /** A host call failed: the error the request fails with. */
  private hostFailed(e: unknown): Error {
    const field = this.options.field;
    if (this.set.disposed)
      return new DisposedError(`${field}: the model's grammars are disposed (its engine was disposed)`, { field });
    // The matcher lived on the host: its state is gone with it (or XGrammar failed inside it).
    return new GrammarHostError(
      `${field}: the grammar host holding this request's format failed: ${(e as Error).message}. The request cannot go on; send it again (its format compiles on a new host; the engine serves other requests meanwhile). If the same format fails a host again, report it with the format`,
      { field, cause: e },
    );
  }

  /** Takes in a host's answer to the calls `sent`: tokens accepted, the grammar's end, a refused token. */
  private take(r: StepReply, sent: SequenceConstraint["pending"]): Int32Array | null {
    this.accepted += r.accepted;
    this.done = r.terminated;
    if (r.rejected)
      throw new InvalidOptionError(
        `${this.options.field}: token ${sent.accept[r.accepted]} at position ${sent.positions[r.accepted]} does not fit the format (a fork's appended text must continue it)`,
        { field: this.options.field },
      );
    return r.mask;
  }

  /** The mask of the token at `position` (null: free), as prepare() computed it; undefined if it has not. */
  maskAt(position: number): Int32Array | null | undefined {
    return this.masks.get(position)?.mask;
  }

  /**
   * The one token the format allows at `position`, where its mask (prepare() computed it) is the matcher's and allows
   * exactly one id, not a stop token: sampling there can only pick it, under any sampling settings (the constrained
   * distribution puts all its mass on it, logprob 0). Null otherwise: a thought's position, a choice, the format's end.
   * The engine appends such tokens without sampling them (ModelSlot jump-forward).
   */
  forcedAt(position: number): number | null {
    const m = this.masks.get(position);
    if (m === undefined || m.phase !== "answer" || m.mask === null || this.done) return null;
    let found = -1;
    const words = Math.ceil(this.set.vocabSize / 32);
    for (let w = 0; w < words; w++) {
      const bits = m.mask[w];
      if (bits === 0) continue;
      // more than one bit in this word, or a second word with bits: more than one id allowed
      if (found >= 0 || (bits & (bits - 1)) !== 0) return null;
      found = w * 32 + (31 - Math.clz32(bits));
    }
    return found >= 0 && found < this.set.vocabSize && !this.stop.has(found) ? found : null;
  }

  /** Whether a mask is ready for `position` (prepare() ran since the sequence reached it). */
  ready(position: number): boolean {
    return this.masks.has(position);
  }

  /**
   * Whether the format allows only its end after `tokens` (the sequence's, its newest the last its budget allowed):
   * the value is whole, so the sample ends "stop", not "length". Folds the newest token into the matcher and asks
   * for the next position's mask (one host call, no forward): true when the grammar terminated or that mask allows
   * stop tokens only. False in a thought, or when the value could go on.
   */
  async onlyEndAfter(tokens: readonly number[], cut = Number.POSITIVE_INFINITY): Promise<boolean> {
    await this.prepare(tokens, cut);
    const m = this.masks.get(tokens.length);
    if (m === undefined || m.phase !== "answer" || m.mask === null) return false;
    if (this.done) return true;
    const stops = this.stopMask();
    const full = this.set.vocabSize >> 5;
    const words = Math.ceil(this.set.vocabSize / 32);
    for (let w = 0; w < words; w++) {
      const valid = w < full ? -1 : (1 << (this.set.vocabSize & 31)) - 1;
      if ((m.mask[w] & ~stops[w] & valid) !== 0) return false;
    }
    return true;
  }

  /** Whether `token` at `position` completes the format (a stop token of the answer): the sequence ends there. */
  ends(token: number, position: number): boolean {
    return this.stop.has(token) && this.masks.get(position)?.phase === "answer";
  }

  /** `count` masks from `position` on, concatenated (free positions allow every token), or null if all are free. */
  rows(position: number, count: number): Int32Array | null {
    let any = false;
    const out = new Int32Array(count * this.words);
    for (let j = 0; j < count; j++) {
      const m = this.masks.get(position + j);
      if (m === undefined)
        throw new Error(`structured output: no mask for position ${position + j} (prepare() did not run)`);
      if (m.mask === null) out.fill(-1, j * this.words, (j + 1) * this.words);
      else {
        out.set(m.mask, j * this.words);
        any = true;
      }
    }
    return any ? out : null;
  }

  // The state from the tokens.

  /** Forgets tokens from position `length` on (and the masks of positions past it). */
  private rewind(length: number): void {
    for (const k of this.masks.keys()) if (k > length) this.masks.delete(k);
    const back = this.seen.length - length;
    // Within the answer, every token past `length` was accepted: the matcher steps back over them.
    if (this.phase === "answer" && !this.done && back <= this.accepted) {
      this.pending.rollback += back;
      this.accepted -= back;
      this.seen.length = length;
      return;
    }
    // Into the thought or before it, or past a completed format: start over from the tokens kept.
    const keep = this.seen.slice(0, length);
    this.seen.length = 0;
    this.pending = { reset: true, rollback: 0, accept: [], positions: [] };
    this.accepted = 0;
    this.phase = "opening";
    this.done = false;
    for (let i = 0; i < keep.length; i++) this.fold(keep[i], i);
  }

  /** Folds the token at `position` into the state. */
  private fold(token: number, position: number): void {
    const o = this.options;
    const think = this.think;
    this.seen.push(token);
    if (position < o.origin) {
      // The prompt: its thought markers after its last other special token (the assistant turn's header; earlier
      // turns' closed thoughts do not count) say whether the answer starts at once, after a thought, or either.
      if (think !== null) {
        if (token === think.start) this.phase = "thinking";
        else if (token === think.end) this.phase = "answer";
        else if (this.set.vocab.tokens[token] === "" || token >= this.set.vocab.tokens.length) this.phase = "opening";
      }
      if (this.seen.length === o.origin && think === null) this.phase = "answer";
      return;
    }
    if (this.phase === "opening") {
      if (think !== null && token === think.start) {
        this.phase = "thinking";
        return;
      }
      this.phase = "answer";
    } else if (this.phase === "thinking") {
      if (think !== null && token === think.end) this.phase = "answer";
      return;
    }
    if (this.done) return; // past a stop token: nothing more belongs to the format
    // The matcher takes it on the next host call (sync()), which stops at a refused token or the grammar's end.
    this.pending.accept.push(token);
    this.pending.positions.push(position);
  }

  /** The model's think tokens when the thought is free, else null. */
  private get think(): { start: number; end: number } | null {
    return this.options.thought === "free" ? this.set.vocab.think : null;
  }

  /** `fromMatcher`: the matcher's bitmask for the position (null when it was not asked or has terminated). */
  private computeMask(position: number, fromMatcher: Int32Array | null): Int32Array | null {
    const o = this.options;
    const think = this.think;
    if (position < o.origin) return null; // a prompt position (never sampled)
    const phase = this.phase;
    if (phase === "thinking") {
      // A thought may not end the sample (it would end with no answer): every token but the stop tokens, until the
      // budget's last answerTokens, which are the answer's (the thought is closed).
      if (o.end - position > o.answerTokens) return this.set.thoughtMask();
      return this.only(think!.end);
    }
    const mask = this.done ? this.stopMask() : fromMatcher;
    if (mask === null) throw new Error(`structured output: no bitmask from the matcher for position ${position}`);
    if (phase === "opening" && think !== null) mask[think.start >> 5] |= 1 << (think.start & 31);
    // A grammar this vocabulary cannot continue (a character no token spells, a rule with no way out) fails its own
    // sequence here, not the whole forward's batch (the native forward refuses a row that allows nothing).
    if (!allowsAny(mask, this.set.vocabSize))
      throw new InvalidOptionError(
        `${o.field}: the format cannot go on after ${this.accepted} answer tokens: no token of the model's vocabulary is allowed next (a character no token spells, or a rule with no end)`,
        { field: o.field },
      );
    return mask;
  }

  private only(token: number): Int32Array {
    const m = new Int32Array(this.words);
    m[token >> 5] = 1 << (token & 31);
    return m;
  }

  private stopMask(): Int32Array {
    const m = new Int32Array(this.words);
    for (const t of this.stop) m[t >> 5] |= 1 << (t & 31);
    return m;
  }
}

/** Whether a bitmask allows any id below `vocabSize`. */
function allowsAny(mask: Int32Array, vocabSize: number): boolean {
  const full = vocabSize >> 5;
  for (let w = 0; w < full; w++) if (mask[w] !== 0) return true;
  const rest = vocabSize & 31;
  return rest > 0 && (mask[full] & ((1 << rest) - 1)) !== 0;
}
