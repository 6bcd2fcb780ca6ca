// Prompt files for the determinism CLI: one prompt per line, or JSONL objects with `prompt` (text) or
// `promptIds` (token ids). Blank lines are skipped; a malformed JSONL line is an Error naming the line.
// A JSONL line may name a reasoning program (`"program": "sc"`, a ProgramKind, with `"programOptions"`): the prompt
// is then the program's question, run as a program (runner.ts), and its output the program's replayable report.
import { parseProgramKind, type ProgramKind } from "../programs/registry.js";

export type PromptSpec = ({ text: string; promptIds?: undefined } | { promptIds: number[]; text?: undefined }) & {
  program?: ProgramPrompt;
};

/** A program prompt: which program, and the knobs a line may set (the rest: the CLI's --max-tokens, --temperature,
 *  --seed, and each program's defaults). */
export interface ProgramPrompt {
  kind: ProgramKind;
  options: ProgramPromptOptions;
}

export interface ProgramPromptOptions {
  /** The program's cap (branches, width, simulations; BuildProgramOptions.cap). */
  cap?: number;
  /** cot-probe: tokens between probes. */
  interval?: number;
  /** Tokens per branch (default: --max-tokens). */
  maxTokens?: number;
  /** short-m@k: m. */
  shortM?: number;
  /** beam / dvts: continuations per kept path. */
  beamWidth?: number;
  /** deepconf: "low" or "high". */
  variant?: "low" | "high";
}

const PROGRAM_INTS = ["cap", "interval", "maxTokens", "shortM", "beamWidth"] as const;

function programOf(o: { program?: unknown; programOptions?: unknown }, where: string): ProgramPrompt | undefined {
  if (o.program === undefined) {
    if (o.programOptions !== undefined) throw new Error(`${where}: programOptions without "program"`);
    return undefined;
  }
  let kind: ProgramKind;
  try {
    kind = parseProgramKind(String(o.program));
  } catch (e) {
    throw new Error(`${where}: ${(e as Error).message}`);
  }
  const raw = o.programOptions ?? {};
  if (raw === null || typeof raw !== "object" || Array.isArray(raw))
    throw new Error(`${where}: programOptions must be an object of program knobs`);
  const options: ProgramPromptOptions = {};
  for (const [k, v] of Object.entries(raw)) {
    if ((PROGRAM_INTS as readonly string[]).includes(k)) {
      if (!Number.isInteger(v) || (v as number) < 1)
        throw new Error(`${where}: programOptions.${k} is ${JSON.stringify(v)}; expected an integer >= 1`);
      options[k as (typeof PROGRAM_INTS)[number]] = v as number;
    } else if (k === "variant") {
      if (v !== "low" && v !== "high")
        throw new Error(`${where}: programOptions.variant is ${JSON.stringify(v)}; expected "low" or "high"`);
      options.variant = v;
    } else {
      throw new Error(`${where}: programOptions.${k} is unknown; expected ${[...PROGRAM_INTS, "variant"].join(", ")}`);
    }
  }
  return { kind, options };
}

export function parsePromptsFile(content: string, fileName = "prompts file"): PromptSpec[] {
  const lines = content.split(/\r?\n/);
  const nonEmpty = lines.map((l, i) => ({ l, i })).filter(({ l }) => l.trim() !== "");
  if (nonEmpty.length === 0)
    throw new Error(`${fileName} has no prompts: write one prompt per line, or JSONL with "prompt" or "promptIds"`);
  const jsonl = nonEmpty.every(({ l }) => l.trimStart().startsWith("{"));
  if (!jsonl) {
    // A program line in a file of text lines would run as its JSON text: refused, naming the line.
    const program = nonEmpty.find(({ l }) => l.trimStart().startsWith("{") && /"program"\s*:/.test(l));
    if (program !== undefined)
      throw new Error(
        `${fileName} line ${program.i + 1} names a program, but other lines are plain text; write every line as JSON ({"prompt": ...})`,
      );
    return nonEmpty.map(({ l }) => ({ text: l }));
  }
  return nonEmpty.map(({ l, i }) => {
    const where = `${fileName} line ${i + 1}`;
    let obj: unknown;
    try {
      obj = JSON.parse(l);
    } catch (e) {
      throw new Error(`${where}: invalid JSON (${(e as Error).message})`);
    }
    const o = obj as { prompt?: unknown; promptIds?: unknown; program?: unknown; programOptions?: unknown };
    const program = programOf(o, where);
    const withProgram = <T extends object>(spec: T): T & { program?: ProgramPrompt } =>
      program === undefined ? spec : { ...spec, program };
    if (typeof o.prompt === "string" && o.prompt !== "") return withProgram({ text: o.prompt });
    if (
      Array.isArray(o.promptIds) &&
      o.promptIds.length > 0 &&
      o.promptIds.every((t) => Number.isInteger(t) && t >= 0)
    ) {
      return withProgram({ promptIds: o.promptIds as number[] });
    }
    throw new Error(`${where}: expected {"prompt": "non-empty text"} or {"promptIds": [non-negative integers]}`);
  });
}
