// The constraint of a chat request with tools, as an XGrammar structural tag in the model's own tool-call syntax: a
// forced call (`tool_choice: "required"` or a named function) whose arguments are an instance of the function's
// parameters schema, so any model, even a random one, writes a call that parses and validates; with
// `tool_choice: "auto"` and a response format, either one call or an answer in the format.
//
// A schema inside a structural tag is given as an EBNF grammar, not as a json_schema element: XGrammar (0.1.27)
// compiles a structural tag's json_schema elements allowing any whitespace between JSON tokens, which a weak model
// fills until max_tokens; the grammar is the one a json_schema format compiles to (one line, no free whitespace).
import { grammarSource } from "../grammar/grammars.js";
import type { StructuredFormat, StructuredOutput } from "../grammar/types.js";
import { loadXGrammar } from "../grammar/xgrammar.js";
import { badRequest } from "./errors.js";
import type { ServeTarget } from "./state.js";
import { prepareStructured, type StructuredRequest } from "./structured.js";
import type { FunctionTool, ToolCallSyntax, ToolPlan } from "./tools.js";

type TagFormat = Record<string, unknown>;

/**
 * The constraint a chat request generates under, and the field its errors name: a forced call (a format with it is
 * a 400 naming both: the call is the answer); with tool_choice "auto" and a format, either one call or an answer in
 * the format; else the format, if any.
 */
export async function chatConstraint(
  t: ServeTarget,
  plan: ToolPlan | null,
  format: StructuredRequest | null,
): Promise<StructuredRequest | null> {
  if (plan?.forced != null) {
    if (format !== null)
      throw badRequest(
        `tool_choice forces a tool call, and ${format.param} asks for an answer in a format; send one of them`,
        format.param,
      );
    const calls = await callsFormat(t, plan.syntax!, plan.forced.tools, plan.forced.parallel, plan.tools);
    return { structured: structuralTag(calls), param: "tools" };
  }
  if (plan?.syntax == null || format === null) return format;
  // One call: XGrammar takes no repetition of tags inside an `or`.
  const calls = await callsFormat(t, plan.syntax, plan.tools, false, plan.tools);
  const answer = await tagFormatOf(t, format);
  return { structured: structuralTag({ type: "or", elements: [calls, answer] }), param: format.param };
}

const structuralTag = (format: TagFormat): StructuredOutput => ({
  type: "structural_tag",
  structuralTag: { type: "structural_tag", format },
});

/** How a syntax writes one call around its arguments. */
function callText(syntax: ToolCallSyntax, name: string): { begin: string; end: string } {
  const n = JSON.stringify(name);
  switch (syntax) {
    case "hermes":
      return { begin: `<tool_call>\n{"name": ${n}, "arguments": `, end: "}\n</tool_call>" };
    case "llama3_json":
      return { begin: `{"name": ${n}, "parameters": `, end: "}" };
    case "mistral":
      return { begin: `{"name": ${n}, "arguments": `, end: "}" };
    default:
      return syntax satisfies never;
  }
}

/**
 * Calls to `tools` in `syntax`: one, or one or more when `parallel` (Hermes, Mistral). Mistral's calls are the JSON list after its
 * [TOOL_CALLS] token, which a grammar cannot write (a special token): the parser is told the answer starts after it.
 */
async function callsFormat(
  t: ServeTarget,
  syntax: ToolCallSyntax,
  tools: FunctionTool[],
  parallel: boolean,
  all: FunctionTool[],
): Promise<TagFormat> {
  const tags = await Promise.all(
    tools.map(async (tool) => ({
      type: "tag",
      ...callText(syntax, tool.function.name),
      content: {
        type: "grammar",
        grammar: await schemaGrammar(
          t,
          tool.function.parameters ?? { type: "object" },
          `tools[${all.indexOf(tool)}].function.parameters`,
        ),
      },
    })),
  );
  const one = tags.length === 1 ? tags[0] : { type: "or", elements: tags };
  // Llama 3.1's template takes one call a turn (it raises on more): never parallel.
  if (syntax === "llama3_json") return one;
  if (syntax === "hermes")
    return parallel ? { type: "tags_with_separator", tags, separator: "\n", at_least_one: true } : one;
  // Mistral's list ends with "]", and XGrammar takes nothing after a tags_with_separator: 1 to MISTRAL_MAX_CALLS calls.
  const lists = Array.from({ length: parallel ? MISTRAL_MAX_CALLS : 1 }, (_, n) => ({
    type: "sequence",
    elements: Array.from({ length: n + 1 }, (_2, i) => (i === 0 ? [one] : [constString(", "), one])).flat(),
  }));
  return {
    type: "sequence",
    elements: [constString("["), lists.length === 1 ? lists[0] : { type: "or", elements: lists }, constString("]")],
  };
}

const constString = (value: string): TagFormat => ({ type: "const_string", value });
const MISTRAL_MAX_CALLS = 4;

/** A response format as an element of a structural tag (XGrammar's formats: structural_tag.d.ts). */
async function tagFormatOf(t: ServeTarget, req: StructuredRequest): Promise<TagFormat> {
  const s: StructuredFormat = req.structured;
  switch (s.type) {
    case "json_schema":
      return { type: "grammar", grammar: await schemaGrammar(t, s.schema, req.param) };
    case "json_object":
      return { type: "grammar", grammar: await schemaGrammar(t, { type: "object" }, req.param) };
    case "regex":
      return { type: "regex", pattern: s.pattern };
    case "grammar":
      return { type: "grammar", grammar: s.grammar };
    case "choice":
      return { type: "or", elements: s.choices.map((value) => ({ type: "const_string", value })) };
    case "structural_tag":
      return (s.structuralTag.format as TagFormat | undefined) ?? s.structuralTag;
    default:
      return s satisfies never;
  }
}

/** EBNF of JSON Schemas by their text (bounded: the oldest is dropped past MAX_GRAMMARS). */
const grammars = new Map<string, string>();
const MAX_GRAMMARS = 256;

/**
 * A JSON Schema as XGrammar's EBNF with no free whitespace, as the engine compiles a json_schema format (from the
 * same source text: ts/grammar/grammars.ts). The schema is compiled through the engine first, whose sandbox refuses
 * one XGrammar cannot use (a 400 naming `param`), so the converter here only sees schemas it takes.
 */
async function schemaGrammar(
  t: ServeTarget,
  schema: Record<string, unknown> | boolean | string,
  param: string,
): Promise<string> {
  const text = typeof schema === "string" ? schema : JSON.stringify(schema);
  const hit = grammars.get(text);
  if (hit !== undefined) return hit;
  await prepareStructured(t, { structured: { type: "json_schema", schema }, param });
  const xg = await loadXGrammar();
  const source = grammarSource({ type: "json_schema", schema }, param); // the text the engine would compile
  const g = await xg.Grammar.fromJSONSchema(source.kind === "json_schema" ? source.text : text, false, -1);
  let ebnf: string;
  try {
    ebnf = g.toString();
  } finally {
    g.dispose();
  }
  if (grammars.size >= MAX_GRAMMARS) grammars.delete(grammars.keys().next().value!);
  grammars.set(text, ebnf);
  return ebnf;
}
