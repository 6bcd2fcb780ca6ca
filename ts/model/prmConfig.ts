// A process reward model's scoring convention, read from `prm.json` beside its config.json (the project's own
// file; HF PRMs such as Math-Shepherd document theirs in a model card). It says how a step is laid out for the
// model and which tokens mean good / bad, so `--prm DIR` needs no further flags.
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { ModelFormatError } from "../errors/index.js";

export const PRM_FILE = "prm.json";

export interface PrmConfig {
  /** "tagged-steps": prefix + question + "\n" + each step followed by stepTag, one a line (Math-Shepherd). */
  format: "tagged-steps";
  /** Text before the question (e.g. "<|bos|>"). */
  prefix: string;
  /** One token after each step, where the model predicts the step's label. */
  stepTag: string;
  goodTokens: string[];
  badTokens: string[];
}

/** The PRM convention of a model folder, or null when it has no prm.json. */
export function readPrmConfig(dir: string): PrmConfig | null {
  const path = join(dir, PRM_FILE);
  if (!existsSync(path)) return null;
  let raw: unknown;
  try {
    raw = JSON.parse(readFileSync(path, "utf8"));
  } catch (e) {
    throw new ModelFormatError(
      `${path} is not valid JSON (${(e as Error).message}); restore the file or delete it and pass --prm-good / --prm-bad / --prm-tag`,
      {
        cause: e,
      },
    );
  }
  const o = raw as Partial<PrmConfig>;
  const strings = (v: unknown) =>
    Array.isArray(v) && v.length > 0 && v.every((t) => typeof t === "string" && t.length > 0);
  const bad = (field: string, expected: string) => new ModelFormatError(`${path}: ${field} must be ${expected}`);
  if (o.format !== "tagged-steps") throw bad("format", '"tagged-steps"');
  if (typeof o.prefix !== "string") throw bad("prefix", "a string (may be empty)");
  if (typeof o.stepTag !== "string" || o.stepTag.length === 0) throw bad("stepTag", "a non-empty string (one token)");
  if (!strings(o.goodTokens)) throw bad("goodTokens", "a non-empty array of token strings");
  if (!strings(o.badTokens)) throw bad("badTokens", "a non-empty array of token strings");
  return { format: o.format, prefix: o.prefix, stepTag: o.stepTag, goodTokens: o.goodTokens!, badTokens: o.badTokens! };
}
