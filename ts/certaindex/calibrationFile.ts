// Per-model calibration of the built-in programs' certaindex policies, as a JSON file the CLI and the benchmarks
// read. `npm run bench:certaindex -- --calibrate` writes it (thresholds chosen by `calibrate()` on the validation
// split so that no accuracy is lost there); `deliberate run` applies it. Where it is looked for:
//   1. an explicit path (`--calibration FILE`),
//   2. `<model dir>/certaindex.json` (a calibration that travels with its model),
//   3. for the bundled tiny reasoner, `calibration/tiny-reasoner.json` at the package root.
// The file records the SHA-256 of the model's weights; a file calibrated on other weights is still used (its
// thresholds are a better start than none) but reported as stale, with the command that redoes it.
import { createHash } from "node:crypto";
import { existsSync, readdirSync, readFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { validatePolicy, type PolicySpec } from "./policies.js";

export const CALIBRATION_FORMAT = "deliberate-certaindex-calibration";
/** calibration/ at the package root (this file is ts/certaindex or dist/certaindex). */
export const PACKAGE_CALIBRATION_DIR = fileURLToPath(new URL("../../calibration", import.meta.url));
export const BUNDLED_CALIBRATION_FILE = join(PACKAGE_CALIBRATION_DIR, "tiny-reasoner.json");
export const MODEL_CALIBRATION_NAME = "certaindex.json";
export const RECALIBRATE_COMMAND = "npm run bench:certaindex -- --calibrate";

/** What the policy achieved on the calibration split, against running the program to its cap (or unprobed). */
export interface CalibrationOutcome {
  n: number;
  accuracy: number;
  meanTokens: number;
  baselineAccuracy: number;
  baselineMeanTokens: number;
  /** 1 − meanTokens / baselineMeanTokens. */
  tokenSavings: number;
}

export interface ProgramCalibration {
  /** The intra-program policy (threshold / detectAt in the program's knob units). */
  policy: PolicySpec;
  /** The program settings the policy was calibrated with (knob cap, branches per round, probe interval...). */
  settings: Record<string, number>;
  validation: CalibrationOutcome;
}

export interface CalibrationFile {
  format: typeof CALIBRATION_FORMAT;
  version: 1;
  createdAt: string;
  command: string;
  model: { path: string; sha256: string };
  split: "validation";
  /** The default cap of each program is the entry in `programs`; SC also has one per cap in `scByCap`. */
  programs: {
    sc?: ProgramCalibration;
    "cot-probe"?: ProgramCalibration;
    rebase?: ProgramCalibration;
    mcts?: ProgramCalibration;
  };
  /** SC policies per branch cap (key: the cap), each with its branches per round in settings. */
  scByCap?: Record<string, ProgramCalibration & { baselineLength?: PolicySpec }>;
  /**
   * reasoning_effort on a plain request (ts/programs/effort.ts): per level, the probe settings of one thinking
   * stream (`interval`: thought tokens between probes, 0 = no probing; `probeWindow`, optional `probeAgree` and
   * `probeMaxTokens`) and the exit policy over (probe certaindex, probes made); `validation` against the thought
   * run to its end. `programs` optionally names the policy a program runs under at this level (key: program kind).
   */
  effort?: Partial<Record<"low" | "medium" | "high", EffortCalibration>>;
  /** The command and time that wrote `effort` (it may be recalibrated apart from the programs). */
  effortCommand?: string;
}

export interface EffortCalibration extends ProgramCalibration {
  programs?: Record<string, PolicySpec>;
}

export interface LoadedCalibration {
  file: string;
  calibration: CalibrationFile;
  /** The weights differ from those it was calibrated on. */
  stale: boolean;
}

/** SHA-256 (hex) of a model folder's weights (every *.safetensors file, in name order). */
export function modelFingerprint(modelDir: string): string {
  const h = createHash("sha256");
  const files = readdirSync(modelDir)
    .filter((f) => f.endsWith(".safetensors"))
    .sort();
  if (files.length === 0) throw new Error(`${modelDir}: no .safetensors file to fingerprint`);
  for (const f of files) h.update(readFileSync(join(modelDir, f)));
  return h.digest("hex");
}

function isBundled(modelDir: string, bundledDir: string | undefined): boolean {
  return bundledDir !== undefined && resolve(modelDir) === resolve(bundledDir);
}

/** Where the calibration of `modelDir` is read from (first that exists), or null. */
export function findCalibrationFile(modelDir: string, bundledDir?: string): string | null {
  const own = join(modelDir, MODEL_CALIBRATION_NAME);
  if (existsSync(own)) return own;
  if (isBundled(modelDir, bundledDir) && existsSync(BUNDLED_CALIBRATION_FILE)) return BUNDLED_CALIBRATION_FILE;
  return null;
}

/** Where `--calibrate` writes for `modelDir`: calibration/tiny-reasoner.json for the bundled model, else next to
 * the model. */
export function defaultCalibrationOut(modelDir: string, bundledDir?: string): string {
  return isBundled(modelDir, bundledDir) ? BUNDLED_CALIBRATION_FILE : join(modelDir, MODEL_CALIBRATION_NAME);
}

const POLICY_KINDS: readonly string[] = ["threshold", "curve", "baseline-even", "baseline-length"];

function checkOutcome(o: unknown, where: string): CalibrationOutcome {
  const x = o as Record<string, unknown> | null;
  if (x === null || typeof x !== "object") throw new Error(`${where}: missing validation outcome`);
  for (const k of ["n", "accuracy", "meanTokens", "baselineAccuracy", "baselineMeanTokens", "tokenSavings"]) {
    if (typeof x[k] !== "number" || !Number.isFinite(x[k]))
      throw new Error(`${where}.validation.${k} must be a number`);
  }
  return x as unknown as CalibrationOutcome;
}

function checkProgram(p: unknown, where: string): ProgramCalibration {
  const x = p as Record<string, unknown> | null;
  if (x === null || typeof x !== "object") throw new Error(`${where} must be an object`);
  const policy = x.policy as PolicySpec | undefined;
  if (policy === undefined || typeof policy !== "object" || typeof (policy as { kind?: unknown }).kind !== "string")
    throw new Error(`${where}.policy is missing`);
  if (!POLICY_KINDS.includes(policy.kind)) throw new Error(`${where}.policy.kind "${policy.kind}" is unknown`);
  try {
    validatePolicy(policy);
  } catch (e) {
    throw new Error(`${where}.policy: ${(e as Error).message}`);
  }
  const settings = x.settings as Record<string, unknown> | undefined;
  if (settings === undefined || typeof settings !== "object" || settings === null)
    throw new Error(`${where}.settings is missing`);
  for (const [k, v] of Object.entries(settings))
    if (typeof v !== "number" || !Number.isFinite(v)) throw new Error(`${where}.settings.${k} must be a number`);
  checkOutcome(x.validation, where);
  return x as unknown as ProgramCalibration;
}

function checkEffort(e: unknown, where: string): void {
  if (e === null || typeof e !== "object" || Array.isArray(e)) throw new Error(`${where} must be an object`);
  for (const [level, v] of Object.entries(e as Record<string, unknown>)) {
    if (!["low", "medium", "high"].includes(level)) throw new Error(`${where}.${level} is not an effort level`);
    const c = checkProgram(v, `${where}.${level}`) as EffortCalibration;
    const s = c.settings;
    if (!Number.isInteger(s.interval) || s.interval < 0)
      throw new Error(`${where}.${level}.settings.interval must be an integer ≥ 0`);
    for (const k of ["probeWindow", "probeAgree", "probeMaxTokens"])
      if (s[k] !== undefined && !(Number.isInteger(s[k]) && s[k] >= 1))
        throw new Error(`${where}.${level}.settings.${k} must be an integer ≥ 1`);
    if (s.probeAgree !== undefined && s.probeAgree > (s.probeWindow ?? 3))
      throw new Error(`${where}.${level}.settings.probeAgree must be at most probeWindow`);
    if (c.programs !== undefined) {
      if (c.programs === null || typeof c.programs !== "object")
        throw new Error(`${where}.${level}.programs must be an object`);
      for (const [k, p] of Object.entries(c.programs)) {
        try {
          if (!POLICY_KINDS.includes(p?.kind)) throw new Error(`kind "${String(p?.kind)}" is unknown`);
          validatePolicy(p);
        } catch (err) {
          throw new Error(`${where}.${level}.programs.${k}: ${(err as Error).message}`);
        }
      }
    }
  }
}

/** Parses and checks a calibration file's content (throws an Error naming the file and the field). */
export function parseCalibration(text: string, file = "calibration"): CalibrationFile {
  let j: Record<string, unknown>;
  try {
    j = JSON.parse(text) as Record<string, unknown>;
  } catch (e) {
    throw new Error(`${file}: not JSON (${(e as Error).message})`);
  }
  if (j === null || typeof j !== "object" || j.format !== CALIBRATION_FORMAT)
    throw new Error(`${file}: not a certaindex calibration (format must be "${CALIBRATION_FORMAT}")`);
  if (j.version !== 1)
    throw new Error(`${file}: calibration version ${String(j.version)} is not supported (expected 1)`);
  const model = j.model as { sha256?: unknown } | undefined;
  if (!model || typeof model.sha256 !== "string") throw new Error(`${file}: model.sha256 is missing`);
  const programs = j.programs as Record<string, unknown> | undefined;
  if (!programs || typeof programs !== "object") throw new Error(`${file}: programs is missing`);
  for (const [k, v] of Object.entries(programs)) {
    if (!["sc", "cot-probe", "rebase", "mcts"].includes(k)) throw new Error(`${file}: programs.${k} is not a program`);
    checkProgram(v, `${file}: programs.${k}`);
  }
  const byCap = j.scByCap as Record<string, unknown> | undefined;
  if (byCap !== undefined) for (const [k, v] of Object.entries(byCap)) checkProgram(v, `${file}: scByCap.${k}`);
  if (j.effort !== undefined) checkEffort(j.effort, `${file}: effort`);
  return j as unknown as CalibrationFile;
}

/** Reads the calibration for `modelDir` (explicit `file`, else found by findCalibrationFile); null when none. */
export function loadCalibration(
  modelDir: string,
  opts: { file?: string; bundledDir?: string } = {},
): LoadedCalibration | null {
  const file = opts.file ?? findCalibrationFile(modelDir, opts.bundledDir);
  if (file === null) return null;
  if (!existsSync(file)) throw new Error(`calibration file ${file} not found`);
  const calibration = parseCalibration(readFileSync(file, "utf8"), file);
  return { file, calibration, stale: calibration.model.sha256 !== modelFingerprint(modelDir) };
}

/** The calibrated policy and settings for one program at a knob cap (SC: the per-cap entry when there is one). */
export function programCalibration(
  c: CalibrationFile,
  kind: "sc" | "cot-probe" | "rebase" | "mcts",
  cap?: number,
): ProgramCalibration | undefined {
  if (kind === "sc" && cap !== undefined) {
    const entry = c.scByCap?.[String(cap)];
    if (entry) return entry;
    const main = c.programs.sc;
    return main && main.settings.maxBranches === cap ? main : undefined;
  }
  const p = c.programs[kind];
  if (p === undefined || cap === undefined) return p;
  const capKey = kind === "rebase" ? "width" : kind === "mcts" ? "maxSimulations" : undefined;
  return capKey === undefined || p.settings[capKey] === cap ? p : undefined;
}
