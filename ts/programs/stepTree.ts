// The search tree shared by Rebase and MCTS: nodes are reasoning steps (one line of the thought, generated with
// stop "\n"); a child continues its parent's request by engine.fork, so the path's KV is shared while the parent
// lives and revived from the prefix cache after. Each new step is scored by a RewardSource (default: the task's step
// verifier); a node's reward aggregates the step scores along its path (`aggregate`: "min" by default, a solution is
// as good as its worst step; "last", the newest step's score, as REBASE balances on; "prod"). A step that
// writes the task's answer marker (`\boxed{`) ends its solution.
import { InvalidOptionError } from "../errors/index.js";
import { weightedMajority } from "../certaindex/signals.js";
import type { RequestHandle } from "../engine/handle.js";
import type { GenerationOutput, SampleOutput } from "../engine/outputs.js";
import { boxedAnswers } from "./answers.js";
import type { ProgramContext } from "./program.js";
import type { RewardSource } from "./rewards.js";
import { aggregateScore, type ScoreAggregate } from "./beam.js";
import type { ProgramTask } from "./task.js";

export interface TreeNode {
  id: number;
  parent: TreeNode | null;
  children: TreeNode[];
  /** The request whose sample `sample` generated this step (fork it to continue); null for the root. */
  handle: RequestHandle | null;
  sample: number;
  /** This step's text (without its trailing newline). */
  step: string;
  depth: number;
  /** Tokens generated from the root to this node (this step included). */
  pathTokens: number;
  /** Path reward in [0, 1]: the step scores from the root, aggregated (StepTreeOptions.aggregate). */
  reward: number;
  terminal: boolean;
  answer: string | null;
  /** MCTS statistics. */
  visits: number;
  valueSum: number;
}

export interface StepTreeOptions {
  /** Rendered prompt (text or ids) the first steps continue. */
  prompt: string | readonly number[];
  /** The question as the reward source should see it. */
  question: string;
  /** The answer format and, unless `reward` is given, the step verifier (default boxedAnswers, which has none). */
  task?: ProgramTask;
  /** Scores each step (default: the task's stepVerifier; one of the two is required). */
  reward?: RewardSource;
  /** How a path's reward aggregates its step scores (default "min"). */
  aggregate?: ScoreAggregate;
  /** Most tokens per step (default 48). */
  stepMaxTokens?: number;
  /** Deepest path: a node at this depth is terminal (default 64: the token cap binds first; at 16 a thought of the
   * hardest arithmetic questions, steps then check lines, was cut before its answer). */
  maxDepth?: number;
  /** Most tokens one solution (root to end) may generate (default 256; keep it within the model's context). */
  maxTokens?: number;
  temperature?: number;
  seed?: number;
  model?: string;
  /** Reads a solution's answer (default: the task's). */
  extractAnswer?: (text: string) => string | null;
}

export class StepTree {
  readonly root: TreeNode;
  readonly nodes: TreeNode[] = [];
  private nextSeed: number;
  private readonly stepMaxTokens: number;
  private readonly maxDepth: number;
  readonly maxTokens: number;
  private readonly extract: (text: string) => string | null;
  private readonly reward: RewardSource;
  private readonly answerMarker: string;

  constructor(private readonly o: StepTreeOptions) {
    this.stepMaxTokens = o.stepMaxTokens ?? 48;
    this.maxDepth = o.maxDepth ?? 64;
    this.maxTokens = o.maxTokens ?? 256;
    if (!Number.isInteger(this.maxTokens) || this.maxTokens < 1)
      throw new InvalidOptionError(`maxTokens must be an integer ≥ 1, got ${this.maxTokens}`, { field: "maxTokens" });
    const task = o.task ?? boxedAnswers;
    const reward = o.reward ?? task.stepVerifier;
    if (reward === undefined)
      throw new InvalidOptionError(
        "tree search scores steps: give a reward (verifierReward, modelProcessReward) or a task with a stepVerifier (arithTask)",
        { field: "reward" },
      );
    this.reward = reward;
    this.extract = o.extractAnswer ?? ((text) => task.extractAnswer(text));
    this.answerMarker = task.answerMarker;
    this.nextSeed = o.seed ?? 0;
    this.root = this.node(null, null, 0, "", 1);
  }

  /** Upper bound on tokens generated for `expansions` steps. */
  budgetFor(expansions: number): number {
    return expansions * Math.min(this.stepMaxTokens, this.maxTokens);
  }

  /** The steps from the root to `node`. */
  path(node: TreeNode): string[] {
    const steps: string[] = [];
    for (let n: TreeNode | null = node; n && n.parent; n = n.parent) steps.push(n.step);
    return steps.reverse();
  }

  /** Generates `k` children of `node` (the root: one request with n = k samples sharing the prompt) and scores them. */
  async expand(ctx: ProgramContext, node: TreeNode, k: number): Promise<TreeNode[]> {
    if (k <= 0 || node.terminal) return [];
    const left = this.maxTokens - node.pathTokens;
    if (left <= 0) return [];
    const params = {
      maxTokens: Math.min(this.stepMaxTokens, left),
      temperature: this.o.temperature ?? 0.8,
      stop: ["\n"],
    };
    let outs: Array<{ handle: RequestHandle; sample: SampleOutput }>;
    if (node.handle === null) {
      const h = ctx.submit({ prompt: this.o.prompt, n: k, seed: this.takeSeeds(k), model: this.o.model, ...params });
      const out = await h.result;
      outs = out.samples.map((sample) => ({ handle: h, sample }));
    } else {
      const handles = Array.from({ length: k }, () =>
        ctx.fork(node.handle!, { sample: node.sample, seed: this.takeSeeds(1), ...params }),
      );
      const results: GenerationOutput[] = await Promise.all(handles.map((h) => h.result));
      outs = results.map((out, i) => ({ handle: handles[i], sample: out.samples[0] }));
    }
    const previous = this.path(node);
    const children = outs.map(({ handle, sample }) => this.childOf(node, handle, sample));
    const scores = await Promise.all(
      children.map((c) => this.reward.score(ctx, { question: this.o.question, previous, step: c.step })),
    );
    const how = this.o.aggregate ?? "min";
    children.forEach((c, i) => (c.reward = aggregateScore(node.parent === null ? null : node.reward, scores[i], how)));
    return children;
  }

  /**
   * Completes the solution from `node` in one request (no step stop: up to eos or the solution's token cap), the
   * MCTS simulation. Every line of the completion is scored in order, so its reward aggregates the whole
   * path, as for tree steps. The rollout is not added to the tree.
   */
  async rollout(
    ctx: ProgramContext,
    node: TreeNode,
  ): Promise<{ text: string; answer: string | null; reward: number; tokens: number }> {
    if (node.handle === null) throw new Error("rollout: expand the root first (a rollout continues a step)");
    const left = this.maxTokens - node.pathTokens;
    const prefix = this.path(node);
    if (node.terminal || left <= 0)
      return { text: "", answer: node.answer ?? this.extract(prefix.join("\n")), reward: node.reward, tokens: 0 };
    const h = ctx.fork(node.handle, {
      sample: node.sample,
      seed: this.takeSeeds(1),
      maxTokens: left,
      temperature: this.o.temperature ?? 0.8,
      stop: [],
    });
    const out = await h.result;
    const text = out.samples[0]?.text ?? "";
    const lines = text.split("\n").filter((l) => l.trim() !== "");
    let reward = node.reward;
    const previous = [...prefix];
    for (const step of lines) {
      const score = await this.reward.score(ctx, { question: this.o.question, previous, step });
      reward = aggregateScore(reward, score, this.o.aggregate ?? "min");
      previous.push(step);
    }
    return { text, answer: this.extract([...prefix, text].join("\n")), reward, tokens: out.usage.generatedTokens };
  }

  private childOf(parent: TreeNode, handle: RequestHandle, s: SampleOutput): TreeNode {
    const c = this.node(parent, handle, s.index, s.text, 0);
    c.pathTokens = parent.pathTokens + s.tokens.length;
    // A step cut by stepMaxTokens is just a long step; eos (or any stop other than the newline) ends the solution.
    const endedSolution = s.finishReason === "stop" && s.stoppedBy !== "\n";
    c.terminal =
      endedSolution ||
      s.text.includes(this.answerMarker) ||
      c.depth >= this.maxDepth ||
      c.pathTokens >= this.maxTokens ||
      s.finishReason === "aborted";
    if (c.terminal) c.answer = this.extract(this.path(c).join("\n"));
    parent.children.push(c);
    return c;
  }

  private takeSeeds(k: number): number {
    const s = this.nextSeed;
    this.nextSeed += k;
    return s;
  }

  private node(
    parent: TreeNode | null,
    handle: RequestHandle | null,
    sample: number,
    step: string,
    reward: number,
  ): TreeNode {
    const n: TreeNode = {
      id: this.nodes.length,
      parent,
      children: [],
      handle,
      sample,
      step,
      depth: parent ? parent.depth + 1 : 0,
      pathTokens: parent ? parent.pathTokens : 0,
      reward,
      terminal: false,
      answer: null,
      visits: 0,
      valueSum: 0,
    };
    this.nodes.push(n);
    return n;
  }
}

/** Reward-weighted vote over finished solutions: the answer with the largest summed weight. */
export function weightedVote(
  items: ReadonlyArray<{ answer: string | null; weight: number }>,
  equivalent: (a: string, b: string) => boolean,
): string | null {
  return weightedMajority(items, equivalent).answer;
}
