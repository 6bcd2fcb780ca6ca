// The schemas of what users hand the engine: engine options, generate requests and fork options. Shape and range
// rules that hold for any model live here; rules that need the model (token ids < vocab size, maxTokens within the
// context left) are checked where the model is known (request.ts resolveParams). The OpenAI-compatible server
// maps its wire fields onto these.
import { z } from "zod";
import { field, isBool, isFiniteNumber, isInt, strictObject } from "./validate.js";

const isTokenIds = (v: unknown): boolean => Array.isArray(v) && v.every((id) => Number.isInteger(id));
const isText = (v: unknown): boolean => typeof v === "string";

const isRecord = (v: unknown): boolean => v !== null && typeof v === "object" && !Array.isArray(v);

/** The fields each structured-output type takes besides `type` (ts/grammar/types.ts StructuredFormat). */
const STRUCTURED_FIELDS: Record<string, Record<string, (v: unknown) => boolean>> = {
  json_schema: { schema: (v) => isRecord(v) || typeof v === "boolean" || isText(v) },
  json_object: {},
  regex: { pattern: (v) => isText(v) && (v as string).length > 0 },
  choice: { choices: (v) => Array.isArray(v) && v.length > 0 && v.every((c) => isText(c) && c.length > 0) },
  grammar: { grammar: (v) => isText(v) && (v as string).length > 0 },
  structural_tag: { structuralTag: isRecord },
};

function isStructured(v: unknown): boolean {
  if (!isRecord(v)) return false;
  const o = v as Record<string, unknown>;
  const fields = typeof o.type === "string" ? STRUCTURED_FIELDS[o.type] : undefined;
  if (fields === undefined) return false;
  for (const [k, ok] of Object.entries(fields)) if (!ok(o[k])) return false;
  for (const k of Object.keys(o))
    if (k !== "type" && k !== "thought" && k !== "answerTokens" && !(k in fields)) return false;
  if (o.thought !== undefined && o.thought !== "free" && o.thought !== "none") return false;
  return o.answerTokens === undefined || isInt(1)(o.answerTokens);
}

export const samplingShape = {
  temperature: field<number>(
    "expected a finite number >= 0 (0 = greedy)",
    (v) => isFiniteNumber(v) && (v as number) >= 0,
  ).optional(),
  topK: field<number>("expected an integer >= 0 (0 = off)", isInt(0)).optional(),
  topP: field<number>(
    "expected a number in (0, 1] (1 = off)",
    (v) => typeof v === "number" && v > 0 && v <= 1,
  ).optional(),
  seed: field<number>(`expected an integer in [0, ${Number.MAX_SAFE_INTEGER}]`, isInt(0)).optional(),
  maxTokens: field<number>("expected an integer >= 1", isInt(1)).optional(),
  stop: field<string | string[]>(
    "expected a non-empty string or an array of non-empty strings",
    (v) => (isText(v) && (v as string).length > 0) || (Array.isArray(v) && v.every((s) => isText(s) && s.length > 0)),
  ).optional(),
  stopTokenIds: field<number[]>("expected an array of integer token ids", isTokenIds).optional(),
  ignoreEos: field<boolean>("expected true or false", isBool).optional(),
  logprobs: field<number>("expected an integer in [0, 64]", isInt(0, 64)).optional(),
  tokenLogprobs: field<number[]>("expected an array of integer token ids", isTokenIds).optional(),
  captureHidden: strictObject(
    { layer: field<number>("expected an integer layer index >= 0", isInt(0)) },
    "expected { layer: number }",
  ).optional(),
  probe: strictObject(
    {
      layer: field<number | number[]>(
        "expected a block index >= -1 (-1 = the last block's output, the final norm's input) or a non-empty array of them",
        (v) => isInt(-1)(v) || (Array.isArray(v) && v.length > 0 && v.every((l) => isInt(-1)(l))),
      ),
      every: field<number>("expected an integer >= 1 (generated tokens between captures)", isInt(1)),
    },
    "expected { layer: number, every: number } (null: off)",
  )
    .nullable()
    .optional(),
  confidence: strictObject(
    {
      window: field<number>("expected an integer >= 1 (tokens per group)", isInt(1)),
      topK: field<number>("expected an integer in [1, 64] (the paper uses 20)", isInt(1, 64)).optional(),
      threshold: field<number>(
        "expected a finite number (stop when the group confidence falls below it)",
        isFiniteNumber,
      ).optional(),
      tail: field<number>("expected an integer >= 1 (tokens of the tail confidence)", isInt(1)).optional(),
    },
    "expected { window: number, topK?: number, threshold?: number, tail?: number } (null: off)",
  )
    .nullable()
    .optional(),
  deterministic: field<boolean>("expected true or false", isBool).optional(),
  structured: field<unknown>(
    'expected null or one of { type: "json_schema", schema }, { type: "json_object" }, { type: "regex", pattern }, ' +
      '{ type: "choice", choices: string[] }, { type: "grammar", grammar: EBNF text }, { type: "structural_tag", ' +
      'structuralTag }, each with optional thought ("free" | "none") and answerTokens (integer >= 1)',
    isStructured,
  )
    .nullable()
    .optional(),
  eagerDeltas: field<boolean>("expected true or false", isBool).optional(),
  metadata: strictObject(
    {
      programId: field<string>("expected a string", isText).optional(),
      programArrivalMs: field<number>(
        "expected a finite number >= 0",
        (v) => isFiniteNumber(v) && (v as number) >= 0,
      ).optional(),
      priority: field<number>("expected a finite number (higher runs first)", isFiniteNumber).optional(),
      remainingKnob: field<number>(
        "expected a finite number >= 0",
        (v) => isFiniteNumber(v) && (v as number) >= 0,
      ).optional(),
      meanTokensPerRound: field<number>(
        "expected a finite number >= 0",
        (v) => isFiniteNumber(v) && (v as number) >= 0,
      ).optional(),
      predictedTokens: field<number>(
        "expected a finite number >= 0",
        (v) => isFiniteNumber(v) && (v as number) >= 0,
      ).optional(),
    },
    "expected an object of scheduling metadata",
  ).optional(),
  signal: field<AbortSignal>("expected an AbortSignal", (v) => v instanceof AbortSignal).optional(),
};

export const MAX_SAMPLES = 1024;

const promptField = field<string | number[]>(
  "expected text or an array of integer token ids",
  (v) => isText(v) || isTokenIds(v),
);

export const generateRequestSchema = strictObject(
  {
    ...samplingShape,
    prompt: promptField,
    model: field<string>("expected the name of a loaded model", isText).optional(),
    n: field<number>(`expected an integer in [1, ${MAX_SAMPLES}]`, isInt(1, MAX_SAMPLES)).optional(),
    addSpecialTokens: field<boolean>("expected true or false", isBool).optional(),
  },
  'expected a request object such as { prompt: "...", maxTokens: 64 }',
);

export const forkOptionsSchema = strictObject(
  {
    ...samplingShape,
    length: field<number>("expected an integer >= 1 (tokens of the parent to keep)", isInt(1)).optional(),
    append: promptField.optional(),
    sample: field<number>("expected an integer >= 0 (which sample of the parent)", isInt(0)).optional(),
  },
  'expected fork options such as { append: "...", maxTokens: 16 }',
);

const positiveInt = (what: string) => field<number>(`expected an integer >= 1 (${what})`, isInt(1));

/**
 * The engine options whose rules hold without the engine's names. `models`, `kernelMode` and `schedulingPolicy` are
 * checked by the engine's own schema (ts/engine/options.ts), which knows the kernel modes and scheduling policies.
 */
export const engineOptionsShape = {
  models: z.any(),
  kernelMode: z.any().optional(),
  schedulingPolicy: z.any().optional(),
  maxBatchTokens: positiveInt("tokens per step").optional(),
  maxBatchSeqs: positiveInt("sequences per step").optional(),
  agingTokensPerSecond: field<number>(
    "expected a finite number >= 0",
    (v) => isFiniteNumber(v) && (v as number) >= 0,
  ).optional(),
  verifyWindow: field<number>("expected an integer >= 2 (the last committed token + candidates)", isInt(2)).optional(),
  verifyGroup: positiveInt("verify rows per pass").optional(),
  fuseVerify: field<boolean>("expected true or false", isBool).optional(),
  preemption: field<"recompute" | "swap">(
    'expected "recompute" or "swap"',
    (v) => v === "recompute" || v === "swap",
  ).optional(),
};
