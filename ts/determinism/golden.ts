// Output hashes and golden files: `--record FILE` writes them, `--check FILE` compares a new run against them.
// A golden file carries its provenance (model hash, device, kernel configuration; provenance.ts) and a check
// refuses to compare across a different model, and across a different device or kernel configuration unless told to.
// An output is a prompt's token ids, or for a program prompt (prompts.ts) the program's replayable report as a JSON
// string (runner.ts programReplay); a file with program outputs is version 4, one without is written as version 3
// (byte for byte what earlier builds wrote, and read by them).
import { createHash } from "node:crypto";
import { compareProvenance, type Provenance } from "./provenance.js";

/** SHA-256 of the token ids as little-endian int32: equal hashes ⇔ byte-identical outputs. */
export function hashTokens(tokens: readonly number[]): string {
  const buf = Buffer.alloc(tokens.length * 4);
  tokens.forEach((t, i) => buf.writeInt32LE(t, i * 4));
  return createHash("sha256").update(buf).digest("hex");
}

/** A run's output: token ids, or a program's replayable report (a JSON string). */
export type RunOutput = readonly number[] | string;

/** SHA-256 of an output: hashTokens of token ids, of a program's report its UTF-8 bytes. */
export function hashOutput(output: RunOutput): string {
  if (typeof output !== "string") return hashTokens(output);
  return createHash("sha256").update(output, "utf8").digest("hex");
}

/**
 * First index where the two sequences differ (including one being a prefix of the other), or null if equal: a token
 * position, or for program reports a character offset.
 */
export function firstDivergence<T extends number | string>(a: ArrayLike<T>, b: ArrayLike<T>): number | null {
  const n = Math.min(a.length, b.length);
  for (let i = 0; i < n; i++) if (a[i] !== b[i]) return i;
  return a.length === b.length ? null : n;
}

/** Version 3: provenance with the knobs in effect (listDevices().knobs), the KV dtype and page size, and `verify`.
 *  Version 4: the same, with program outputs (`replay`) among the outputs. */
export const GOLDEN_VERSION = 4;
/** The version of a golden file without program outputs (what builds before program prompts wrote and read). */
export const GOLDEN_VERSION_TOKENS = 3;

/** One prompt's recorded output: its token ids, or a program prompt's report (with hash = hashOutput of it). */
export type GoldenOutput =
  { index: number; hash: string; tokens: number[] } | { index: number; hash: string; replay: string };

export interface GoldenFile {
  version: typeof GOLDEN_VERSION | typeof GOLDEN_VERSION_TOKENS;
  model: string;
  provenance: Provenance;
  params: Record<string, unknown>;
  outputs: GoldenOutput[];
}

export function makeGolden(
  model: string,
  provenance: Provenance,
  params: Record<string, unknown>,
  outputs: readonly RunOutput[],
): GoldenFile {
  const programs = outputs.some((o) => typeof o === "string");
  return {
    version: programs ? GOLDEN_VERSION : GOLDEN_VERSION_TOKENS,
    model,
    provenance,
    params,
    outputs: outputs.map((o, index) =>
      typeof o === "string"
        ? { index, hash: hashOutput(o), replay: o }
        : { index, hash: hashTokens(o), tokens: [...o] },
    ),
  };
}

/** A recorded output as a RunOutput. */
function recorded(o: GoldenOutput): RunOutput {
  return "replay" in o ? o.replay : o.tokens;
}

export function parseGolden(text: string, fileName: string): GoldenFile {
  let g: GoldenFile;
  try {
    g = JSON.parse(text) as GoldenFile;
  } catch (e) {
    throw new Error(`${fileName}: not a golden file (${(e as Error).message}); record one with --record`);
  }
  if (g === null || typeof g !== "object") throw new Error(`${fileName}: not a golden file; record one with --record`);
  if ((g.version as number) === 1) {
    throw new Error(
      `${fileName} was recorded without the model hash, device and kernel configuration (version 1); re-record it with --record`,
    );
  }
  if ((g.version as number) === 2) {
    throw new Error(
      `${fileName} was recorded without the native knobs in effect, the KV dtype and the verify settings (version 2); re-record it with --record`,
    );
  }
  if (
    (g.version !== GOLDEN_VERSION && g.version !== GOLDEN_VERSION_TOKENS) ||
    !Array.isArray(g.outputs) ||
    typeof g.provenance?.modelHash !== "string" ||
    typeof g.provenance.kernels !== "object"
  ) {
    throw new Error(`${fileName}: unsupported golden file (version ${String(g.version)}); re-record it with --record`);
  }
  return g;
}

export interface GoldenMismatch {
  index: number;
  firstDivergence: number | null;
}

export interface CheckGoldenOptions {
  /** Compare even though the device or kernel configuration differs (never across models). */
  allowDeviceChange?: boolean;
}

/**
 * Throws unless a run with `provenance` and `params` may be compared with `g`: the same model always, the same device
 * and kernel configuration unless allowDeviceChange, the same parameters. Cheap: call it before a long run.
 */
export function checkProvenance(
  g: GoldenFile,
  provenance: Provenance,
  params: Record<string, unknown>,
  fileName: string,
  options: CheckGoldenOptions = {},
): void {
  const diff = compareProvenance(g.provenance, provenance);
  if (diff.model) {
    throw new Error(
      `${fileName} was recorded with another model (weights hash ${g.provenance.modelHash.slice(0, 12)}…, "${g.model}") than this run's ` +
        `(${provenance.modelHash.slice(0, 12)}…); check the model it was recorded with, or re-record`,
    );
  }
  if (diff.what.length > 0 && options.allowDeviceChange !== true) {
    throw new Error(
      `${fileName} was recorded under another device or kernel configuration: ${diff.what.join("; ")}. Outputs may differ in ` +
        `the last bits there; re-record on this configuration, or pass --allow-device-change to compare anyway`,
    );
  }
  if (JSON.stringify(g.params) !== JSON.stringify(params)) {
    throw new Error(
      `${fileName} was recorded with ${JSON.stringify(g.params)} but this run uses ${JSON.stringify(params)}; use the same flags or re-record`,
    );
  }
}

/** Compares outputs with a golden file (after checkProvenance): the outputs whose hash differs from the recording. */
export function checkGolden(
  g: GoldenFile,
  provenance: Provenance,
  params: Record<string, unknown>,
  outputs: readonly RunOutput[],
  fileName: string,
  options: CheckGoldenOptions = {},
): GoldenMismatch[] {
  checkProvenance(g, provenance, params, fileName, options);
  if (g.outputs.length !== outputs.length)
    throw new Error(`${fileName} holds ${g.outputs.length} outputs but the prompts file has ${outputs.length} prompts`);
  const bad: GoldenMismatch[] = [];
  outputs.forEach((t, i) => {
    if (hashOutput(t) === g.outputs[i].hash) return;
    const was = recorded(g.outputs[i]);
    // A program output where a token output was recorded (or the reverse): the prompts file changed there.
    const at = typeof was === typeof t ? firstDivergence<number | string>(was, t) : 0;
    bad.push({ index: i, firstDivergence: at });
  });
  return bad;
}
