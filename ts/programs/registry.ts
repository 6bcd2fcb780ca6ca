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
        branches: o.cap,
        maxTokens: o.maxTokens,
        temperature: o.temperature,
      });
    default:
      return kind satisfies never;
  }
}
