// --quantize / --quantize-group: the one definition of the flags (help text and the check of their values) shared by
// every command that loads a model (run, serve, generate, eval, devices, probe train) and the benches
// (scripts/bench/*.ts). Values are checked here, before anything is loaded, so a wrong flag fails at once naming the
// flag; loadModel checks the same values again (and that the group divides the model's widths) for library callers.
import { Option } from "commander";

export type QuantizeKind = "int8" | "int4" | "fp8";

/** The int4 group sizes loadModel takes (the native kernels' multiples of 32). */
export const QUANTIZE_GROUPS = [32, 64, 128] as const;

export const QUANTIZE_HELP =
  "quantize the linear weights at load: int8 (per output row), int4 (symmetric groups of --quantize-group inputs, 32 by default: Q4_0's scheme) or fp8 (e4m3, a scale per row and 128 inputs); default: as stored";
export const QUANTIZE_GROUP_HELP = `--quantize int4: inputs per group, ${QUANTIZE_GROUPS.join(", ")} (default 32)`;

/** --quantize and --quantize-group as commander options: `.addOption(quantizeOption()).addOption(quantizeGroupOption())`. */
export const quantizeOption = (): Option => new Option("--quantize <int8|int4|fp8>", QUANTIZE_HELP);
export const quantizeGroupOption = (): Option => new Option("--quantize-group <n>", QUANTIZE_GROUP_HELP);

/** The same flags as node:util parseArgs options (the benches). */
export const QUANTIZE_PARSE_ARGS = {
  quantize: { type: "string" },
  "quantize-group": { type: "string" },
} as const;

/** loadModel's quantize options from the flags' raw strings; a wrong value throws naming the flag. */
export function quantizeOptions(
  quantize: string | undefined,
  group: string | undefined,
): { quantize?: QuantizeKind; quantizeGroupSize?: number } {
  if (quantize !== undefined && quantize !== "int8" && quantize !== "int4" && quantize !== "fp8")
    throw new Error(`--quantize must be int8, int4 or fp8, got '${quantize}'`);
  if (group === undefined) return quantize === undefined ? {} : { quantize };
  if (quantize !== "int4")
    throw new Error(`--quantize-group is for --quantize int4 only (int8 has one scale per output row)`);
  const g = Number(group);
  if (!(QUANTIZE_GROUPS as readonly number[]).includes(g))
    throw new Error(`--quantize-group must be one of ${QUANTIZE_GROUPS.join(", ")}, got '${group}'`);
  return { quantize, quantizeGroupSize: g };
}

/** A description of the options for logs: "int8", "int4 (groups of 64)" or "as stored". */
export function describeQuantize(q: { quantize?: QuantizeKind; quantizeGroupSize?: number }): string {
  if (q.quantize === undefined) return "as stored";
  return q.quantize === "int4" ? `int4 (groups of ${q.quantizeGroupSize ?? 32})` : q.quantize;
}
