// Monte Carlo tree search over reasoning steps: UCT selection (Q + c·sqrt(ln N_parent / N_child)), expansion by
// one sampled step, simulation (a rollout completes the solution from the new step; every line of it is scored),
// back-propagation of the solution's path reward to the root. A round runs `simulationsPerRound` simulations whose
// selections use virtual visits and pending expansions (so they spread out) and whose requests run concurrently on
// the engine. Every simulation ends in a solution, so the search has an answer after its first round; without the
// rollout a tree `branching` wide needs ~branching^depth simulations before any path reaches an answer (the
// interim tiny reasoner's 32 simulations never did: "(none)"). Certaindex (Dynasor, signals combined per threshold):
// the mean reward of the solutions found (mean aggregation) against `rewardThreshold`, and their answer entropy H̃
// against `entropyThreshold` (off by default); 1 exactly when every signal meets its threshold, which is what the
// default policy waits for.
import { InvalidOptionError } from "../errors/index.js";
import {
  checkThreshold,
  combineCertaindex,
  entropyCertaindex,
  rewardCertaindex,
  type AnswerEquivalence,
  type ThresholdedSignal,
} from "../certaindex/signals.js";
import type { PolicySpec } from "../certaindex/policies.js";
import { boxedAnswers } from "./answers.js";
import type { Knob, Program, ProgramContext } from "./program.js";
import { StepTree, weightedVote, type StepTreeOptions, type TreeNode } from "./stepTree.js";

export interface MctsOptions extends StepTreeOptions {
  /** Simulation cap (default 32). */
  maxSimulations?: number;
  /** Simulations per round (default 4). */
  simulationsPerRound?: number;
  /** Children a node gets before UCT descends past it (default 3). */
  branching?: number;
  /** UCT exploration constant (default 1.0). */
  exploration?: number;
  /** The solutions' mean reward must reach this (R_τ; default 0.9; 0 turns the reward signal off). */
  rewardThreshold?: number;
  /** The solutions' answer entropy certaindex H̃ must reach this too (H̃_τ; default 0: off; the paper's MCTS on GSM8K
   * uses 0.99 with R_τ 0.4). */
  entropyThreshold?: number;
  /** When two solutions' answers are the same answer (default: the task's). */
  equivalent?: AnswerEquivalence;
}

/** One simulation's complete solution: the tree node it grew from (a terminal node, or the step its rollout
 * continued), the answer and the path reward (minimum over every step, rollout lines included). */
export interface MctsSolution {
  node: TreeNode;
  answer: string | null;
  reward: number;
  /** Tokens the rollout generated (0 when the step itself ended the solution). */
  rolloutTokens: number;
}

export function uct(child: TreeNode, parentVisits: number, c: number): number {
  if (child.visits === 0) return Infinity;
  return child.valueSum / child.visits + c * Math.sqrt(Math.log(Math.max(1, parentVisits)) / child.visits);
}

export class Mcts implements Program {
  readonly name = "mcts";
  certaindex = 0;
  readonly knob: Knob;
  readonly tokenBudget: number;
  readonly defaultPolicy: PolicySpec;
  readonly tree: StepTree;
  readonly state: { solutions: MctsSolution[] } = { solutions: [] };
  private readonly perRound: number;
  private readonly branching: number;
  private readonly c: number;
  private readonly eq: AnswerEquivalence;
  private readonly rewardThreshold: number;
  private readonly entropyThreshold: number;
  private exhausted = false;

  constructor(private readonly o: MctsOptions) {
    const max = o.maxSimulations ?? 32;
    if (!Number.isInteger(max) || max < 1)
      throw new InvalidOptionError(`mcts.maxSimulations must be an integer ≥ 1, got ${max}`, {
        field: "mcts.maxSimulations",
      });
    this.perRound = Math.min(o.simulationsPerRound ?? 4, max);
    this.branching = o.branching ?? 3;
    this.c = o.exploration ?? 1;
    this.eq = o.equivalent ?? ((a, b) => (o.task ?? boxedAnswers).equivalent(a, b));
    this.rewardThreshold = checkThreshold("mcts.rewardThreshold", o.rewardThreshold ?? 0.9);
    this.entropyThreshold = checkThreshold("mcts.entropyThreshold", o.entropyThreshold ?? 0);
    this.tree = new StepTree(o);
    this.knob = { used: 0, max };
    // A simulation generates one step and the rollout after it: at most the solution's token cap.
    this.tokenBudget = max * this.tree.maxTokens;
    // Every signal at its threshold, checked from the second round on.
    this.defaultPolicy = { kind: "threshold", threshold: 1, detectAt: this.perRound * 2 };
  }

  /** Every path ends in a solution that has been expanded as far as it goes. */
  get done(): boolean {
    return this.exhausted;
  }

  /** Deterministic runs: a round's expansions, then its rollouts, each started in path order (seeds taken in that
   *  order), and children and solutions entered in path order, whatever finishes first (simulate). */
  readonly deterministic = true;

  async execute(ctx: ProgramContext): Promise<void> {
    const n = Math.min(this.perRound, this.knob.max - this.knob.used);
    const paths: TreeNode[][] = [];
    const pending = new Map<TreeNode, number>();
    for (let i = 0; i < n; i++) {
      const path = this.select(pending);
      for (const node of path) node.visits++; // virtual visit until the value arrives
      const leaf = path[path.length - 1];
      if (!leaf.terminal) pending.set(leaf, (pending.get(leaf) ?? 0) + 1);
      paths.push(path);
    }
    const values = ctx.deterministic
      ? await this.simulateInOrder(ctx, paths)
      : await Promise.all(
          paths.map(async (path) => {
            const leaf = path[path.length - 1];
            if (leaf.terminal) return leaf.reward;
            const [child] = await this.tree.expand(ctx, leaf, 1);
            if (child === undefined) return 0;
            let solution: MctsSolution;
            if (child.terminal) {
              solution = { node: child, answer: child.answer, reward: child.reward, rolloutTokens: 0 };
            } else {
              const r = await this.tree.rollout(ctx, child);
              solution = { node: child, answer: r.answer, reward: r.reward, rolloutTokens: r.tokens };
            }
            this.state.solutions.push(solution);
            child.visits = 1;
            child.valueSum = solution.reward;
            return solution.reward;
          }),
        );
    paths.forEach((path, i) => {
      for (const node of path) node.valueSum += values[i];
    });
    this.exhausted = paths.every((p) => p[p.length - 1].terminal);
    this.knob.used += n;
  }

  /**
   * Deterministic runs: the simulations of one round in two phases, each started in path order (a request's seed is
   * taken when it starts): every leaf's expansion, then every new step's rollout. Expansions enter their parents'
   * children as they finish, so those lists are put back in path order before anything reads them; solutions are
   * entered in path order.
   */
  private async simulateInOrder(ctx: ProgramContext, paths: TreeNode[][]): Promise<number[]> {
    const leaves = paths.map((p) => p[p.length - 1]);
    const children = await Promise.all(
      leaves.map(async (leaf) => (leaf.terminal ? null : ((await this.tree.expand(ctx, leaf, 1))[0] ?? null))),
    );
    const added = new Set(children.filter((c): c is TreeNode => c !== null));
    for (const parent of new Set(leaves)) {
      const kept = parent.children.filter((c) => !added.has(c));
      parent.children = [...kept, ...children.filter((c) => c !== null && c.parent === parent)] as TreeNode[];
    }
    const solutions = await Promise.all(
      children.map(async (child): Promise<MctsSolution | null> => {
        if (child === null) return null;
        if (child.terminal) return { node: child, answer: child.answer, reward: child.reward, rolloutTokens: 0 };
        const r = await this.tree.rollout(ctx, child);
        return { node: child, answer: r.answer, reward: r.reward, rolloutTokens: r.tokens };
      }),
    );
    return solutions.map((solution, i) => {
      if (solution === null) return leaves[i].terminal ? leaves[i].reward : 0;
      this.state.solutions.push(solution);
      solution.node.visits = 1;
      solution.node.valueSum = solution.reward;
      return solution.reward;
    });
  }

  /** Root → leaf by UCT; stops at a node that may still grow a child (counting this round's pending expansions),
   * or at a solution. */
  private select(pending: ReadonlyMap<TreeNode, number>): TreeNode[] {
    const path = [this.tree.root];
    let node = this.tree.root;
    for (;;) {
      if (node.terminal || node.children.length + (pending.get(node) ?? 0) < this.branching) return path;
      if (node.children.length === 0) return path; // all its expansions are pending: grow it once more
      let best = node.children[0];
      for (const ch of node.children) if (uct(ch, node.visits, this.c) > uct(best, node.visits, this.c)) best = ch;
      node = best;
      path.push(node);
    }
  }

  /** The two signals over the solutions found, each with its threshold. */
  signals(): ThresholdedSignal[] {
    const s = this.state.solutions;
    return [
      {
        value: rewardCertaindex(
          s.map((n) => n.reward),
          "mean",
        ),
        threshold: this.rewardThreshold,
      },
      {
        value: entropyCertaindex(
          s.map((n) => n.answer),
          this.eq,
        ),
        threshold: this.entropyThreshold,
      },
    ];
  }

  updateCertaindex(): number {
    this.certaindex = this.state.solutions.length === 0 ? 0 : combineCertaindex(this.signals());
    return this.certaindex;
  }

  /** Solutions vote, each weighted by its path reward (a solution of reward 0 still beats having no answer). */
  answer(): string | null {
    return weightedVote(
      this.state.solutions.map((n) => ({ answer: n.answer, weight: n.reward })),
      this.eq,
    );
  }
}
