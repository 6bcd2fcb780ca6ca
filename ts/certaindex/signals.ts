// Certaindex signals (Dynasor, arXiv 2412.20993): how sure a reasoning program is, in [0, 1].

import type { ConfidenceReport } from "../engine/outputs.js";
import { InvalidOptionError } from "../errors/index.js";

/** Decides whether two extracted answers are the same answer (default: exact string match after trimming). */
export type AnswerEquivalence = (a: string, b: string) => boolean;

export const exactMatch: AnswerEquivalence = (a, b) => a.trim() === b.trim();

export interface AnswerCluster {
  answer: string;
  count: number;
}

/** Groups answers into clusters of equivalent answers, largest first (ties: first seen). Empty answers are dropped. */
export function clusterAnswers(
  answers: readonly (string | null | undefined)[],
  equivalent: AnswerEquivalence = exactMatch,
): AnswerCluster[] {
  const clusters: AnswerCluster[] = [];
  for (const a of answers) {
    if (a == null || a.trim() === "") continue;
    const c = clusters.find((k) => equivalent(k.answer, a));
    if (c) c.count++;
    else clusters.push({ answer: a.trim(), count: 1 });
  }
  return clusters
    .map((c, i) => ({ c, i }))
    .sort((x, y) => y.c.count - x.c.count || x.i - y.i)
    .map((x) => x.c);
}

/** A majority vote: the largest cluster's answer (ties: the first seen), or null when no sample had an answer. */
export interface Vote {
  answer: string | null;
  votes: number;
  clusters: AnswerCluster[];
}

/** Self-consistency's vote over sampled answers (the one copy of the rule: programs and eval use it). */
export function majorityVote(
  answers: readonly (string | null | undefined)[],
  equivalent: AnswerEquivalence = exactMatch,
): Vote {
  const clusters = clusterAnswers(answers, equivalent);
  return { answer: clusters[0]?.answer ?? null, votes: clusters[0]?.count ?? 0, clusters };
}

/** A weighted vote: the answer whose cluster carries the most weight (ties: the first seen), that weight, and the
 *  weight of every answered item (null and empty answers carry none). */
export interface WeightedVote {
  answer: string | null;
  weight: number;
  total: number;
}

/** The weighted majority (reward-weighted for tree search, confidence-weighted for DeepConf): one copy of the rule. */
export function weightedMajority(
  items: ReadonlyArray<{ answer: string | null | undefined; weight: number }>,
  equivalent: AnswerEquivalence = exactMatch,
): WeightedVote {
  const groups: Array<{ answer: string; weight: number }> = [];
  let total = 0;
  for (const { answer, weight } of items) {
    if (answer == null || answer.trim() === "") continue;
    total += weight;
    const g = groups.find((x) => equivalent(x.answer, answer));
    if (g) g.weight += weight;
    else groups.push({ answer: answer.trim(), weight });
  }
  let best: { answer: string; weight: number } | null = null;
  for (const g of groups) if (best === null || g.weight > best.weight) best = g;
  return { answer: best?.answer ?? null, weight: best?.weight ?? 0, total };
}

/** DeepConf's confidence measures of a trace: its lowest group confidence, the mean of its bottom 10% of groups,
 * or its tail confidence. */
export type ConfidenceMeasure = "lowest" | "bottom10" | "tail";

/** A trace's confidence by the paper's measure. */
export function measureOf(c: ConfidenceReport, measure: ConfidenceMeasure): number {
  return measure === "lowest" ? c.lowestGroup : measure === "bottom10" ? c.bottom10Group : c.tail;
}

/**
 * Confidence as a certaindex signal (DeepConf's consensus): the share of the confidence-weighted vote that the top
 * answer holds, in [0, 1]; 0 when nothing carries weight. Each vote's weight is its trace's confidence measure
 * (lowest group, bottom 10% or tail confidence).
 */
export function confidenceCertaindex(
  votes: ReadonlyArray<{ answer: string | null | undefined; weight: number }>,
  equivalent: AnswerEquivalence = exactMatch,
): number {
  const v = weightedMajority(votes, equivalent);
  return v.total > 0 ? v.weight / v.total : 0;
}

/**
 * Normalised answer entropy H̃ = (log n − H) / log n over the answer clusters of n samples, where H is the entropy
 * of the cluster distribution. 1 when all n agree, 0 when all differ. Samples without an answer count towards n
 * (each as its own cluster): a branch that failed to answer is evidence of uncertainty. n < 2 gives 0.
 */
export function entropyCertaindex(
  answers: readonly (string | null | undefined)[],
  equivalent: AnswerEquivalence = exactMatch,
): number {
  const n = answers.length;
  if (n < 2) return 0;
  const clusters = clusterAnswers(answers, equivalent);
  const answered = clusters.reduce((s, c) => s + c.count, 0);
  const counts = [...clusters.map((c) => c.count), ...Array<number>(n - answered).fill(1)];
  let h = 0;
  for (const k of counts) {
    const p = k / n;
    h -= p * Math.log(p);
  }
  const v = (Math.log(n) - h) / Math.log(n);
  return Math.min(1, Math.max(0, v));
}

/** Reward-based certaindex: aggregate of per-branch rewards in [0, 1] (mean for MCTS, max for Rebase). */
export function rewardCertaindex(rewards: readonly number[], aggregate: "mean" | "max"): number {
  if (rewards.length === 0) return 0;
  for (const r of rewards)
    if (!(r >= 0 && r <= 1)) throw new RangeError(`reward ${r} is outside [0, 1]; normalise rewards first`);
  return aggregate === "max" ? Math.max(...rewards) : rewards.reduce((s, r) => s + r, 0) / rewards.length;
}

/** One certaindex signal and the bar it must reach (both in [0, 1]; a threshold of 0 is always met). */
export interface ThresholdedSignal {
  value: number;
  threshold: number;
}

/** A program option's per-signal threshold, checked at the boundary (`field` names the option in the message). */
export function checkThreshold(field: string, threshold: number): number {
  if (!(threshold >= 0 && threshold <= 1))
    throw new InvalidOptionError(`${field} must be in [0, 1] (0 turns the signal off), got ${threshold}`, { field });
  return threshold;
}

/** The largest double below 1: a signal short of its threshold never rounds up to "met". */
const JUST_BELOW_ONE = 1 - 2 ** -53;

/** How far one signal is towards its threshold: 1 when value ≥ threshold, else value / threshold (< 1). */
function progress({ value, threshold }: ThresholdedSignal): number {
  if (!(threshold >= 0 && threshold <= 1)) throw new RangeError(`certaindex threshold ${threshold} is outside [0, 1]`);
  if (!(value >= 0 && value <= 1))
    throw new RangeError(`certaindex signal ${value} is outside [0, 1]; normalise it first`);
  if (value >= threshold) return 1;
  return Math.min(value / threshold, JUST_BELOW_ONE);
}

/**
 * Several signals combined as Dynasor does: each signal has its own threshold and the program is certain only when
 * every signal meets its own (e.g. MCTS: reward ≥ R_τ and answer entropy ≥ H̃_τ). The result is
 * min over signals of min(1, value / threshold): exactly 1 when all thresholds are met (meetsAll), below 1 otherwise,
 * and it grows with every signal's progress, so a threshold / curve policy can still act on partial certainty.
 * Policies on a combined certaindex therefore use threshold 1 for "every signal met". No signals: a RangeError.
 */
export function combineCertaindex(signals: readonly ThresholdedSignal[]): number {
  if (signals.length === 0) throw new RangeError("combineCertaindex needs at least one signal");
  return Math.min(...signals.map(progress));
}

/** True when every signal meets its own threshold (combineCertaindex(signals) === 1). */
export function meetsAll(signals: readonly ThresholdedSignal[]): boolean {
  return combineCertaindex(signals) >= 1;
}
