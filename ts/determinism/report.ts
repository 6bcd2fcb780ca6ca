// Per-prompt agreement across runs and the summary line of the determinism CLI.
import { mulberry32, shuffleInPlace } from "../util/random.js";
import { firstDivergence, hashOutput, type RunOutput } from "./golden.js";

export interface RunRecord {
  /** Which load the run was under (concurrency; 1 = alone). */
  load: number;
  /** The output's token ids (a program prompt: empty; its report is `replay`). */
  tokens: number[];
  /** A program prompt's replayable report (runner.ts programReplay), compared instead of tokens. */
  replay?: string;
  /** Tokens generated (default tokens.length; a program: its tokensUsed). */
  generatedTokens?: number;
  rollbacks: number;
  recomputedTokens: number;
  /** Tokens committed as exact decodes (no verify row); 0 when absent. */
  exactTokens?: number;
}

export interface PromptReport {
  index: number;
  runs: number;
  agree: boolean;
  /** Distinct output hashes seen. */
  distinct: number;
  /** Earliest position where some run differs from the first run (alone), or null: a token position, or for a
   *  program prompt a character offset in its report. */
  firstDivergence: number | null;
  divergentLoads: number[];
  rollbacks: number;
  recomputedTokens: number;
  exactTokens: number;
  generatedTokens: number;
  /** A program prompt (compared by its report; firstDivergence is a character offset). Absent otherwise. */
  program?: true;
}

export function comparePromptRuns(index: number, runs: readonly RunRecord[]): PromptReport {
  if (runs.length === 0) throw new Error(`prompt ${index} has no runs`);
  const base = outputOf(runs[0]);
  let first: number | null = null;
  const loads = new Set<number>();
  for (const r of runs.slice(1)) {
    const d = firstDivergence<number | string>(base, outputOf(r));
    if (d !== null) {
      loads.add(r.load);
      first = first === null ? d : Math.min(first, d);
    }
  }
  return {
    index,
    runs: runs.length,
    agree: first === null,
    distinct: new Set(runs.map((r) => hashOutput(outputOf(r)))).size,
    firstDivergence: first,
    divergentLoads: [...loads].sort((a, b) => a - b),
    rollbacks: runs.reduce((s, r) => s + r.rollbacks, 0),
    recomputedTokens: runs.reduce((s, r) => s + r.recomputedTokens, 0),
    exactTokens: runs.reduce((s, r) => s + (r.exactTokens ?? 0), 0),
    generatedTokens: runs.reduce((s, r) => s + (r.generatedTokens ?? r.tokens.length), 0),
    ...(runs[0].replay !== undefined ? { program: true as const } : {}),
  };
}

/** What a run is compared by: a program's report, else its tokens. */
export function outputOf(r: RunRecord): RunOutput {
  return r.replay ?? r.tokens;
}

export interface DeterminismSummary {
  prompts: number;
  runs: number;
  divergences: number;
  rollbacks: number;
  recomputedTokens: number;
  recomputedFraction: number;
  /** Share of generated tokens committed as exact decodes, without a verify row. */
  exactFraction: number;
}

export function summarize(reports: readonly PromptReport[]): DeterminismSummary {
  const generated = reports.reduce((s, r) => s + r.generatedTokens, 0);
  const recomputed = reports.reduce((s, r) => s + r.recomputedTokens, 0);
  return {
    prompts: reports.length,
    runs: reports.reduce((s, r) => s + r.runs, 0),
    divergences: reports.filter((r) => !r.agree).length,
    rollbacks: reports.reduce((s, r) => s + r.rollbacks, 0),
    recomputedTokens: recomputed,
    recomputedFraction: generated > 0 ? recomputed / generated : 0,
    exactFraction: generated > 0 ? reports.reduce((s, r) => s + r.exactTokens, 0) / generated : 0,
  };
}

/** Seeded Fisher–Yates shuffle (mulberry32) for choosing background companions reproducibly. */
export function shuffled<T>(items: readonly T[], seed: number): T[] {
  return shuffleInPlace([...items], mulberry32(seed));
}
