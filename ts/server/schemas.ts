// The wire schemas of the OpenAI-compatible routes, with vLLM's field names. The generation bodies (chat, completions)
// are strict objects: a field they do not name is a 400 naming it (`param`), never ignored, since an ignored field
// could change the output the client expects (reasoning_effort or tools on /v1/completions, vLLM's bad_words).
// Fields the openai client and vLLM's clients commonly send that change nothing in the output (metadata, store,
// priority, request_id, ...) are named and accepted; fields we know but do not implement are accepted at their
// neutral value and rejected otherwise, naming the field. Every failure is a 400 naming the field (`param`).
import { z } from "zod";
import { field as rule } from "../options/validate.js";
import type { FastifySchemaCompiler } from "fastify";
import { ApiError, badRequest, BodyValidationError } from "./errors.js";
import { structuredFields } from "./structured.js";
import { messageToolCall, toolFields } from "./tools.js";

// rule(): a scalar whose rule is one sentence ("expected ..."), as the library's own options say it (the library's
// field(), so both speak alike).
const isInt =
  (lo: number, hi = Number.MAX_SAFE_INTEGER) =>
  (v: unknown): boolean =>
    Number.isInteger(v) && (v as number) >= lo && (v as number) <= hi;
const isNum =
  (lo: number, hi: number) =>
  (v: unknown): boolean =>
    typeof v === "number" && Number.isFinite(v) && v >= lo && v <= hi;
const isBool = (v: unknown): boolean => typeof v === "boolean";
const isTokenIds = (v: unknown): boolean =>
  Array.isArray(v) && v.length > 0 && v.every((t) => Number.isInteger(t) && t >= 0);
const isStop = (v: unknown): boolean =>
  v === null ||
  (typeof v === "string" && v.length > 0) ||
  (Array.isArray(v) && v.length <= 16 && v.every((s) => typeof s === "string" && s.length > 0));

/** Fields vLLM accepts that change nothing at their neutral value; another value is a 400 naming the field. */
const neutral = (value: number | null) =>
  rule<number | null>(`expected ${value} (not supported by this server)`, (v) => v === null || v === value);

export const MAX_N = 128;

export const REASONING_EFFORTS = ["none", "minimal", "low", "medium", "high", "xhigh", "max"] as const;
export type ReasoningEffort = (typeof REASONING_EFFORTS)[number];

const samplingFields = {
  model: rule<string>(
    "expected a model name (GET /v1/models lists them)",
    (v) => typeof v === "string" && v.length > 0,
  ).optional(),
  max_tokens: rule<number | null>("expected an integer >= 1", (v) => v === null || isInt(1)(v)).optional(),
  temperature: rule<number | null>(
    "expected a number in [0, 2] (0 = greedy)",
    (v) => v === null || isNum(0, 2)(v),
  ).optional(),
  top_p: rule<number | null>(
    "expected a number in (0, 1]",
    (v) => v === null || (isNum(0, 1)(v) && (v as number) > 0),
  ).optional(),
  top_k: rule<number | null>("expected an integer >= -1 (-1 or 0 = off)", (v) => v === null || isInt(-1)(v)).optional(),
  seed: rule<number | null>("expected an integer >= 0", (v) => v === null || isInt(0)(v)).optional(),
  n: rule<number | null>(`expected an integer in [1, ${MAX_N}]`, (v) => v === null || isInt(1, MAX_N)(v)).optional(),
  stop: rule<string | string[] | null>(
    "expected a non-empty string or an array of up to 16 non-empty strings",
    isStop,
  ).optional(),
  stop_token_ids: rule<number[] | null>(
    "expected an array of integer token ids",
    (v) => v === null || (Array.isArray(v) && v.every((t) => Number.isInteger(t) && t >= 0)),
  ).optional(),
  ignore_eos: rule<boolean>("expected true or false", isBool).optional(),
  stream: rule<boolean | null>("expected true or false", (v) => v === null || isBool(v)).optional(),
  stream_options: z
    .strictObject(
      {
        include_usage: rule<boolean>("expected true or false", isBool).optional(),
        continuous_usage_stats: rule<boolean>("expected true or false", isBool).optional(),
        // OpenAI's padding of stream events against length side channels: none is added here; the text is the same.
        include_obfuscation: rule<boolean>("expected true or false", isBool).optional(),
      },
      { error: unknownField("stream_options", "{ include_usage?: boolean, continuous_usage_stats?: boolean }") },
    )
    .nullable()
    .optional(),
  user: rule<string | null>("expected a string", (v) => v === null || typeof v === "string").optional(),
  frequency_penalty: neutral(0).optional(),
  presence_penalty: neutral(0).optional(),
  repetition_penalty: neutral(1).optional(),
  min_p: neutral(0).optional(),
  min_tokens: neutral(0).optional(),
  best_of: neutral(1).optional(),
  logit_bias: rule<Record<string, number> | null>(
    "expected null or {} (logit biases are not supported by this server)",
    (v) => v === null || (typeof v === "object" && !Array.isArray(v) && Object.keys(v as object).length === 0),
  ).optional(),
  use_beam_search: rule<boolean>(
    "expected false (beam search is not supported by this server)",
    (v) => v === false,
  ).optional(),
  include_stop_str_in_output: rule<boolean>(
    "expected false (the stop string is never included in the output here)",
    (v) => v === false,
  ).optional(),
  // Our extensions (the openai client passes unknown body fields through as `extra_body` / spread fields).
  deterministic: rule<boolean>(
    "expected true or false (bitwise-identical output for the same request whatever else runs)",
    isBool,
  ).optional(),
  program: rule<string>(
    "expected a program name (sc, cot-probe, rebase, mcts, short-m@k, deepconf, duchess)",
    (v) => typeof v === "string",
  ).optional(),
  program_options: z
    .object(
      {
        cap: rule<number>("expected an integer >= 1 (branches, width or simulations)", isInt(1)).optional(),
        policy: rule<string>(
          'expected "calibrated", "threshold" or "baseline-even"',
          (v) => v === "calibrated" || v === "threshold" || v === "baseline-even",
        ).optional(),
        threshold: rule<number>("expected a number in [0, 1]", isNum(0, 1)).optional(),
        interval: rule<number>("expected an integer >= 1 (tokens between probes)", isInt(1)).optional(),
        variant: rule<string>('expected "low" or "high"', (v) => v === "low" || v === "high").optional(),
        offline: rule<boolean>("expected true or false", isBool).optional(),
      },
      { error: "expected an object of program knobs" },
    )
    .strict()
    .optional(),
  // response_format, vLLM's structured_outputs and guided_* (./structured.ts).
  ...structuredFields,
};

const isString = (v: unknown): boolean => typeof v === "string";
const nullOr =
  (ok: (v: unknown) => boolean) =>
  (v: unknown): boolean =>
    v === null || ok(v);
/** A field accepted only at its neutral value (null, or `value`), with why. */
const onlyAt = <T>(value: T, why: string) =>
  rule<T | null>(`expected ${JSON.stringify(value)} (${why})`, (v) => v === null || v === value).optional();
const onlyNull = (why: string) => rule<null>(`expected null (${why})`, (v) => v === null).optional();
const NOT_SUPPORTED = "not supported by this server";

/**
 * vLLM's extra sampling fields on both routes beyond samplingFields: what changes nothing in the output is accepted
 * (scheduling, caching, ids), what would change it is accepted at its neutral value only, named.
 */
const vllmExtras = {
  // The cluster router's affinity key (docs/cluster.md: every request of one program lands on one replica); the
  // replica answers the same whatever it says.
  program_id: rule<string | null>(
    "expected a string (the cluster router's program affinity key)",
    nullOr(isString),
  ).optional(),
  // Scheduling and bookkeeping: the output is the same whatever they say.
  priority: rule<number | null>("expected an integer", nullOr(Number.isInteger)).optional(),
  request_id: rule<string | null>("expected a string", nullOr(isString)).optional(),
  // The prefix cache's salt: which cached prefixes a request may reuse, never what it generates.
  cache_salt: rule<string | null>("expected a string", nullOr(isString)).optional(),
  skip_special_tokens: onlyAt(true, "special tokens are always skipped in the text here"),
  spaces_between_special_tokens: onlyAt(true, NOT_SUPPORTED),
  length_penalty: onlyAt(1, "beam search is not supported by this server"),
  bad_words: rule<string[] | null>(
    `expected null or [] (bad_words is ${NOT_SUPPORTED})`,
    (v) => v === null || (Array.isArray(v) && v.length === 0),
  ).optional(),
  allowed_token_ids: onlyNull(NOT_SUPPORTED),
  logits_processors: onlyNull(NOT_SUPPORTED),
  truncate_prompt_tokens: onlyNull("prompts are never truncated here: one over the context is a 400"),
  prompt_logprobs: onlyNull(NOT_SUPPORTED),
  return_tokens_as_token_ids: onlyAt(false, NOT_SUPPORTED),
  return_token_ids: onlyAt(false, NOT_SUPPORTED),
  kv_transfer_params: onlyNull(NOT_SUPPORTED),
  vllm_xargs: onlyNull(NOT_SUPPORTED),
};

/**
 * The error of a strict generation body: a field it does not name is refused by name (checkBody makes it the
 * param), anything else says what was expected.
 */
function unknownField(route: string, expected: string): (issue: { code?: string; keys?: string[] }) => string {
  return (issue) =>
    issue.code === "unrecognized_keys"
      ? `${issue.keys!.join(", ")} ${issue.keys!.length === 1 ? "is" : "are"} not served on ${route} (refused rather than ignored: it could change the output); send the fields of OpenAI's API or vLLM's that this server names (docs/server.md)`
      : `expected ${expected}`;
}

const textPart = z.strictObject(
  {
    type: z.literal("text", { error: 'expected "text" (this server serves text-only models)' }),
    text: rule<string>("expected a string", (v) => typeof v === "string"),
    // Anthropic-style prompt caching hints some clients add: this server caches prefixes by itself.
    cache_control: z.unknown().optional(),
  },
  { error: unknownField("message content parts", 'a text part { type: "text", text }') },
);

const message = z.strictObject(
  {
    role: rule<string>('expected "system", "developer", "user", "assistant" or "tool"', (v) =>
      ["system", "developer", "user", "assistant", "tool"].includes(v as string),
    ),
    content: z
      .union([rule<string>("expected a string", (v) => typeof v === "string"), z.array(textPart)], {
        error: "expected a string or an array of text parts",
      })
      .nullable()
      .optional(),
    reasoning: z.string().nullable().optional(),
    reasoning_content: z.string().nullable().optional(),
    name: z.string().optional(),
    // An assistant turn's calls, and a tool message's answer to one (rendered by the chat template).
    tool_calls: z.array(messageToolCall, { error: "expected an array of tool calls" }).nullable().optional(),
    tool_call_id: z.string({ error: "expected the id of the tool call this message answers" }).optional(),
    // What the openai client's ChatCompletionMessage carries when a client sends an earlier answer back as an
    // assistant turn: accepted at the values an answer from this server has (they add nothing to the prompt).
    refusal: onlyNull("a refusal is not rendered into the prompt; send it as content"),
    annotations: rule<unknown[]>(
      "expected an empty array (annotations are not rendered into the prompt)",
      (v) => Array.isArray(v) && v.length === 0,
    ).optional(),
    audio: onlyNull("this server serves text-only models"),
    function_call: onlyNull("the legacy function_call is not served; send tool_calls"),
  },
  // Strict: a key this server does not render (a future field, a typo of tool_calls) is refused by name, since
  // dropping it could change the answer the client expects.
  { error: unknownField("chat messages", "a message { role, content }") },
);

/** Variables for the chat template (Qwen3's enable_thinking, say), as vLLM takes them. */
const templateKwargs = z
  .record(z.string(), z.unknown(), { error: "expected an object of template variables" })
  .nullable()
  .optional();

export const chatSchema = z.strictObject(
  {
    ...samplingFields,
    ...vllmExtras,
    messages: z
      .array(message, { error: "expected a non-empty array of messages" })
      .min(1, { error: "expected a non-empty array of messages" }),
    max_completion_tokens: rule<number | null>("expected an integer >= 1", (v) => v === null || isInt(1)(v)).optional(),
    logprobs: rule<boolean | null>("expected true or false", (v) => v === null || isBool(v)).optional(),
    top_logprobs: rule<number | null>(
      "expected an integer in [0, 20]",
      (v) => v === null || isInt(0, 20)(v),
    ).optional(),
    include_reasoning: rule<boolean>("expected true or false", isBool).optional(),
    reasoning_effort: rule<ReasoningEffort | null>(
      'expected one of "none", "minimal", "low", "medium", "high", "xhigh", "max"',
      (v) => v === null || REASONING_EFFORTS.includes(v as ReasoningEffort),
    ).optional(),
    thinking_token_budget: rule<number | null>(
      "expected an integer >= 0 (reasoning tokens before the thought is closed)",
      (v) => v === null || isInt(0)(v),
    ).optional(),
    chat_template_kwargs: templateKwargs,
    chat_template: rule<null>("expected null (the model's own chat template is used)", (v) => v === null).optional(),
    // tools, tool_choice, parallel_tool_calls (./tools.ts).
    ...toolFields,
    // The openai client's fields that change nothing in the answer here: accepted.
    metadata: rule<Record<string, string> | null>(
      "expected an object of string values",
      nullOr((v) => v !== null && typeof v === "object" && !Array.isArray(v) && Object.values(v).every(isString)),
    ).optional(),
    store: rule<boolean | null>("expected true or false", nullOr(isBool)).optional(),
    safety_identifier: rule<string | null>("expected a string", nullOr(isString)).optional(),
    prompt_cache_key: rule<string | null>("expected a string", nullOr(isString)).optional(),
    prompt_cache_retention: rule<string | null>(
      'expected "in-memory" or "24h"',
      nullOr((v) => v === "in-memory" || v === "24h"),
    ).optional(),
    // One tier here: every value is served the same way, with the same answer.
    service_tier: rule<string | null>(
      'expected "auto", "default", "flex", "scale" or "priority"',
      nullOr((v) => ["auto", "default", "flex", "scale", "priority"].includes(v as string)),
    ).optional(),
    // A predicted output only speeds generation up at OpenAI; the answer is the same.
    prediction: z.unknown().optional(),
    // The openai client's fields that would change the answer: their neutral value only.
    modalities: rule<string[] | null>(
      'expected ["text"] (this server answers with text only)',
      nullOr((v) => Array.isArray(v) && v.every((m) => m === "text")),
    ).optional(),
    audio: onlyNull("this server answers with text only"),
    verbosity: onlyAt("medium", NOT_SUPPORTED),
    web_search_options: onlyNull("web search is not served"),
    // vLLM's chat extras at their neutral value (the template is rendered as the model's own).
    echo: onlyAt(false, "the last message is never echoed here"),
    add_generation_prompt: onlyAt(true, "the assistant turn is always opened here"),
    continue_final_message: onlyAt(false, NOT_SUPPORTED),
    add_special_tokens: onlyAt(false, "the chat template adds the special tokens"),
    documents: onlyNull(NOT_SUPPORTED),
    mm_processor_kwargs: onlyNull("this server serves text-only models"),
    // A handed-off program's state, added by the cluster router (checked by ./handoff.ts, refused without a program).
    deliberate_handoff: z.unknown().optional(),
  },
  { error: unknownField("/v1/chat/completions", "a chat completion request") },
);

export const completionSchema = z.strictObject(
  {
    ...samplingFields,
    ...vllmExtras,
    prompt: rule<string | string[] | number[] | number[][]>(
      "expected a string, an array of strings, an array of token ids, or an array of token-id arrays",
      (v) =>
        typeof v === "string" ||
        isTokenIds(v) ||
        (Array.isArray(v) && v.length > 0 && (v.every((p) => typeof p === "string") || v.every((p) => isTokenIds(p)))),
    ),
    logprobs: rule<number | null>("expected an integer in [0, 20]", (v) => v === null || isInt(0, 20)(v)).optional(),
    echo: rule<boolean | null>("expected true or false", (v) => v === null || isBool(v)).optional(),
    suffix: rule<string | null>(
      "expected null (suffix is not supported by this server)",
      (v) => v === null || v === "",
    ).optional(),
    // A completion's prompt gets the tokenizer's special tokens (BOS) as vLLM's default; false is not served.
    add_special_tokens: onlyAt(true, NOT_SUPPORTED),
  },
  { error: unknownField("/v1/completions", "a completion request") },
);

export const tokenizeSchema = z.looseObject({
  chat_template_kwargs: templateKwargs,
  model: z.string().optional(),
  prompt: z.string().optional(),
  messages: z.array(message).min(1).optional(),
  add_special_tokens: rule<boolean>("expected true or false", isBool).optional(),
  add_generation_prompt: rule<boolean>("expected true or false", isBool).optional(),
});

export const detokenizeSchema = z.looseObject({
  model: z.string().optional(),
  tokens: rule<number[]>(
    "expected an array of integer token ids",
    (v) => Array.isArray(v) && v.every((t) => Number.isInteger(t) && t >= 0),
  ),
});

export const controlSchema = z.looseObject({
  id: rule<string>(
    "expected the id of a running chat completion (the `id` of its chunks)",
    (v) => typeof v === "string" && v.length > 0,
  ),
  action: rule<string>(
    'expected "reasoning_end" (close the thought now and answer) or "abort"',
    (v) => v === "reasoning_end" || v === "abort",
  ),
});

export type ChatBody = z.output<typeof chatSchema>;
export type CompletionBody = z.output<typeof completionSchema>;
export type ChatMessageBody = z.output<typeof message>;

export type TokenizeBody = z.output<typeof tokenizeSchema>;
export type DetokenizeBody = z.output<typeof detokenizeSchema>;
export type ControlBody = z.output<typeof controlSchema>;

/** Checks a body; the first failure is a 400 whose `param` is the field's path as the client wrote it. */
export function checkBody<S extends z.ZodType>(schema: S, body: unknown): { value: z.output<S> } | { error: ApiError } {
  if (body === null || typeof body !== "object" || Array.isArray(body))
    return { error: badRequest("the request body must be a JSON object") };
  const r = schema.safeParse(body);
  if (r.success) return { value: r.data };
  const issue = r.error.issues[0];
  const param = issue.path.reduce<string>(
    (s, k) => (typeof k === "number" ? `${s}[${k}]` : s === "" ? String(k) : `${s}.${String(k)}`),
    "",
  );
  let value: unknown = body;
  for (const k of issue.path)
    value = value !== null && typeof value === "object" ? (value as Record<PropertyKey, unknown>)[k] : undefined;
  if (issue.code === "unrecognized_keys") {
    // A field the schema does not name (a strict object's): the error names it, the first when there are several.
    const key = `${param === "" ? "" : `${param}.`}${issue.keys[0]}`;
    return { error: badRequest(`${param === "" ? "" : `${param}: `}${issue.message}`, key) };
  }
  const shown = value === undefined ? "missing" : showValue(value);
  const message = `${param || "body"} is ${shown}; ${issue.message}`;
  return { error: badRequest(message, param === "" ? null : param) };
}

/** A value as the error shows it: its JSON's first 80 characters ("nested too deep" where JSON.stringify's recursion
 * overflows the stack: JSON.parse takes nesting far deeper). */
function showValue(value: unknown): string | undefined {
  try {
    return JSON.stringify(value)?.slice(0, 80);
  } catch {
    return "(nested too deep to show)";
  }
}

/** Parses a body (checkBody), throwing its 400. */
export function parseBody<S extends z.ZodType>(schema: S, body: unknown): z.output<S> {
  const r = checkBody(schema, body);
  if ("error" in r) throw r.error;
  return r.value;
}

/**
 * fastify's validator compiler over these schemas: a route declares `schema: { body: chatSchema }` and its handler
 * gets the parsed body; a failure reaches the error handler as checkBody's 400 (wrapped: see BodyValidationError).
 */
export const zodValidatorCompiler: FastifySchemaCompiler<z.ZodType> =
  ({ schema }) =>
  (data) => {
    const r = checkBody(schema, data);
    return "error" in r ? { error: new BodyValidationError(r.error) } : r;
  };
