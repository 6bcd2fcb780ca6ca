// Monte Carlo tree search over reasoning steps: UCT selection (Q + c·sqrt(ln N_parent / N_child)), expansion by
// one sampled step, evaluation by the step's path reward, back-propagation of that value to the root. A round runs
// `simulationsPerRound` simulations whose selections use virtual visits (so they spread out) and whose
// expansions run concurrently on the engine. Certaindex (Dynasor): the mean reward of the solutions found
// (mean aggregation), optionally combined with their answer entropy.
import { combineCertaindex, entropyCertaindex, rewardCertaindex, type AnswerEquivalence } from "../certaindex/signals.js";
import type { PolicySpec } from "../certaindex/policies.js";
import { answersEquivalent } from "../tasks/arith/answer.js";
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
  entropy?: boolean;
  equivalent?: AnswerEquivalence;
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
  readonly state: { solutions: TreeNode[] } = { solutions: [] };
  private readonly perRound: number;
  private readonly branching: number;
  private readonly c: number;
  private readonly eq: AnswerEquivalence;
  private exhausted = false;

  constructor(private readonly o: MctsOptions) {
    const max = o.maxSimulations ?? 32;
    if (!Number.isInteger(max) || max < 1) throw new RangeError(`mcts.maxSimulations must be an integer ≥ 1, got ${max}`);
    this.perRound = Math.min(o.simulationsPerRound ?? 4, max);
    this.branching = o.branching ?? 3;
    this.c = o.exploration ?? 1;
    this.eq = o.equivalent ?? ((a, b) => answersEquivalent(a, b));
    this.tree = new StepTree(o);
    this.knob = { used: 0, max };
    this.tokenBudget = this.tree.budgetFor(max);
    this.defaultPolicy = { kind: "threshold", threshold: 0.9, detectAt: this.perRound * 2 };
  }

  /** Every path ends in a solution that has been expanded as far as it goes. */
  get done(): boolean {
    return this.exhausted;
  }

  async execute(ctx: ProgramContext): Promise<void> {
    const n = Math.min(this.perRound, this.knob.max - this.knob.used);
    const paths: TreeNode[][] = [];
    for (let i = 0; i < n; i++) {
      const path = this.select();
      for (const node of path) node.visits++; // virtual visit until the value arrives
      paths.push(path);
    }
    const values = await Promise.all(
      paths.map(async (path) => {
        const leaf = path[path.length - 1];
        if (leaf.terminal) return leaf.reward;
        const [child] = await this.tree.expand(ctx, leaf, 1);
        if (child === undefined) return 0;
        if (child.terminal) this.state.solutions.push(child);
        child.visits = 1;
        child.valueSum = child.reward;
        return child.reward;
      }),
    );
    paths.forEach((path, i) => {
      for (const node of path) node.valueSum += values[i];
    });
    this.exhausted = paths.every((p) => p[p.length - 1].terminal);
    this.knob.used += n;
  }

  /** Root → leaf by UCT; stops at a node that may still grow a child, or at a solution. */
  private select(): TreeNode[] {
    const path = [this.tree.root];
    let node = this.tree.root;
    for (;;) {
      if (node.terminal || node.children.length < this.branching) return path;
      let best = node.children[0];
      for (const ch of node.children) if (uct(ch, node.visits, this.c) > uct(best, node.visits, this.c)) best = ch;
      node = best;
      path.push(node);
    }
  }

  updateCertaindex(): number {
    const s = this.state.solutions;
    const reward = rewardCertaindex(s.map((n) => n.reward), "mean");
    this.certaindex = this.o.entropy ? combineCertaindex([reward, entropyCertaindex(s.map((n) => n.answer), this.eq)]) : reward;
    return this.certaindex;
  }

  /** Solutions vote, each weighted by its reward times its visits. */
  answer(): string | null {
    return weightedVote(this.state.solutions.map((n) => ({ answer: n.answer, weight: n.reward * n.visits })), this.eq);
  }
}
