// The tool-call parser with no model: each syntax's calls and content out of answers as models write them, and the
// property the server relies on to stream: however the answer is cut into pieces, the joined deltas and content equal
// those of the whole answer (so a streamed response assembles into the non-streamed one).
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { callText, TOOL_CALL_SYNTAXES } from "../../ts/grammar/toolGrammar.js";
import { joinToolCallDeltas, parseToolCalls, ToolCallParser } from "../../ts/server/toolCallParser.js";
import type { ToolCallSyntax } from "../../ts/server/tools.js";

const ids = () => {
  let k = 0;
  return () => `call_${k++}`;
};
const parse = (syntax: ToolCallSyntax, text: string, afterOpener = false, names?: string[]) => {
  const { cut: _cut, ...r } = parseToolCalls(syntax, text, ids(), { afterOpener, names });
  return r;
};
/** A streamed parse: the deltas and content of the whole answer pushed at once, and how it ended. */
const stream = (syntax: ToolCallSyntax, text: string, names?: string[]) => {
  const p = new ToolCallParser(syntax, ids(), { names });
  const a = p.push(text);
  const b = p.end();
  return {
    content: a.content + b.content,
    calls: joinToolCallDeltas([...a.toolCalls, ...b.toolCalls]),
    cut: b.cut,
    intact: p.intact,
  };
};

describe("tool-call syntaxes", () => {
  it("hermes / Qwen: one or several <tool_call> blocks, arguments as written, text outside them as content", () => {
    expect(
      parse(
        "hermes",
        '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "x": [1, {"a": "}"}]}}\n</tool_call>',
      ),
    ).toEqual({
      content: "",
      calls: [{ id: "call_0", name: "get_weather", arguments: '{"city": "Paris", "x": [1, {"a": "}"}]}' }],
    });
    expect(
      parse(
        "hermes",
        'Let me check.\n<tool_call>\n{"name": "a", "arguments": {}}\n</tool_call>\n<tool_call>\n{"arguments": {"x": 1}, "name": "b"}\n</tool_call>\n',
      ),
    ).toEqual({
      content: "Let me check.",
      calls: [
        { id: "call_0", name: "a", arguments: "{}" },
        { id: "call_1", name: "b", arguments: '{"x":1}' }, // another key order: read whole, re-serialized
      ],
    });
  });

  it("text that is no call stays content, byte for byte", () => {
    for (const text of ["plain < text <tool and more  \n", "<tool_call>not json</tool_call> after", "a {b} c", ""])
      expect(parse("hermes", text)).toEqual({ content: text, calls: [] });
    expect(parse("llama3_json", "The answer is {not a call}")).toEqual({
      content: "The answer is {not a call}",
      calls: [],
    });
  });

  it("llama3_json: the answer is the call ({name, parameters}), calls split by ;, <|python_tag|> allowed", () => {
    expect(parse("llama3_json", ' {"name": "f", "parameters": {"q": "x"}}; {"name": "g", "parameters": {}}')).toEqual({
      content: "",
      calls: [
        { id: "call_0", name: "f", arguments: '{"q": "x"}' },
        { id: "call_1", name: "g", arguments: "{}" },
      ],
    });
    expect(parse("llama3_json", '<|python_tag|>{"name": "f", "parameters": {"q": 1}}').calls).toHaveLength(1);
  });

  it("an object naming no declared function is no call: it stays content, byte for byte (every syntax)", () => {
    const names = ["get_weather", "add"];
    // Llama 3.1: an answer that is a JSON object with a string name, as a JSON answer to the user may be.
    for (const text of [
      '{"name": "Alice", "parameters": {"age": 3}}',
      '{"name": "Alice", "age": 3}',
      '{"parameters": {}, "name": "lookup"}',
      ' {"name": "Alice", "parameters": {"age": 3}}; {"name": "add", "parameters": {}}',
    ])
      expect(parse("llama3_json", text, false, names), text).toEqual({ content: text, calls: [] });
    expect(parse("llama3_json", '{"name": "add", "parameters": {"a": 1}}', false, names).calls).toEqual([
      { id: "call_0", name: "add", arguments: '{"a": 1}' },
    ]);
    const hermes =
      '<tool_call>\n{"name": "nope", "arguments": {}}\n</tool_call> then <tool_call>\n{"name": "add", "arguments": {}}\n</tool_call>';
    expect(parse("hermes", hermes, false, names)).toEqual({
      content: '<tool_call>\n{"name": "nope", "arguments": {}}\n</tool_call> then',
      calls: [{ id: "call_0", name: "add", arguments: "{}" }],
    });
    const mistral = '[TOOL_CALLS][{"name": "nope", "arguments": {}}]';
    expect(parse("mistral", mistral, false, names)).toEqual({ content: mistral, calls: [] });
  });

  it("maxCalls 1 (parallel_tool_calls false): the first call is read, any further call's text is content", () => {
    const one = (syntax: ToolCallSyntax, text: string) =>
      parseToolCalls(syntax, text, ids(), { maxCalls: 1, names: ["a", "b"] });
    const hermes =
      '<tool_call>\n{"name": "a", "arguments": {}}\n</tool_call>\n<tool_call>\n{"name": "b", "arguments": {}}\n</tool_call>';
    expect(one("hermes", hermes)).toEqual({
      content: '<tool_call>\n{"name": "b", "arguments": {}}\n</tool_call>',
      calls: [{ id: "call_0", name: "a", arguments: "{}" }],
      cut: false,
    });
    expect(one("llama3_json", '{"name": "a", "parameters": {}}; {"name": "b", "parameters": {}}').calls).toEqual([
      { id: "call_0", name: "a", arguments: "{}" },
    ]);
    expect(
      one("mistral", '[TOOL_CALLS][{"name": "a", "arguments": {}}, {"name": "b", "arguments": {}}]').calls,
    ).toEqual([{ id: "call_0", name: "a", arguments: "{}" }]);
  });

  it("mistral: [TOOL_CALLS] and a JSON list; a forced call's list starts the answer", () => {
    const list = '[{"name": "f", "arguments": {"q": 1}}, {"name": "g", "arguments": {}}]';
    const expected = [
      { id: "call_0", name: "f", arguments: '{"q": 1}' },
      { id: "call_1", name: "g", arguments: "{}" },
    ];
    expect(parse("mistral", `[TOOL_CALLS]${list}`)).toEqual({ content: "", calls: expected });
    expect(parse("mistral", list, true)).toEqual({ content: "", calls: expected });
    expect(parse("mistral", list)).toEqual({ content: list, calls: [] });
  });

  it("a call cut off (max_tokens, a stop string) is no call: whole, its text is content; streamed, it is flagged", () => {
    const cutOff = 'Checking.\n<tool_call>\n{"name": "a", "arguments": {"x": "trunc';
    expect(parseToolCalls("hermes", cutOff, ids())).toEqual({ content: cutOff, calls: [], cut: true });
    // Streamed, the name and the arguments so far went out before the cut: the parser says the call is cut.
    expect(stream("hermes", cutOff)).toMatchObject({ content: "Checking.", cut: true, intact: false });
    // A complete call then a cut one: the complete one is a call, the cut one content.
    const two = '<tool_call>\n{"name": "a", "arguments": {}}\n</tool_call>\n<tool_call>\n{"name": "b", "argu';
    expect(parseToolCalls("hermes", two, ids())).toEqual({
      content: '<tool_call>\n{"name": "b", "argu',
      calls: [{ id: "call_0", name: "a", arguments: "{}" }],
      cut: true,
    });
    // An opener with nothing after it, and each other syntax's cut call.
    expect(parseToolCalls("hermes", "Sure. <tool_call>\n", ids())).toEqual({
      content: "Sure. <tool_call>\n",
      calls: [],
      cut: true,
    });
    for (const [syntax, text] of [
      ["llama3_json", '{"name": "a", "parameters": {"q": [1, 2'],
      ["mistral", '[TOOL_CALLS][{"name": "a", "arguments": {"q": 1}}, {"name": "a", "arguments": {"q"'],
    ] as const) {
      const r = parseToolCalls(syntax, text, ids());
      expect(r.cut, syntax).toBe(true);
      expect(r.content, syntax).toMatch(/^\s*\{"name": "a"/); // the cut call's text, as written
      expect(text.endsWith(r.content), syntax).toBe(true);
      expect(
        r.calls.every((c) => JSON.parse(c.arguments) !== undefined),
        syntax,
      ).toBe(true);
    }
    // A call whose object closed but whose closing tag was cut is complete.
    expect(parseToolCalls("hermes", '<tool_call>\n{"name": "a", "arguments": {}}\n</tool_', ids())).toEqual({
      content: "",
      calls: [{ id: "call_0", name: "a", arguments: "{}" }],
      cut: false,
    });
  });

  it("a malformed call does not swallow the text after it (whole and streamed)", () => {
    // Text after the arguments inside the object, and a closing tag inside an unfinished object.
    for (const bad of [
      '<tool_call>\n{"name": "a", "arguments": {"x": 1} oops</tool_call>',
      '<tool_call>\n{"name": "a", "arguments": {"x": "unterminated}\n</tool_call>',
      '<tool_call>\n{"name": "a", "arguments": {"x": 1},}\n</tool_call>',
    ]) {
      const text = `${bad} The answer is 4. <tool_call>\n{"name": "b", "arguments": {}}\n</tool_call>`;
      expect(parseToolCalls("hermes", text, ids()), bad).toEqual({
        content: `${bad} The answer is 4.`,
        calls: [{ id: "call_0", name: "b", arguments: "{}" }],
        cut: false,
      });
      // Streamed: the malformed call's first deltas went out (flagged), the text after it is content, b is a call.
      const s = stream("hermes", text);
      expect(s.intact, bad).toBe(false);
      expect(s.content, bad).toMatch(/The answer is 4\.$/);
      expect(s.calls.at(-1), bad).toMatchObject({ name: "b", arguments: "{}" });
    }
    expect(parse("hermes", '<tool_call>{"name": "we\\"ird", "arguments": "s t"}</tool_call>').calls).toEqual([
      { id: "call_0", name: 'we"ird', arguments: '"s t"' },
    ]);
  });

  it("streams a call's name first, then its arguments in pieces as they come", () => {
    const p = new ToolCallParser("hermes", ids());
    expect(p.push('<tool_call>\n{"name": "f", "argu').toolCalls).toEqual([]);
    expect(p.push('ments": {"a"').toolCalls).toEqual([
      { index: 0, id: "call_0", type: "function", function: { name: "f", arguments: '{"a"' } },
    ]);
    expect(p.push(": 1").toolCalls).toEqual([{ index: 0, function: { arguments: ": 1" } }]);
    expect(p.push("}}\n</tool_call>").toolCalls).toEqual([{ index: 0, function: { arguments: "}" } }]);
    expect(p.end()).toEqual({ content: "", toolCalls: [], cut: false });
  });
});

describe("one description of each syntax, read by the grammar and by the parser", () => {
  it("calls written as the grammar writes them (callText and the syntax's markers) parse back to the same calls", () => {
    const calls = [
      { name: "get_weather", args: '{"city": "Paris", "days": [1, 2]}' },
      { name: "add", args: '{"a": 1, "b": "x\\"}"}' },
    ];
    for (const syntax of Object.keys(TOOL_CALL_SYNTAXES) as ToolCallSyntax[]) {
      const s = TOOL_CALL_SYNTAXES[syntax];
      const written = (s.maxCalls === 1 ? calls.slice(0, 1) : calls).map((c) => {
        const { begin, end } = callText(syntax, c.name);
        return begin + c.args + end;
      });
      const answer = s.closeEach
        ? written.join(s.pad)
        : s.listOpen !== ""
          ? `${s.open}${s.listOpen}${written.join(`${s.separator} `)}${s.close}`
          : written.join(`${s.separator} `);
      const expected = (s.maxCalls === 1 ? calls.slice(0, 1) : calls).map((c, i) => ({
        id: `call_${i}`,
        name: c.name,
        arguments: c.args,
      }));
      expect(parse(syntax, answer), syntax).toEqual({ content: "", calls: expected });
    }
  });
});

const answers: Record<ToolCallSyntax, string[]> = {
  hermes: [
    'Sure.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "n": [1, 2]}}\n</tool_call>\n<tool_call>\n{"name": "add", "arguments": {"a": "x\\"}"}}\n</tool_call>',
    '<tool_call>\n{"arguments": {"q": 1}, "name": "f"}\n</tool_call> then text <tool_ca',
    "no calls here, just <b>text</b>",
    '<tool_call>\n{"name": "a", "arguments": {"x": 1} oops</tool_call> after <tool_call>\n{"name": "b", "argu',
  ],
  llama3_json: [
    '{"name": "f", "parameters": {"a": {"b": [1, "}"]}}}; {"name": "g", "parameters": {}}',
    "Answer: 42",
    '{"name": "f", "parameters": {"a": 1} x',
  ],
  mistral: [
    'Hm [TOOL_CALLS] [{"name": "f", "arguments": {"x": null}}, {"name": "g", "arguments": {"y": true}}]',
    "[x]",
  ],
};

describe("property: cutting the answer anywhere changes nothing", () => {
  it("pushed in random pieces, the joined deltas and content equal the whole answer's", () => {
    const arb = fc
      .constantFrom(...(Object.keys(answers) as ToolCallSyntax[]))
      .chain((syntax) =>
        fc.tuple(
          fc.constant(syntax),
          fc.constantFrom(...answers[syntax]),
          fc.array(fc.integer({ min: 0, max: 200 }), { maxLength: 12 }),
        ),
      );
    fc.assert(
      fc.property(arb, ([syntax, text, cuts]) => {
        // Streamed pieces against the whole answer streamed at once, and held pieces against parseToolCalls.
        const hold = cuts.length % 2 === 0;
        const whole = hold ? parse(syntax, text) : (({ cut: _c, intact: _i, ...r }) => r)(stream(syntax, text));
        const p = new ToolCallParser(syntax, ids(), { hold });
        const points = [...new Set(cuts.map((c) => Math.min(c, text.length)))].sort((a, b) => a - b);
        let content = "";
        const deltas = [];
        let at = 0;
        for (const cut of [...points, text.length]) {
          const piece = p.push(text.slice(at, cut));
          at = cut;
          content += piece.content;
          deltas.push(...piece.toolCalls);
        }
        const last = p.end();
        content += last.content;
        deltas.push(...last.toolCalls);
        expect({ content, calls: joinToolCallDeltas(deltas) }).toEqual(whole);
      }),
      { numRuns: 300, seed: 44 },
    );
  });
});
