// Structured outputs over HTTP on the bundled tiny reasoner, with clients nobody here wrote: the openai client's
// chat.completions.parse(zodResponseFormat(...)), raw response_format / vLLM fields, and ajv judging every answer.
// The thought stays free (the reasoner still reasons) and the answer after it is the format; n > 1 constrains every
// sample; fields that cannot be served are 400s naming them.
import { Ajv } from "ajv";
import OpenAI from "openai";
import { zodResponseFormat } from "openai/helpers/zod";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { z } from "zod";
import type { DeliberateServer } from "../../ts/server/index.js";
import { startBundledServer } from "../helpers/bundledServer.js";

let server: DeliberateServer;
let url: string;
let client: OpenAI;
const ajv = new Ajv();
const QUESTION = [{ role: "user" as const, content: "What is 7*(8+5)-19?" }];

// Bounded (integer range, string length, enum) so even a tiny model's answer completes within max_tokens.
const SCHEMA = {
  type: "object",
  properties: {
    answer: { type: "integer", minimum: 0, maximum: 999 },
    unit: { type: "string", enum: ["apples", "pears"] },
    // A nullable string with a bound: anyOf, one type per branch (XGrammar ignores keywords beside a type list)
    note: { anyOf: [{ type: "string", maxLength: 8 }, { type: "null" }] },
  },
  required: ["answer", "unit", "note"],
  additionalProperties: false,
} as const;
const RESPONSE_FORMAT = { type: "json_schema", json_schema: { name: "count", strict: true, schema: SCHEMA } };

beforeAll(async () => {
  ({ server, url } = await startBundledServer());
  client = new OpenAI({ baseURL: `${url}/v1`, apiKey: "unused", maxRetries: 0 });
}, 60_000);
afterAll(async () => {
  await server?.close();
});

async function post(path: string, body: Record<string, unknown>): Promise<{ status: number; json: any }> {
  const r = await fetch(url + path, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify(body),
  });
  return { status: r.status, json: await r.json() };
}
const chat = (body: Record<string, unknown>) =>
  post("/v1/chat/completions", { messages: QUESTION, max_tokens: 160, ...body });

describe("response_format", () => {
  it("openai chat.completions.parse(zodResponseFormat(...)) returns the parsed object, valid by ajv", async () => {
    const Count = z.object({
      answer: z.number().int().min(0).max(999),
      unit: z.enum(["apples", "pears"]),
      note: z.string().max(8).nullable(),
    });
    const format = zodResponseFormat(Count, "count");
    const r = await client.chat.completions.parse({
      model: "tiny-reasoner",
      messages: QUESTION,
      max_tokens: 160,
      temperature: 0,
      response_format: format,
    });
    const message = r.choices[0].message as (typeof r.choices)[0]["message"] & { reasoning: string | null };
    expect(r.choices[0].finish_reason).toBe("stop");
    expect(message.parsed).not.toBeNull();
    expect(ajv.validate(format.json_schema.schema!, message.parsed), message.content ?? "").toBe(true);
    expect(Count.parse(message.parsed)).toEqual(message.parsed);
    // The thought stayed free: the reasoner reasoned before answering in the format.
    expect(message.reasoning ?? "").toMatch(/\S/);
  });

  it("json_schema with n = 3: every sample's answer validates; streamed, the joined content does too", async () => {
    const validate = ajv.compile(SCHEMA);
    const r = await chat({ response_format: RESPONSE_FORMAT, n: 3, temperature: 1, seed: 7 });
    expect(r.status, JSON.stringify(r.json)).toBe(200);
    expect(r.json.choices).toHaveLength(3);
    for (const c of r.json.choices) {
      expect(c.finish_reason).toBe("stop");
      expect(validate(JSON.parse(c.message.content)), c.message.content).toBe(true);
    }
    const stream = await client.chat.completions.create({
      model: "tiny-reasoner",
      messages: QUESTION,
      max_tokens: 160,
      temperature: 0,
      stream: true,
      response_format: RESPONSE_FORMAT as never,
    });
    let content = "";
    for await (const chunk of stream) content += chunk.choices[0]?.delta.content ?? "";
    expect(validate(JSON.parse(content)), content).toBe(true);
  });

  it("json_object: the answer is a JSON object", async () => {
    const r = await chat({ response_format: { type: "json_object" }, temperature: 0 });
    expect(r.status).toBe(200);
    const c = r.json.choices[0];
    expect(c.finish_reason).toBe("stop");
    const v = JSON.parse(c.message.content) as unknown;
    expect(typeof v === "object" && v !== null && !Array.isArray(v)).toBe(true);
  });

  it("text is the free answer; another type is a 400 naming response_format and the types", async () => {
    expect((await chat({ response_format: { type: "text" }, max_tokens: 8 })).status).toBe(200);
    const r = await chat({ response_format: { type: "bogus" } });
    expect(r.status).toBe(400);
    expect(r.json.error).toMatchObject({ type: "invalid_request_error", param: "response_format" });
    expect(r.json.error.message).toMatch(/json_schema.*json_object.*text/);
    const noSchema = await chat({ response_format: { type: "json_schema", json_schema: { name: "x" } } });
    expect(noSchema.status).toBe(400);
    expect(noSchema.json.error.param).toBe("response_format.json_schema.schema");
  });

  it("a key response_format does not name is a 400 naming it, never dropped (another provider's schema placement)", async () => {
    // {type: "json_object", schema} is how some providers take a schema: dropped, the answer would be any object.
    const placed = await chat({ response_format: { type: "json_object", schema: SCHEMA } });
    expect(placed.status).toBe(400);
    expect(placed.json.error).toMatchObject({ type: "invalid_request_error", param: "response_format.schema" });
    expect(placed.json.error.message).toMatch(/json_schema: \{name, schema/);
    const outside = await chat({ response_format: { ...RESPONSE_FORMAT, strict: true } });
    expect(outside.json.error.param).toBe("response_format.strict");
    const inside = await chat({
      response_format: { type: "json_schema", json_schema: { name: "x", schema: SCHEMA, schema_: 1 } },
    });
    expect(inside.json.error.param).toBe("response_format.json_schema.schema_");
    // What the openai client's zodResponseFormat and the AI SDK send (description included) is served.
    const full = { name: "count", description: "a count", strict: true, schema: SCHEMA };
    expect((await chat({ response_format: { type: "json_schema", json_schema: full }, max_tokens: 8 })).status).toBe(
      200,
    );
  });
});

describe("vLLM's structured_outputs and guided_* fields", () => {
  it("guided_choice answers one of the choices; guided_regex a match; on chat and completions", async () => {
    const choices = ["positive", "negative", "neutral"];
    for (const body of [{ guided_choice: choices }, { structured_outputs: { choice: choices } }]) {
      const r = await chat({ ...body, n: 2, temperature: 1, seed: 3 });
      expect(r.status, JSON.stringify(r.json)).toBe(200);
      for (const c of r.json.choices) expect(choices).toContain(c.message.content);
    }
    const pattern = "[a-z]{3}-[0-9]{2}";
    const regex = await chat({ guided_regex: pattern, temperature: 0 });
    expect(regex.json.choices[0].message.content).toMatch(new RegExp(`^${pattern}$`));
    // A completion's text is the format from its first token (no thought split on this route).
    const completion = await post("/v1/completions", { prompt: "Count:", max_tokens: 60, n: 2, guided_json: SCHEMA });
    expect(completion.status, JSON.stringify(completion.json)).toBe(200);
    for (const c of completion.json.choices) expect(ajv.validate(SCHEMA, JSON.parse(c.text)), c.text).toBe(true);
    const cRegex = await post("/v1/completions", { prompt: "Code:", max_tokens: 20, guided_regex: pattern });
    expect(cRegex.json.choices[0].text).toMatch(new RegExp(`^${pattern}$`));
  });

  it("guided_grammar and structured_outputs.grammar: an answer of the EBNF grammar", async () => {
    const grammar = 'root ::= "yes" | "no" | ("maybe " [0-9])';
    for (const body of [{ guided_grammar: grammar }, { structured_outputs: { grammar } }]) {
      const r = await chat({ ...body, temperature: 0 });
      expect(r.status, JSON.stringify(r.json)).toBe(200);
      expect(r.json.choices[0].message.content).toMatch(/^(yes|no|maybe [0-9])$/);
    }
  });

  it("two constraints at once, or a structured_outputs with two kinds, is a 400 naming both", async () => {
    const both = await chat({ response_format: RESPONSE_FORMAT, guided_regex: "a+" });
    expect(both.status).toBe(400);
    expect(both.json.error.message).toMatch(/response_format and guided_regex/);
    const two = await chat({ structured_outputs: { regex: "a+", choice: ["a"] } });
    expect(two.status).toBe(400);
    expect(two.json.error).toMatchObject({ param: "structured_outputs" });
    expect(two.json.error.message).toMatch(/regex and choice/);
    const unknown = await chat({ structured_outputs: { json: SCHEMA, whitespace_pattern: " " } });
    expect(unknown.status).toBe(400);
    expect(unknown.json.error.message).toMatch(/whitespace_pattern/);
  });

  it("a grammar or schema XGrammar cannot use is a 400 naming the field the client sent, before any stream", async () => {
    const grammar = await chat({ guided_grammar: "root ::= (", stream: true });
    expect(grammar.status).toBe(400);
    expect(grammar.json.error).toMatchObject({ param: "guided_grammar", code: "invalid_option" });
    const schema = await chat({
      response_format: { type: "json_schema", json_schema: { name: "x", schema: { type: "frobnicate" } } },
    });
    expect(schema.status).toBe(400);
    expect(schema.json.error.param).toBe("response_format");
    const json = await post("/v1/completions", { prompt: "x", guided_json: "{not json" });
    expect(json.status).toBe(400);
    expect(json.json.error.param).toBe("guided_json");
  });

  it("an empty choice is a 400 saying so; a character the vocabulary cannot spell names the field the client sent", async () => {
    for (const body of [{ guided_choice: ["", "a"] }, { structured_outputs: { choice: ["a", ""] } }]) {
      const r = await chat(body);
      expect(r.status).toBe(400);
      expect(r.json.error.message).toMatch(/non-empty array of non-empty strings/);
    }
    // The bundled reasoner's vocabulary has no token for 日: the format cannot go on mid-answer (not a compile error).
    const schema = { enum: ["日本"] };
    const whole = await chat({ response_format: { type: "json_schema", json_schema: { name: "x", schema } } });
    expect(whole.status).toBe(400);
    expect(whole.json.error).toMatchObject({ param: "response_format", code: "invalid_option" });
    expect(whole.json.error.message).toMatch(/^response_format: the format cannot go on/);
    const streamed = await fetch(`${url}/v1/chat/completions`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ messages: QUESTION, max_tokens: 160, guided_choice: ["é"], stream: true }),
    });
    const error = (await streamed.text()).split("\n").find((l) => l.includes('"error"'));
    expect(JSON.parse(error!.slice("data: ".length)).error).toMatchObject({ param: "guided_choice" });
  });
});

describe("a value that fills max_tokens exactly", () => {
  // The grammar is complete after the value's last token (only the end is allowed): the sample is done, "stop", even
  // when that token was the last max_tokens allowed (the engine folds it into the grammar: ModelSlot.completeFormats).
  it("ends stop, not length (completions)", async () => {
    const body = { prompt: "<think></think>Answer:", guided_choice: ["yes", "no"], temperature: 0 }; // no thought
    const free = await post("/v1/completions", { ...body, max_tokens: 8 });
    expect(free.json.choices[0].finish_reason).toBe("stop");
    // The value's tokens: the completion's (usage counts no eos; the prompt's closed thought leaves none to count).
    const exact = free.json.usage.completion_tokens;
    const r = await post("/v1/completions", { ...body, max_tokens: exact });
    expect(r.json.choices[0].text).toBe(free.json.choices[0].text);
    expect(r.json.choices[0].finish_reason).toBe("stop");
  });
});

describe("a stop string inside a structured answer", () => {
  // vLLM's behaviour (docs/structured.md "Stop strings"): the stop string is applied, the answer ends "stop" with the
  // string as stop_reason, and the content is the cut text. With a format, a non-null stop_reason always means the
  // value was cut: a complete value ends at the model's eos, never at a stop string.
  it("chat: finish_reason stop, stop_reason naming the string, the cut text (no valid JSON); parse() refuses it", async () => {
    const body = { response_format: RESPONSE_FORMAT, temperature: 0, stop: ['"unit"'] };
    const r = await chat(body);
    expect(r.status).toBe(200);
    const choice = r.json.choices[0];
    expect(choice).toMatchObject({ finish_reason: "stop", stop_reason: '"unit"' });
    expect(choice.message.content).toMatch(/^\{"answer": \d+, $/);
    expect(() => JSON.parse(choice.message.content)).toThrow();
    // The same request without the stop string is a complete value.
    const whole = await chat({ ...body, stop: undefined });
    expect(whole.json.choices[0]).toMatchObject({ finish_reason: "stop", stop_reason: null });
    expect(ajv.validate(SCHEMA, JSON.parse(whole.json.choices[0].message.content))).toBe(true);
    // The openai client's parse() helper never hands over a value it cannot parse: it throws.
    await expect(
      client.chat.completions.parse({
        model: "tiny-reasoner",
        messages: QUESTION,
        max_tokens: 160,
        temperature: 0,
        stop: ['"unit"'],
        response_format: RESPONSE_FORMAT as never,
      }),
    ).rejects.toThrow(SyntaxError);
  });
});

describe("fields refused by name", () => {
  it("tools on a model whose template renders none; tools or a format with a program; OpenAI's deprecated functions", async () => {
    const tools = [{ type: "function", function: { name: "add", parameters: { type: "object" } } }];
    const r = await chat({ tools });
    expect(r.status).toBe(400);
    expect(r.json.error.param).toBe("tools");
    expect(r.json.error.message).toMatch(/chat template .* does not render tools/);
    const program = await chat({ tools, program: "sc" });
    expect(program.json.error.param).toBe("tools");
    // A format with a program whose early exit reads an answer anchor (sc, duchess, deepconf take one: programs.test.ts).
    const structuredProgram = await chat({ program: "cot-probe", response_format: RESPONSE_FORMAT });
    expect(structuredProgram.status).toBe(400);
    expect(structuredProgram.json.error.param).toBe("response_format");
    expect(structuredProgram.json.error.message).toMatch(/program cot-probe does not take structured answers/);
    const functions = await chat({ functions: [{ name: "add" }] });
    expect(functions.status).toBe(400);
    expect(functions.json.error.param).toBe("functions");
    const choice = await chat({ tool_choice: "required" });
    expect(choice.status).toBe(400);
    expect(choice.json.error.param).toBe("tool_choice");
  });

  it("fields that would change the answer and are not served: refused by name, accepted at their neutral value", async () => {
    const refused: Array<[string, unknown]> = [
      ["logit_bias", { "50": 100 }],
      ["min_p", 0.1],
      ["min_tokens", 5],
      ["best_of", 2],
      ["use_beam_search", true],
      ["include_stop_str_in_output", true],
      ["chat_template", "{{ messages }}"],
      ["guided_whitespace_pattern", " *"],
    ];
    for (const [field, value] of refused) {
      const r = await chat({ [field]: value, max_tokens: 4 });
      expect(r.status, field).toBe(400);
      expect(r.json.error.param).toBe(field);
    }
    const neutral = await chat({ logit_bias: {}, min_p: 0, min_tokens: 0, best_of: 1, max_tokens: 4 });
    expect(neutral.status).toBe(200);
  });
});
