// Output hashes and golden files: `--record FILE` writes them, `--check FILE` compares a new run against them.
// A golden file carries its provenance (model hash, device, kernel configuration; provenance.ts) and a check
// refuses to compare across a different model, and across a different device or kernel configuration unless told to.
import { createHash } from "node:crypto";
import { compareProvenance, type Provenance } from "./provenance.js";

/** SHA-256 of the token ids as little-endian int32: equal hashes ⇔ byte-identical outputs. */
export function hashTokens(tokens: readonly number[]): string {
  const buf = Buffer.alloc(tokens.length * 4);
  tokens.forEach((t, i) => buf.writeInt32LE(t, i * 4));
  return createHash("sha256").update(buf).digest("hex");
}

/** First index where the two sequences differ (including one being a prefix of the other), or null if equal. */
export function firstDivergence(a: readonly number[], b: readonly number[]): number | null {
  const n = Math.min(a.length, b.length);
  for (let i = 0; i < n; i++) if (a[i] !== b[i]) return i;
  return a.length === b.length ? null : n;
}

/** Version 3: provenance with the knobs in effect (listDevices().knobs), the KV dtype and page size, and `verify`. */
export const GOLDEN_VERSION = 3;

export interface GoldenFile {
  version: typeof GOLDEN_VERSION;
  model: string;
  provenance: Provenance;
  params: Record<string, unknown>;
  outputs: { index: number; hash: string; tokens: number[] }[];
}

export function makeGolden(
  model: string,
  provenance: Provenance,
  params: Record<string, unknown>,
  outputs: readonly (readonly number[])[],
): GoldenFile {
  return {
    version: GOLDEN_VERSION,
    model,
    provenance,
    params,
    outputs: outputs.map((t, index) => ({ index, hash: hashTokens(t), tokens: [...t] })),
  };
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
    g.version !== GOLDEN_VERSION ||
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
  outputs: readonly (readonly number[])[],
  fileName: string,
  options: CheckGoldenOptions = {},
): GoldenMismatch[] {
  checkProvenance(g, provenance, params, fileName, options);
  if (g.outputs.length !== outputs.length)
    throw new Error(`${fileName} holds ${g.outputs.length} outputs but the prompts file has ${outputs.length} prompts`);
  const bad: GoldenMismatch[] = [];
  outputs.forEach((t, i) => {
    if (hashTokens(t) !== g.outputs[i].hash)
      bad.push({ index: i, firstDivergence: firstDivergence(g.outputs[i].tokens, t) });
  });
  return bad;
}
