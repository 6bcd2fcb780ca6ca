// The tool-call grammars of ts/grammar/toolGrammar.ts, matched character by character on a toy vocabulary (one token
// per printable ASCII character, newline and eos): what each syntax's grammar lets a model write under tool_choice
// "auto" with a strict function or parallel_tool_calls false (free text, and a call, once opened, under its schema;
// one call then the end), and that a forced call written as the grammar allows parses back through the server's
// parser (one description of each syntax).
import type * as XG from "@mlc-ai/web-xgrammar";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { toolCallFormat, type ToolCallSyntax, type ToolGrammarRequest } from "../../ts/grammar/toolGrammar.js";
import { loadXGrammar, type XGrammar } from "../../ts/grammar/xgrammar.js";
import { parseToolCalls } from "../../ts/server/toolCallParser.js";

const TOKENS: string[] = [];
for (let c = 32; c < 127; c++) TOKENS.push(String.fromCharCode(c));
TOKENS.push("\n", ""); // the last: eos
const EOS = TOKENS.length - 1;

let xg: XGrammar;
let compiler: XG.GrammarCompiler;
beforeAll(async () => {
  xg = await loadXGrammar();
  const info = await xg.TokenizerInfo.createTokenizerInfo(TOKENS, "raw", false, TOKENS.length, [EOS]);
  compiler = await xg.GrammarCompiler.createGrammarCompiler(info);
});
afterAll(() => compiler?.dispose());

const ADD = {
  type: "object",
  properties: { a: { type: "integer", minimum: 0, maximum: 99 }, b: { type: "integer", minimum: 0, maximum: 99 } },
  required: ["a", "b"],
  additionalProperties: false,
};
const TOOLS = [
  { name: "add", parameters: ADD, field: "tools[0].function.parameters" },
  { name: "noop", parameters: null, field: "tools[1].function.parameters" },
];

/** Whether the grammar of `req` accepts `text` whole (and can end there). */
async function accepts(req: Omit<ToolGrammarRequest, "tools">, texts: string[]): Promise<boolean[]> {
  const format = await toolCallFormat({ ...req, tools: TOOLS });
  if (format.type !== "structural_tag") throw new Error("expected a structural tag");
  const compiled = await compiler.compileStructuralTag(JSON.stringify(format.structuralTag));
  const out: boolean[] = [];
  for (const text of texts) {
    const m = await xg.GrammarMatcher.createGrammarMatcher(compiled);
    let ok = true;
    for (const ch of text) if (!m.acceptToken(TOKENS.indexOf(ch))) ok = false;
    out.push(ok && m.acceptToken(EOS));
    m.dispose();
  }
  compiled.dispose();
  return out;
}

const hermesCall = (name: string, args: string) =>
  `<tool_call>\n{"name": "${name}", "arguments": ${args}}\n</tool_call>`;

describe("a tool's arguments are a JSON object", () => {
  it('parameters {} / true / properties without a type: a forced call\'s arguments are an object, never [1] or "x"', async () => {
    for (const parameters of [{}, true, { properties: { q: { type: "string" } } }] as const) {
      const format = await toolCallFormat({
        syntax: "hermes",
        choice: "forced",
        parallel: false,
        openerWritable: true,
        tools: [{ name: "f", parameters, field: "tools[0].function.parameters" }],
      });
      if (format.type !== "structural_tag") throw new Error("expected a structural tag");
      const compiled = await compiler.compileStructuralTag(JSON.stringify(format.structuralTag));
      const results: boolean[] = [];
      for (const args of ['{"q": "a"}', "[1]", '"x"', "1"]) {
        const m = await xg.GrammarMatcher.createGrammarMatcher(compiled);
        let ok = true;
        for (const ch of hermesCall("f", args)) if (!m.acceptToken(TOKENS.indexOf(ch))) ok = false;
        results.push(ok && m.acceptToken(EOS));
        m.dispose();
      }
      compiled.dispose();
      expect(results, JSON.stringify(parameters)).toEqual([true, false, false, false]);
    }
  });
});

describe('tool_choice "auto", calls constrained once started', () => {
  it("hermes, parallel_tool_calls false: text, then at most one call under its schema, then the end", async () => {
    const req = { syntax: "hermes" as const, choice: "auto" as const, parallel: false, openerWritable: true };
    expect(
      await accepts(req, [
        "Just text, no call.",
        `Let me add. ${hermesCall("add", '{"a": 2, "b": 3}')}`,
        hermesCall("noop", '{"any": [1, "x"]}'), // no schema: any JSON object
        `${hermesCall("add", '{"a": 2, "b": 3}')}\n${hermesCall("add", '{"a": 1, "b": 1}')}`, // a second call
        `${hermesCall("add", '{"a": 2, "b": 3}')} and more text`, // text after the one call
        hermesCall("add", '{"a": 2}'), // b missing: not the schema
        hermesCall("add", '{"a": 2, "b": "3"}'),
        hermesCall("sub", '{"a": 2, "b": 3}'), // not a declared function
      ]),
    ).toEqual([true, true, true, false, false, false, false, false]);
  });

  it("hermes, parallel (a strict function): calls and text interleave, each call under its schema", async () => {
    const req = { syntax: "hermes" as const, choice: "auto" as const, parallel: true, openerWritable: true };
    expect(
      await accepts(req, [
        `A ${hermesCall("add", '{"a": 2, "b": 3}')} B ${hermesCall("add", '{"a": 1, "b": 1}')} C`,
        `A ${hermesCall("add", '{"a": 2, "b": 300}')}`,
      ]),
    ).toEqual([true, false]);
  });

  it("llama3_json: text that does not start with {, or one call under its schema", async () => {
    const req = { syntax: "llama3_json" as const, choice: "auto" as const, parallel: true, openerWritable: false };
    expect(
      await accepts(req, [
        "The answer is {4}.",
        '{"name": "add", "parameters": {"a": 2, "b": 3}}',
        '{"name": "Alice", "parameters": {}}',
        '  {"a": 1}',
        '{"name": "add", "parameters": {"a": 2, "b": 3}}; {"name": "noop", "parameters": {}}',
      ]),
    ).toEqual([true, true, false, false, false]);
  });

  it("mistral: text, then one [TOOL_CALLS] list under the schemas that ends the answer; a special opener refused", async () => {
    const req = { syntax: "mistral" as const, choice: "auto" as const, parallel: false, openerWritable: true };
    const call = '{"name": "add", "arguments": {"a": 2, "b": 3}}';
    expect(
      await accepts(req, [
        "Plain text.",
        `Sure. [TOOL_CALLS][${call}]`,
        `[TOOL_CALLS][${call}, ${call}]`,
        `[TOOL_CALLS][${call}] more`,
        '[TOOL_CALLS][{"name": "add", "arguments": {"a": -1, "b": 3}}]',
      ]),
    ).toEqual([true, true, false, false, false]);
    expect((await accepts({ ...req, parallel: true }, [`[TOOL_CALLS][${call}, ${call}]`]))[0]).toBe(true);
    await expect(toolCallFormat({ ...req, tools: TOOLS, openerWritable: false })).rejects.toMatchObject({
      code: "invalid_option",
      field: "tools",
    });
  });
});

describe('tool_choice "auto" with a response format', () => {
  it.each(["hermes", "mistral"] as const)(
    "%s: one call (with the syntax's opener, which the parser needs) or an answer in the format",
    async (syntax) => {
      const req = {
        syntax,
        choice: "auto" as const,
        parallel: true,
        openerWritable: true,
        answer: { format: { type: "json_object" as const }, field: "response_format" },
      };
      const call =
        syntax === "hermes"
          ? hermesCall("add", '{"a": 2, "b": 3}')
          : '[TOOL_CALLS][{"name": "add", "arguments": {"a": 2, "b": 3}}]';
      expect(
        await accepts(req, [
          call,
          '{"ok": true}',
          "plain text",
          call.replace(syntax === "hermes" ? "<tool_call>" : "[TOOL_CALLS]", ""),
        ]),
      ).toEqual([true, true, false, false]);
      // What the grammar writes, the (unforced) parser reads as the call.
      expect(parseToolCalls(syntax, call, () => "id").calls).toHaveLength(1);
    },
  );
});

describe("forced calls", () => {
  it.each(["hermes", "llama3_json", "mistral"] as const)(
    "%s: a call written as the grammar allows is accepted, and parses back into the call",
    async (syntax: ToolCallSyntax) => {
      const req = { syntax, choice: "forced" as const, parallel: false, openerWritable: syntax !== "mistral" };
      const text = {
        hermes: hermesCall("add", '{"a": 2, "b": 3}'),
        llama3_json: '{"name": "add", "parameters": {"a": 2, "b": 3}}',
        mistral: '[{"name": "add", "arguments": {"a": 2, "b": 3}}]', // after [TOOL_CALLS], which the server assumes
      }[syntax];
      expect(await accepts(req, [text, "no call"])).toEqual([true, false]);
      const parsed = parseToolCalls(syntax, text, () => "id", { afterOpener: syntax === "mistral" });
      expect(parsed.calls).toEqual([{ id: "id", name: "add", arguments: '{"a": 2, "b": 3}' }]);
    },
  );

  it("a schema XGrammar cannot use is an InvalidOptionError naming its field", async () => {
    await expect(
      toolCallFormat({
        syntax: "hermes",
        choice: "forced",
        parallel: false,
        openerWritable: true,
        tools: [{ name: "f", parameters: { type: "frobnicate" }, field: "tools[3].function.parameters" }],
      }),
    ).rejects.toMatchObject({ code: "invalid_option", field: "tools[3].function.parameters" });
  });
});
