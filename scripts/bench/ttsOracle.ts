// Oracle replay of a verifier-guided search (issue 48): after a search has run, what a perfect picker would have
// got among the solutions it finished, what a plain majority vote among them gets, and — when no finished solution
// is right — where the right paths were lost. This tells a search that fails to *generate* right paths (exploration,
// pruning) from one that generates them and fails to *pick* them (aggregation).
//
// "Right prefix" is exact on the arithmetic task (no rollouts): every line of the prefix is on track
// (ts/tasks/arith/onTrack.ts: right arithmetic on a value the question's own solution computes, a right check, the
// right answer). A line that is right arithmetic on the wrong sub-expression is off track: the mistakes this
// generator mostly makes, which a PRM trained on the step checker's labels cannot see.
import { Mcts } from "../../ts/programs/mcts.js";
import { BeamSearch } from "../../ts/programs/beam.js";
import { BestOfN } from "../../ts/programs/bestOfN.js";
import { Rebase } from "../../ts/programs/rebase.js";
import { SelfConsistency } from "../../ts/programs/selfConsistency.js";
import type { Program } from "../../ts/programs/program.js";
import type { TreeNode } from "../../ts/programs/stepTree.js";
import { majorityVote } from "../../ts/certaindex/signals.js";
import { legitimateValuesOf, pathOnTrack } from "../../ts/tasks/arith/onTrack.js";

/** Where a question's right paths went, when the search's own pick was wrong. */
export type Outcome =
  | "right" // the search's pick is right
  | "pick" // a finished solution is right, the pick is not (aggregation)
  | "pruned" // right prefixes were generated and pruned (selection); lostAt says at which step
  | "cut" // a right prefix ran into the depth or token cap unfinished
  | "none"; // no right first step was ever generated (exploration)

export interface Replay {
  outcome: Outcome;
  /** Step (depth, 1 = the first step) of the deepest right prefix when it was pruned (outcome "pruned"). */
  lostAt: number | null;
  /** Finished solutions, distinct finished texts, and whether any is right / the plain majority is right. */
  finished: number;
  distinct: number;
  oracle: boolean;
  majority: boolean;
}

interface Finished {
  answer: string | null;
  text: string;
}

/** A generic search tree for the replay: each node's path, whether it finished, and whether it was expanded. */
interface ReplayNode {
  depth: number;
  path: string[];
  terminal: boolean;
  expanded: boolean;
}

function replayOf(
  picked: boolean,
  finished: readonly Finished[],
  nodes: readonly ReplayNode[] | null,
  legit: ReadonlySet<number>,
  answer: string,
  equivalent: (a: string, b: string) => boolean,
): Replay {
  const right = (a: string | null) => a !== null && equivalent(a, answer);
  const oracle = finished.some((f) => right(f.answer));
  const majority = right(
    majorityVote(
      finished.map((f) => f.answer),
      equivalent,
    ).answer,
  );
  const base = { finished: finished.length, distinct: new Set(finished.map((f) => f.text)).size, oracle, majority };
  if (picked) return { outcome: "right", lostAt: null, ...base };
  if (oracle) return { outcome: "pick", lostAt: null, ...base };
  if (nodes === null) return { outcome: "none", lostAt: null, ...base };
  const onTrack = nodes.filter((n) => n.depth > 0 && pathOnTrack(n.path, legit, answer));
  if (onTrack.length === 0) return { outcome: "none", lostAt: null, ...base };
  const deepest = Math.max(...onTrack.map((n) => n.depth));
  const lost = onTrack.filter((n) => n.depth === deepest);
  // The deepest right prefixes: expanded ones would have deeper children (some right or not: then the children were
  // all off track, and the right prefix's line of descent ended here too).
  if (lost.some((n) => !n.terminal && !n.expanded)) return { outcome: "pruned", lostAt: deepest, ...base };
  if (lost.every((n) => n.expanded)) return { outcome: "none", lostAt: deepest, ...base };
  return { outcome: "cut", lostAt: deepest, ...base };
}

/**
 * The replay of one finished program run on one arithmetic question (`question` "What is <expr>?"), for the
 * programs that keep their solutions: beam / dvts (BeamSearch), best-of-N, Rebase, MCTS and SC (no tree: only the
 * picker figures). null for any other program.
 */
export function replay(
  program: Program,
  picked: boolean,
  question: string,
  answer: string,
  equivalent: (a: string, b: string) => boolean,
): Replay | null {
  const legit = legitimateValuesOf(question);
  if (program instanceof BeamSearch) {
    // By path, not by node: with dedupe one copy of a path is kept and its twins are not expanded, yet the path was.
    const expanded = new Set(program.nodes.filter((n) => n.parent !== null).map((n) => n.parent!.key));
    const nodes = program.nodes.map((n) => ({
      depth: n.depth,
      path: program.path(n),
      terminal: n.terminal,
      expanded: expanded.has(n.key),
    }));
    const finished = program.finished.map((f) => ({ answer: f.answer, text: program.path(f).join("\n") }));
    return replayOf(picked, finished, nodes, legit, answer, equivalent);
  }
  if (program instanceof Rebase || program instanceof Mcts) {
    const tree = program.tree;
    const key = (n: TreeNode) => tree.path(n).join("\n");
    const expanded = new Set(tree.nodes.filter((n) => n.children.length > 0).map(key));
    const nodes = tree.nodes.map((n: TreeNode) => ({
      depth: n.depth,
      path: tree.path(n),
      terminal: n.terminal,
      expanded: expanded.has(key(n)),
    }));
    const finished =
      program instanceof Rebase
        ? program.state.finished.map((f) => ({ answer: f.answer, text: tree.path(f).join("\n") }))
        : program.state.solutions.map((s) => ({ answer: s.answer, text: `${s.node.id}:${s.answer}` }));
    // MCTS's rollouts are not tree nodes: a rollout from a right prefix that went wrong reads as "none" / "cut".
    return replayOf(picked, finished, program instanceof Rebase ? nodes : null, legit, answer, equivalent);
  }
  if (program instanceof BestOfN) {
    const finished = program.solutions.map((s) => ({ answer: s.answer, text: s.text }));
    return replayOf(picked, finished, null, legit, answer, equivalent);
  }
  if (program instanceof SelfConsistency) {
    const finished = program.state.branches.map((b) => ({ answer: b.answer, text: b.text }));
    return replayOf(picked, finished, null, legit, answer, equivalent);
  }
  return null;
}

/** The replays of one method over its questions: the figures a report prints. */
export interface OracleSummary {
  questions: number;
  /** Fractions of questions: the pick right, some finished solution right, the plain majority right. */
  picked: number;
  oracle: number;
  majority: number;
  /** Fractions by outcome (right, pick, pruned, cut, none). */
  outcomes: Record<Outcome, number>;
  /** For "pruned": how many questions lost their last right prefix at each step. */
  lostAt: Record<number, number>;
  /** Mean finished solutions and mean distinct finished texts per question. */
  finished: number;
  distinct: number;
}

export function summarizeReplays(rs: readonly Replay[]): OracleSummary {
  const q = Math.max(1, rs.length);
  const frac = (f: (r: Replay) => boolean) => rs.filter(f).length / q;
  const outcomes = { right: 0, pick: 0, pruned: 0, cut: 0, none: 0 } as Record<Outcome, number>;
  for (const r of rs) outcomes[r.outcome] += 1 / q;
  const lostAt: Record<number, number> = {};
  for (const r of rs) if (r.outcome === "pruned" && r.lostAt !== null) lostAt[r.lostAt] = (lostAt[r.lostAt] ?? 0) + 1;
  return {
    questions: rs.length,
    picked: frac((r) => r.outcome === "right"),
    oracle: frac((r) => r.oracle),
    majority: frac((r) => r.majority),
    outcomes,
    lostAt,
    finished: rs.reduce((a, r) => a + r.finished, 0) / q,
    distinct: rs.reduce((a, r) => a + r.distinct, 0) / q,
  };
}
