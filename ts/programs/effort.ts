// reasoning_effort as an early-exit policy on one stream (Dynasor-CoT on a plain request). A ThoughtProbe watches a
// single thinking stream that its caller drives (the server's Generation, or a library user's own loop): each time
// the thought has grown by `interval` tokens the caller asks it to probe; it forks the stream at exactly the length
// the caller names (KV shared, nothing copied), appends the probe suffix (`\n</think> \boxed{` for boxed answers),
// decodes a short answer greedily and discards the fork. Over the probe answers it computes the probe certaindex
// (ts/certaindex/probe.ts: the windowed agreement of the last `window` answers) and asks the effort level's policy
// (ts/certaindex/policies.ts, knob = probes made, cap = probes that fit the thought's hard cap) whether the thought may
// go on. When it may not, the caller closes the thought where the probe cut it, as reasoning_end does, and the
// answer streams after. The levels' settings come from the model's calibration file (`effort` section, written by
// `npm run bench:certaindex -- --calibrate-effort`); without one, FALLBACK_EFFORT.
import type { Engine } from "../engine/engine.js";
import type { RequestHandle } from "../engine/handle.js";
import type { CalibrationFile } from "../certaindex/calibrationFile.js";
import { decide, validatePolicy, type PolicySpec } from "../certaindex/policies.js";
import { agreeCount, DEFAULT_HESITATION_WORDS, probeCertaindex, type ProbeRule } from "../certaindex/probe.js";
import { InvalidOptionError } from "../errors/index.js";
import { defaultProbeSuffix } from "./answers.js";

/** The levels of reasoning_effort that choose an early-exit policy. */
export const EFFORT_LEVELS = ["low", "medium", "high"] as const;
export type EffortLevel = (typeof EFFORT_LEVELS)[number];

/** How one effort level thinks. */
export interface ThoughtEffort {
  /** Thought tokens between probes; 0: no probing (the thought runs to its own end or to its hard cap). */
  interval: number;
  /** Probes the agreement check looks at (the rule's window) and how many must agree with the latest. */
  window: number;
  agree?: number;
  /** Exit policy over the probe certaindex, its knob being the probes made (`threshold` 1 at `detectAt` w: exit
   * the first time the last w probes agree). */
  policy: PolicySpec;
  /** Most tokens a probe decodes (default 20). */
  probeMaxTokens?: number;
}

/**
 * Without a calibration (a model with no `effort` section): low exits the first time two probes in a row agree,
 * medium when three do, high does not probe (the thought runs to its end or its hard cap: plain decoding). A probe
 * every 32 thought tokens, the interval of the Dynasor-CoT reference implementation.
 */
export const FALLBACK_EFFORT: Record<EffortLevel, ThoughtEffort> = {
  low: { interval: 32, window: 2, policy: { kind: "threshold", threshold: 1, detectAt: 2 } },
  medium: { interval: 32, window: 3, policy: { kind: "threshold", threshold: 1, detectAt: 3 } },
  high: { interval: 0, window: 3, policy: { kind: "baseline-even" } },
};

/** An effort level's settings: the calibration file's `effort.<level>` when it has one, else FALLBACK_EFFORT. */
export function resolveEffort(
  level: EffortLevel,
  calibration: CalibrationFile | null | undefined,
): { effort: ThoughtEffort; source: "calibration" | "fallback" } {
  const c = calibration?.effort?.[level];
  if (c === undefined) return { effort: FALLBACK_EFFORT[level], source: "fallback" };
  const s = c.settings;
  const effort: ThoughtEffort = {
    interval: s.interval ?? 0,
    window: s.probeWindow ?? 3,
    policy: c.policy,
  };
  if (s.probeAgree !== undefined) effort.agree = s.probeAgree;
  if (s.probeMaxTokens !== undefined) effort.probeMaxTokens = s.probeMaxTokens;
  return { effort, source: "calibration" };
}

export interface ThoughtProbeOptions {
  effort: ThoughtEffort;
  /** Thought tokens the stream may spend at most (thinking budget or max tokens): the policy's knob cap is the
   * probes that fit in it. */
  cap: number;
  /** Text appended to the cut thought (default defaultProbeSuffix: a newline if mid-line, `</think> \boxed{`). */
  probeSuffix?: (thoughtSoFar: string) => string;
  /** Where a probe answer ends (default "}" and a newline, as CotProbe). */
  probeStop?: string[];
  hesitationWords?: readonly string[];
  model?: string;
}

/** Why a probed thought stopped early: the policy's reason. */
export type ThoughtExit = "certain" | "curve";

/** Dynasor-CoT on one stream the caller drives (see the header). */
export class ThoughtProbe {
  /** Probe answers in order (null: the probe failed or was aborted). */
  readonly probes: Array<string | null> = [];
  /** Thought tokens at each probe. */
  readonly probeAt: number[] = [];
  /** Tokens the probes generated (their suffix is prefill, not counted). */
  probeTokens = 0;
  certaindex = 0;
  /** Set once the policy has said to stop thinking. */
  exit: ThoughtExit | null = null;
  readonly rule: ProbeRule;
  private readonly maxProbes: number;

  constructor(private readonly o: ThoughtProbeOptions) {
    const e = o.effort;
    if (!Number.isInteger(e.interval) || e.interval < 0)
      throw new InvalidOptionError(`effort interval must be an integer ≥ 0, got ${e.interval}`, {
        field: "effort.interval",
      });
    validatePolicy(e.policy);
    this.rule = { window: e.window, agree: e.agree, hesitationWords: o.hesitationWords ?? DEFAULT_HESITATION_WORDS };
    agreeCount(this.rule);
    this.maxProbes = e.interval === 0 ? 0 : Math.max(1, Math.ceil(o.cap / e.interval));
  }

  /** The thought length (tokens) from which the next probe is due; null: no more probes (no probing, an exit made,
   * or the cap reached). */
  get nextProbeAt(): number | null {
    if (this.exit !== null || this.probes.length >= this.maxProbes) return null;
    return (this.probes.length + 1) * this.o.effort.interval;
  }

  /**
   * Forks a probe from `parent` (its sample `sample`) cut at `length` tokens (prompt and generated), where the
   * thought so far is `thought` of `thoughtTokens` tokens; resolves true when the policy says to stop thinking there.
   * A fork the engine refuses, or a probe that fails, counts as an answer that disagrees.
   */
  async probe(
    engine: Engine,
    parent: RequestHandle,
    at: {
      sample: number;
      length: number;
      thought: string;
      thoughtTokens: number;
      signal?: AbortSignal;
      /** Most tokens this probe may decode (the caller's budget left); at most the effort's probeMaxTokens. */
      maxTokens?: number;
    },
  ): Promise<boolean> {
    let answer: string | null = null;
    try {
      const h = engine.fork(parent, {
        sample: at.sample,
        length: at.length,
        append: (this.o.probeSuffix ?? defaultProbeSuffix)(at.thought),
        maxTokens: Math.max(1, Math.min(this.o.effort.probeMaxTokens ?? 20, at.maxTokens ?? Infinity)),
        temperature: 0,
        stop: this.o.probeStop ?? ["}", "\n"],
        signal: at.signal,
        ...(this.o.model === undefined ? {} : { model: this.o.model }),
      });
      const out = await h.result;
      this.probeTokens += out.usage.generatedTokens;
      answer = out.finishReason === "aborted" ? null : out.text.trim();
    } catch {
      answer = null;
    }
    this.probes.push(answer);
    this.probeAt.push(at.thoughtTokens);
    this.certaindex = probeCertaindex(this.probes, this.rule);
    const d = decide(this.o.effort.policy, {
      certaindex: this.certaindex,
      used: this.probes.length,
      max: Math.max(this.maxProbes, this.probes.length),
      tokensUsed: at.thoughtTokens + this.probeTokens,
    });
    // Reaching the cap is not an exit: the thought goes on to its hard cap (thinking budget or max tokens).
    if (!d.grant && (d.reason === "certain" || d.reason === "curve")) this.exit = d.reason;
    return this.exit !== null;
  }

  /** The latest probe's answer (what an exit answers with), or null. */
  get answer(): string | null {
    const last = this.probes[this.probes.length - 1];
    return last == null || last === "" ? null : last;
  }
}
