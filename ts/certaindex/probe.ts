// Chain-of-thought probing (Dynasor-CoT): every `interval` tokens the runtime asks the model for its current
// answer; the program exits once the last `window` probe answers agree, are non-empty and show no hesitation.
//
// The reference implementation's `should_early_exit` returns true whenever enough probes exist, whatever they say
// (hao-ai-lab/Dynasor issue #25). Here all three conditions must hold.

/** Words that mark a probe answer as a guess rather than a conclusion (matched as whole words, any case). */
export const DEFAULT_HESITATION_WORDS: readonly string[] = ["wait", "hmm", "hold", "but", "maybe", "perhaps", "unsure", "not sure", "double-check", "recheck", "alternatively"];

export interface ProbeRule {
  /** How many consecutive probe answers must agree (default 3). */
  window: number;
  hesitationWords: readonly string[];
}

export const DEFAULT_PROBE_RULE: ProbeRule = { window: 3, hesitationWords: DEFAULT_HESITATION_WORDS };

function escapeRegExp(s: string): string {
  return s.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
}

/** True when `text` contains one of `words` as a whole word (so "but" does not match "button"). */
export function hasHesitation(text: string, words: readonly string[] = DEFAULT_HESITATION_WORDS): boolean {
  return words.some((w) => new RegExp(`(^|[^\\p{L}\\p{N}_])${escapeRegExp(w)}($|[^\\p{L}\\p{N}_])`, "iu").test(text));
}

/** A probe answer counts only when it is non-empty after trimming and free of hesitation words. */
export function isConfidentProbe(answer: string | null | undefined, rule: ProbeRule = DEFAULT_PROBE_RULE): answer is string {
  return answer != null && answer.trim() !== "" && !hasHesitation(answer, rule.hesitationWords);
}

/** Exit when the last `window` probe answers are all confident and equal. */
export function shouldExitOnProbes(probes: readonly (string | null | undefined)[], rule: ProbeRule = DEFAULT_PROBE_RULE): boolean {
  if (rule.window < 1) throw new RangeError(`probe window must be ≥ 1, got ${rule.window}`);
  if (probes.length < rule.window) return false;
  const last = probes.slice(-rule.window);
  if (!last.every((p) => isConfidentProbe(p, rule))) return false;
  const first = (last[0] as string).trim();
  return last.every((p) => (p as string).trim() === first);
}

/**
 * Probe certaindex in [0, 1]: the length of the run of confident probes equal to the latest one, over the window.
 * Reaches 1 exactly when shouldExitOnProbes is true.
 */
export function probeCertaindex(probes: readonly (string | null | undefined)[], rule: ProbeRule = DEFAULT_PROBE_RULE): number {
  if (probes.length === 0) return 0;
  const latest = probes[probes.length - 1];
  if (!isConfidentProbe(latest, rule)) return 0;
  let run = 0;
  for (let i = probes.length - 1; i >= 0 && run < rule.window; i--) {
    const p = probes[i];
    if (!isConfidentProbe(p, rule) || p.trim() !== latest.trim()) break;
    run++;
  }
  return run / rule.window;
}
