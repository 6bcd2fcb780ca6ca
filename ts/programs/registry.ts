// The built-in programs by name, built for one question (CLI, benchmarks). Strategies are chosen by a string union
// checked with `satisfies never`.
import { DEFAULT_PROBE_RULE } from "../certaindex/probe.js";
import { InvalidOptionError, UnsupportedError } from "../errors/index.js";
import type { StructuredOutput } from "../engine/index.js";
import { CotProbe } from "./cotProbe.js";
import { Duchess } from "./duchess.js";
import { ShortMK } from "./shortMK.js";
import { DeepConf, type DeepConfVariant } from "./deepconf.js";
import type { DuchessProbe } from "../probe/probeFile.js";
import { Mcts } from "./mcts.js";
import { BeamSearch, type FlashTtsSwitches } from "./beam.js";
import { BestOfN } from "./bestOfN.js";
import type { Program } from "./program.js";
import { Rebase } from "./rebase.js";
import type { RewardSource } from "./rewards.js";
import type { ProgramTask } from "./task.js";
import { SelfConsistency } from "./selfConsistency.js";

export type ProgramKind =
  "sc" | "cot-probe" | "rebase" | "mcts" | "duchess" | "short-m@k" | "deepconf" | "beam" | "dvts" | "best-of-n";
export const PROGRAM_KINDS: readonly ProgramKind[] = [
  "sc",
  "cot-probe",
  "rebase",
  "mcts",
  "duchess",
  "short-m@k",
  "deepconf",
  "beam",
  "dvts",
  "best-of-n",
];
/** The programs whose answers may be structured (BuildProgramOptions.structured): they vote over their branches'
 *  answers, and the early exits they have (certaindex over the answers, DUCHESS's activation probes, DeepConf's
 *  confidence) read no answer anchor out of a thought. */
export const STRUCTURED_PROGRAMS: readonly ProgramKind[] = ["sc", "duchess", "deepconf", "short-m@k", "best-of-n"];
/** Why the others refuse structured answers. */
const STEP_MARKER =
  "its steps end where the task's answer marker (`\\boxed{`) is written; a structured answer has none";
const NOT_STRUCTURED: Partial<Record<ProgramKind, string>> = {
  "cot-probe":
    "its early exit reads short probe answers written after an answer anchor (`</think> \\boxed{`, stopped at `}`); a structured answer has no such anchor",
  rebase: STEP_MARKER,
  mcts: STEP_MARKER,
  beam: STEP_MARKER,
  dvts: STEP_MARKER,
};
/** The programs that score steps with a reward source (a PRM, or the task's verifier). */
export const STEP_SCORED_PROGRAMS: readonly ProgramKind[] = ["rebase", "mcts", "beam", "dvts", "best-of-n"];

export interface BuildProgramOptions {
  /** The question as asked (what the reward sources see). */
  question: string;
  /** The rendered prompt (e.g. the chat template applied to the question), text or ids. */
  prompt: string | readonly number[];
  /** The program's cap: branches (sc), probe-interval tokens budget (cot-probe: maxTokens), width (rebase),
   * simulations (mcts). Default: each program's own. */
  cap?: number;
  maxTokens?: number;
  seed?: number;
  temperature?: number;
  /** Step reward of rebase / mcts; default: the task's step verifier. */
  reward?: RewardSource;
  /** How answers are read, compared and probed, and steps checked (e.g. arithTask, gsm8kTask); default: boxedAnswers
   * (the arithmetic task's answer format, without its step verifier: rebase / mcts then need `reward`). */
  task?: ProgramTask;
  model?: string;
  /** sc: branches sampled per round (default 4). */
  branchesPerRound?: number;
  /** mcts: simulations per round (default 4). */
  simulationsPerRound?: number;
  /** cot-probe: generated tokens between probes (default 64). */
  interval?: number;
  /** cot-probe: probe answers that must agree (the exit rule's window, default 3). */
  probeWindow?: number;
  /** short-m@k: the m of the first branches to finish that vote (default 3; k is the cap). */
  shortM?: number;
  /** deepconf: keep the top 10% ("low", default) or 90% ("high"); offline: all traces, then filter. */
  deepconfVariant?: DeepConfVariant;
  deepconfOffline?: boolean;
  /** duchess: the trained probe (loadProbe); required. */
  probe?: DuchessProbe;
  /** duchess: the reasoning_effort level its τ follows (duchessTauFor); absent or medium: the probe's tuned τ. */
  duchessEffort?: "low" | "medium" | "high";
  /** duchess: τ at duchessEffort from the calibration's `effort.<level>.settings.duchessTau` (wins over the rule). */
  duchessTau?: number;
  /** beam / dvts: continuations per kept path M (default 4; must divide the cap N). */
  beamWidth?: number;
  /** beam / dvts: the FlashTTS switches (default: prefix-aware forks on, speculation off). */
  flashTts?: FlashTtsSwitches;
  /** Constrain every branch's answer (BranchSampling.structured): the STRUCTURED_PROGRAMS only, the others refuse. */
  structured?: StructuredOutput;
}

export function parseProgramKind(value: string): ProgramKind {
  const kind = PROGRAM_KINDS.find((k) => k === value);
  if (kind === undefined)
    throw new InvalidOptionError(`program "${value}" is unknown; expected one of ${PROGRAM_KINDS.join(", ")}`, {
      field: "program",
    });
  return kind;
}

/** Percentile points reasoning_effort low / high moves DUCHESS's τ below / above the tuned τ's percentile. */
export const DUCHESS_EFFORT_PERCENTILE_STEP = 20;

/**
 * DUCHESS's termination threshold τ at a reasoning_effort level (undefined: the probe's tuned τ), as DeepConf's kept
 * percentile follows the effort. A branch is terminated (its answer read, its thought cut) once the probe's p > τ:
 * `low` takes the τ DUCHESS_EFFORT_PERCENTILE_STEP percentile points below the tuned τ's among the probe's validation
 * percentiles (correctness.tauByPercentile; clamped to the lowest there), so branches stop sooner; `high` the τ that
 * many points above (clamped to the highest), so they think longer; `medium` the tuned τ. A probe file without
 * percentiles: low 0.8 τ, high halfway from τ to 1.
 */
export function duchessTauFor(level: "low" | "medium" | "high" | undefined, probe: DuchessProbe): number | undefined {
  if (level === undefined || level === "medium") return undefined;
  const c = probe.meta.correctness;
  const tuned = probe.meta.orchestration?.tau ?? c.tau;
  const byPercentile = Object.entries(c.tauByPercentile ?? {})
    .map(([k, v]) => ({ percentile: Number(k), tau: v }))
    .filter((x) => Number.isFinite(x.percentile) && Number.isFinite(x.tau))
    .sort((a, b) => a.percentile - b.percentile);
  if (byPercentile.length === 0) return level === "low" ? 0.8 * tuned : tuned + (1 - tuned) / 2;
  // The tuned τ's percentile: as the trainer chose it, else the entry equal to it, else the paper's rule's.
  const at =
    probe.meta.orchestration?.tauPercentile ?? byPercentile.find((x) => x.tau === tuned)?.percentile ?? c.tauPercentile;
  const want = at + (level === "low" ? -1 : 1) * DUCHESS_EFFORT_PERCENTILE_STEP;
  const pick =
    level === "low"
      ? ([...byPercentile].reverse().find((x) => x.percentile <= want) ?? byPercentile[0])
      : (byPercentile.find((x) => x.percentile >= want) ?? byPercentile[byPercentile.length - 1]);
  // Never past the tuned τ the other way (percentiles are monotone, but a hand-edited file need not be).
  return level === "low" ? Math.min(pick.tau, tuned) : Math.max(pick.tau, tuned);
}

/** A τ given outright (the calibration's effort.<level>.settings.duchessTau) must be a probability in (0, 1). */
function checkTau(tau: number | undefined): number | undefined {
  if (tau !== undefined && !(tau > 0 && tau < 1))
    throw new InvalidOptionError(`duchessTau must be a number in (0, 1), got ${tau}`, { field: "duchessTau" });
  return tau;
}

export function buildProgram(kind: ProgramKind, o: BuildProgramOptions): Program {
  if (o.structured && !STRUCTURED_PROGRAMS.includes(kind))
    throw new UnsupportedError(
      `program ${kind} does not take structured answers: ${NOT_STRUCTURED[kind]}; use program ${STRUCTURED_PROGRAMS.join(", ")}, or drop structured`,
      { field: "structured" },
    );
  const common = { prompt: o.prompt, seed: o.seed, model: o.model, task: o.task };
  const voting = { ...common, structured: o.structured };
  const tree = {
    ...common,
    question: o.question,
    reward: o.reward,
    temperature: o.temperature,
    maxTokens: o.maxTokens,
  };
  switch (kind) {
    case "sc":
      return new SelfConsistency({
        ...voting,
        maxBranches: o.cap ?? 16,
        branchesPerRound: o.branchesPerRound,
        maxTokens: o.maxTokens,
        temperature: o.temperature,
      });
    case "cot-probe": {
      const rule = o.probeWindow === undefined ? undefined : { ...DEFAULT_PROBE_RULE, window: o.probeWindow };
      return new CotProbe({
        ...common,
        maxTokens: o.maxTokens,
        temperature: o.temperature,
        interval: o.interval,
        rule,
      });
    }
    case "rebase":
      return new Rebase({ ...tree, width: o.cap });
    case "mcts":
      return new Mcts({ ...tree, maxSimulations: o.cap, simulationsPerRound: o.simulationsPerRound });
    case "short-m@k":
      return new ShortMK({ ...voting, k: o.cap, m: o.shortM, maxTokens: o.maxTokens, temperature: o.temperature });
    case "deepconf":
      return new DeepConf({
        ...voting,
        budget: o.cap,
        variant: o.deepconfVariant,
        mode: o.deepconfOffline ? "offline" : "online",
        maxTokens: o.maxTokens,
        temperature: o.temperature,
      });
    case "beam":
    case "dvts":
      return new BeamSearch({ ...tree, variant: kind, n: o.cap, beamWidth: o.beamWidth, ...o.flashTts });
    case "best-of-n":
      return new BestOfN({ ...tree, n: o.cap, structured: o.structured });
    case "duchess":
      if (o.probe === undefined) {
        throw new InvalidOptionError(
          "program duchess needs a trained probe (BuildProgramOptions.probe, from loadProbe); train one with `deliberate probe train --model <dir> --task <task>`",
          {
            field: "probe",
          },
        );
      }
      return new Duchess({
        ...voting,
        probe: o.probe,
        tau: checkTau(o.duchessTau) ?? duchessTauFor(o.duchessEffort, o.probe),
        branches: o.cap,
        maxTokens: o.maxTokens,
        temperature: o.temperature,
      });
    default:
      return kind satisfies never;
  }
}
