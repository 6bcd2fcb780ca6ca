// When decode-verify-rollback's fixed-schedule work is worth doing in a step (verifier.ts), as pure
// functions of the step's shape: how many ready verify rows ride in a fused step, and whether a step's deterministic
// decodes can run as exact fixed rows instead of candidates. Both turn on one fact: a step whose GEMMs already run
// the fixed splitK gives fixed rows for the price of their own tokens, while a split-K step carrying fixed rows
// streams the weights a second time for them.
import { FIXED_SCHEDULE } from "../kernelSchedule.js";

export interface ReadyRow {
  /** Tokens of its verify row: the last committed token and the candidates. */
  rowTokens: number;
  /** Engine step at which it became ready. */
  readySince: number;
}

export interface FusedStep {
  /** Ready rows, oldest first. */
  ready: readonly ReadyRow[];
  /** Tokens the scheduler put in the step. */
  scheduledTokens: number;
  /** The step's token budget (the scheduler's maxBatchTokens), shared with the verify rows. */
  tokenBudget: number;
  /** The step's GEMM splitK if `extraTokens` tokens of fixed rows ride along (kernelSchedule.ts decides). */
  gemmSplitKWith: (extraTokens: number) => number;
  /** Whether some other deterministic sequence still decodes (more rows will become ready). */
  othersDecoding: boolean;
  /** Rows a group waits for (verifyGroup), and at most how many steps its oldest row waits (verifyWindow / 4). */
  group: number;
  maxWaitSteps: number;
  step: number;
}

/**
 * How many of the ready rows (from the oldest) ride in this fused step: as many as fit in the token budget beside the
 * scheduled tokens (vLLM's unified budget), at least one. They go at once when the step then runs its GEMMs on the
 * fixed splitK anyway, or when nothing else is scheduled; otherwise they wait to go as a group, as separate passes
 * do: `group` rows ready, no other deterministic sequence decoding, or the oldest waited `maxWaitSteps`.
 */
export function fusedRowCount(s: FusedStep): number {
  let n = 0;
  let tokens = s.scheduledTokens;
  for (const row of s.ready) {
    if (n > 0 && tokens + row.rowTokens > s.tokenBudget) break;
    n++;
    tokens += row.rowTokens;
  }
  if (n === 0) return 0;
  if (s.scheduledTokens === 0 || s.gemmSplitKWith(tokens - s.scheduledTokens) === FIXED_SCHEDULE.gemmSplitK) return n;
  const grouped = s.ready.length >= s.group || !s.othersDecoding || s.step - s.ready[0].readySince >= s.maxWaitSteps;
  return grouped ? n : 0;
}

/**
 * Whether a step's deterministic decodes (those with no candidate pending) may run as exact fixed rows: the step's
 * GEMMs run the fixed splitK anyway, or, on the CPU, whose fixed schedule is within a few % of its fast one at any
 * batch (bench/RESULTS-determinism.md), every row of the step is deterministic, so no fast row would share a GEMM
 * with them. An exact row's token and KV are bitwise what a verify row would compute, so it is committed at once.
 * On the GPU a split-K step is 1.6-1.8x faster than splitK 1 at small batches, so there candidates are verified.
 */
export function exactDecodesFree(
  stepGemmSplitK: number,
  allDeterministic: boolean,
  device: "cpu" | "cuda" | undefined,
): boolean {
  return stepGemmSplitK === FIXED_SCHEDULE.gemmSplitK || (allDeterministic && device !== "cuda");
}
