// Chain-of-thought probing (Dynasor-CoT). One main branch thinks; every `interval` generated tokens a probe forks
// it at exactly that length (KV shared, nothing copied), appends the task's probe suffix (`</think> \boxed{` for
// boxed answers), decodes a short answer greedily (≤ 20 tokens, stopped at `}` or a newline) and is discarded: its
// pages are freed when it finishes and the main branch never sees it. The program exits once at least `rule.agree` of
// the last `rule.window` probe answers are non-empty, free of hesitation words and equal to the latest one (Dynasor's
// windowed consistency, ts/certaindex/probe.ts; probeCertaindex reaches 1 exactly then). Because
// a probe cuts the main branch at a fixed length, its answer does not depend on how far the main branch ran
// meanwhile.
import { InvalidOptionError } from "../errors/index.js";
import type { RequestHandle } from "../engine/handle.js";
import type { PolicySpec } from "../certaindex/policies.js";
import { agreeCount, DEFAULT_PROBE_RULE, probeCertaindex, type ProbeRule } from "../certaindex/probe.js";
import { boxedAnswers } from "./answers.js";
import { withDefaults, type Knob, type Program, type ProgramContext } from "./program.js";
import type { ProgramTask } from "./task.js";

export interface CotProbeOptions {
  prompt: string | readonly number[];
  /** Generated tokens between probes (default 64). */
  interval?: number;
  /** Main-branch generation cap (default 1024). */
  maxTokens?: number;
  /** Most tokens a probe decodes (default 20). */
  probeMaxTokens?: number;
  /** The answer format: the probe suffix, the answer marker and the final answer's reading come from it (default
   * boxedAnswers). */
  task?: ProgramTask;
  /** Text appended to the cut thought (default: the task's probeSuffix). */
  probeSuffix?: string | ((thoughtSoFar: string) => string);
  /** Where a probe answer ends (default "}" and a newline: an answer is one line; a probe that starts another
   * thought line instead of answering stops there rather than spending probeMaxTokens). */
  probeStop?: string[];
  /** The exit rule: `window` probes looked at, `agree` of them confident and equal to the latest (default: window 3,
   * agree = window), hesitation words. */
  rule?: ProbeRule;
  temperature?: number;
  seed?: number;
  model?: string;
  /** Reads the final answer of a finished main branch (default: the task's). */
  extractAnswer?: (text: string) => string | null;
  /** Probing off: the main branch runs to its end (the baseline). */
  probe?: boolean;
  /** Text that shows the main branch has stopped thinking and is writing its answer: no probe is made from there
   * on (default `</think>` and the task's answerMarker, `\boxed{`; a tokenizer may drop `</think>` from decoded text,
   * the answer marker remains). */
  answerMarkers?: readonly string[];
}

export class CotProbe implements Program {
  readonly name = "cot-probe";
  certaindex = 0;
  readonly knob: Knob;
  readonly state = {
    probes: [] as Array<string | null>,
    /** Main-branch tokens at each probe. */
    probeAt: [] as number[],
    /** Tokens each probe generated. */
    probeTokens: [] as number[],
    mainText: "",
    mainTokens: 0,
    /** The main branch ended on its own (eos or maxTokens), not by an abort. */
    finished: false,
  };
  readonly tokenBudget: number;
  readonly defaultPolicy: PolicySpec = { kind: "threshold", threshold: 1, detectAt: 1 };
  private readonly o: Required<Omit<CotProbeOptions, "model" | "task">> & { model?: string };
  private main: RequestHandle | null = null;
  /** Text after each generated token (textAt[k] = text of the first k tokens). */
  private readonly textAt: string[] = [""];
  private progress: (() => void) | null = null;
  private mainError: unknown = undefined;
  /** The main branch's stream ended (finished, aborted or failed). */
  private ended = false;
  private promptLength = 0;
  /** Deterministic run (ProgramContext.deterministic): set by the first execute. */
  private deterministicRun = false;
  /** The main branch's generated ids (deterministic runs read the thought at a probe point from them). */
  private readonly mainIds: number[] = [];
  /** Deterministic runs: a round saw the main branch end before its probe point (what `done` means there). */
  private endSeen = false;

  constructor(options: CotProbeOptions) {
    const interval = options.interval ?? 64;
    if (!Number.isInteger(interval) || interval < 1)
      throw new InvalidOptionError(`cot-probe.interval must be an integer ≥ 1, got ${interval}`, {
        field: "cot-probe.interval",
      });
    const task = options.task ?? boxedAnswers;
    const defaults = {
      maxTokens: 1024,
      probeMaxTokens: 20,
      probeSuffix: (thought: string) => task.probeSuffix(thought),
      probeStop: ["}", "\n"],
      rule: DEFAULT_PROBE_RULE,
      temperature: 0,
      seed: 0,
      extractAnswer: (text: string) => task.extractAnswer(text),
      probe: true,
      answerMarkers: ["</think>", task.answerMarker] as readonly string[],
    };
    this.o = { ...withDefaults(defaults, options), interval };
    agreeCount(this.o.rule); // a bad window / agree fails here, not after the first probe
    this.knob = { used: 0, max: Math.ceil(this.o.maxTokens / interval) };
    this.tokenBudget = this.o.maxTokens + (this.o.probe ? this.knob.max * this.o.probeMaxTokens : 0);
  }

  /** The main branch ended on its own and no probe point is left inside it. Deterministic runs: a round saw it end
   *  before its probe point (whether the end has streamed by the time a round's probe returns depends on timing). */
  get done(): boolean {
    if (this.deterministicRun) return this.endSeen && this.state.finished;
    return this.state.finished && !this.canProbeAt((this.knob.used + 1) * this.o.interval);
  }

  /** Deterministic runs: probes fork at fixed lengths and read the thought from the token ids, rounds wait for token
   *  counts, and the main branch counts up to the last probe point (ProgramContext.countUpTo). */
  readonly deterministic = true;

  async execute(ctx: ProgramContext): Promise<void> {
    if (this.main === null) {
      this.deterministicRun = ctx.deterministic === true;
      this.startMain(ctx);
    }
    const target = (this.knob.used + 1) * this.o.interval;
    while (this.state.mainTokens < target && !this.ended) {
      await new Promise<void>((resolve) => (this.progress = resolve));
    }
    if (this.mainError !== undefined) throw this.mainError;
    if (this.state.mainTokens < target) {
      // The branch ended before this probe point: done. It counts all its tokens.
      this.endSeen = true;
      ctx.countUpTo?.(this.main!, Number.POSITIVE_INFINITY);
      return;
    }
    // If the run stops after this round, the main branch counts up to here (it has streamed at least this far).
    ctx.countUpTo?.(this.main!, target);
    this.knob.used++;
    if (this.deterministicRun) this.textAt[target] = this.thoughtFromIds(ctx, target);
    if (!this.canProbeAt(target)) return;
    const thought = this.textAt[target];
    const suffix = typeof this.o.probeSuffix === "string" ? this.o.probeSuffix : this.o.probeSuffix(thought);
    const probe = ctx.fork(
      this.main!,
      {
        length: this.promptLength + target,
        append: suffix,
        maxTokens: this.o.probeMaxTokens,
        temperature: 0,
        stop: this.o.probeStop,
      },
      "probe",
    );
    const out = await probe.result;
    this.state.probes.push(out.finishReason === "aborted" ? null : out.text.trim());
    this.state.probeAt.push(target);
    this.state.probeTokens.push(out.usage.generatedTokens);
  }

  /** A probe at `tokens` generated tokens makes sense while the thought is still open there. */
  private canProbeAt(tokens: number): boolean {
    if (!this.o.probe || this.state.mainTokens < tokens) return false;
    const text = this.textAt[tokens];
    return !this.o.answerMarkers.some((m) => text.includes(m));
  }

  /**
   * Deterministic runs: the text of the first `tokens` generated ids. The streamed textAt holds a delta's text at its
   * last token only (the tokens inside a multi-token delta see the text before it), and how verified tokens are
   * grouped into deltas depends on timing.
   */
  private thoughtFromIds(ctx: ProgramContext, tokens: number): string {
    if (ctx.decode === undefined) return this.textAt[tokens];
    return ctx.decode(this.mainIds.slice(0, tokens), { model: this.o.model });
  }

  /** The main branch's text after its first `tokens` generated tokens (as far as it has run). */
  thoughtAt(tokens: number): string {
    if (!Number.isInteger(tokens) || tokens < 0 || tokens >= this.textAt.length)
      throw new RangeError(`thoughtAt(${tokens}): the main branch has ${this.textAt.length - 1} tokens`);
    return this.textAt[tokens];
  }

  updateCertaindex(): number {
    this.certaindex = probeCertaindex(this.state.probes, this.o.rule);
    return this.certaindex;
  }

  /** The finished branch's answer once done; before that (an early exit), the latest probe's. */
  answer(): string | null {
    if (this.done) return this.o.extractAnswer(this.state.mainText);
    const last = this.state.probes[this.state.probes.length - 1];
    return last == null || last === "" ? null : last;
  }

  private startMain(ctx: ProgramContext): void {
    const o = this.o;
    const prompt = ctx.encode(o.prompt, { model: o.model });
    this.promptLength = prompt.length;
    const main = ctx.submit({
      prompt,
      maxTokens: o.maxTokens,
      temperature: o.temperature,
      seed: o.seed,
      model: o.model,
    });
    this.main = main;
    const wake = (): void => {
      const p = this.progress;
      this.progress = null;
      p?.();
    };
    void (async () => {
      try {
        for await (const d of main) {
          for (const _ of d.tokens) this.textAt.push(this.textAt[this.textAt.length - 1]);
          this.mainIds.push(...d.tokens);
          this.state.mainText += d.text;
          this.textAt[this.textAt.length - 1] = this.state.mainText;
          this.state.mainTokens += d.tokens.length;
          // Known with the last tokens, not later with the result: a round that wakes on them sees it.
          if (d.finishReason !== undefined && d.finishReason !== "aborted") this.state.finished = true;
          wake();
        }
        const out = await main.result;
        this.state.mainText = out.text;
        this.state.finished = out.finishReason !== "aborted";
      } catch (e) {
        this.mainError = e;
      }
      this.ended = true;
      wake();
    })();
  }
}
