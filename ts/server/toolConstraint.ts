// The constraint of a chat request with tools: the plan (tools.ts) described to ts/grammar/toolGrammar.ts, which
// builds the XGrammar structural tag in the model's own tool-call syntax. A forced call (`tool_choice: "required"` or
// a named function) has arguments that are an instance of the function's parameters schema, so any model, even a
// random one, writes a call that parses and validates; with `tool_choice: "auto"` and a response format, either one
// call or an answer in the format; with "auto" and calls to constrain (a strict function, parallel_tool_calls false),
// free text in which a call, once started, follows its schema.
import { InvalidOptionError } from "../errors/index.js";
import { toolCallFormat, type ToolGrammarRequest } from "../grammar/toolGrammar.js";
import { ApiError, badRequest } from "./errors.js";
import type { StructuredRequest } from "./structured.js";
import type { FunctionTool, ToolPlan } from "./tools.js";

/**
 * The constraint a chat request generates under, and the field its errors name: a forced call (a format with it is
 * a 400 naming both: the call is the answer); with tool_choice "auto" and a format, either one call or an answer in
 * the format; with "auto" and calls to constrain, text or constrained calls; else the format, if any.
 */
export async function chatConstraint(
  plan: ToolPlan | null,
  format: StructuredRequest | null,
): Promise<StructuredRequest | null> {
  if (plan?.forced != null) {
    if (format !== null)
      throw badRequest(
        `tool_choice forces a tool call, and ${format.param} asks for an answer in a format; send one of them`,
        format.param,
      );
    return { structured: await build(plan, "forced", plan.forced.tools, plan.forced.parallel, null), param: "tools" };
  }
  if (plan?.syntax == null) return format;
  if (format !== null) return { structured: await build(plan, "auto", plan.tools, false, format), param: format.param };
  if (plan.constrainCalls)
    return { structured: await build(plan, "auto", plan.tools, plan.maxCalls === null, null), param: "tools" };
  return null;
}

async function build(
  plan: ToolPlan,
  choice: ToolGrammarRequest["choice"],
  tools: FunctionTool[],
  parallel: boolean,
  answer: StructuredRequest | null,
): Promise<StructuredRequest["structured"]> {
  try {
    return await toolCallFormat({
      syntax: plan.syntax!,
      tools: tools.map((tool) => ({
        name: tool.function.name,
        parameters: tool.function.parameters ?? null,
        field: `tools[${plan.tools.indexOf(tool)}].function.parameters`,
      })),
      choice,
      parallel,
      answer: answer === null ? null : { format: answer.structured, field: answer.param },
      openerWritable: plan.openerWritable,
    });
  } catch (e) {
    // A schema XGrammar cannot use: a 400 naming the field the client wrote it in.
    if (e instanceof InvalidOptionError)
      throw new ApiError(400, e.message, "invalid_request_error", e.field ?? "tools", e.code);
    throw e;
  }
}
