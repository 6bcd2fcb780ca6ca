// What a program run spent and what its early exit saved, as ProgramResult.usage (and the server's
// usage.completion_tokens_details.reasoning_tokens / deliberate.tokens_saved). The saving is against the same
// program run to its knob cap; those rounds never ran, so it is an estimate: the rounds not taken, each costing what
// the rounds taken cost on average, (knob.max − knob.used) · tokensUsed / knob.used, when the policy stopped the
// program (stopReason "certain" or "curve"); 0 when it ran to its cap, ended on its own ("done": nothing was left to
// run) or was aborted. A program that prunes inside its rounds (DUCHESS terminating branches, DeepConf's early-stopped
// traces) reports that as branchesPruned, not as tokens: what a pruned branch would have cost is not known.
import type { Knob, StopReason } from "./program.js";

export interface ProgramUsage {
  /** Every generated token of the program (branches, probes, reward calls): all of it is reasoning, the answer is
   * read from it. */
  reasoningTokens: number;
  /** Estimated tokens not spent against the program run to its cap (see the header). */
  tokensSaved: number;
  /** Samples of the program's branch requests (every purpose but "probe" and "reward"). */
  branchesStarted: number;
  /** Of those, the samples that ended by an abort (the program terminated them, or its exit stopped them) or by the
   * engine's low-confidence stop. Absent from a deterministic run's usage: there the count may depend on timing (a
   * branch can finish just before the exit would have stopped it), so it is ProgramResult.determinism.branchesPruned,
   * beside the run's other timing-dependent figures. */
  branchesPruned?: number;
  /** Certaindex when the program stopped. */
  certaindexAtExit: number;
}

/** Purposes that are not branches of the program's reasoning. */
export const NON_BRANCH_PURPOSES: readonly string[] = ["probe", "reward"];

/** Tokens saved by the rounds not taken (see the header). */
export function estimateTokensSaved(r: { stopReason: StopReason; knob: Knob; tokensUsed: number }): number {
  if (r.stopReason !== "certain" && r.stopReason !== "curve") return 0;
  if (r.knob.used <= 0 || r.knob.max <= r.knob.used) return 0;
  return Math.round(((r.knob.max - r.knob.used) * r.tokensUsed) / r.knob.used);
}

export function programUsage(
  r: { stopReason: StopReason; knob: Knob; tokensUsed: number; certaindex: number },
  branches: { started: number; pruned?: number },
): ProgramUsage {
  return {
    reasoningTokens: r.tokensUsed,
    tokensSaved: estimateTokensSaved(r),
    branchesStarted: branches.started,
    ...(branches.pruned === undefined ? {} : { branchesPruned: branches.pruned }),
    certaindexAtExit: r.certaindex,
  };
}
