// The structured-output fields of a request body as the engine's `structured` option: OpenAI's `response_format`
// (json_schema, json_object, text), vLLM's `structured_outputs` ({json | regex | choice | grammar | json_object |
// structural_tag}, exactly one) and its older `guided_json` / `guided_choice` / `guided_regex` / `guided_grammar`.
// One constraint a request: two at once is a 400 naming both. Routes spread `structuredFields` into their body schema
// and call structuredOf(); /v1/responses' `text.format` (flat: {type, name, schema, strict}) goes through
// textFormatToStructured(); prepareStructured() compiles the format before anything streams, so a schema XGrammar
// cannot use is a 400 naming the field the client wrote.
import { z } from "zod";
import { DeliberateError } from "../errors/index.js";
import type { StructuredOutput } from "../grammar/types.js";
import { field as rule } from "../options/validate.js";
import { ApiError, badRequest, fromDeliberateError } from "./errors.js";
import type { ServeTarget } from "./state.js";

const isObject = (v: unknown): v is Record<string, unknown> => v !== null && typeof v === "object" && !Array.isArray(v);
const isString = (v: unknown): boolean => typeof v === "string";
const isNonEmptyString = (v: unknown): boolean => typeof v === "string" && v.length > 0;
/** A JSON Schema as vLLM takes one: an object, `true`, or its JSON text. */
const isSchema = (v: unknown): boolean => isObject(v) || v === true || isNonEmptyString(v);
// The engine's rule (ts/options/schemas.ts): an empty choice is no answer a grammar can end on.
const isChoices = (v: unknown): boolean => Array.isArray(v) && v.length > 0 && v.every(isNonEmptyString);
const EXPECTED_CHOICES = "expected a non-empty array of non-empty strings";

const RESPONSE_FORMAT_TYPES = ["json_schema", "json_object", "text"];
const EXPECTED_RESPONSE_FORMAT =
  'expected {type: "json_schema", json_schema: {name, schema, strict?}}, {type: "json_object"} or {type: "text"}';

/**
 * The error of a format's strict object: a key it does not name is refused by name (checkBody makes it the param),
 * never dropped: `{type: "json_object", schema}` (another provider's way to send a schema) would otherwise be
 * answered with any JSON object, as OpenAI refuses it.
 */
const formatKeys =
  (expected: string, hint = 'send a schema as {type: "json_schema", json_schema: {name, schema, strict?}}') =>
  (issue: { code?: string; keys?: string[] }): string =>
    issue.code === "unrecognized_keys"
      ? `${issue.keys!.join(", ")} ${issue.keys!.length === 1 ? "is" : "are"} not a field of ${expected} (refused rather than ignored: it could change the answer); ${hint}`
      : `expected ${expected}`;

// The type first, as one rule over the whole field (a bad type is a 400 naming `response_format` and the allowed
// types); then each type's own fields, whose errors name their path (response_format.json_schema.schema). Each
// object is strict: a key it does not name is a 400 naming it.
const responseFormat = rule<{ type: string }>(
  EXPECTED_RESPONSE_FORMAT,
  (v) => isObject(v) && RESPONSE_FORMAT_TYPES.includes(v.type as string),
).pipe(
  z.discriminatedUnion("type", [
    z.strictObject({ type: z.literal("text") }, { error: formatKeys('{type: "text"}') }),
    z.strictObject({ type: z.literal("json_object") }, { error: formatKeys('{type: "json_object"}') }),
    z.strictObject(
      {
        type: z.literal("json_schema"),
        json_schema: z.strictObject(
          {
            name: rule<string>("expected a name for the schema (a string)", isNonEmptyString),
            description: z.string().nullable().optional(),
            schema: rule<Record<string, unknown> | true>(
              "expected a JSON Schema (an object or true)",
              (v) => isObject(v) || v === true,
            ),
            // OpenAI's strict mode: the answer follows the schema exactly. The answer is generated under the schema
            // either way (as vLLM does), so false changes nothing here.
            strict: rule<boolean | null>(
              "expected true or false",
              (v) => v === null || typeof v === "boolean",
            ).optional(),
          },
          { error: formatKeys("{name, description?, schema, strict?}", "send only these") },
        ),
      },
      { error: formatKeys('{type: "json_schema", json_schema}') },
    ),
  ]),
);

const STRUCTURED_OUTPUTS_KINDS = ["json", "regex", "choice", "grammar", "json_object", "structural_tag"] as const;

const structuredOutputs = z.strictObject(
  {
    json: rule<Record<string, unknown> | true | string>(
      "expected a JSON Schema (an object, true, or its JSON text)",
      isSchema,
    ).optional(),
    regex: rule<string>("expected a regular expression (a string)", isNonEmptyString).optional(),
    choice: rule<string[]>(EXPECTED_CHOICES, isChoices).optional(),
    grammar: rule<string>("expected an EBNF grammar (a string)", isNonEmptyString).optional(),
    json_object: rule<boolean>("expected true or false", (v) => typeof v === "boolean").optional(),
    structural_tag: rule<Record<string, unknown> | string>(
      "expected an XGrammar structural tag (an object or its JSON text)",
      (v) => isObject(v) || isNonEmptyString(v),
    ).optional(),
  },
  {
    error: (issue) =>
      issue.code === "unrecognized_keys"
        ? `expected exactly one of ${STRUCTURED_OUTPUTS_KINDS.join(", ")} (${issue.keys.join(", ")} not supported by this server)`
        : `expected an object with exactly one of ${STRUCTURED_OUTPUTS_KINDS.join(", ")}`,
  },
);

/** The body fields, spread into a route's schema (chat and completions take them all, as vLLM's do). */
export const structuredFields = {
  response_format: responseFormat.nullable().optional(),
  structured_outputs: structuredOutputs.nullable().optional(),
  guided_json: rule<Record<string, unknown> | true | string | null>(
    "expected a JSON Schema (an object, true, or its JSON text)",
    (v) => v === null || isSchema(v),
  ).optional(),
  guided_choice: rule<string[] | null>(EXPECTED_CHOICES, (v) => v === null || isChoices(v)).optional(),
  guided_regex: rule<string | null>(
    "expected a regular expression (a string)",
    (v) => v === null || isNonEmptyString(v),
  ).optional(),
  guided_grammar: rule<string | null>(
    "expected an EBNF grammar (a string)",
    (v) => v === null || isNonEmptyString(v),
  ).optional(),
  // vLLM's whitespace knob changes the answer's bytes; XGrammar's JSON allows any whitespace, so only null is served.
  guided_whitespace_pattern: rule<null>(
    "expected null (a whitespace pattern is not supported by this server)",
    (v) => v === null,
  ).optional(),
  // Which grammar engine: XGrammar is the one here, so the name changes nothing.
  guided_decoding_backend: rule<string | null>("expected a string", (v) => v === null || isString(v)).optional(),
};

const structuredSchema = z.object(structuredFields);
export type StructuredBody = z.output<typeof structuredSchema>;

/** A request's constraint and the wire field that asked for it (the `param` of its errors). */
export interface StructuredRequest {
  structured: StructuredOutput;
  param: string;
}

/** The schema of a json_schema format as the engine takes it: its JSON text parsed, so a bad one names the field. */
function schemaOf(v: Record<string, unknown> | true | string, param: string): Record<string, unknown> | boolean {
  if (typeof v !== "string") return v;
  try {
    const parsed = JSON.parse(v) as unknown;
    if (isObject(parsed) || typeof parsed === "boolean") return parsed;
  } catch {
    // the 400 below
  }
  throw badRequest(`${param} is not a JSON Schema: expected an object, true, or its JSON text`, param);
}

/** OpenAI's chat `response_format` as a format (null for text). */
export function responseFormatToStructured(
  rf: NonNullable<StructuredBody["response_format"]>,
): StructuredOutput | null {
  switch (rf.type) {
    case "text":
      return null;
    case "json_object":
      return { type: "json_object" };
    case "json_schema":
      return { type: "json_schema", schema: rf.json_schema.schema };
    default:
      return rf satisfies never;
  }
}

/** The keys of a Responses API json_schema format (OpenAI's ResponseFormatTextJSONSchemaConfig). */
const TEXT_FORMAT_SCHEMA_KEYS = ["type", "name", "schema", "description", "strict"];

/**
 * The Responses API's `text.format` (`{type: "text"}`, `{type: "json_object"}`, `{type: "json_schema", name,
 * schema, strict?}`) as a format (null for text); anything else is a 400 naming `param`.
 */
export function textFormatToStructured(format: unknown, param = "text.format"): StructuredOutput | null {
  if (format === null || format === undefined) return null;
  if (!isObject(format) || !RESPONSE_FORMAT_TYPES.includes(format.type as string))
    throw badRequest(
      `${param} is ${JSON.stringify(format)?.slice(0, 80)}; expected {type: "json_schema", name, schema, strict?}, {type: "json_object"} or {type: "text"}`,
      param,
    );
  // As chat's response_format: a key the format does not name is refused by name, never dropped.
  const known = format.type === "json_schema" ? TEXT_FORMAT_SCHEMA_KEYS : ["type"];
  const unknown = Object.keys(format).find((k) => !known.includes(k));
  if (unknown !== undefined)
    throw badRequest(
      `${param}.${unknown} is not a field of a ${format.type} format (refused rather than ignored: it could change the answer); expected ${format.type === "json_schema" ? "{type, name, schema, description?, strict?}" : "{type}"}`,
      `${param}.${unknown}`,
    );
  if (format.strict !== undefined && format.strict !== null && typeof format.strict !== "boolean")
    throw badRequest(
      `${param}.strict is ${JSON.stringify(format.strict)?.slice(0, 80)}; expected true or false`,
      `${param}.strict`,
    );
  if (format.type === "text") return null;
  if (format.type === "json_object") return { type: "json_object" };
  if (!isObject(format.schema) && format.schema !== true)
    throw badRequest(
      `${param}.schema is ${JSON.stringify(format.schema)?.slice(0, 80) ?? "missing"}; expected a JSON Schema (an object or true)`,
      `${param}.schema`,
    );
  return { type: "json_schema", schema: format.schema };
}

/** vLLM's structured_outputs: exactly one kind. */
function structuredOutputsToStructured(so: NonNullable<StructuredBody["structured_outputs"]>): StructuredOutput {
  const given = STRUCTURED_OUTPUTS_KINDS.filter(
    (k) => so[k] !== undefined && so[k] !== null && (k !== "json_object" || so[k] === true),
  );
  if (given.length !== 1)
    throw badRequest(
      `structured_outputs has ${given.length === 0 ? "no constraint" : given.join(" and ")}; expected exactly one of ${STRUCTURED_OUTPUTS_KINDS.join(", ")}`,
      "structured_outputs",
    );
  const param = `structured_outputs.${given[0]}`;
  switch (given[0]) {
    case "json":
      return { type: "json_schema", schema: schemaOf(so.json!, param) };
    case "regex":
      return { type: "regex", pattern: so.regex! };
    case "choice":
      return { type: "choice", choices: so.choice! };
    case "grammar":
      return { type: "grammar", grammar: so.grammar! };
    case "json_object":
      return { type: "json_object" };
    case "structural_tag": {
      const tag = so.structural_tag!;
      if (isObject(tag)) return { type: "structural_tag", structuralTag: tag };
      let parsed: unknown;
      try {
        parsed = JSON.parse(tag);
      } catch {
        parsed = undefined;
      }
      if (!isObject(parsed))
        throw badRequest(`${param} is not JSON text of an object; expected an XGrammar structural tag`, param);
      return { type: "structural_tag", structuralTag: parsed };
    }
    default:
      return given[0] satisfies never;
  }
}

/**
 * The body's constraint, or null for none. Every field that asks for one is read; two at once is a 400 naming both
 * (which would win is not the client's to guess).
 */
export function structuredOf(body: StructuredBody): StructuredRequest | null {
  const asked: StructuredRequest[] = [];
  if (body.response_format !== undefined && body.response_format !== null) {
    const s = responseFormatToStructured(body.response_format);
    if (s !== null) asked.push({ structured: s, param: "response_format" });
  }
  if (body.structured_outputs !== undefined && body.structured_outputs !== null)
    asked.push({ structured: structuredOutputsToStructured(body.structured_outputs), param: "structured_outputs" });
  if (body.guided_json !== undefined && body.guided_json !== null)
    asked.push({
      structured: { type: "json_schema", schema: schemaOf(body.guided_json, "guided_json") },
      param: "guided_json",
    });
  if (body.guided_choice !== undefined && body.guided_choice !== null)
    asked.push({ structured: { type: "choice", choices: body.guided_choice }, param: "guided_choice" });
  if (body.guided_regex !== undefined && body.guided_regex !== null)
    asked.push({ structured: { type: "regex", pattern: body.guided_regex }, param: "guided_regex" });
  if (body.guided_grammar !== undefined && body.guided_grammar !== null)
    asked.push({ structured: { type: "grammar", grammar: body.guided_grammar }, param: "guided_grammar" });
  if (asked.length > 1)
    throw badRequest(
      `${asked.map((a) => a.param).join(" and ")} each constrain the output; send one of them`,
      asked[1].param,
    );
  return asked[0] ?? null;
}

/**
 * An engine error about the request's format as the field the client wrote: the engine names its own field
 * (`request.structured...`), at compile time (a schema XGrammar cannot use) and mid-answer (a character no token of
 * the vocabulary spells); the client sent `req.param` (response_format, guided_choice, text.format, ...). Any other
 * error is returned as it is.
 */
export function structuredError(e: unknown, req: StructuredRequest | null): unknown {
  if (req === null || !(e instanceof DeliberateError) || !e.field?.startsWith("request.structured")) return e;
  const api = fromDeliberateError(e);
  return new ApiError(
    api.status,
    e.message.replace(/^request\.structured/, req.param),
    api.type,
    req.param,
    api.code,
    api.headers,
  );
}

/**
 * Compiles the request's format for the served model (cached by the engine), so a schema, regex or grammar XGrammar
 * cannot use is a 400 naming the field the client sent before any generation starts.
 */
export async function prepareStructured(t: ServeTarget, req: StructuredRequest): Promise<void> {
  try {
    await t.engine.prepareStructured(req.structured, t.engineModel);
  } catch (e) {
    if (!(e instanceof DeliberateError)) throw e;
    const api = fromDeliberateError(e);
    // The engine names its own field (request.structured...): the client wrote `req.param`.
    if (api.status !== 400) throw api;
    throw new ApiError(400, e.message.replace(/^request\.structured/, req.param), api.type, req.param, api.code);
  }
}
