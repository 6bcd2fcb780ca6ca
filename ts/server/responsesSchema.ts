// The wire schema of POST /v1/responses: the subset of OpenAI's Responses API that `client.responses.create` sends,
// with chat's sampling rules (the same zod fields, so both routes say alike what a value must be). Input is a string
// (one user message) or a list of messages, which the route renders through the chat template as chat does. What
// needs state this server does not keep (previous_response_id, conversation, background) or tool calls is refused by
// name; `store` is accepted and ignored (nothing is stored, as vLLM without its store). `text.format` is checked by
// ./structured.ts's textFormatToStructured, the same translation as chat's response_format.
import { z } from "zod";
import { field as rule } from "../options/validate.js";
import { chatSchema, REASONING_EFFORTS, type ReasoningEffort } from "./schemas.js";

const isObject = (v: unknown): v is Record<string, unknown> => v !== null && typeof v === "object" && !Array.isArray(v);
const isBool = (v: unknown): boolean => typeof v === "boolean";
const nullOr =
  (ok: (v: unknown) => boolean) =>
  (v: unknown): boolean =>
    v === null || ok(v);

/** A text part of an input message: the user's `input_text`, or `output_text` of an earlier answer sent back. */
const inputTextPart = z.object({
  type: rule<"input_text" | "output_text">(
    'expected "input_text" or "output_text" (this server serves text-only models)',
    (v) => v === "input_text" || v === "output_text",
  ),
  text: rule<string>("expected a string", (v) => typeof v === "string"),
});

const inputMessage = z.object({
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
});

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

export const responsesSchema = z.looseObject({
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
    .object(
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
      { error: "expected {effort?, summary?}" },
    )
    .nullable()
    .optional(),
  stream: chat.stream,
  // Nothing is stored (as vLLM without VLLM_ENABLE_RESPONSES_API_STORE): true answers the same, and no later request
  // can name the response.
  store: rule<boolean | null>("expected true or false", nullOr(isBool)).optional(),
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
    .object(
      {
        // {type: "text" | "json_object" | "json_schema", ...}: checked by textFormatToStructured (param text.format).
        format: z.unknown().optional(),
        verbosity: rule<"medium" | null>(
          'expected "medium" (verbosity is not supported by this server)',
          (v) => v === null || v === "medium",
        ).optional(),
      },
      { error: "expected {format?}" },
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
});

export type ResponsesBody = z.output<typeof responsesSchema>;
export type ResponsesInputItem = ResponsesBody["input"][number];
