// Rebase (Wu et al., "Inference Scaling Laws"): reward-balanced tree search. A budget of `width` solutions; each
// round expands every frontier step once more, giving node j round(remaining × softmax(reward_j / τ)) children
// (largest remainders settle the rounding), where remaining = width − finished solutions. Certaindex (Dynasor's
// reward-based certaindex with signals combined per threshold): the best finished solution's reward (max aggregation)
// against `rewardThreshold` and the answer entropy H̃ of the finished solutions against `entropyThreshold`; it is 1
// exactly when both are met (combineCertaindex), so the default policy (threshold 1 from the first round) stops the
// search as soon as a finished solution is rewarded ≥ 0.99 and the finished solutions agree (H̃ ≥ 0.85, at least two
// of them), not only when the width is spent or maxDepth reached. H̃ of fewer than two solutions is 0: one finished
// solution never stops the search on its own.
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

export interface RebaseOptions extends StepTreeOptions {
  /** Solutions budget (default 8). */
  width?: number;
  /** Softmax temperature τ over rewards (default 0.2; lower = greedier). */
  balanceTemperature?: number;
  /** The best finished solution's reward must reach this (R_τ; default 0.99, the paper's Rebase setting; 0 turns the
   * reward signal off). */
  rewardThreshold?: number;
  /** The finished solutions' answer entropy certaindex H̃ must reach this (H̃_τ; default 0.85, the paper's Rebase
   * setting; 0 turns the entropy signal off). */
  entropyThreshold?: number;
  /** When two solutions' answers are the same answer (default: the task's). */
  equivalent?: AnswerEquivalence;
}

/** Children per node: softmax(scores / τ) × total, rounded by largest remainder so they sum to `total`. */
export function allotChildren(scores: readonly number[], total: number, temperature: number): number[] {
  if (scores.length === 0 || total <= 0) return scores.map(() => 0);
  const m = Math.max(...scores);
  const w = scores.map((s) => Math.exp((s - m) / temperature));
  const z = w.reduce((a, b) => a + b, 0);
  const exact = w.map((x) => (x / z) * total);
  const out = exact.map(Math.floor);
  let left = total - out.reduce((a, b) => a + b, 0);
  const order = exact.map((x, i) => ({ r: x - Math.floor(x), i })).sort((a, b) => b.r - a.r || a.i - b.i);
  for (const { i } of order) {
    if (left <= 0) break;
    out[i]++;
    left--;
  }
  return out;
}

export class Rebase implements Program {
  readonly name = "rebase";
  certaindex = 0;
  readonly knob: Knob;
  readonly tokenBudget: number;
  /** Stop once every certaindex signal meets its threshold, checked after every round. */
  readonly defaultPolicy: PolicySpec = { kind: "threshold", threshold: 1, detectAt: 1 };
  readonly tree: StepTree;
  readonly state: { frontier: TreeNode[]; finished: TreeNode[] } = { frontier: [], finished: [] };
  private readonly width: number;
  private readonly tau: number;
  private readonly eq: AnswerEquivalence;
  private readonly rewardThreshold: number;
  private readonly entropyThreshold: number;

  constructor(private readonly o: RebaseOptions) {
    this.width = o.width ?? 8;
    if (!Number.isInteger(this.width) || this.width < 1)
      throw new InvalidOptionError(`rebase.width must be an integer ≥ 1, got ${this.width}`, { field: "rebase.width" });
    this.tau = o.balanceTemperature ?? 0.2;
    if (!(this.tau > 0))
      throw new InvalidOptionError(`rebase.balanceTemperature must be > 0, got ${this.tau}`, {
        field: "rebase.balanceTemperature",
      });
    this.eq = o.equivalent ?? ((a, b) => (o.task ?? boxedAnswers).equivalent(a, b));
    this.rewardThreshold = checkThreshold("rebase.rewardThreshold", o.rewardThreshold ?? 0.99);
    this.entropyThreshold = checkThreshold("rebase.entropyThreshold", o.entropyThreshold ?? 0.85);
    this.tree = new StepTree(o);
    const depth = o.maxDepth ?? 64;
    this.knob = { used: 0, max: depth };
    // Each of the width solutions generates at most its token cap, whatever its depth.
    this.tokenBudget = Math.min(this.tree.budgetFor(this.width * depth), this.width * this.tree.maxTokens);
  }

  /** Deterministic runs: a round expands the whole frontier and takes the children in frontier order (seeds are
   *  taken before any request runs), so nothing depends on which finishes first. */
  readonly deterministic = true;

  get done(): boolean {
    return this.knob.used > 0 && (this.state.frontier.length === 0 || this.state.finished.length >= this.width);
  }

  async execute(ctx: ProgramContext): Promise<void> {
    let created: TreeNode[];
    if (this.knob.used === 0) {
      created = await this.tree.expand(ctx, this.tree.root, this.width);
    } else {
      const frontier = this.state.frontier;
      const counts = allotChildren(
        frontier.map((n) => n.reward),
        this.width - this.state.finished.length,
        this.tau,
      );
      created = (await Promise.all(frontier.map((n, i) => this.tree.expand(ctx, n, counts[i])))).flat();
    }
    this.state.frontier = created.filter((n) => !n.terminal);
    this.state.finished.push(...created.filter((n) => n.terminal));
    this.knob.used++;
  }

  /** The two signals over the finished solutions, each with its threshold. */
  signals(): ThresholdedSignal[] {
    const f = this.state.finished;
    return [
      {
        value: rewardCertaindex(
          f.map((n) => n.reward),
          "max",
        ),
        threshold: this.rewardThreshold,
      },
      {
        value: entropyCertaindex(
          f.map((n) => n.answer),
          this.eq,
        ),
        threshold: this.entropyThreshold,
      },
    ];
  }

  updateCertaindex(): number {
    this.certaindex = this.state.finished.length === 0 ? 0 : combineCertaindex(this.signals());
    return this.certaindex;
  }

  answer(): string | null {
    const f = this.state.finished;
    if (f.length > 0)
      return weightedVote(
        f.map((n) => ({ answer: n.answer, weight: n.reward })),
        this.eq,
      );
    return null;
  }
}
