// One HTTP generation: a request's n samples as one stream of events, with reasoning split from content and the
// thought closable while it runs (POST .../control reasoning_end, thinking_token_budget, reasoning_effort). Closing
// a thought forks each sample still thinking at the tokens the client has seen, appends the model's end-of-thought
// token and goes on from there (the KV is shared with the parent), and aborts the parent: the client sees one
// continuous completion. It owns the sources of every sample and the per-sample counts usage is made of.
// reasoning_effort low / medium (options.effort) probes each sample's thought on the way (ts/programs/effort.ts,
// Dynasor-CoT): at every probe point the sample's later tokens are held back from the client until the probe has
// answered; when its policy says the answer has settled, the held tokens are dropped and the thought is closed at
// the probe point (a newline first if mid-line, as the probe had it), so the answer that streams is the one the
// probe read. Probe tokens and dropped tokens count as reasoning tokens (compute spent on the thought).
import type {
  Engine,
  FinishReason,
  GenerateRequest,
  RequestHandle,
  StreamDelta,
  TokenLogprob,
} from "../engine/index.js";
import { defaultProbeSuffix } from "../programs/answers.js";
import { ThoughtProbe, type ThoughtEffort, type ThoughtExit } from "../programs/effort.js";

/** A model's reasoning tokens: the thought runs from `start` (generated first, or opened by the prompt) to `end`. */
export interface ThinkTokens {
  start: number;
  end: number;
}

/**
 * A token's logprob entry as the client gets it: the engine's, or, for a token this server appended (an early exit's
 * `</think> \boxed{`, reasoning_end's end of thought), one whose logprob is null: the engine scores only the tokens
 * it samples (it has no prompt logprobs), and an appended token is prefilled, never sampled. Its entry is there so
 * the entries spell the text the client got.
 */
export type ServedLogprob = Omit<TokenLogprob, "logprob"> & { logprob: number | null };
/** A step as forward() takes it: the engine's, or one this server made up (with ServedLogprob entries). */
type ServedDelta = Omit<StreamDelta, "logprobs"> & { logprobs?: ServedLogprob[] };

/** What the client sees of one sample's step. */
export interface SampleEvent {
  kind: "tokens";
  index: number;
  tokens: number[];
  /** Text of these tokens that is part of the thought / of the answer. */
  reasoning: string;
  content: string;
  logprobs?: ServedLogprob[];
  finishReason?: FinishReason;
  /** vLLM's stop_reason, on the last event: the stop string or the stop token id that ended the sample (eos: none). */
  stopReason?: string | number;
}
export type GenerationEvent = SampleEvent | { kind: "error"; error: unknown };

interface Source {
  handle: RequestHandle;
  /** Which sample of the handle feeds this output index. */
  sample: number;
  /** Tokens of the source before its first generated one (prompt, or kept + appended for a fork). */
  promptLength: number;
  /** Generated tokens of this source forwarded to the client. */
  forwarded: number;
}

interface SampleState {
  source: Source;
  finished: boolean;
  finishReason?: FinishReason;
  inReasoning: boolean;
  /** Whether the thought was closed (by the model or by us): no second close. */
  closed: boolean;
  /** Tokens forwarded over all sources (the client's completion tokens). */
  tokens: number;
  reasoningTokens: number;
  /** While thinking: the thought's tokens so far (decoded once, when it closes, to size its text). */
  thoughtIds: number[];
  /** Characters of thought text the client has been sent. */
  reasoningChars: number;
  /**
   * Text still to come that is not the answer's, in order: the thought's last characters (after the close) and the
   * think markers' own text where they are ordinary tokens (Qwen3's, DeepSeek-R1's), which is neither thought nor
   * answer. The engine holds text back while it could still grow into a stop string, so it may arrive tokens late.
   */
  owed: Array<{ reasoning: boolean; chars: number }>;
  /** What stopped the sample, when a stop string or a stop token id did (vLLM's stop_reason; eos is none). */
  stopReason?: string | number;
  /** reasoning_effort's probe of this sample's thought (null: no early exit asked for). */
  prober: ThoughtProbe | null;
  /** Deltas held back from the client while a probe is out (null: none is). */
  held: ServedDelta[] | null;
  /** Generated tokens dropped when an exit closed the thought at a probe point before them. */
  dropped: number;
}

/** What reasoning_effort did to one sample's thought (Generation.effortReport). */
export interface EffortReport {
  /** Probes made, their answers, and the probe certaindex after the last. */
  probes: number;
  answers: Array<string | null>;
  certaindex: number;
  /** The policy closed the thought ("certain" / "curve"), or null: it ran to its end or its hard cap. */
  exit: ThoughtExit | null;
  /** Thought tokens when it closed (the probe point of an exit), probe tokens, dropped tokens. */
  thoughtTokens: number;
  probeTokens: number;
  droppedTokens: number;
  /** The thought's hard cap (thinking budget, else max tokens) less the sample's reasoning tokens (the thought with
   * its markers, probes, dropped tokens), when the policy closed it; 0 otherwise. An upper bound on the saving: the
   * thought might have ended on its own before the cap. */
  tokensSaved: number;
}

export interface GenerationOptions {
  /** The model's think tokens, or null for a model without a thought to split. */
  think: ThinkTokens | null;
  /** Whether the prompt already opened the thought (its last token is think.start). */
  promptOpensThought: boolean;
  /** Close each sample's thought once it holds this many tokens. */
  thinkingBudget?: number;
  /** reasoning_effort's early exit: each sample's thought probed every effort.interval tokens (see the header);
   * `cap` is the thought's hard cap the policy counts probes against. */
  effort?: { effort: ThoughtEffort; cap: number; probeSuffix?: (thoughtSoFar: string) => string };
  codec: { decode(ids: readonly number[], options?: { skipSpecialTokens?: boolean }): string } | null;
}

export class Generation {
  private readonly samples: SampleState[] = [];
  private readonly events: GenerationEvent[] = [];
  private waiter: (() => void) | null = null;
  private readonly controller = new AbortController();
  private readonly maxTokens: number;
  private failed = false;
  /** Prompt tokens served from the prefix cache (the first source's). */
  cachedTokens = 0;
  /** Time the first source waited for the scheduler. */
  queueMs = 0;
  /** Verify passes that rolled back, over every source (deterministic requests). */
  rollbacks = 0;
  private readonly results: Array<Promise<unknown>> = [];
  readonly promptLength: number;

  constructor(
    private readonly engine: Engine,
    private readonly request: GenerateRequest & { prompt: number[]; maxTokens: number },
    private readonly options: GenerationOptions,
  ) {
    this.maxTokens = request.maxTokens;
    this.promptLength = request.prompt.length;
    const handle = engine.submit({ ...request, signal: this.controller.signal });
    const n = request.n ?? 1;
    for (let i = 0; i < n; i++) {
      this.samples.push({
        source: { handle, sample: i, promptLength: this.promptLength, forwarded: 0 },
        finished: false,
        inReasoning: options.think !== null && options.promptOpensThought,
        closed: false,
        tokens: 0,
        reasoningTokens: 0,
        thoughtIds: [],
        reasoningChars: 0,
        owed: [],
        prober:
          // A structured answer (response_format, tools) is not probed: the probe asks for a \boxed{} answer, which
          // the format's grammar (inherited by every fork) would refuse.
          options.effort === undefined ||
          options.think === null ||
          options.effort.effort.interval === 0 ||
          request.structured !== undefined
            ? null
            : new ThoughtProbe({
                effort: options.effort.effort,
                cap: options.effort.cap,
                probeSuffix: options.effort.probeSuffix,
                model: request.model,
              }),
        held: null,
        dropped: 0,
      });
    }
    this.watch(handle, true);
    void this.pump(handle);
  }

  /** Settles once every source has finished (their outputs counted). */
  async settled(): Promise<void> {
    for (let i = 0; i < this.results.length; i++) await this.results[i];
  }

  /** Counts a source's output once it settles; the first source's also gives the prompt's cache hits and queue time. */
  private watch(handle: RequestHandle, first = false): void {
    const counted = handle.result.then(
      (o) => {
        this.rollbacks += o.determinism?.rollbacks ?? 0;
        if (!first) return;
        this.cachedTokens = o.usage.cachedTokens;
        this.queueMs = o.queueMs;
      },
      () => undefined,
    );
    this.results.push(counted);
  }

  get n(): number {
    return this.samples.length;
  }
  /** The generation failed (a native or KV error): its unfinished samples end in error, not by an abort. */
  get hasFailed(): boolean {
    return this.failed;
  }
  get done(): boolean {
    return this.failed || this.samples.every((s) => s.finished);
  }
  /** The client's tokens, plus the thought's probes and dropped tokens (reasoning it did not see as text). */
  get completionTokens(): number {
    return this.samples.reduce((t, s) => t + s.tokens + this.hidden(s), 0);
  }
  get reasoningTokens(): number {
    return this.samples.reduce((t, s) => t + s.reasoningTokens + this.hidden(s), 0);
  }
  /** Per sample, the tokens generated that the client did not get as text (probes, dropped tokens). */
  hiddenTokens(): number[] {
    return this.samples.map((s) => this.hidden(s));
  }
  private hidden(s: SampleState): number {
    return (s.prober?.probeTokens ?? 0) + s.dropped;
  }
  /** Tokens sample `s` may still generate: max_tokens charges the client's tokens and the hidden ones (probes,
   * dropped), so usage.completion_tokens never passes max_tokens. */
  private room(s: SampleState): number {
    return this.maxTokens - s.tokens - this.hidden(s);
  }

  /** Per sample, what reasoning_effort's probing did (null: the sample was not probed). */
  effortReport(): Array<EffortReport | null> {
    return this.samples.map((s) => {
      const p = s.prober;
      if (p === null) return null;
      const thoughtTokens = p.exit !== null ? p.probeAt[p.probeAt.length - 1] : s.reasoningTokens;
      const cap = this.options.effort!.cap;
      return {
        probes: p.probes.length,
        answers: [...p.probes],
        certaindex: p.certaindex,
        exit: p.exit,
        thoughtTokens,
        probeTokens: p.probeTokens,
        droppedTokens: s.dropped,
        tokensSaved: p.exit === null ? 0 : Math.max(0, cap - s.reasoningTokens - p.probeTokens - s.dropped),
      };
    });
  }
  finishReasons(): Array<FinishReason | undefined> {
    return this.samples.map((s) => s.finishReason);
  }
  /** Per sample, the stop string or stop token id that ended it (undefined: eos, length, abort, or still running). */
  stopReasons(): Array<string | number | undefined> {
    return this.samples.map((s) => s.stopReason);
  }

  /** Stops every sample at the next engine step; their pages are freed and they finish "aborted". */
  abort(): void {
    this.controller.abort();
  }

  /**
   * Closes the thought of every sample still thinking: returns how many were closed (0: none was thinking, or the
   * model has no thought tokens).
   */
  endReasoning(): number {
    let closed = 0;
    for (let i = 0; i < this.samples.length; i++) if (this.closeThought(i)) closed++;
    return closed;
  }

  async *stream(): AsyncGenerator<GenerationEvent, void, undefined> {
    for (let i = 0; ;) {
      if (i < this.events.length) {
        const e = this.events[i++];
        yield e;
        if (e.kind === "error") return;
      } else if (this.done) {
        return;
      } else {
        await new Promise<void>((resolve) => (this.waiter = resolve));
      }
    }
  }

  private emit(e: GenerationEvent): void {
    this.events.push(e);
    const w = this.waiter;
    this.waiter = null;
    w?.();
  }

  private async pump(handle: RequestHandle): Promise<void> {
    try {
      for await (const d of handle) {
        const index = this.samples.findIndex((s) => s.source.handle === handle && s.source.sample === d.sample);
        if (index < 0) continue; // a parent whose sample was forked away: its late tokens are not the client's
        this.forward(index, d);
      }
      await handle.result;
    } catch (e) {
      if (this.failed) return;
      this.failed = true;
      this.controller.abort();
      this.emit({ kind: "error", error: e });
    }
  }

  /** synthetic: a close of the thought by this server (its source stops here; its held-back text never comes). */
  private forward(index: number, d: ServedDelta, synthetic = false): void {
    const s = this.samples[index];
    if (s.finished) return;
    if (s.held !== null && !synthetic) {
      s.held.push(d); // a probe is out: the client gets these once it has answered "go on"
      // max_tokens reserves the probe's most tokens (probeRoom): held tokens that reach the rest end the sample now,
      // as max_tokens would have: they are sent, the source stops, and the probe's answer is not waited for.
      const held = s.held.reduce((t, h) => t + h.tokens.length, 0);
      if (held >= this.room(s) - this.probeRoom(s)) {
        const all = s.held;
        s.held = null;
        for (const h of all) this.forward(index, h);
        if (!s.finished) this.forward(index, { sample: d.sample, tokens: [], text: "", finishReason: "length" }, true);
        this.abortSource(s.source);
      }
      return;
    }
    // max_tokens charges hidden tokens too (probes, dropped: see room()), which the source's own maxTokens does not
    // know of: a delta that reaches the budget ends the sample there ("length"), cut to the tokens that fit (their
    // text decoded afresh: a cut delta's text is its kept tokens'), and its source stops.
    const room = this.room(s);
    let cut = false;
    // (Without hidden tokens the source's maxTokens is the room already, and the engine ends it there itself.)
    if (this.hidden(s) > 0 && (d.finishReason === undefined ? d.tokens.length >= room : d.tokens.length > room)) {
      const keep = Math.max(0, room);
      if (keep < d.tokens.length) {
        const tokens = d.tokens.slice(0, keep);
        const text = this.options.codec?.decode(tokens, { skipSpecialTokens: true }) ?? "";
        d = { ...d, tokens, text, logprobs: d.logprobs?.slice(0, keep) };
      }
      d = { ...d, finishReason: "length", stoppedBy: undefined };
      cut = true;
    }
    s.source.forwarded += d.tokens.length;
    const { reasoning, content } = this.split(s, d.tokens, d.text, synthetic);
    s.tokens += d.tokens.length;
    s.finished = d.finishReason !== undefined;
    s.finishReason = d.finishReason;
    // vLLM's stop_reason: a stop string, or a stop token id the request asked for (eos is no stop_reason).
    const by = d.stoppedBy;
    if (typeof by === "string" || (by !== undefined && this.request.stopTokenIds?.includes(by))) s.stopReason = by;
    this.emit({
      kind: "tokens",
      index,
      tokens: d.tokens,
      reasoning,
      content,
      logprobs: d.logprobs,
      finishReason: d.finishReason,
      stopReason: s.stopReason,
    });
    if (cut && !synthetic) this.abortSource(s.source);
    const budget = this.options.thinkingBudget;
    if (!s.finished && s.inReasoning && budget !== undefined && s.reasoningTokens >= budget) this.closeThought(index);
    const due = s.prober?.nextProbeAt ?? null;
    // A probe needs room for its own tokens and as many of the sample's decoded beside it, and the close; without,
    // the thought runs on to max_tokens (an exit that late would save little).
    if (
      !synthetic &&
      !s.finished &&
      s.inReasoning &&
      due !== null &&
      s.tokens >= due &&
      this.room(s) > 2 * this.probeRoom(s) + 4
    )
      this.probe(index);
  }

  /** The most tokens one probe of sample `s` decodes (the effort's probeMaxTokens, default 20). */
  private probeRoom(s: SampleState): number {
    return s.prober === null ? 0 : (this.options.effort?.effort.probeMaxTokens ?? 20);
  }

  /** Probes sample `index`'s thought where the client's stream stands, holding its later deltas until it answers. */
  private probe(index: number): void {
    const s = this.samples[index];
    const prober = s.prober!;
    const source = s.source;
    const codec = this.options.codec;
    const thought = codec === null ? "" : codec.decode(s.thoughtIds, { skipSpecialTokens: true });
    const at = { sample: source.sample, length: source.promptLength + source.forwarded, thoughtTokens: s.tokens };
    s.held = [];
    // The probe decodes at most probeRoom tokens, reserved out of what max_tokens has left (room()).
    const maxTokens = this.probeRoom(s);
    void prober
      .probe(this.engine, source.handle, { ...at, thought, maxTokens, signal: this.controller.signal })
      .then((exit) => {
        const held = s.held;
        s.held = null;
        if (held === null || s.source !== source || this.failed) return; // closed meanwhile (reasoning_end)
        if (exit && !s.finished && s.inReasoning) {
          // The answer settled at the probe point: the thought closes there, the held tokens are never sent.
          for (const d of held) s.dropped += d.tokens.length;
          this.closeThought(index, this.probeSuffixIds(thought));
          return;
        }
        for (const d of held) this.forward(index, d); // may hold again at the next probe point
      });
  }

  /**
   * The probe suffix as an exit appends it, split at the model's end-of-thought token: what comes before it is the
   * thought's (a newline if mid-line), what follows opens the answer (` \boxed{`). A model answers after the suffix
   * (it is what every probe asks); it need not have learnt to write the opener itself after a thought cut short.
   */
  private probeSuffixIds(thought: string): { before: number[]; after: number[] } {
    const end = this.options.think!.end;
    const text = (this.options.effort!.probeSuffix ?? defaultProbeSuffix)(thought);
    const ids = this.engine.tokenizer(this.request.model)?.encode(text, { addSpecialTokens: false }) ?? [];
    const at = ids.indexOf(end);
    // A suffix that does not spell the end-of-thought token: the close appends that token alone.
    return at < 0 ? { before: [], after: [] } : { before: ids.slice(0, at), after: ids.slice(at + 1) };
  }

  /**
   * Splits a step's tokens and text between the thought and the answer, and counts the thought's tokens. The split
   * is by position in the sample's text, not by delta: the thought's text is what its tokens decode to, however the
   * stream happened to cut it (a stop string's hold-back delays the thought's last characters past its end token).
   */
  private split(
    s: SampleState,
    tokens: number[],
    text: string,
    synthetic: boolean,
  ): { reasoning: string; content: string } {
    const think = this.options.think;
    if (think === null) return { reasoning: "", content: text };
    let thoughtTokens = tokens;
    if (!s.inReasoning && !s.closed && s.tokens === 0 && tokens[0] === think.start) {
      s.inReasoning = true;
      this.owe(s, false, this.markerChars.start); // the opening marker's text is not the thought's
      thoughtTokens = tokens.slice(1);
    }
    if (s.inReasoning) {
      const end = tokens.indexOf(think.end);
      if (end < 0) {
        for (const t of thoughtTokens) s.thoughtIds.push(t);
        s.reasoningTokens += tokens.length;
        const { reasoning, rest } = this.take(s, text);
        s.reasoningChars += rest.length;
        return { reasoning: reasoning + rest, content: "" };
      }
      for (let i = tokens.length - thoughtTokens.length; i < end; i++) s.thoughtIds.push(tokens[i]);
      s.inReasoning = false;
      s.closed = true;
      s.reasoningTokens += end + 1;
      const codec = this.options.codec;
      const thought = codec === null ? null : codec.decode(s.thoughtIds, { skipSpecialTokens: true });
      s.thoughtIds = [];
      if (synthetic) {
        // Closed here: the source's held-back thought text never comes, so the client gets it now.
        const rest = thought === null ? "" : thought.slice(s.reasoningChars);
        s.reasoningChars += rest.length;
        s.owed = [];
        // Its text is what the close appended after the end of thought (an effort exit's answer opener).
        return { reasoning: rest, content: text };
      }
      // What the thought's text still lacks, then the closing marker's own text; the answer follows.
      this.owe(s, true, thought === null ? text.length : Math.max(0, thought.length - s.reasoningChars));
      this.owe(s, false, this.markerChars.end);
    }
    const { reasoning, rest } = this.take(s, text);
    return { reasoning, content: rest };
  }

  /** Characters of the think tokens' text as the stream spells it (0 for special tokens, which it skips). */
  private get markerChars(): { start: number; end: number } {
    const think = this.options.think!;
    const codec = this.options.codec;
    const len = (id: number): number => (codec === null ? 0 : codec.decode([id], { skipSpecialTokens: true }).length);
    return (this.markerLengths ??= { start: len(think.start), end: len(think.end) });
  }
  private markerLengths: { start: number; end: number } | null = null;

  private owe(s: SampleState, reasoning: boolean, chars: number): void {
    if (chars > 0) s.owed.push({ reasoning, chars });
  }

  /** The owed part of `text`: its thought characters (counted as sent) and, dropped, its markers'; then the rest. */
  private take(s: SampleState, text: string): { reasoning: string; rest: string } {
    let reasoning = "";
    let at = 0;
    while (s.owed.length > 0 && at < text.length) {
      const o = s.owed[0];
      const n = Math.min(o.chars, text.length - at);
      if (o.reasoning) reasoning += text.slice(at, at + n);
      at += n;
      o.chars -= n;
      if (o.chars === 0) s.owed.shift();
    }
    s.reasoningChars += reasoning.length;
    return { reasoning, rest: text.slice(at) };
  }

  /** Closes sample `index`'s thought where the client's stream stands (`suffix`: thought tokens appended before the
   * end of thought, answer tokens after it: an effort exit's probe suffix). */
  private closeThought(
    index: number,
    suffix: { before: number[]; after: number[] } = { before: [], after: [] },
  ): boolean {
    const { before, after } = suffix;
    const s = this.samples[index];
    const think = this.options.think;
    if (think === null || s.finished || !s.inReasoning) return false;
    if (s.held !== null) {
      // Closed while a probe is out (reasoning_end, the budget): what it held back is never sent.
      for (const d of s.held) s.dropped += d.tokens.length;
      s.held = null;
    }
    const left = this.room(s) - before.length - 1 - after.length;
    const parent = s.source;
    // The client has seen `parent.forwarded` tokens of this source: the thought closes right after them.
    const appended = [...before, think.end, ...after];
    const synthetic: ServedDelta = {
      sample: 0,
      tokens: appended,
      // Entries for the appended tokens when the client asked for logprobs (ServedLogprob: null, never sampled).
      ...(this.request.logprobs === undefined
        ? {}
        : { logprobs: appended.map((token) => ({ token, logprob: null, top: [] })) }),
      text: after.length === 0 ? "" : (this.options.codec?.decode(after, { skipSpecialTokens: true }) ?? ""),
    };
    if (left < 1) {
      // No room to answer: the close's tokens that fit end the sample (forward cuts them to max_tokens' room).
      this.forward(index, { ...synthetic, finishReason: "length" }, true);
      this.abortSource(parent);
      return true;
    }
    let child: RequestHandle;
    try {
      child = this.engine.fork(parent.handle, {
        sample: parent.sample,
        length: parent.promptLength + parent.forwarded,
        append: [...before, think.end, ...after],
        maxTokens: left,
        signal: this.controller.signal,
      });
    } catch (e) {
      this.failed = true;
      this.controller.abort();
      this.emit({ kind: "error", error: e });
      return false;
    }
    const childPrompt = parent.promptLength + parent.forwarded + before.length + 1 + after.length;
    this.forward(index, synthetic, true); // the client sees the thought close (counted on the parent, which ends here)
    s.source = { handle: child, sample: 0, promptLength: childPrompt, forwarded: 0 };
    this.abortSource(parent);
    this.watch(child);
    void this.pump(child);
    return true;
  }

  /** Aborts a source once no sample reads from it any more. */
  private abortSource(source: Source): void {
    if (!this.samples.some((s) => s.source.handle === source.handle && !s.finished)) source.handle.abort();
  }
}
