// Tool calls as grammars. One description of each model family's tool-call syntax (TOOL_CALL_SYNTAXES: the markers
// around its calls and the JSON shape of one call), read both by the XGrammar structural tag built here, which makes a
// model write calls in that syntax, and by the server's parser, which reads the calls back out of the answer
// (ts/server/toolCallParser.ts). The caller describes its tools and what it wants (a forced call, or free text in which
// a call, once started, follows its schema), and gets a StructuredFormat for the engine's `structured` option.
//
// A schema inside a structural tag is given as an EBNF grammar, not as a json_schema element: XGrammar (0.1.27)
// compiles a structural tag's json_schema elements allowing any whitespace between JSON tokens, which a weak model
// fills until max_tokens; the grammar is the one a json_schema format compiles to (one line, no free whitespace). Each
// schema is parsed in the sandbox (sandbox.ts: XGrammar aborts its runtime on bad input) and converted to EBNF without
// a vocabulary; only the whole structural tag is compiled against the model's vocabulary, once, by the engine.
import { InvalidOptionError } from "../errors/index.js";
import { grammarSource } from "./grammars.js";
import { substituteNumbers } from "./numberRange.js";
import { checkGrammar } from "./sandbox.js";
import type { StructuredFormat } from "./types.js";
import { loadXGrammar } from "./xgrammar.js";

/**
 * The tool-call syntaxes, as vLLM's tool parsers name them: hermes (Hermes, Qwen2.5, Qwen3: `<tool_call>{"name",
 * "arguments"}</tool_call>`), llama3_json (Llama 3.1 / 3.2: the answer is `{"name", "parameters"}`, calls split by
 * `;`), mistral (`[TOOL_CALLS][{"name", "arguments"}, ...]`).
 */
export type ToolCallSyntax = "hermes" | "llama3_json" | "mistral";

/** How one syntax writes its calls. */
export interface ToolCallSyntaxSpec {
  /** The text that opens the calls (null: Llama's, whose answer is the calls when it starts with "{"). */
  open: string | null;
  /** Another text that may open the calls (Llama's `<|python_tag|>`), or null. */
  altOpen: string | null;
  /** After the opener, before the first call (Mistral's list bracket), or "". */
  listOpen: string;
  /** Between two calls, or "" (Hermes: each call has its own tags). */
  separator: string;
  /** After each call (closeEach: Hermes' closing tag) or after the last (Mistral's bracket), or "". */
  close: string;
  closeEach: boolean;
  /** The keys a call object's arguments may have; the first is the one a generated call writes. */
  argumentsKeys: readonly string[];
  /** Calls one turn takes (Llama 3.1's template raises on more than one), or null for any number. */
  maxCalls: number | null;
  /** Written between the opener and a call, and between a call and its closing tag, in a generated call. */
  pad: string;
}

export const TOOL_CALL_SYNTAXES: Readonly<Record<ToolCallSyntax, ToolCallSyntaxSpec>> = {
  hermes: {
    open: "<tool_call>",
    altOpen: null,
    listOpen: "",
    separator: "",
    close: "</tool_call>",
    closeEach: true,
    argumentsKeys: ["arguments", "parameters"],
    maxCalls: null,
    pad: "\n",
  },
  llama3_json: {
    open: null,
    altOpen: "<|python_tag|>",
    listOpen: "",
    separator: ";",
    close: "",
    closeEach: false,
    argumentsKeys: ["parameters", "arguments"],
    maxCalls: 1,
    pad: "",
  },
  mistral: {
    open: "[TOOL_CALLS]",
    altOpen: null,
    listOpen: "[",
    separator: ",",
    close: "]",
    closeEach: false,
    argumentsKeys: ["arguments", "parameters"],
    maxCalls: null,
    pad: "",
  },
};

/** A tool as the grammar needs it. */
export interface ToolGrammarTool {
  name: string;
  /** Its parameters' JSON Schema (null: any JSON object). */
  parameters: Record<string, unknown> | boolean | null;
  /** Where the request gave the schema (errors name it), e.g. `tools[0].function.parameters`. */
  field: string;
}

/** What a request's answer may be. */
export interface ToolGrammarRequest {
  syntax: ToolCallSyntax;
  /** The tools a call may name (each call's arguments follow its schema). */
  tools: ToolGrammarTool[];
  /**
   * "forced": the answer is calls and nothing else (tool_choice "required" or a named function); "auto": free text,
   * or calls whose arguments follow their schemas once they start.
   */
  choice: "forced" | "auto";
  /** One or more calls (false: exactly / at most one). The syntax's own maxCalls bounds it too. */
  parallel: boolean;
  /**
   * With choice "auto": instead of free text, an answer in this format (either one call or the format). Its field
   * names it in errors.
   */
  answer?: { format: StructuredFormat; field: string } | null;
  /**
   * Whether the grammar may write the syntax's opener (false when it is a special token of the model, which no
   * grammar allows). A forced Mistral call starts after it (the server assumes it); an auto one needs it written.
   */
  openerWritable: boolean;
}

type TagFormat = Record<string, unknown>;

/** The text a generated call is written with, around its arguments. */
export function callText(syntax: ToolCallSyntax, name: string): { begin: string; end: string } {
  const s = TOOL_CALL_SYNTAXES[syntax];
  const head = `{"name": ${JSON.stringify(name)}, "${s.argumentsKeys[0]}": `;
  return s.closeEach ? { begin: `${s.open}${s.pad}${head}`, end: `}${s.pad}${s.close}` } : { begin: head, end: "}" };
}

/** Mistral's list holds up to this many calls in a generated answer (XGrammar takes nothing after a repetition). */
const MAX_LISTED_CALLS = 4;

/**
 * The structural tag of a request's tool calls (a StructuredFormat the engine compiles). Rejects with an
 * InvalidOptionError naming a tool's schema field (or the answer's) that XGrammar cannot use.
 */
export async function toolCallFormat(req: ToolGrammarRequest): Promise<StructuredFormat> {
  const s = TOOL_CALL_SYNTAXES[req.syntax];
  const parallel = req.parallel && s.maxCalls !== 1;
  const tags = await Promise.all(req.tools.map((t) => callTag(req.syntax, t)));
  const one: TagFormat = tags.length === 1 ? tags[0] : { type: "or", elements: tags };
  // Hermes' tags begin with its opener: a model whose <tool_call> is a special token cannot be made to write one.
  if (s.closeEach && !req.openerWritable) withOpener(req, one);
  if (req.choice === "forced") {
    // Mistral's forced list starts after [TOOL_CALLS], which the server assumes (a special token in Mistral's
    // tokenizers, which a grammar cannot write).
    return structuralTag(listOf(req.syntax, tags, one, parallel));
  }
  if (req.answer != null) {
    // One call or the answer: XGrammar takes no repetition of tags inside an `or`.
    const calls = withOpener(req, listOf(req.syntax, tags, one, false));
    return structuralTag({ type: "or", elements: [calls, await answerElement(req.answer.format, req.answer.field)] });
  }
  if (s.open === null) {
    // Llama: the answer is one call, or text that does not start with "{" (which would read as a call).
    return structuralTag({ type: "or", elements: [one, { type: "grammar", grammar: NOT_A_CALL }] });
  }
  if (s.closeEach) {
    // Hermes: free text; each <tool_call> starts a call that must follow its schema; after the first, the answer
    // ends unless calls may be parallel.
    return structuralTag({ type: "triggered_tags", triggers: [s.open], tags, stop_after_first: !parallel });
  }
  // Mistral: free text; [TOOL_CALLS] starts the list of calls (one, or up to MAX_LISTED_CALLS when parallel), which
  // ends the answer.
  withOpener(req, one); // (refuses an opener no grammar can write)
  const list: TagFormat = {
    type: "tag",
    begin: s.open + s.listOpen,
    content: listBody(s, one, parallel),
    end: s.close,
  };
  return structuralTag({ type: "triggered_tags", triggers: [s.open], tags: [list], stop_after_first: true });
}

/** Text that is no Llama call: optional whitespace, then anything that does not start with "{". */
const NOT_A_CALL = String.raw`root ::= [ \t\n\r]* (head [\u0000-\U0010ffff]*)?
head ::= [\u0000-\u0008\u000e-\u001f!-z|-\U0010ffff]`;

const structuralTag = (format: TagFormat): StructuredFormat => ({
  type: "structural_tag",
  structuralTag: { type: "structural_tag", format },
});

const constString = (value: string): TagFormat => ({ type: "const_string", value });

/** One call to `tool` in `syntax`, its arguments under the tool's schema. */
async function callTag(syntax: ToolCallSyntax, tool: ToolGrammarTool): Promise<TagFormat> {
  return {
    type: "tag",
    ...callText(syntax, tool.name),
    content: { type: "grammar", grammar: await schemaGrammar(argumentsSchema(tool.parameters), tool.field) },
  };
}

/**
 * A tool's parameters as the schema of its arguments, which are a JSON object (what the parsers read back and the
 * clients expect): none, `true` or a schema with no `type` and nothing that picks one (`{}`, `{"properties": ...}`)
 * gets `type: "object"` (alone, `{}` let a call's arguments be any JSON value: `[1]`, `"x"`).
 */
function argumentsSchema(parameters: ToolGrammarTool["parameters"]): Record<string, unknown> | boolean | string {
  if (parameters === null || parameters === true) return { type: "object" };
  if (typeof parameters !== "object") return parameters;
  const picks = ["type", "$ref", "anyOf", "oneOf", "allOf", "enum", "const"].some((k) => Object.hasOwn(parameters, k));
  return picks ? parameters : { ...parameters, type: "object" };
}

/** Calls as the syntax lists them: one (`one`), or one or more when `parallel`. */
function listOf(syntax: ToolCallSyntax, tags: TagFormat[], one: TagFormat, parallel: boolean): TagFormat {
  const s = TOOL_CALL_SYNTAXES[syntax];
  if (s.closeEach) return parallel ? { type: "tags_with_separator", tags, separator: s.pad, at_least_one: true } : one;
  if (s.listOpen === "") return one;
  return { type: "sequence", elements: [constString(s.listOpen), listBody(s, one, parallel), constString(s.close)] };
}

/**
 * The calls inside a bracketed list: one, or 1 to MAX_LISTED_CALLS spelled out (the list ends with its close, and
 * XGrammar takes nothing after a tags_with_separator).
 */
function listBody(s: ToolCallSyntaxSpec, one: TagFormat, parallel: boolean): TagFormat {
  const lists = Array.from({ length: parallel ? MAX_LISTED_CALLS : 1 }, (_, n) => ({
    type: "sequence",
    elements: Array.from({ length: n + 1 }, (_2, i) =>
      i === 0 ? [one] : [constString(`${s.separator} `), one],
    ).flat(),
  }));
  return lists.length === 1 ? lists[0] : { type: "or", elements: lists };
}

/** Calls that the model writes unforced: after the syntax's opener where it has one outside each call (Mistral). */
function withOpener(req: ToolGrammarRequest, calls: TagFormat): TagFormat {
  const s = TOOL_CALL_SYNTAXES[req.syntax];
  if (s.open === null) return calls; // Llama has none
  if (!req.openerWritable)
    throw new InvalidOptionError(
      `tools: ${s.open} is a special token of this model, which a grammar cannot write, so a call cannot be constrained unless it is forced`,
      { field: "tools" },
    );
  // Hermes' tags hold the opener in each call.
  return s.closeEach ? calls : { type: "sequence", elements: [constString(s.open), calls] };
}

/** A response format as an element of a structural tag (XGrammar's formats: structural_tag.d.ts). */
async function answerElement(format: StructuredFormat, field: string): Promise<TagFormat> {
  switch (format.type) {
    case "json_schema":
      return { type: "grammar", grammar: await schemaGrammar(format.schema, field, `${field}.schema`) };
    case "json_object":
      return { type: "grammar", grammar: await schemaGrammar({ type: "object" }, field) };
    case "regex":
      return { type: "regex", pattern: format.pattern };
    case "grammar":
      return { type: "grammar", grammar: format.grammar };
    case "choice":
      return { type: "or", elements: format.choices.map((value) => constString(value)) };
    case "structural_tag":
      return (format.structuralTag.format as TagFormat | undefined) ?? format.structuralTag;
    default:
      return format satisfies never;
  }
}

/** EBNF of JSON Schemas by their source text (bounded: the oldest is dropped past MAX_GRAMMARS). */
const grammars = new Map<string, Promise<string>>();
const MAX_GRAMMARS = 256;

/**
 * A JSON Schema as XGrammar's EBNF with no free whitespace (its errors name `field`, and the schema's keywords by
 * their path from `path`), as the engine compiles a json_schema format (from the
 * same source text: grammars.ts's grammarSource). Parsed in the sandbox first, so a schema XGrammar cannot use is an
 * InvalidOptionError naming `field` and never reaches this process's instance.
 */
export function schemaGrammar(
  schema: Record<string, unknown> | boolean | string,
  field: string,
  path = field,
): Promise<string> {
  let source;
  try {
    source = grammarSource({ type: "json_schema", schema }, field);
  } catch (e) {
    // grammarSource names the schema `${field}.schema` (a format's): here it is `path` (a tool's parameters are
    // the schema itself), and the error's field is the one the request wrote it in.
    if (!(e instanceof InvalidOptionError)) throw e;
    throw new InvalidOptionError(e.message.replaceAll(`${field}.schema`, path), { field });
  }
  if (source.kind !== "json_schema") throw new Error("a json_schema format has a json_schema source");
  const numbers = source.numbers ?? [];
  const key = [source.text, ...numbers].join("\u0000");
  const hit = grammars.get(key);
  if (hit !== undefined) return hit;
  const ebnf = (async () => {
    const error = await checkGrammar(source);
    if (error !== null)
      throw new InvalidOptionError(`${field}: XGrammar cannot use this JSON Schema: ${error}`, { field });
    const xg = await loadXGrammar();
    const g = await xg.Grammar.fromJSONSchema(source.text, false, -1);
    try {
      // Number ranges XGrammar gets wrong are placeholders in the schema, their EBNF put in here (numberRange.ts).
      return numbers.length === 0 ? g.toString() : substituteNumbers(g.toString(), numbers);
    } finally {
      g.dispose();
    }
  })();
  if (grammars.size >= MAX_GRAMMARS) grammars.delete(grammars.keys().next().value!);
  grammars.set(key, ebnf);
  // A failure is not kept: the next request reports it afresh (and the cache holds only grammars).
  ebnf.catch(() => {
    if (grammars.get(key) === ebnf) grammars.delete(key);
  });
  return ebnf;
}
