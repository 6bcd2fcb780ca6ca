// Verifier-guided search over reasoning steps (a step = one line), served the FlashTTS way.
//
// Algorithms (HF search-and-learn, Snell et al.): `beam` keeps the N/M best of N candidate steps by their score and
// gives each M continuations; `dvts` splits the N into N/M independent subtrees that each keep their best one
// (diverse verifier tree search); best-of-N weighted is ts/programs/bestOfN.ts. A step is scored by a RewardSource (a
// process reward model: prmReward; or a task's verifier); a path's score aggregates its step scores (`aggregate`:
// "last" as search-and-learn, "min", "prod"). A step that writes the answer marker or ends the turn finishes its
// solution; the answer is the score-weighted vote of the finished solutions.
//
// Defaults tuned on the arithmetic task's validation split with the bundled tiny reasoner and PRM (issue 48,
// bench/tts-compare.md): candidates that are the same path are kept once (`dedupe`; without it the kept beams were
// mostly copies of one path), T = 0.8, aggregate "last", and for `beam` M = 1: every distinct path is kept and the
// duplicates' continuations go to the distinct paths, best-scored first. Each narrower width lost right paths to
// pruning (the oracle replay: at M = 4 a third of the questions lost their last right prefix to the PRM's ranking)
// — the bundled PRM learned the step checker's "is this line's arithmetic right", and this generator's mistakes are
// mostly right lines on the wrong sub-expression. Give beamWidth > 1 with a PRM whose ranking is worth pruning by.
//
// FlashTTS techniques, each a switch (all off = the baseline of the paper's ablation). Defaults: prefix-aware on,
// speculation and LookAhead off — built for GPUs, where decode rows are nearly free up to the memory-bound batch, and
// to be measured there before it becomes a default (on the 2-core CPU, bench/tts.md, two runs: at the full batch
// 0.84-0.99x the baseline at N = 8-64, every row being compute there and three in four pruned; capped at the free
// decode batch 0.79-1.14x, within this VM's spread).
// - `prefixAware` (P): a kept path's continuations fork its request (KV shared while it lives, revived from the
//   prefix cache after) and are issued grouped by parent, parents in the order they were kept. Off: every
//   continuation is a new request with the whole path as its prompt, issued in a seeded random order (a serving
//   system fed by a search script: only the prefix cache can find the shared prefixes).
// - `speculative` (S): while stragglers still write their step, finished steps start their continuations early,
//   filling the slots the finished steps freed (at most N requests in flight, or `speculativeRows`: the batch up to
//   which a decode step costs no more on this device, measured), highest previous score first, up to
//   M_i = B - j + 1 continuations for a step whose parent's score is in bin C_j of B = M bins (paper §4.1.1). A
//   continuation is exactly the request the search would issue if the step is kept (same tokens, same per-node
//   seed), so a kept step's speculative tokens are the tokens the search would generate anyway: speculation never
//   changes what the search decides. Pruned steps' speculation is aborted, and so is an iteration's unfinished
//   speculation once the generator preempts a sequence (memory pressure: the paper's speculation is preemptible).
//   `truncateRatio` R > 0 is the paper's duplicate-then-truncate: a kept step's continuations that had no
//   speculation of their own start from the first one's speculative tokens cut to R of their length (their own
//   seed after that) — faster, but no longer the non-speculative search's samples (off by default).
// - `lookahead`: a step whose first continuation has finished is verified together with it (one verifier KV:
//   RewardSource.scoreAhead), so a kept speculative step needs no verifier pass the next iteration.
//
// Seeds are per node (a node's k-th continuation samples with mixSeed(node.seed, k)), never from a counter, so the
// search samples the same tokens whatever order the requests run in.
import { InvalidOptionError } from "../errors/index.js";
import { confidenceCertaindex, weightedMajority, type AnswerEquivalence } from "../certaindex/signals.js";
import type { PolicySpec } from "../certaindex/policies.js";
import type { RequestHandle } from "../engine/handle.js";
import type { SampleOutput } from "../engine/outputs.js";
import { hashPage } from "../engine/pageHash.js";
import { boxedAnswers } from "./answers.js";
import type { Knob, Program, ProgramContext } from "./program.js";
import { scoreAhead, type RewardSource } from "./rewards.js";
import type { ProgramTask } from "./task.js";

export type BeamVariant = "beam" | "dvts";
export type ScoreAggregate = "last" | "min" | "prod";

export interface FlashTtsSwitches {
  /** P: continuations fork their parent, grouped by parent (default true). */
  prefixAware?: boolean;
  /** S: speculative beam extension (default false: unmeasured where it pays, on a GPU; see the file's comment). */
  speculative?: boolean;
  /** Duplicate-then-truncate ratio R in [0, 1) (default 0: off, exact). */
  truncateRatio?: number;
  /** LookAhead verification (default: on when speculative is; needs it). */
  lookahead?: boolean;
  /**
   * Most generator rows (continuations and speculation) in flight while speculating (default N: the paper keeps the
   * batch full). Speculation is free only while a decode step costs what a smaller one does: give the generator's
   * free decode batch (freeDecodeBatch of its measured profile; KvSplitPlan.speculativeRows) where rows beyond it
   * cost compute, as on a CPU.
   */
  speculativeRows?: number;
}

export interface BeamSearchOptions extends FlashTtsSwitches {
  /** Rendered prompt (text or ids) the first steps continue. */
  prompt: string | readonly number[];
  /** The question as the reward source sees it. */
  question: string;
  /** Scores each step (a PRM: prmReward; default: the task's step verifier). */
  reward?: RewardSource;
  task?: ProgramTask;
  variant?: BeamVariant;
  /** N: candidate steps per iteration, and the finished solutions wanted (default 16). */
  n?: number;
  /** M: continuations per kept path (default: beam 1, dvts 4; N must be a multiple of M). */
  beamWidth?: number;
  /**
   * Candidates that are the same path (the same steps from the root) are one beam (default true): the best copy is
   * kept once, and the kept beams share the iteration's N continuations (search-and-learn's filter_duplicates with
   * its refill to N). Off: N/M copies of one path may be kept, and the N solutions are often one solution.
   */
  dedupe?: boolean;
  /**
   * beam: a candidate whose own step scores below this is not kept while any candidate scores at least this
   * (default 0: off). A PRM's coarse verdict (a wrong product, a boxed answer that is not the thought's result) is
   * reliable where its ranking among steps it calls good is not; the kept paths share the pruned ones' continuations.
   */
  pruneBelow?: number;
  /**
   * The vote weighs each finished solution by its sampling mass too (default false): the share of the first N samples
   * its path stands for (a kept path holds its twins' mass, its continuations share it). dedupe spreads the
   * continuations evenly over the distinct paths; this undoes that flattening in the vote, as SC's duplicates are
   * votes.
   */
  massVote?: boolean;
  aggregate?: ScoreAggregate;
  /** Most tokens per step (default 48). */
  stepMaxTokens?: number;
  /** Most iterations (steps per solution) (default 64: the token cap binds first; at 16 a thought of the hardest
   * questions, steps then check lines, was cut before its answer and the search had none). */
  maxDepth?: number;
  /** Most tokens a solution may generate (default 256). */
  maxTokens?: number;
  temperature?: number;
  seed?: number;
  model?: string;
  equivalent?: AnswerEquivalence;
}

export interface BeamNode {
  id: number;
  parent: BeamNode | null;
  /** The request whose sample `sample` wrote this step (null: the root). */
  handle: RequestHandle | null;
  sample: number;
  /** The seed this step was sampled with; continuation k uses mixSeed(seed, k). */
  seed: number;
  /** Prompt and path tokens up to this step's end (the root: the prompt). */
  ids: number[];
  step: string;
  depth: number;
  pathTokens: number;
  /** This step's score and the path's aggregate. */
  stepScore: number;
  score: number;
  terminal: boolean;
  answer: string | null;
  /** dvts: which subtree. */
  group: number;
  /** Which continuation of its parent (the root's: the sample index). */
  k: number;
  /** Position among its iteration's candidates (frontier order, then k): breaks score ties reproducibly. */
  rank: number;
  /** The path's text (its steps from the root, one a line): equal keys are the same path. */
  key: string;
  /** Continuations this node gets once kept (the root: N; a kept path: M, or its share of N after dedupe). */
  width: number;
  /** Sampling mass: the root 1; a child its parent's mass / the parent's width; a kept path adds its twins'. */
  mass: number;
  /** A finished solution: milliseconds from the search's start until it was finished (precise goodput). */
  finishedMs: number;
}

/** A speculative continuation: the request node's k-th continuation would be, issued early. */
interface Speculation {
  parent: BeamNode;
  k: number;
  handle: RequestHandle;
  done: Promise<SampleOutput>;
  finished: SampleOutput | null;
  /** LookAhead: this step's score, computed with its parent's. */
  score: number | null;
}

export interface BeamStats {
  iterations: number;
  /** Tokens of steps the search kept (parts of finished or frontier paths) — what goodput counts. */
  candidateTokens: number;
  speculativeIssued: number;
  /** Speculative continuations the search used (kept) / aborted or left unused. */
  speculativeUsed: number;
  speculativeWasted: number;
  /** The most generator rows (unfinished continuations + speculation) in flight once speculation started. */
  speculativePeakRows: number;
  /** Iterations whose speculation stopped for memory pressure (the generator preempted a sequence). */
  speculationStops: number;
  /** Verifier passes (scored steps) and the steps LookAhead scored ahead of time. */
  verifierCalls: number;
  lookaheadScored: number;
  /** Milliseconds in generation (until the iteration's last step) and in verification. */
  generationMs: number;
  verificationMs: number;
}

/** The first of each path in `ranked` (equal keys: the same steps from the root). */
function distinct(ranked: readonly BeamNode[]): BeamNode[] {
  const seen = new Set<string>();
  return ranked.filter((c) => !seen.has(c.key) && (seen.add(c.key), true));
}

/** A continuation seed: a 32-bit hash of the node's seed and the continuation index. */
export function mixSeed(seed: number, k: number): number {
  return hashPage(seed, [k, 0x5eed]) % 2 ** 32;
}

export function aggregateScore(parent: number | null, step: number, how: ScoreAggregate): number {
  if (parent === null || how === "last") return step;
  return how === "min" ? Math.min(parent, step) : parent * step;
}

export class BeamSearch implements Program {
  readonly name: string;
  certaindex = 0;
  readonly knob: Knob;
  readonly tokenBudget: number;
  /** Runs until the search ends (N finished solutions, no frontier, or maxDepth): no certaindex stop of its own. */
  readonly defaultPolicy: PolicySpec = { kind: "baseline-even" };
  readonly nodes: BeamNode[] = [];
  readonly root: BeamNode;
  readonly finished: BeamNode[] = [];
  frontier: BeamNode[];
  readonly stats: BeamStats = {
    iterations: 0,
    candidateTokens: 0,
    speculativeIssued: 0,
    speculativeUsed: 0,
    speculativeWasted: 0,
    speculativePeakRows: 0,
    speculationStops: 0,
    verifierCalls: 0,
    lookaheadScored: 0,
    generationMs: 0,
    verificationMs: 0,
  };
  private readonly n: number;
  private readonly m: number;
  private readonly variant: BeamVariant;
  private readonly reward: RewardSource;
  private readonly task: ProgramTask;
  private readonly eq: AnswerEquivalence;
  private readonly sw: Required<FlashTtsSwitches>;
  private readonly stepMax: number;
  private readonly pruneBelow: number;
  private readonly maxDepth: number;
  private readonly maxTokens: number;
  private shuffleState: number;
  private startedAt = 0;
  /** Speculative continuations by parent node id. */
  private spec = new Map<number, Speculation[]>();

  constructor(private readonly o: BeamSearchOptions) {
    this.variant = o.variant ?? "beam";
    this.name = this.variant;
    this.n = o.n ?? 16;
    this.m = o.beamWidth ?? (this.variant === "beam" ? 1 : 4);
    if (!Number.isInteger(this.n) || this.n < 1)
      throw new InvalidOptionError(`${this.name}.n must be an integer ≥ 1, got ${this.n}`, { field: `${this.name}.n` });
    if (!Number.isInteger(this.m) || this.m < 1 || this.n % this.m !== 0) {
      throw new InvalidOptionError(
        `${this.name}.beamWidth must be an integer ≥ 1 dividing n (${this.n}), got ${this.m}`,
        { field: `${this.name}.beamWidth` },
      );
    }
    this.task = o.task ?? boxedAnswers;
    const reward = o.reward ?? this.task.stepVerifier;
    if (reward === undefined)
      throw new InvalidOptionError(
        `${this.name} scores steps: give a reward (prmReward, modelProcessReward, verifierReward) or a task with a stepVerifier (arithTask)`,
        { field: "reward" },
      );
    this.reward = reward;
    this.eq = o.equivalent ?? ((a, b) => this.task.equivalent(a, b));
    const r = o.truncateRatio ?? 0;
    if (!(r >= 0 && r < 1))
      throw new InvalidOptionError(`${this.name}.truncateRatio must be in [0, 1), got ${r}`, {
        field: `${this.name}.truncateRatio`,
      });
    const speculative = o.speculative ?? false;
    const rows = o.speculativeRows ?? this.n;
    if (!Number.isInteger(rows) || rows < 1)
      throw new InvalidOptionError(`${this.name}.speculativeRows must be an integer ≥ 1, got ${rows}`, {
        field: `${this.name}.speculativeRows`,
      });
    this.sw = {
      prefixAware: o.prefixAware ?? true,
      speculative,
      truncateRatio: r,
      lookahead: speculative && (o.lookahead ?? true),
      speculativeRows: Math.min(rows, this.n),
    };
    this.pruneBelow = o.pruneBelow ?? 0;
    if (!(this.pruneBelow >= 0 && this.pruneBelow <= 1))
      throw new InvalidOptionError(`${this.name}.pruneBelow must be in [0, 1], got ${this.pruneBelow}`, {
        field: `${this.name}.pruneBelow`,
      });
    this.stepMax = o.stepMaxTokens ?? 48;
    this.maxDepth = o.maxDepth ?? 64;
    this.maxTokens = o.maxTokens ?? 256;
    this.shuffleState = (o.seed ?? 0) >>> 0;
    this.root = this.newNode(null, null, 0, o.seed ?? 0, [], "", 0);
    this.frontier = [this.root];
    this.knob = { used: 0, max: this.maxDepth };
    this.tokenBudget = this.n * this.maxTokens;
  }

  get done(): boolean {
    return this.knob.used > 0 && (this.frontier.length === 0 || this.finished.length >= this.n);
  }

  /** Deterministic runs: without speculation an iteration awaits every continuation and ranks them in frontier order,
   *  scores break ties by that rank, and seeds are per node, so nothing depends on which finishes first. */
  get deterministic(): true | string {
    if (this.sw.speculative)
      return "speculative beam extension starts continuations as steps finish and stops them under memory pressure (both depend on timing); turn speculative off";
    return true;
  }

  /** The score-weighted vote share of the leading answer among finished solutions (0 before any). */
  updateCertaindex(): number {
    this.certaindex = confidenceCertaindex(
      this.finished.map((f) => ({ answer: f.answer, weight: this.voteWeight(f) })),
      this.eq,
    );
    return this.certaindex;
  }

  answer(): string | null {
    if (this.finished.length === 0) return null;
    return weightedMajority(
      this.finished.map((f) => ({ answer: f.answer, weight: this.voteWeight(f) })),
      this.eq,
    ).answer;
  }

  /** A finished solution's weight in the vote: its score, times its sampling mass with massVote. */
  voteWeight(f: BeamNode): number {
    return this.o.massVote ? f.score * f.mass : f.score;
  }

  /** One iteration: every frontier path gets its continuations (one step each), they are scored, and selected. */
  async execute(ctx: ProgramContext): Promise<void> {
    const t0 = performance.now();
    if (this.knob.used === 0)
      ((this.root.ids = ctx.encode(this.o.prompt, { model: this.o.model })), (this.startedAt = t0));
    const children = await this.generate(ctx);
    const t1 = performance.now();
    await this.verify(ctx, children);
    const t2 = performance.now();
    this.select(children);
    this.stats.generationMs += t1 - t0;
    this.stats.verificationMs += t2 - t1;
    this.stats.iterations++;
    this.knob.used++;
  }

  // ---- generation ----

  private continuationsOf(node: BeamNode): number {
    return node.width;
  }

  private stepParams(node: BeamNode) {
    return {
      maxTokens: Math.min(this.stepMax, this.maxTokens - node.pathTokens),
      temperature: this.o.temperature ?? 0.8,
      stop: ["\n"],
    };
  }

  /** The k-th continuation of `node`: what the search issues for it (or speculation issues early). */
  private continuation(ctx: ProgramContext, node: BeamNode, k: number, purpose: string): RequestHandle {
    const seed = mixSeed(node.seed, k);
    const p = this.stepParams(node);
    if (this.sw.prefixAware && node.handle !== null)
      return ctx.fork(node.handle, { sample: node.sample, seed, ...p }, purpose);
    return ctx.submit({ prompt: node.ids, model: this.o.model, seed, ...p }, purpose);
  }

  private async generate(ctx: ProgramContext): Promise<BeamNode[]> {
    // The root's N first steps: one request of N samples sharing the prompt (sample i: seed + i).
    if (this.frontier.length === 1 && this.frontier[0] === this.root) {
      const seed = this.root.seed;
      const h = ctx.submit({
        prompt: this.root.ids,
        model: this.o.model,
        n: this.n,
        seed,
        ...this.stepParams(this.root),
      });
      const out = await h.result;
      const children = out.samples.map((s, i) =>
        this.childOf(this.root, h, s, seed + i, this.variant === "dvts" ? Math.floor(i / this.m) : 0, i),
      );
      children.forEach((c, i) => (c.rank = i));
      return children;
    }
    type Pending = { parent: BeamNode; k: number; handle: RequestHandle; group: number };
    const order = this.sw.prefixAware ? this.frontier : this.shuffled(this.frontier);
    const pending: Pending[] = [];
    const reused: Array<{ parent: BeamNode; k: number; spec: Speculation; group: number }> = [];
    for (const parent of order) {
      const specs = this.spec.get(parent.id) ?? [];
      for (let k = 0; k < this.continuationsOf(parent); k++) {
        const s = specs.find((x) => x.k === k);
        if (s) reused.push({ parent, k, spec: s, group: parent.group });
        else pending.push({ parent, k, handle: this.duplicate(ctx, parent, k, specs), group: parent.group });
      }
    }
    this.spec = new Map();
    this.stats.speculativeUsed += reused.length;
    // Speculation: as continuations finish, their own continuations start in the slots they freed.
    const total = pending.length + reused.length;
    const newSpec = new Map<number, Speculation[]>();
    const results: BeamNode[] = [];
    const ready: BeamNode[] = [];
    let inFlight = 0;
    let wake: (() => void) | null = null;
    // Speculation yields to memory (paper §4.1.2: fully preemptible): once the generator preempts a sequence during
    // this iteration, its unfinished speculation is aborted and no more starts. (Not on requests waiting for
    // admission: this iteration's own continuations wait until the next step.)
    const kv = () => ctx.kvState?.(this.o.model);
    const preemptionsAtStart = this.sw.speculative ? (kv()?.preemptions ?? 0) : 0;
    let stopped = false;
    const underPressure = (): boolean => (kv()?.preemptions ?? 0) > preemptionsAtStart;
    const stopSpeculation = () => {
      stopped = true;
      this.stats.speculationStops++;
      for (const [id, specs] of newSpec) {
        const kept = specs.filter((sp) => sp.finished !== null);
        for (const sp of specs) if (sp.finished === null) (sp.handle.abort(), this.stats.speculativeWasted++);
        if (kept.length > 0) newSpec.set(id, kept);
        else newSpec.delete(id);
      }
    };
    const launch = () => {
      // Speculation fills the slots stragglers leave idle while the step is being generated (the paper's generation
      // loop); once every continuation has finished, no new speculation starts (what runs goes on, beside verification).
      if (!this.sw.speculative || stopped || results.length >= total) return;
      if (underPressure()) return stopSpeculation();
      const slots = this.sw.speculativeRows - (total - results.length) - inFlight;
      if (slots <= 0 || ready.length === 0) return;
      for (let s = 0; s < slots; s++) {
        const pick = this.nextSpeculation(ready, newSpec);
        if (pick === null) return;
        const handle = this.continuation(ctx, pick.node, pick.k, "speculative");
        const spec: Speculation = {
          parent: pick.node,
          k: pick.k,
          handle,
          done: handle.result.then((o) => o.samples[0]),
          finished: null,
          score: null,
        };
        const list = newSpec.get(pick.node.id) ?? [];
        list.push(spec);
        newSpec.set(pick.node.id, list);
        this.stats.speculativeIssued++;
        inFlight++;
        this.stats.speculativePeakRows = Math.max(this.stats.speculativePeakRows, total - results.length + inFlight);
        spec.done.then(
          (out) => {
            inFlight--;
            if (out.finishReason === "aborted") return; // stopped for memory pressure: not a step the search can use
            spec.finished = out;
            launch();
          },
          () => inFlight--,
        );
      }
    };
    const add = (node: BeamNode) => {
      results.push(node);
      if (!node.terminal) ready.push(node);
      launch();
      wake?.();
    };
    for (const r of reused) {
      const out = r.spec.finished ?? (await r.spec.done);
      const child = this.childOf(r.parent, r.spec.handle, out, mixSeed(r.parent.seed, r.k), r.group, r.k);
      if (r.spec.score !== null)
        ((child.stepScore = r.spec.score),
          (child.score = aggregateScore(r.parent.score, r.spec.score, this.o.aggregate ?? "last")));
      add(child);
    }
    // An engine error on any continuation fails the round (the runtime reports it); nothing waits forever.
    let failure: unknown = null;
    for (const p of pending) {
      p.handle.result.then(
        (out) => add(this.childOf(p.parent, p.handle, out.samples[0], mixSeed(p.parent.seed, p.k), p.group, p.k)),
        (e: unknown) => ((failure ??= e), wake?.()),
      );
    }
    while (results.length < total && failure === null) await new Promise<void>((r) => (wake = r));
    wake = null;
    if (failure !== null) {
      for (const specs of newSpec.values()) for (const sp of specs) sp.handle.abort();
      throw failure;
    }
    this.spec = newSpec;
    // The frontier's order, whatever finished first (node ids follow completion): parents as kept, then k.
    const rank = new Map(this.frontier.map((p, i) => [p.id, i]));
    results.sort((a, b) => rank.get(a.parent!.id)! - rank.get(b.parent!.id)! || a.k - b.k);
    results.forEach((r, i) => (r.rank = i));
    return results;
  }

  /** Continuation k of a kept node: fresh, or (truncateRatio > 0) from the first speculation's tokens cut to R. */
  private duplicate(ctx: ProgramContext, parent: BeamNode, k: number, specs: readonly Speculation[]): RequestHandle {
    const first = specs.find((s) => s.finished !== null && s.finished.tokens.length > 1);
    if (this.sw.truncateRatio > 0 && first) {
      const keep = Math.floor(this.sw.truncateRatio * (first.finished!.tokens.length - 1));
      if (keep > 0) {
        const p = this.stepParams(parent);
        return ctx.fork(first.handle, {
          seed: mixSeed(parent.seed, k),
          length: parent.ids.length + keep,
          ...p,
          maxTokens: Math.max(1, p.maxTokens - keep),
        });
      }
    }
    return this.continuation(ctx, parent, k, "generate");
  }

  /** The next speculation: among finished, non-terminal steps, the highest potential M_i with continuations left. */
  private nextSpeculation(
    ready: readonly BeamNode[],
    issued: Map<number, Speculation[]>,
  ): { node: BeamNode; k: number } | null {
    // Bins by the previous step's score (the parent's), B = M bins, C_1 the highest: M_i = B - j + 1.
    const scores = [...new Set(this.frontier.map((f) => f.score))].sort((a, b) => b - a);
    let best: { node: BeamNode; k: number; potential: number; score: number } | null = null;
    for (const node of ready) {
      const prev = node.parent!.score;
      const rank = scores.indexOf(prev);
      const bin = scores.length <= 1 || rank < 0 ? 1 : 1 + Math.floor((rank * this.m) / scores.length);
      const potential = Math.min(this.m, this.m - bin + 1);
      const k = (issued.get(node.id) ?? []).length;
      if (k >= potential || this.maxTokens - node.pathTokens <= 0) continue;
      const left = potential - k;
      if (best === null || left > best.potential || (left === best.potential && prev > best.score))
        best = { node, k, potential: left, score: prev };
    }
    return best && { node: best.node, k: best.k };
  }

  // ---- verification and selection ----

  private async verify(ctx: ProgramContext, children: BeamNode[]): Promise<void> {
    const how = this.o.aggregate ?? "last";
    await Promise.all(
      children.map(async (c) => {
        if (c.stepScore >= 0) return; // scored ahead last iteration (LookAhead)
        const input = { question: this.o.question, previous: this.path(c.parent!), step: c.step };
        const ahead = this.sw.lookahead
          ? (this.spec.get(c.id) ?? []).filter((s) => s.k === 0 && s.finished !== null)
          : [];
        const scores =
          ahead.length > 0
            ? await scoreAhead(this.reward, ctx, input, [ahead[0].finished!.text])
            : [await this.reward.score(ctx, input)];
        this.stats.verifierCalls++;
        if (ahead.length > 0) ((ahead[0].score = scores[1]), this.stats.lookaheadScored++);
        c.stepScore = scores[0];
        c.score = aggregateScore(c.parent === this.root ? null : c.parent!.score, scores[0], how);
      }),
    );
  }

  private select(children: BeamNode[]): void {
    const open: BeamNode[] = [];
    const now = performance.now() - this.startedAt;
    for (const c of children) {
      if (c.terminal) c.finishedMs = now;
      (c.terminal ? this.finished : open).push(c);
    }
    const byScore = (a: BeamNode, b: BeamNode) => b.score - a.score || a.rank - b.rank;
    let kept: BeamNode[];
    const dedupe = this.o.dedupe ?? true;
    if (this.variant === "beam") {
      const slots = Math.max(0, Math.min(this.n / this.m, Math.ceil((this.n - this.finished.length) / this.m)));
      const sorted = open.sort(byScore);
      const ranked = dedupe ? distinct(sorted) : sorted;
      if (dedupe) {
        // The kept copy of a path stands for its twins too.
        const mass = new Map<string, number>();
        for (const c of sorted) mass.set(c.key, (mass.get(c.key) ?? 0) + c.mass);
        for (const c of ranked) c.mass = mass.get(c.key)!;
      }
      const good = ranked.filter((c) => c.stepScore >= this.pruneBelow);
      kept = (good.length > 0 ? good : ranked).slice(0, slots);
      // Fewer distinct paths than slots: the kept ones share the slots' continuations (the iteration still samples
      // slots × M steps), the better-ranked first.
      const total = slots * this.m;
      kept.forEach((k, i) => (k.width = Math.floor(total / kept.length) + (i < total % kept.length ? 1 : 0)));
    } else {
      const groups = new Map<number, BeamNode[]>();
      for (const c of open) groups.set(c.group, [...(groups.get(c.group) ?? []), c]);
      // Each subtree keeps its best path; with dedupe, its best path no earlier subtree kept (a subtree whose
      // candidates are all taken keeps its best anyway: subtrees are independent, and its budget is its own).
      const taken = new Set<string>();
      kept = [...groups.entries()]
        .sort((a, b) => a[0] - b[0])
        .map(([, g]) => {
          const ranked = g.sort(byScore);
          const pick = (dedupe ? ranked.find((c) => !taken.has(c.key)) : undefined) ?? ranked[0];
          taken.add(pick.key);
          return pick;
        });
    }
    if (this.finished.length >= this.n || this.knob.used + 1 >= this.maxDepth) kept = [];
    const keptIds = new Set(kept.map((k) => k.id));
    for (const [id, specs] of this.spec) {
      if (keptIds.has(id)) continue;
      for (const s of specs) {
        s.handle.abort();
        this.stats.speculativeWasted++;
      }
      this.spec.delete(id);
    }
    // Continuations a kept node will not use (k ≥ its continuation count) are aborted too.
    for (const k of kept) {
      const specs = this.spec.get(k.id) ?? [];
      for (const s of specs.filter((x) => x.k >= this.continuationsOf(k)))
        (s.handle.abort(), this.stats.speculativeWasted++);
    }
    for (const c of children)
      if (keptIds.has(c.id) || c.terminal) this.stats.candidateTokens += c.pathTokens - c.parent!.pathTokens;
    this.frontier = kept;
  }

  // ---- nodes ----

  path(node: BeamNode): string[] {
    const steps: string[] = [];
    for (let n: BeamNode | null = node; n && n.parent; n = n.parent) steps.push(n.step);
    return steps.reverse();
  }

  private childOf(
    parent: BeamNode,
    handle: RequestHandle,
    s: SampleOutput,
    seed: number,
    group: number,
    k: number,
  ): BeamNode {
    const c = this.newNode(parent, handle, s.index, seed, parent.ids.concat(s.tokens), s.text, group);
    c.k = k;
    c.pathTokens = parent.pathTokens + s.tokens.length;
    const endedSolution = s.finishReason === "stop" && s.stoppedBy !== "\n";
    c.terminal =
      endedSolution ||
      s.text.includes(this.task.answerMarker) ||
      c.pathTokens >= this.maxTokens ||
      s.finishReason === "aborted";
    if (c.terminal) c.answer = this.task.extractAnswer(this.path(c).join("\n"));
    return c;
  }

  private newNode(
    parent: BeamNode | null,
    handle: RequestHandle | null,
    sample: number,
    seed: number,
    ids: number[],
    step: string,
    group: number,
  ): BeamNode {
    const n: BeamNode = {
      id: this.nodes.length,
      parent,
      handle,
      sample,
      seed,
      ids,
      step,
      depth: parent ? parent.depth + 1 : 0,
      pathTokens: 0,
      stepScore: -1,
      score: 0,
      terminal: false,
      answer: null,
      group,
      k: 0,
      rank: 0,
      key: parent === null ? "" : parent.key + "\n" + step,
      width: parent === null ? this.n : this.m,
      mass: parent === null ? 1 : parent.mass / parent.width,
      finishedMs: 0,
    };
    this.nodes.push(n);
    return n;
  }

  /** A seeded Fisher-Yates shuffle (the baseline's arbitrary order, reproducible). */
  private shuffled<T>(xs: readonly T[]): T[] {
    const out = [...xs];
    for (let i = out.length - 1; i > 0; i--) {
      this.shuffleState = (Math.imul(this.shuffleState ^ (this.shuffleState >>> 15), 0x2c1b3c6d) + 0x9e3779b9) >>> 0;
      const j = this.shuffleState % (i + 1);
      [out[i], out[j]] = [out[j], out[i]];
    }
    return out;
  }
}
