// The wire schema of POST /v1/responses: the subset of OpenAI's Responses API that `client.responses.create` sends,
// with chat's sampling rules (the same zod fields, so both routes say alike what a value must be). Input is a string
// (one user message) or a list of messages, which the route renders through the chat template as chat does. What
// needs state this server does not keep (previous_response_id, conversation, background) or tool calls is refused by
// name; `store` is accepted and ignored (nothing is stored, as vLLM without its store). `text.format` is checked by
// ./structured.ts's textFormatToStructured, the same translation as chat's response_format.
//
// The body is a strict object: a field this schema does not name is a 400 naming it, never ignored (a client that
// sends chat's presence_penalty or response_format here would otherwise get an answer they do not shape). Fields that
// change nothing in the answer (store, metadata, user, safety_identifier, prompt_cache_key, service_tier, ...) are
// accepted; chat's sampling fields are served as on chat, or accepted at their neutral value only.
import { z } from "zod";
import { field as rule } from "../options/validate.js";
import { chatSchema, REASONING_EFFORTS, type ReasoningEffort } from "./schemas.js";

const isObject = (v: unknown): v is Record<string, unknown> => v !== null && typeof v === "object" && !Array.isArray(v);
const isBool = (v: unknown): boolean => typeof v === "boolean";
const isString = (v: unknown): boolean => typeof v === "string";
const nullOr =
  (ok: (v: unknown) => boolean) =>
  (v: unknown): boolean =>
    v === null || ok(v);

/** A text part of an input message: the user's `input_text`, or `output_text` of an earlier answer sent back. */
const inputTextPart = z.strictObject(
  {
    type: rule<"input_text" | "output_text">(
      'expected "input_text" or "output_text" (this server serves text-only models)',
      (v) => v === "input_text" || v === "output_text",
    ),
    text: rule<string>("expected a string", (v) => typeof v === "string"),
    // An earlier output_text part sent back as the openai client returned it: metadata, not rendered.
    annotations: z.array(z.unknown(), { error: "expected an array" }).optional(),
    logprobs: z.array(z.unknown(), { error: "expected an array" }).optional(),
  },
  { error: unknownKeys("an input_text part {type, text}") },
);

// Strict: a key not rendered into the prompt is refused by name (dropping it could change the answer expected).
const inputMessage = z.strictObject(
  {
    type: z.literal("message"),
    role: rule<"user" | "assistant" | "system" | "developer">(
      'expected "user", "assistant", "system" or "developer"',
      (v) => ["user", "assistant", "system", "developer"].includes(v as string),
    ),
    // A string is one input_text part: one shape for the route, and a bad part's error names its index.
    content: z.preprocess(
      (v) => (typeof v === "string" ? [{ type: "input_text", text: v }] : v),
      z.array(inputTextPart, { error: "expected a string or an array of input_text parts" }),
    ),
    // An earlier output message sent back as returned (its id and status): identify it, add nothing to the prompt.
    id: z.string({ error: "expected a string" }).optional(),
    status: z.string({ error: "expected a string" }).optional(),
  },
  { error: unknownKeys("a message {role, content}") },
);

// A reasoning item of an earlier response, sent back with its output: dropped, as chat templates drop earlier
// thoughts (the thought is not part of the conversation the model reads).
const reasoningItem = z.looseObject({ type: z.literal("reasoning") });

const INPUT_ITEM =
  'expected a message {role, content} (type "message") or a reasoning item of an earlier response; tool calls and other items are not served on /v1/responses';

/** An input item: a message (its `type` optional, as EasyInputMessage's) or an earlier reasoning item. */
const inputItem = z.preprocess(
  (v) => (isObject(v) && v.type === undefined ? { ...v, type: "message" } : v),
  z.discriminatedUnion("type", [inputMessage, reasoningItem], { error: INPUT_ITEM }),
);

/** Fields whose only value served here is the neutral one; `why` says what to do instead. */
const onlyNull = (why: string) => rule<null>(`expected null (${why})`, (v) => v === null).optional();

const INCLUDABLE = [
  "file_search_call.results",
  "web_search_call.results",
  "web_search_call.action.sources",
  "message.input_image.image_url",
  "computer_call_output.output.image_url",
  "code_interpreter_call.outputs",
  "reasoning.encrypted_content",
];

const chat = chatSchema.shape;

/** Chat's ways of asking for a format: on this route the format is `text.format`. */
const chatFormatField = onlyNull("on /v1/responses the answer's format is text.format");

/** A field's rule, accepting only its neutral value (chat's fields this server does not implement). */
const neutral = <T>(value: T, why: string) =>
  rule<T | null>(`expected ${JSON.stringify(value)} (${why})`, (v) => v === null || v === value).optional();

export const responsesSchema = z.strictObject(
  {
    model: chat.model,
    // A string is one user message.
    input: z.preprocess(
      (v) => (typeof v === "string" ? [{ type: "message", role: "user", content: v }] : v),
      z
        .array(inputItem, { error: "expected a string or a non-empty array of input messages" })
        .min(1, { error: "expected a string or a non-empty array of input messages" }),
    ),
    instructions: rule<string | null>(
      "expected a string (the system message)",
      nullOr((v) => typeof v === "string"),
    ).optional(),
    max_output_tokens: chat.max_tokens,
    temperature: chat.temperature,
    top_p: chat.top_p,
    reasoning: z
      .strictObject(
        {
          effort: rule<ReasoningEffort | null>(
            `expected one of ${REASONING_EFFORTS.map((e) => `"${e}"`).join(", ")}`,
            nullOr((v) => REASONING_EFFORTS.includes(v as ReasoningEffort)),
          ).optional(),
          // The thought itself is the reasoning item's content (reasoning_text); no summary is written, so any value
          // gives the same answer (vLLM's too).
          summary: rule<string | null>(
            'expected "auto", "concise" or "detailed"',
            nullOr((v) => ["auto", "concise", "detailed"].includes(v as string)),
          ).optional(),
          generate_summary: rule<string | null>(
            'expected "auto", "concise" or "detailed"',
            nullOr((v) => ["auto", "concise", "detailed"].includes(v as string)),
          ).optional(),
        },
        { error: unknownKeys("{effort?, summary?}") },
      )
      .nullable()
      .optional(),
    stream: chat.stream,
    // Nothing is stored (as vLLM without VLLM_ENABLE_RESPONSES_API_STORE): true answers the same, and no later request
    // can name the response.
    store: chat.store,
    metadata: rule<Record<string, string> | null>(
      "expected an object of up to 16 string values (keys up to 64 characters, values up to 512)",
      nullOr(
        (v) =>
          isObject(v) &&
          Object.keys(v).length <= 16 &&
          Object.entries(v).every(([k, s]) => k.length <= 64 && typeof s === "string" && s.length <= 512),
      ),
    ).optional(),
    text: z
      .strictObject(
        {
          // {type: "text" | "json_object" | "json_schema", ...}: checked by textFormatToStructured (param text.format).
          format: z.unknown().optional(),
          verbosity: rule<"medium" | null>(
            'expected "medium" (verbosity is not supported by this server)',
            (v) => v === null || v === "medium",
          ).optional(),
        },
        { error: unknownKeys("{format?, verbosity?}") },
      )
      .nullable()
      .optional(),
    tools: rule<unknown[] | null>(
      "expected no tools (tool calls are not served on /v1/responses yet; /v1/chat/completions serves tools)",
      (v) => v === null || (Array.isArray(v) && v.length === 0),
    ).optional(),
    tool_choice: rule<"auto" | "none" | null>(
      'expected "auto" or "none" (no tools are served on /v1/responses)',
      (v) => v === null || v === "auto" || v === "none",
    ).optional(),
    parallel_tool_calls: rule<boolean | null>("expected true or false", nullOr(isBool)).optional(),
    previous_response_id: onlyNull("this server stores no responses; send the whole conversation as input"),
    conversation: onlyNull("this server stores no conversations; send the whole conversation as input"),
    prompt: onlyNull("stored prompt templates are not served; send instructions and input"),
    background: rule<boolean | null>(
      "expected false (this server stores no responses to poll; stream instead)",
      (v) => v === null || v === false,
    ).optional(),
    include: rule<string[] | null>(
      `expected an array of ${INCLUDABLE.join(", ")} (message.output_text.logprobs is not served on /v1/responses; /v1/chat/completions serves logprobs)`,
      nullOr((v) => Array.isArray(v) && v.every((s) => INCLUDABLE.includes(s as string))),
    ).optional(),
    top_logprobs: rule<number | null>(
      "expected 0 (logprobs are not served on /v1/responses; /v1/chat/completions serves them)",
      (v) => v === null || v === 0,
    ).optional(),
    truncation: rule<"disabled" | null>(
      'expected "disabled" (the input is never truncated: one over the context is a 400)',
      (v) => v === null || v === "disabled",
    ).optional(),
    // Our (and vLLM's) extensions, as on chat.
    top_k: chat.top_k,
    seed: chat.seed,
    stop: chat.stop,
    stop_token_ids: chat.stop_token_ids,
    deterministic: chat.deterministic,
    thinking_token_budget: chat.thinking_token_budget,
    chat_template_kwargs: chat.chat_template_kwargs,
    ignore_eos: chat.ignore_eos,
    // Fields that change nothing in the answer: accepted (as the openai client passes them through).
    user: chat.user,
    safety_identifier: chat.safety_identifier,
    prompt_cache_key: chat.prompt_cache_key,
    // The prefix cache keeps what it keeps whatever the client asks; the answer is the same.
    prompt_cache_retention: chat.prompt_cache_retention,
    // One tier here: every value is served the same way, with the same answer.
    service_tier: chat.service_tier,
    stream_options: z
      .strictObject(
        // No obfuscation field is added to deltas either way; the text is the same.
        { include_obfuscation: rule<boolean | null>("expected true or false", nullOr(isBool)).optional() },
        { error: unknownKeys("{include_obfuscation?}") },
      )
      .nullable()
      .optional(),
    // No tools are served here, so no call is ever made to count.
    max_tool_calls: rule<number | null>(
      "expected an integer >= 1",
      nullOr((v) => Number.isInteger(v) && (v as number) >= 1),
    ).optional(),
    context_management: onlyNull("this server stores no conversation to compact; send the whole conversation as input"),
    // Chat's fields that change the answer: a Response has one output, and penalties / biases are not implemented.
    n: neutral(1, "a Response has one output; /v1/chat/completions serves n"),
    frequency_penalty: neutral(0, "not supported by this server"),
    presence_penalty: neutral(0, "not supported by this server"),
    repetition_penalty: neutral(1, "not supported by this server"),
    min_p: neutral(0, "not supported by this server"),
    min_tokens: neutral(0, "not supported by this server"),
    best_of: neutral(1, "not supported by this server"),
    use_beam_search: neutral(false, "beam search is not supported by this server"),
    include_stop_str_in_output: neutral(false, "the stop string is never included in the output here"),
    logit_bias: chat.logit_bias,
    response_format: chatFormatField,
    structured_outputs: chatFormatField,
    guided_json: chatFormatField,
    guided_choice: chatFormatField,
    guided_regex: chatFormatField,
    guided_grammar: chatFormatField,
    guided_whitespace_pattern: chatFormatField,
    guided_decoding_backend: rule<string | null>("expected a string", nullOr(isString)).optional(),
  },
  { error: unknownKeys("a Responses API request") },
);

/**
 * The error of a strict object: a field it does not name is refused by name (checkBody makes the first unknown key
 * the error's param), anything else says what was expected.
 */
function unknownKeys(expected: string): (issue: { code?: string; keys?: string[] }) => string {
  return (issue) =>
    issue.code === "unrecognized_keys"
      ? `${issue.keys!.join(", ")} ${issue.keys!.length === 1 ? "is" : "are"} not served on /v1/responses (refused rather than ignored: it could change the answer); send the fields of OpenAI's Responses API or /v1/chat/completions`
      : `expected ${expected}`;
}

export type ResponsesBody = z.output<typeof responsesSchema>;
export type ResponsesInputItem = ResponsesBody["input"][number];
