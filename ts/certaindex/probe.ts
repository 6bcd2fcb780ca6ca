// Chain-of-thought probing (Dynasor-CoT): every `interval` tokens the runtime asks the model for its current
// answer y_k. The paper's consistency over a sliding window of the last w probes is
//   C_k = (1/w) · Σ_{j=k−w+1..k} I[y_j = y_k],
// with probe answers that hesitate ("wait", "hmm", ...) marked unconfident and left out of the check; the program
// exits once C_k ≥ τ. Here τ is given as a count, `agree` = ⌈τ·w⌉: exit once, among the last `window` probes (by
// position, the latest included), at least `agree` are confident and equal to the latest one, which must itself be
// confident. A probe that is empty, failed, or hesitates counts as disagreeing (it still takes its place in the
// window, so the window always spans the last window × interval tokens of thought). agree = window (the default)
// is τ = 1, the reference implementation's rule: the last `window` probes all confident and equal.
//
// The reference implementation's `should_early_exit` returns true whenever enough probes exist, whatever they say
// (hao-ai-lab/Dynasor issue #25). Here the answers must agree as above.
import { InvalidOptionError } from "../errors/index.js";

/** Words that mark a probe answer as a guess rather than a conclusion (matched as whole words, any case). */
export const DEFAULT_HESITATION_WORDS: readonly string[] = [
  "wait",
  "hmm",
  "hold",
  "but",
  "maybe",
  "perhaps",
  "unsure",
  "not sure",
  "double-check",
  "recheck",
  "alternatively",
];

export interface ProbeRule {
  /** How many of the latest probes the check looks at, w (default 3). */
  window: number;
  /** How many of those must be confident and equal to the latest, ⌈τ·w⌉ (1 ≤ agree ≤ window; default: window,
   * i.e. τ = 1). */
  agree?: number;
  hesitationWords: readonly string[];
}

export const DEFAULT_PROBE_RULE: ProbeRule = { window: 3, hesitationWords: DEFAULT_HESITATION_WORDS };

/** The rule's `agree`, checked: an integer in [1, window] (absent: window). */
export function agreeCount(rule: ProbeRule): number {
  if (!Number.isInteger(rule.window) || rule.window < 1)
    throw new InvalidOptionError(`probe window must be an integer ≥ 1, got ${rule.window}`, { field: "probe.window" });
  const agree = rule.agree ?? rule.window;
  if (!Number.isInteger(agree) || agree < 1 || agree > rule.window)
    throw new InvalidOptionError(`probe agree must be an integer in [1, window = ${rule.window}], got ${agree}`, {
      field: "probe.agree",
    });
  return agree;
}

function escapeRegExp(s: string): string {
  return s.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
}

/** True when `text` contains one of `words` as a whole word (so "but" does not match "button"). */
export function hasHesitation(text: string, words: readonly string[] = DEFAULT_HESITATION_WORDS): boolean {
  return words.some((w) => new RegExp(`(^|[^\\p{L}\\p{N}_])${escapeRegExp(w)}($|[^\\p{L}\\p{N}_])`, "iu").test(text));
}

/** A probe answer counts only when it is non-empty after trimming and free of hesitation words. */
export function isConfidentProbe(
  answer: string | null | undefined,
  rule: ProbeRule = DEFAULT_PROBE_RULE,
): answer is string {
  return answer != null && answer.trim() !== "" && !hasHesitation(answer, rule.hesitationWords);
}

/**
 * How many of the last `window` probes are confident and equal to the latest (the latest counted; 0 when the latest
 * is not confident): w · C_k in the paper's terms.
 */
export function agreeingProbes(
  probes: readonly (string | null | undefined)[],
  rule: ProbeRule = DEFAULT_PROBE_RULE,
): number {
  agreeCount(rule);
  if (probes.length === 0) return 0;
  const latest = probes[probes.length - 1];
  if (!isConfidentProbe(latest, rule)) return 0;
  let agreeing = 0;
  for (const p of probes.slice(-rule.window)) if (isConfidentProbe(p, rule) && p.trim() === latest.trim()) agreeing++;
  return agreeing;
}

/** Exit when at least `agree` of the last `window` probes are confident and equal to the latest (see the header). */
export function shouldExitOnProbes(
  probes: readonly (string | null | undefined)[],
  rule: ProbeRule = DEFAULT_PROBE_RULE,
): boolean {
  return agreeingProbes(probes, rule) >= agreeCount(rule);
}

/**
 * Probe certaindex in [0, 1]: min(1, agreeing probes / agree). Reaches 1 exactly when shouldExitOnProbes is true.
 */
export function probeCertaindex(
  probes: readonly (string | null | undefined)[],
  rule: ProbeRule = DEFAULT_PROBE_RULE,
): number {
  const agree = agreeCount(rule);
  const agreeing = agreeingProbes(probes, rule);
  return agreeing >= agree ? 1 : agreeing / agree;
}
