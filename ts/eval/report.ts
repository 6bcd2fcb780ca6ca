// Aggregates problem results into the evaluation report (overall and per level) and prints it.
import type { ProblemResult } from "./runEval.js";

export interface LevelReport {
  n: number;
  accuracy: number;
  tokensPerProblem: number;
}

export interface EvalReport extends LevelReport {
  task: string;
  split: string;
  program: string;
  /** Fraction of all samples an answer could be extracted from. */
  extractable: number;
  /** Mean time from submit to result per problem (with `concurrency` problems in flight). */
  latencyMsPerProblem: number;
  wallSeconds: number;
  /** Generated tokens per second of wall time, all problems together. */
  tokensPerSecond: number;
  byLevel: Record<string, LevelReport>;
}

function summarize(rs: readonly ProblemResult[]): LevelReport {
  const n = rs.length;
  return {
    n,
    accuracy: n ? rs.filter((r) => r.correct).length / n : 0,
    tokensPerProblem: n ? rs.reduce((s, r) => s + r.generatedTokens, 0) / n : 0,
  };
}

export function buildReport(
  task: string,
  split: string,
  program: string,
  results: readonly ProblemResult[],
  wallSeconds: number,
): EvalReport {
  const byLevel: Record<string, LevelReport> = {};
  for (const level of [...new Set(results.map((r) => r.level))].sort((a, b) => a - b)) {
    byLevel[String(level)] = summarize(results.filter((r) => r.level === level));
  }
  const samples = results.reduce((s, r) => s + r.samples, 0);
  const tokens = results.reduce((s, r) => s + r.generatedTokens, 0);
  return {
    task,
    split,
    program,
    ...summarize(results),
    extractable: samples ? results.reduce((s, r) => s + r.extracted, 0) / samples : 0,
    latencyMsPerProblem: results.length ? results.reduce((s, r) => s + r.latencyMs, 0) / results.length : 0,
    wallSeconds,
    tokensPerSecond: wallSeconds > 0 ? tokens / wallSeconds : 0,
    byLevel,
  };
}

const pct = (x: number): string => `${(100 * x).toFixed(1)}%`;

export function formatReport(r: EvalReport): string {
  const rows = [["level", "n", "accuracy", "tokens/problem"]];
  for (const [level, l] of Object.entries(r.byLevel))
    rows.push([level, String(l.n), pct(l.accuracy), l.tokensPerProblem.toFixed(1)]);
  rows.push(["all", String(r.n), pct(r.accuracy), r.tokensPerProblem.toFixed(1)]);
  const widths = rows[0].map((_, c) => Math.max(...rows.map((row) => row[c].length)));
  const table = rows.map((row) => row.map((cell, c) => cell.padStart(widths[c])).join("  ")).join("\n");
  return [
    `${r.task} (${r.split}), ${r.program}`,
    table,
    `answer extractable from ${pct(r.extractable)} of samples; latency ${r.latencyMsPerProblem.toFixed(0)} ms/problem; ` +
      `${r.tokensPerSecond.toFixed(0)} generated tokens/s; ${r.wallSeconds.toFixed(1)} s`,
  ].join("\n");
}
