// Tool calling on the chat route: the body's `tools` / `tool_choice` / `parallel_tool_calls` (OpenAI's function
// tools), the model's tool-call syntax read from its chat template, what a request does with them (a plan: parse
// calls, force one), tool call ids, and tool turns as templates read them. The constraint of a forced call is built
// in toolConstraint.ts, the calls are read out of the answer by toolCallParser.ts.
import { randomBytes } from "node:crypto";
import { z } from "zod";
import type { ModelTokenizer } from "../model/tokenizer.js";
import { field as rule } from "../options/validate.js";
import { TOOL_CALL_SYNTAXES, type ToolCallSyntax } from "../grammar/toolGrammar.js";
import { badRequest } from "./errors.js";
import { ToolCallParser, type ParsedEnd, type ParsedPiece } from "./toolCallParser.js";

const isObject = (v: unknown): v is Record<string, unknown> => v !== null && typeof v === "object" && !Array.isArray(v);
// OpenAI's rule for function names.
const isFunctionName = (v: unknown): boolean => typeof v === "string" && /^[a-zA-Z0-9_-]{1,64}$/.test(v);
const FUNCTION_NAME = "expected a function name: 1 to 64 letters, digits, _ or -";

const functionTool = z.object(
  {
    type: z.literal("function", { error: 'expected "function" (function tools only)' }),
    function: z.object(
      {
        name: rule<string>(FUNCTION_NAME, isFunctionName),
        description: z.string({ error: "expected a string" }).nullable().optional(),
        // A call's arguments are a JSON object (OpenAI's wire format, and what templates render back): a schema
        // of another type would have a forced call write a string or a number as its arguments.
        parameters: rule<Record<string, unknown>>(
          'expected a JSON Schema of an object ({type: "object", properties, required}): a call\'s arguments are a JSON object',
          (v) => isObject(v) && (v.type === undefined || v.type === "object"),
        )
          .nullable()
          .optional(),
        strict: rule<boolean | null>("expected true or false", (v) => v === null || typeof v === "boolean").optional(),
      },
      { error: "expected {name, description?, parameters?, strict?}" },
    ),
  },
  { error: 'expected a function tool {type: "function", function: {name, description?, parameters?}}' },
);
export type FunctionTool = z.output<typeof functionTool>;

const namedChoice = z.object({
  type: z.literal("function", { error: 'expected "function"' }),
  function: z.object({ name: rule<string>(FUNCTION_NAME, isFunctionName) }, { error: "expected {name}" }),
});

/** The chat body's tool fields (spread into its schema). */
export const toolFields = {
  tools: z.array(functionTool, { error: "expected an array of function tools" }).nullable().optional(),
  tool_choice: z
    .union([z.enum(["none", "auto", "required"]), namedChoice], {
      error: 'expected "none", "auto", "required" or {type: "function", function: {name}}',
    })
    .nullable()
    .optional(),
  parallel_tool_calls: rule<boolean | null>(
    "expected true or false",
    (v) => v === null || typeof v === "boolean",
  ).optional(),
  // OpenAI's deprecated function calling: refused by name rather than ignored.
  functions: rule<null>("expected null (deprecated: send tools instead)", (v) => v === null).optional(),
  function_call: rule<null>("expected null (deprecated: send tool_choice instead)", (v) => v === null).optional(),
};

/** A tool call as messages carry it back (an assistant message's `tool_calls`). */
export const messageToolCall = z.object(
  {
    id: z.string({ error: "expected a string id" }),
    type: z.literal("function", { error: 'expected "function"' }),
    function: z.object(
      { name: z.string({ error: "expected a string" }), arguments: z.string({ error: "expected a JSON string" }) },
      { error: "expected {name, arguments}" },
    ),
  },
  { error: 'expected a tool call {id, type: "function", function: {name, arguments}}' },
);
export type MessageToolCall = z.output<typeof messageToolCall>;

export type { ToolCallSyntax } from "../grammar/toolGrammar.js";

/**
 * The model's tool-call syntax, read from its chat template as vLLM's parsers key on their tokens: `<tool_call>`
 * (hermes), `[TOOL_CALLS]` in the template or tokenizer (mistral), `<|python_tag|>` or the ipython role
 * (llama3_json). null: the template renders no tools; "unknown": it renders them in a syntax not parsed here.
 */
export function toolCallSyntaxOf(tok: ModelTokenizer): ToolCallSyntax | "unknown" | null {
  const text = tok.chatTemplate?.text ?? "";
  if (!/\btools\b/.test(text)) return null;
  const { hermes, mistral, llama3_json: llama } = TOOL_CALL_SYNTAXES;
  if (text.includes(hermes.open!)) return "hermes";
  if (text.includes(mistral.open!) || tok.tokenToId(mistral.open!) !== undefined) return "mistral";
  if (text.includes(llama.altOpen!) || text.includes("ipython")) return "llama3_json";
  return "unknown";
}

/** What a chat request does with tools. */
export interface ToolPlan {
  /** The tools as the template gets them (transformers passes OpenAI's tool objects as they are). */
  tools: FunctionTool[];
  /** Parse calls out of the answer in this syntax (null: tool_choice "none", nothing parsed). */
  syntax: ToolCallSyntax | null;
  /** A forced call (tool_choice "required" or named): to one of these tools, or to one or more when parallel. */
  forced: { tools: FunctionTool[]; parallel: boolean } | null;
  /**
   * Whether a grammar can write the syntax's opener (it has one, and it is no special token of the model, as
   * Mistral's [TOOL_CALLS] is in Mistral's tokenizers).
   */
  openerWritable: boolean;
  /** Calls read out of an answer at most (parallel_tool_calls false: 1; the text of any further call is content). */
  maxCalls: number | null;
  /**
   * tool_choice "auto" with a strict function or parallel_tool_calls false: the answer is generated under a grammar
   * in which a call, once the model starts one, follows its function's schema, and (parallel false) the answer ends
   * after the first call.
   */
  constrainCalls: boolean;
}

export interface ToolBody {
  tools?: FunctionTool[] | null;
  tool_choice?: z.output<typeof toolFields.tool_choice>;
  parallel_tool_calls?: boolean | null;
}

/** A chat body's tools as a plan, or null without tools; a 400 naming the field for what cannot be served. */
export function toolPlanOf(body: ToolBody, tok: ModelTokenizer, servedName: string): ToolPlan | null {
  const tools = body.tools ?? [];
  const choice = body.tool_choice ?? (tools.length > 0 ? "auto" : "none");
  if (tools.length === 0) {
    if (choice !== "none")
      throw badRequest(`tool_choice is ${JSON.stringify(choice)}, but the request has no tools`, "tool_choice");
    return null;
  }
  const names = new Set<string>();
  tools.forEach((t, i) => {
    if (names.has(t.function.name))
      throw badRequest(`tools[${i}].function.name ${t.function.name} is given twice`, `tools[${i}].function.name`);
    names.add(t.function.name);
  });
  const syntax = toolCallSyntaxOf(tok);
  if (syntax === null)
    throw badRequest(
      `tools: the chat template of model ${servedName} does not render tools, so the model cannot be told of them; send the request without tools`,
      "tools",
    );
  const none = { syntax: null, forced: null, openerWritable: false, maxCalls: null, constrainCalls: false };
  if (choice === "none") return { tools, ...none };
  if (syntax === "unknown")
    throw badRequest(
      `tools: the chat template of model ${servedName} renders tools, but its tool-call syntax is none of those this server parses (<tool_call> JSON as Hermes / Qwen, Llama 3.1 JSON, Mistral [TOOL_CALLS]); send tool_choice "none" or no tools`,
      "tools",
    );
  const open = TOOL_CALL_SYNTAXES[syntax].open;
  const openId = open === null ? undefined : tok.tokenToId(open);
  const openerWritable = open !== null && !(openId !== undefined && tok.specialTokenIds.has(openId));
  const maxCalls = body.parallel_tool_calls === false ? 1 : null;
  if (choice === "auto") {
    // A strict function's arguments follow its schema (OpenAI's strict mode), and parallel_tool_calls false means
    // one call: both are enforced by a grammar that lets the model write text and constrains a call once it starts
    // (ts/grammar/toolGrammar.ts). A model whose call opener is a special token (no grammar can write it) cannot
    // be constrained that way: strict is refused by name; one call is still enforced by reading only the first.
    const strict = tools.findIndex((t) => t.function.strict === true);
    const needsOpener = syntax !== "llama3_json"; // Llama's calls are the answer itself, with no opener
    if (strict >= 0 && needsOpener && !openerWritable)
      throw badRequest(
        `tools[${strict}].function.strict: with tool_choice "auto" a strict call is generated under its schema once the model opens it, and model ${servedName}'s call opener ${open} is a special token no grammar can write; send strict false, or tool_choice "required" or a named function (forced calls are always generated under their schemas)`,
        `tools[${strict}].function.strict`,
      );
    const constrainCalls = (strict >= 0 || maxCalls !== null) && (openerWritable || !needsOpener);
    return { tools, syntax, forced: null, openerWritable, maxCalls, constrainCalls };
  }
  let forcedTools = tools;
  if (choice !== "required") {
    const named = tools.find((t) => t.function.name === choice.function.name);
    if (named === undefined)
      throw badRequest(
        `tool_choice names function ${choice.function.name}, which is not in tools (${[...names].join(", ")})`,
        "tool_choice.function.name",
      );
    forcedTools = [named];
  }
  // A named function is called once; "required" calls one or more unless parallel_tool_calls is false.
  const parallel = choice === "required" && body.parallel_tool_calls !== false;
  return { tools, syntax, forced: { tools: forcedTools, parallel }, openerWritable, maxCalls, constrainCalls: false };
}

const ALNUM = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";

/**
 * A new tool call id: OpenAI's `call_` and 24 characters; Mistral's templates take 9 alphanumerics only (they raise
 * on any other id), as vLLM's Mistral parser writes them.
 */
export function newToolCallId(syntax: ToolCallSyntax): string {
  const len = syntax === "mistral" ? 9 : 24;
  const bytes = randomBytes(len);
  let s = "";
  for (const b of bytes) s += ALNUM[b % ALNUM.length];
  return syntax === "mistral" ? s : `call_${s}`;
}

/**
 * An assistant message's tool calls as chat templates read them: vLLM's (and transformers') shape, the arguments
 * parsed to an object where they are JSON (Llama 3.1's template writes them with `tojson`, Qwen's either way).
 */
export function templateToolCalls(calls: MessageToolCall[]): Array<Record<string, unknown>> {
  return calls.map((c) => {
    let args: unknown = c.function.arguments;
    try {
      args = JSON.parse(c.function.arguments);
    } catch {
      // not JSON: the template gets the string as sent
    }
    return { id: c.id, type: c.type, function: { name: c.function.name, arguments: args } };
  });
}

/**
 * A choice's answer parser for a plan that parses calls: its events' tokens and answer text in, content and
 * `delta.tool_calls` out. Mistral's [TOOL_CALLS] is a special token, absent from the text: where a step's tokens
 * hold it, its text is put back before the step's text. A forced Mistral call starts after it.
 */
export function answerParser(
  syntax: ToolCallSyntax,
  forced: boolean,
  tok: ModelTokenizer,
  names: Iterable<string>,
  hold: boolean,
  maxCalls: number | null,
): {
  push(tokens: readonly number[], text: string): ParsedPiece;
  end(): ParsedEnd;
  readonly callCount: number;
  readonly intact: boolean;
} {
  const parser = new ToolCallParser(syntax, () => newToolCallId(syntax), {
    afterOpener: syntax === "mistral" && forced,
    names,
    hold,
    maxCalls,
  });
  const open = TOOL_CALL_SYNTAXES[syntax].open;
  const marker = syntax === "mistral" && open !== null ? tok.tokenToId(open) : undefined;
  const hidden = marker !== undefined && tok.specialTokenIds.has(marker);
  return {
    push: (tokens, text) => parser.push(hidden && tokens.includes(marker) ? `${open}${text}` : text),
    end: () => parser.end(),
    get callCount() {
      return parser.callCount;
    },
    get intact() {
      return parser.intact;
    },
  };
}
