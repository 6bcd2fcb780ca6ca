// ProgramFactory: one model folder's programs, built the way `deliberate run` and the HTTP server both build them.
// It owns the two per-model files a program reads besides the weights: the certaindex calibration (policy and
// settings per program and cap) and, for duchess, the trained probe (loaded once, checked against the weights).
// Callers pass what the user asked; the calibrated settings fill what they left out.
import { join } from "node:path";
import { loadCalibration, programCalibration, type LoadedCalibration } from "../certaindex/calibrationFile.js";
import type { PolicySpec } from "../certaindex/policies.js";
import { modelHash } from "../model/modelHash.js";
import { loadProbe, PROBE_SUBDIR, type DuchessProbe } from "../probe/probeFile.js";
import { buildProgram, type BuildProgramOptions, type ProgramKind } from "./registry.js";
import type { Program } from "./program.js";

export interface ProgramFactoryOptions {
  /** The model folder (its calibration and probe are looked up there). */
  modelDir: string;
  /** The model's shape, to check a probe against. */
  hiddenSize: number;
  numLayers: number;
  /** A calibration file; false: none (the programs' built-in policies); default: the model's own, if any. */
  calibration?: string | false;
  /** The bundled model's folder (its calibration ships in the package's calibration/). */
  bundledDir?: string;
  /** The trained DUCHESS probe's folder; default <modelDir>/probe. */
  probeDir?: string;
}

/** What the caller asks for one program run; calibrated settings fill the rest. */
export type ProgramRequest = Omit<
  BuildProgramOptions,
  "probe" | "branchesPerRound" | "simulationsPerRound" | "probeWindow"
>;

export interface BuiltProgram {
  program: Program;
  /** The calibrated policy for this program and cap, if the calibration has one (the caller may override it). */
  policy: PolicySpec | undefined;
  /** Whether a calibration entry supplied the policy and settings. */
  calibrated: boolean;
}

export class ProgramFactory {
  private probe: Promise<DuchessProbe> | null = null;

  private constructor(
    private readonly options: ProgramFactoryOptions,
    /** The loaded calibration (null: none, or turned off). */
    readonly calibration: LoadedCalibration | null,
  ) {}

  static open(options: ProgramFactoryOptions): ProgramFactory {
    const cal =
      options.calibration === false
        ? null
        : loadCalibration(options.modelDir, { file: options.calibration, bundledDir: options.bundledDir });
    return new ProgramFactory(options, cal);
  }

  /** The DUCHESS probe, loaded on first use and checked against the model's weights and shape. */
  duchessProbe(): Promise<DuchessProbe> {
    const o = this.options;
    this.probe ??= (async () =>
      loadProbe(o.probeDir ?? join(o.modelDir, PROBE_SUBDIR), {
        hash: await modelHash(o.modelDir),
        hiddenSize: o.hiddenSize,
        numLayers: o.numLayers,
        name: o.modelDir,
      }))();
    // A failed load is not cached: the next request sees the error again, and a probe trained since then loads.
    this.probe.catch(() => (this.probe = null));
    return this.probe;
  }

  async build(kind: ProgramKind, request: ProgramRequest): Promise<BuiltProgram> {
    // Calibrated: the certaindex programs. duchess is tuned by its probe file; short-m@k, deepconf and the
    // verifier-guided searches (beam, dvts, best-of-n) by their own defaults.
    const pc =
      this.calibration === null || !(kind === "sc" || kind === "cot-probe" || kind === "rebase" || kind === "mcts")
        ? undefined
        : programCalibration(this.calibration.calibration, kind, request.cap);
    const s = pc?.settings ?? {};
    const build: BuildProgramOptions = {
      ...request,
      cap: request.cap ?? s.maxBranches ?? s.width ?? s.maxSimulations,
      branchesPerRound: s.branchesPerRound,
      simulationsPerRound: s.simulationsPerRound,
      interval: request.interval ?? s.interval,
      probeWindow: s.probeWindow,
    };
    if (kind === "duchess") build.probe = await this.duchessProbe();
    return { program: buildProgram(kind, build), policy: pc?.policy, calibrated: pc !== undefined };
  }
}
