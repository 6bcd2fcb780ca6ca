// Output hashes and golden files: `--record FILE` writes them, `--check FILE` compares a new run against them.
import { createHash } from "node:crypto";

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

export interface GoldenFile {
  version: 1;
  model: string;
  params: Record<string, unknown>;
  outputs: { index: number; hash: string; tokens: number[] }[];
}

export function makeGolden(model: string, params: Record<string, unknown>, outputs: readonly (readonly number[])[]): GoldenFile {
  return { version: 1, model, params, outputs: outputs.map((t, index) => ({ index, hash: hashTokens(t), tokens: [...t] })) };
}

export function parseGolden(text: string, fileName: string): GoldenFile {
  let g: GoldenFile;
  try {
    g = JSON.parse(text) as GoldenFile;
  } catch (e) {
    throw new Error(`${fileName}: not a golden file (${(e as Error).message}); record one with --record`);
  }
  if (g.version !== 1 || !Array.isArray(g.outputs)) throw new Error(`${fileName}: unsupported golden file (version ${String(g.version)}); re-record it with --record`);
  return g;
}

export interface GoldenMismatch {
  index: number;
  firstDivergence: number | null;
}

/** Compares outputs with a golden file; params must match too, else the comparison is meaningless. */
export function checkGolden(g: GoldenFile, params: Record<string, unknown>, outputs: readonly (readonly number[])[], fileName: string): GoldenMismatch[] {
  if (JSON.stringify(g.params) !== JSON.stringify(params)) {
    throw new Error(`${fileName} was recorded with ${JSON.stringify(g.params)} but this run uses ${JSON.stringify(params)}; use the same flags or re-record`);
  }
  if (g.outputs.length !== outputs.length) throw new Error(`${fileName} holds ${g.outputs.length} outputs but the prompts file has ${outputs.length} prompts`);
  const bad: GoldenMismatch[] = [];
  outputs.forEach((t, i) => {
    if (hashTokens(t) !== g.outputs[i].hash) bad.push({ index: i, firstDivergence: firstDivergence(g.outputs[i].tokens, t) });
  });
  return bad;
}
