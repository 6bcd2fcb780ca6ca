// DUCHESS (intra-request branch orchestration): c branches think in parallel; every `interval` generated tokens the
// engine hands each branch's activation at the probe's layer (request.probe, no extra forward) to a small MLP that
// predicts whether a CoT probe would already answer correctly. Per branch:
//   terminate   p > tau at `consecutive` (S = 2) checks in a row: the branch's answer is read by a CoT probe (a fork
//               at the checked length + the task's probe suffix, decoded greedily), then the branch is aborted and
//               its pages freed; a branch that ends on its own keeps the answer it wrote;
//   branch out  each freed slot is refilled by forking an active branch j (its KV pages shared) chosen with
//               probability p_j^(1/λ) / Σ_k p_k^(1/λ);
//   continue    otherwise.
// Request level: stop as soon as α·c identical answers or β·c answers are collected (0 < α < β ≤ 1); the rest is
// aborted. The answer is the majority vote; certaindex is the answer entropy (as SC's), so the program reports what
// the others report. Optionally the prompt's last-token activation goes through the probe's difficulty classifier
// first and every request carries the predicted length (metadata.predictedTokens) for complexity-aware SJF.
// With `structured` answers there is no `\boxed{` to probe for: a terminated branch's CoT probe closes its thought
// (`</think>`) and the format, which the fork inherits, writes the answer; a branch whose thought has already closed
// (or a thought "none" format, or a model without think tokens) is writing its constrained answer and is not cut.
import { InvalidOptionError } from "../errors/index.js";
import type { RequestHandle } from "../engine/handle.js";
import type { ConfidenceReport, FinishReason, GenerationOutput } from "../engine/outputs.js";
import type { SchedMetadata } from "../engine/sequence.js";
import {
  confidenceCertaindex,
  entropyCertaindex,
  majorityVote,
  measureOf,
  weightedMajority,
  type ConfidenceMeasure,
} from "../certaindex/signals.js";
import { correctnessOf, predictedTokensOf, type DuchessProbe } from "../probe/probeFile.js";
import { Prng } from "../probe/mlp.js";
import { LockstepQueue, type LockstepEvent } from "./lockstep.js";
import type { Knob, Program, ProgramContext } from "./program.js";
import { answerTaskOf, answerText } from "./structuredAnswers.js";
import type { BranchSampling, ProgramTask } from "./task.js";

/** DUCHESS's knobs. Of the branch sampling: maxTokens caps a branch counted from the prompt across forks; branch i
 * starts with seed + i and the k-th fork gets seed + c + k. */
export interface DuchessOptions extends BranchSampling {
  /** The trained probe (loadProbe): its correctness MLP, layer, interval and tau; its classifier if any. */
  probe: DuchessProbe;
  /** c: branches kept active (default: the probe's tuned value, else 8). */
  branches?: number;
  /** Request stop on consensus: α·c identical answers (default: tuned, else 0.6). */
  alpha?: number;
  /** Request stop on coverage: β·c answers (default: tuned, else 0.8). */
  beta?: number;
  /** Branch-out temperature λ (default: tuned, else 1). */
  lambda?: number;
  /** Termination threshold (default: the probe's tuned tau, else its tau). */
  tau?: number;
  /** S: checks in a row above tau before terminating (default: the probe's, 2). */
  consecutive?: number;
  /** Generated tokens between checks (default: the probe's tuned value, else the interval it was trained at). */
  interval?: number;
  /** Most tokens a CoT probe decodes (default 20; with `structured`, the answer's room: structured.answerTokens, else
   * min(256, maxTokens / 2), as the engine keeps it). */
  probeMaxTokens?: number;
  /** Ablations: turn each action off (all on by default; branch-out as the probe's tuning says). Without
   *  requestStop the program stops at c answers. */
  terminate?: boolean;
  branchOut?: boolean;
  requestStop?: boolean;
  /** Predict the request's length with the probe's classifier first (default: when the probe has one). */
  classify?: boolean;
  /**
   * DUCHESS with confidence (issue 28's comparison): every branch tracks DeepConf's confidence (request.confidence,
   * window tokens, top-k logprobs), and the final vote and certaindex weigh each answer by its branch's confidence
   * `measure` (default "lowest") instead of counting it: certaindex becomes the confidence-weighted consensus
   * (signals.ts confidenceCertaindex). The stop rules still count answers. Default: off.
   */
  confidence?: { window: number; topK?: number; measure?: ConfidenceMeasure } | null;
}

export type BranchEnd = "terminated" | FinishReason;

export interface DuchessBranch {
  id: number;
  /** The branch it was forked from (null: started from the prompt). */
  parent: number | null;
  /** Generated tokens inherited from the parent at the fork. */
  offset: number;
  /** Generated tokens of its own so far. */
  tokens: number;
  /** The probe's predictions at each check, in order. */
  predictions: number[];
  end: BranchEnd | null;
  answer: string | null;
  /** Prompt tokens whose KV it did not compute (the shared prompt, or for a fork the parent's pages). */
  cachedTokens: number;
  /** Its trace's confidence (with options.confidence; for a terminated branch, up to where it was cut). */
  confidence: ConfidenceReport | null;
  /** Whether its answer was counted (answers arriving after the request stopped are not). */
  voted: boolean;
}

export type DuchessStop = "consensus" | "coverage" | "answers" | "exhausted";

interface Live {
  b: DuchessBranch;
  handle: RequestHandle;
  /** Prompt tokens of its request (the fork point for a forked branch). */
  promptLength: number;
  text: string;
  above: number;
  /** Its thought is open after the tokens read so far (tracked with `structured` only: where a probe may cut). */
  thinking: boolean;
  /** Deterministic runs: its generated ids as streamed, and whether its thought was open before them. */
  ids: number[];
  thinkingAtStart: boolean;
}

/** Deterministic runs: a branch event in lockstep order (lockstep.ts). */
interface BranchEvent extends LockstepEvent {
  kind: "check" | "end";
  hidden?: Float32Array;
  out?: GenerationOutput;
}

export class Duchess implements Program {
  readonly name = "duchess";
  certaindex = 0;
  readonly knob: Knob = { used: 0, max: 1 };
  readonly tokenBudget: number;
  readonly state = {
    branches: [] as DuchessBranch[],
    answers: [] as string[],
    /** The classifier's predicted tokens per branch (null: not classified). */
    predictedTokens: null as number | null,
    stop: null as DuchessStop | null,
    terminated: 0,
    forks: 0,
  };
  private readonly o: Required<Omit<DuchessOptions, "model" | "topP" | "task" | "probe" | "structured">> &
    Pick<DuchessOptions, "model" | "topP" | "probe" | "structured">;
  private readonly task: ProgramTask;
  private readonly live = new Map<number, Live>();
  private pendingProbes = 0;
  private settle: (() => void) | null = null;
  private failure: unknown = undefined;
  private rng: Prng;
  /** With `structured` and a free thought: the model's think tokens (set by execute; null: no thought to cut). */
  private think: { start: number; end: number } | null = null;

  constructor(options: DuchessOptions) {
    const probe = options.probe;
    const tuned = probe.meta.orchestration;
    const c = options.branches ?? tuned?.branches ?? 8;
    const alpha = options.alpha ?? tuned?.alpha ?? 0.6;
    const beta = options.beta ?? tuned?.beta ?? 0.8;
    const lambda = options.lambda ?? tuned?.lambda ?? 1;
    if (!Number.isInteger(c) || c < 1)
      throw new InvalidOptionError(`duchess.branches must be an integer ≥ 1, got ${c}`, { field: "duchess.branches" });
    if (!(alpha > 0 && alpha < beta && beta <= 1))
      throw new InvalidOptionError(`duchess: expected 0 < alpha < beta ≤ 1, got alpha ${alpha}, beta ${beta}`, {
        field: "duchess.alpha",
      });
    if (!(lambda > 0))
      throw new InvalidOptionError(`duchess.lambda must be > 0, got ${lambda}`, { field: "duchess.lambda" });
    if (options.interval !== undefined && !(Number.isInteger(options.interval) && options.interval >= 1))
      throw new InvalidOptionError(`duchess.interval must be an integer ≥ 1, got ${options.interval}`, {
        field: "duchess.interval",
      });
    this.task = answerTaskOf(options);
    const structured = options.structured;
    this.o = {
      prompt: options.prompt,
      probe,
      branches: c,
      alpha,
      beta,
      lambda,
      tau: options.tau ?? tuned?.tau ?? probe.meta.correctness.tau,
      consecutive: options.consecutive ?? probe.meta.correctness.consecutive,
      interval: options.interval ?? tuned?.interval ?? probe.meta.correctness.interval,
      maxTokens: options.maxTokens ?? 256,
      temperature: options.temperature ?? 0.8,
      topP: options.topP,
      seed: options.seed ?? 0,
      model: options.model,
      probeMaxTokens:
        options.probeMaxTokens ??
        (structured ? (structured.answerTokens ?? Math.min(256, Math.floor((options.maxTokens ?? 256) / 2))) : 20),
      terminate: options.terminate ?? true,
      branchOut: options.branchOut ?? tuned?.branchOut ?? true,
      requestStop: options.requestStop ?? true,
      classify: options.classify ?? probe.difficulty !== null,
      confidence: options.confidence ?? null,
      structured,
    };
    this.rng = new Prng(this.o.seed);
    this.tokenBudget = c * this.o.maxTokens;
  }

  get done(): boolean {
    return this.knob.used >= 1;
  }

  /**
   * Deterministic runs: the branches' checks and ends are taken in lockstep order (lockstep.ts), not as they arrive:
   * a terminated branch is cut, and a branch-out forks its source, at the event's time; answers are collected, and
   * the stop rule checked, in that order (a CoT probe's answer before any later event); the activations come from
   * verified positions (the engine's deterministic probe). Not with `confidence`: a terminated branch's confidence
   * report covers what it streamed until its abort landed.
   */
  get deterministic(): true | string {
    if (this.o.confidence)
      return "with confidence, a terminated branch's vote weighs the confidence of the tokens it streamed until its abort landed (timing); drop confidence";
    return true;
  }
  /** Deterministic runs: events in lockstep order (null otherwise). */
  private lockstep: LockstepQueue<BranchEvent> | null = null;
  private pumping = false;

  async execute(ctx: ProgramContext): Promise<void> {
    const o = this.o;
    const prompt = ctx.encode(o.prompt, { model: o.model });
    const metadata: SchedMetadata = {};
    if (o.classify && o.probe.difficulty) {
      // The paper prefills first and predicts from the prefill's activation; here a one-token request captures it.
      const d = o.probe.meta.difficulty!;
      const out = await ctx.submit(
        { prompt, maxTokens: 1, model: o.model, probe: { layer: d.layer, every: 1 }, metadata: { predictedTokens: 0 } },
        "classify",
      ).result;
      const capture = out.probes?.[0];
      if (capture) {
        this.state.predictedTokens = predictedTokensOf(o.probe, capture.hidden);
        if (this.state.predictedTokens !== null) metadata.predictedTokens = this.state.predictedTokens * o.branches;
      }
    }
    if (o.structured && o.structured.thought !== "none") this.think = ctx.thinkTokens?.(o.model) ?? null;
    const thinking = this.thoughtOpen(prompt, false);
    if (ctx.deterministic) this.lockstep = new LockstepQueue<BranchEvent>();
    const finished = new Promise<void>((resolve) => (this.settle = resolve));
    for (let i = 0; i < o.branches && !ctx.signal.aborted; i++) {
      this.start(
        ctx,
        null,
        ctx.submit({
          prompt,
          maxTokens: o.maxTokens,
          temperature: o.temperature,
          topP: o.topP,
          seed: o.seed + i,
          model: o.model,
          probe: this.probeOption(),
          confidence: this.confidenceOption(),
          structured: o.structured,
          metadata,
        }),
        prompt.length,
        0,
        thinking,
        metadata,
      );
    }
    this.checkDone();
    await finished;
    this.knob.used = 1;
    for (const l of this.live.values()) l.handle.abort();
    if (this.failure !== undefined) throw this.failure;
  }

  private confidenceOption(): { window: number; topK?: number } | null {
    const c = this.o.confidence;
    return c ? { window: c.window, topK: c.topK } : null;
  }

  /** Whether a thought is open after `tokens`, from one that was (`open`) before them: the last think token says. */
  private thoughtOpen(tokens: readonly number[], open: boolean): boolean {
    if (this.think === null) return false;
    for (const t of tokens) {
      if (t === this.think.start) open = true;
      else if (t === this.think.end) open = false;
    }
    return open;
  }

  private probeOption(): { layer: number; every: number } {
    return { layer: this.o.probe.meta.correctness.layer, every: this.o.interval };
  }

  private start(
    ctx: ProgramContext,
    parent: number | null,
    handle: RequestHandle,
    promptLength: number,
    offset: number,
    thinking: boolean,
    metadata: SchedMetadata,
  ): void {
    const b: DuchessBranch = {
      id: this.state.branches.length,
      parent,
      offset,
      tokens: 0,
      predictions: [],
      end: null,
      answer: null,
      cachedTokens: 0,
      confidence: null,
      voted: false,
    };
    this.state.branches.push(b);
    const live: Live = { b, handle, promptLength, text: "", above: 0, thinking, ids: [], thinkingAtStart: thinking };
    this.live.set(b.id, live);
    if (this.lockstep !== null) return this.startLockstep(ctx, live, metadata);
    void (async () => {
      try {
        for await (const d of handle) {
          if (this.stopped) break;
          b.tokens += d.tokens.length;
          live.text += d.text;
          live.thinking = this.thoughtOpen(d.tokens, live.thinking);
          if (d.probe && d.probe.tokens > 0 && b.end === null) this.check(ctx, live, d.probe.hidden, metadata);
        }
        const out = await handle.result;
        b.cachedTokens = out.usage.cachedTokens;
        b.confidence = out.confidence ?? null;
        if (b.end === null) {
          b.end = out.finishReason;
          this.live.delete(b.id);
          if (out.finishReason !== "aborted") {
            const text = answerText(ctx, out, this.o);
            b.answer = text === null ? null : this.task.extractAnswer(text);
            this.collect(b);
            this.refill(ctx, metadata);
          }
        }
      } catch (e) {
        this.failure ??= e;
        this.live.delete(b.id);
      }
      this.checkDone();
    })();
  }

  /** One probe check (the activation at a multiple of the interval): maybe terminate. */
  private check(
    ctx: ProgramContext,
    live: Live,
    hidden: Float32Array,
    metadata: SchedMetadata,
    time?: number,
  ): Promise<void> | null {
    const p = correctnessOf(this.o.probe, hidden);
    live.b.predictions.push(p);
    live.above = p > this.o.tau ? live.above + 1 : 0;
    if (!this.o.terminate || live.above < this.o.consecutive || this.stopped) return null;
    // A structured branch is cut only inside its thought: past `</think>` it is writing the constrained answer.
    if (this.o.structured && !live.thinking) return null;
    // Terminate: a CoT probe reads the answer the thought has reached (cut where this program has read it to: the
    // check arrives with the token after the checked one), then the branch goes.
    const b = live.b;
    b.end = "terminated";
    this.state.terminated++;
    this.live.delete(b.id);
    const probe = ctx.fork(
      live.handle,
      {
        length: live.promptLength + b.tokens,
        append: this.task.probeSuffix(live.text),
        maxTokens: this.o.probeMaxTokens,
        temperature: 0,
        // A structured answer ends when its format is complete (a JSON object has its own `}` and newlines).
        stop: this.o.structured ? [] : ["}", "\n"],
        probe: null,
        confidence: null,
      },
      "probe",
    );
    ctx.countUpTo?.(live.handle, b.tokens);
    live.handle.abort();
    this.lockstep?.close(b.id);
    this.pendingProbes++;
    const settled = probe.result.then(
      (out) => {
        this.pendingProbes--;
        if (out.finishReason !== "aborted") {
          if (this.o.structured) {
            const text = answerText(ctx, out, this.o);
            b.answer = text === null ? null : this.task.extractAnswer(text);
          } else b.answer = out.text.trim() === "" ? null : out.text.trim();
          this.collect(b);
        }
        this.checkDone();
      },
      (e) => {
        this.pendingProbes--;
        this.failure ??= e;
        this.checkDone();
      },
    );
    this.refill(ctx, metadata, time);
    return settled;
  }

  /** Branch-out: fill the freed slot by forking an active branch, p_j^(1/λ)-weighted. Not once the answers in hand
   *  and those on their way (CoT probes in flight) already make the request stop: the fork could only be aborted. */
  private refill(ctx: ProgramContext, metadata: SchedMetadata, time?: number): void {
    if (!this.o.branchOut || this.stopped || ctx.signal.aborted) return;
    const coming = this.state.answers.length + this.pendingProbes;
    if (coming >= (this.o.requestStop ? this.o.beta : 1) * this.o.branches) return;
    const active = [...this.live.values()].filter((l) => l.b.end === null);
    if (active.length === 0) return;
    const weights = active.map(
      (l) => (l.b.predictions.length > 0 ? l.b.predictions[l.b.predictions.length - 1] : 0.5) ** (1 / this.o.lambda),
    );
    const total = weights.reduce((s, w) => s + w, 0);
    let r = this.rng.next() * total;
    let j = 0;
    while (j < active.length - 1 && (r -= weights[j]) >= 0) j++;
    const src = active[j];
    // Deterministic runs: where the source is at the event's time (it has streamed that far: lockstep.ts).
    const cut = time === undefined ? src.b.tokens : time - src.b.offset;
    const generated = src.b.offset + cut;
    if (generated >= this.o.maxTokens) return;
    const fork = ctx.fork(src.handle, {
      length: src.promptLength + cut,
      maxTokens: this.o.maxTokens - generated,
      temperature: this.o.temperature,
      seed: this.o.seed + this.o.branches + this.state.forks,
      probe: this.probeOption(),
      confidence: this.confidenceOption(),
      metadata,
    });
    this.state.forks++;
    this.start(ctx, src.b.id, fork, src.promptLength + cut, generated, src.thinking, metadata);
  }

  /** Adds an answer unless the request has stopped (answers that land in the same step as the stopping one are
   *  dropped: the stop rule is checked answer by answer, in arrival order). */
  private collect(b: DuchessBranch): void {
    if (this.stopped) return;
    const answer = b.answer;
    b.voted = true;
    if (answer !== null) this.state.answers.push(answer);
    else this.state.answers.push("");
    const c = this.o.branches;
    const n = this.state.answers.length;
    const top = majorityVote(this.state.answers, (a, b) => this.task.equivalent(a, b)).votes;
    if (this.o.requestStop) {
      if (top >= this.o.alpha * c) this.state.stop ??= "consensus";
      else if (n >= this.o.beta * c) this.state.stop ??= "coverage";
    } else if (n >= c) {
      this.state.stop ??= "answers";
    }
  }

  private get stopped(): boolean {
    return this.state.stop !== null;
  }

  /**
   * Deterministic runs: the branch's stream feeds the lockstep queue (captures and its end as events, its clock), and
   * the events are taken in order (pump). b.tokens is the time of its last event taken, not what it streamed.
   */
  private startLockstep(ctx: ProgramContext, live: Live, metadata: SchedMetadata): void {
    const q = this.lockstep!;
    const b = live.b;
    q.open(b.id, b.offset);
    let streamed = 0;
    void (async () => {
      try {
        for await (const d of live.handle) {
          live.ids.push(...d.tokens);
          streamed += d.tokens.length;
          if (d.probe && d.probe.tokens > 0)
            q.push({ time: b.offset + streamed, branch: b.id, kind: "check", hidden: d.probe.hidden });
          q.advance(b.id, b.offset + streamed);
          this.pump(ctx, metadata);
        }
        const out = await live.handle.result;
        b.cachedTokens = out.usage.cachedTokens;
        if (out.finishReason !== "aborted") q.push({ time: b.offset + streamed, branch: b.id, kind: "end", out });
        else if (b.end === null && ctx.signal.aborted) {
          // The caller aborted the run (the program's own cuts set end first).
          b.end = "aborted";
          this.live.delete(b.id);
        }
      } catch (e) {
        this.failure ??= e;
      }
      q.close(b.id);
      this.pump(ctx, metadata);
    })();
  }

  /** Deterministic runs: takes the events every branch has caught up with, in lockstep order (one taker at a time:
   *  a termination waits for its CoT probe's answer before the next event). */
  private pump(ctx: ProgramContext, metadata: SchedMetadata): void {
    if (this.pumping) return;
    this.pumping = true;
    void (async () => {
      try {
        for (
          let e = this.lockstep!.next();
          e !== undefined && !this.stopped && this.failure === undefined;
          e = this.lockstep!.next()
        ) {
          const live = this.live.get(e.branch);
          if (live === undefined || live.b.end !== null) continue; // cut before this event
          const b = live.b;
          b.tokens = e.time - b.offset;
          if (e.kind === "check") {
            live.text = ctx.decode ? ctx.decode(live.ids.slice(0, b.tokens), { model: this.o.model }) : live.text;
            live.thinking = this.thoughtOpen(live.ids.slice(0, b.tokens), live.thinkingAtStart);
            await this.check(ctx, live, e.hidden!, metadata, e.time);
          } else {
            const out = e.out!;
            b.end = out.finishReason;
            b.confidence = out.confidence ?? null;
            this.live.delete(b.id);
            const text = answerText(ctx, out, this.o);
            b.answer = text === null ? null : this.task.extractAnswer(text);
            this.collect(b);
            this.refill(ctx, metadata, e.time);
          }
          if (this.stopped) this.stopAt(ctx, e.time);
        }
      } catch (err) {
        this.failure ??= err;
      }
      this.pumping = false;
      this.checkDone();
    })();
  }

  /** Deterministic runs: the request stopped at `time`: every branch still going is cut there. */
  private stopAt(ctx: ProgramContext, time: number): void {
    for (const l of this.live.values()) {
      if (l.b.end !== null) continue;
      l.b.tokens = Math.max(0, time - l.b.offset);
      ctx.countUpTo?.(l.handle, l.b.tokens);
      l.handle.abort();
    }
  }

  private checkDone(): void {
    if (this.lockstep !== null) {
      // Deterministic runs: the taker settles the run itself once it has cut the branches at the stop (stopAt);
      // otherwise done when no branch is active and nothing is left to take.
      if (this.pumping) return;
      if (!this.stopped && this.failure === undefined && (this.lockstep.pending > 0 || this.pendingProbes > 0)) return;
    }
    const running = [...this.live.values()].some((l) => l.b.end === null);
    if (this.stopped || this.failure !== undefined || (!running && this.pendingProbes === 0)) {
      if (!this.stopped && this.failure === undefined) this.state.stop = "exhausted";
      const s = this.settle;
      this.settle = null;
      s?.();
    }
  }

  updateCertaindex(): number {
    const eq = (a: string, b: string): boolean => this.task.equivalent(a, b);
    this.certaindex = this.o.confidence
      ? confidenceCertaindex(this.weightedVotes(), eq)
      : entropyCertaindex(this.votes(), eq);
    return this.certaindex;
  }

  answer(): string | null {
    const eq = (a: string, b: string): boolean => this.task.equivalent(a, b);
    return this.o.confidence
      ? weightedMajority(this.weightedVotes(), eq).answer
      : majorityVote(this.votes(), eq).answer;
  }

  /** The counted answers weighed by their branches' confidence (a branch without a confidence report weighs 0). */
  private weightedVotes(): Array<{ answer: string | null; weight: number }> {
    const measure = this.o.confidence?.measure ?? "lowest";
    return this.state.branches
      .filter((b) => b.voted)
      .map((b) => ({ answer: b.answer, weight: b.confidence === null ? 0 : measureOf(b.confidence, measure) }));
  }

  /** The counted answers in branch order (as SC's samples), not arrival order: the vote breaks a tie by the first
   *  answer to reach the top count, and arrival order would hand ties to the branches that ended first, the short
   *  traces and the early cuts, which are wrong more often (on the tiny reasoner -1 to -2 points at c = 8-16). */
  private votes(): Array<string | null> {
    return this.state.branches.filter((b) => b.voted).map((b) => b.answer);
  }
}
