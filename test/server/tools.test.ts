// Tool calls over HTTP on a Qwen3 fixture (random weights, Qwen3's chat template with its tool parts): a forced call
// (tool_choice "required" or a named function) is generated in Qwen's <tool_call> syntax under the function's
// parameters schema, so even a random model calls it with arguments ajv accepts; the openai client's stream helper
// assembles the streamed deltas into the same calls; tool results render through the template.
import { Ajv } from "ajv";
import OpenAI from "openai";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { DeliberateServer } from "../../ts/server/index.js";
import { startBundledServer } from "../helpers/bundledServer.js";
import { fixtureDir } from "../model/fixtureCache.js";
import { WEATHER } from "./toolSchemas.js";

let server: DeliberateServer;
let url: string;
let client: OpenAI;
const ajv = new Ajv();

const ADD = {
  type: "object",
  properties: { a: { type: "integer", minimum: 0, maximum: 99 }, b: { type: "integer", minimum: 0, maximum: 99 } },
  required: ["a", "b"],
  additionalProperties: false,
} as const;
const TOOLS = [
  { type: "function" as const, function: { name: "get_weather", description: "Forecast", parameters: WEATHER } },
  { type: "function" as const, function: { name: "add", description: "Adds two numbers", parameters: ADD } },
];
const SCHEMAS: Record<string, object> = { get_weather: WEATHER, add: ADD };
const ASK = [{ role: "user" as const, content: "What is the weather in Paris?" }];
// Thinking off keeps a random model's answers short (the thought would be free text up to the budget).
const BASE = { model: "m", messages: ASK, max_tokens: 200, temperature: 0, reasoning_effort: "none" as const };

beforeAll(async () => {
  const dir = await fixtureDir("qwen3", "bf16", { headDim: 32, maxPositions: 2048 });
  ({ server, url } = await startBundledServer({ modelDir: dir, bundledDir: undefined, servedModelName: "m" }));
  client = new OpenAI({ baseURL: `${url}/v1`, apiKey: "unused", maxRetries: 0 });
}, 120_000);
afterAll(async () => {
  await server?.close();
});

async function post(body: Record<string, unknown>): Promise<{ status: number; json: any }> {
  const r = await fetch(`${url}/v1/chat/completions`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ ...BASE, ...body }),
  });
  return { status: r.status, json: await r.json() };
}

function expectValidCalls(calls: Array<{ id: string; type: string; function: { name: string; arguments: string } }>) {
  expect(calls.length).toBeGreaterThan(0);
  for (const c of calls) {
    expect(c.id).toMatch(/^call_[A-Za-z0-9]{24}$/);
    expect(c.type).toBe("function");
    expect(Object.keys(SCHEMAS)).toContain(c.function.name);
    expect(ajv.validate(SCHEMAS[c.function.name], JSON.parse(c.function.arguments)), c.function.arguments).toBe(true);
  }
}

describe("forced tool calls", () => {
  it("a named function: one call to it, arguments valid by its schema, finish_reason tool_calls, content null", async () => {
    const r = await client.chat.completions.create({
      ...BASE,
      tools: TOOLS,
      tool_choice: { type: "function", function: { name: "get_weather" } },
    });
    const choice = r.choices[0];
    expect(choice.finish_reason).toBe("tool_calls");
    expect(choice.message.content).toBeNull();
    expect(choice.message.tool_calls).toHaveLength(1);
    expectValidCalls(choice.message.tool_calls as never);
    expect((choice.message.tool_calls![0] as { function: { name: string } }).function.name).toBe("get_weather");
  });

  it('"required" with parallel_tool_calls false: one call to one of the tools; with n = 3 every sample calls', async () => {
    const r = await post({
      tools: TOOLS,
      tool_choice: "required",
      parallel_tool_calls: false,
      n: 3,
      temperature: 1,
      seed: 5,
    });
    expect(r.status, JSON.stringify(r.json)).toBe(200);
    for (const choice of r.json.choices) {
      expect(choice.finish_reason).toBe("tool_calls");
      expect(choice.message.tool_calls).toHaveLength(1);
      expectValidCalls(choice.message.tool_calls);
    }
  });

  it('"required" (parallel by default): one or more calls, each valid', async () => {
    const r = await post({ tools: TOOLS, tool_choice: "required", max_tokens: 400, seed: 1, temperature: 1 });
    expect(r.status).toBe(200);
    expect(r.json.choices[0].finish_reason).toBe("tool_calls");
    expectValidCalls(r.json.choices[0].message.tool_calls);
  });

  it("streamed: the openai client's stream helper assembles the same calls as the non-streamed response", async () => {
    const body = { ...BASE, tools: TOOLS, tool_choice: "required" as const, parallel_tool_calls: false };
    const whole = await client.chat.completions.create(body);
    const stream = client.chat.completions.stream(body);
    let chunks = 0;
    stream.on("chunk", () => chunks++);
    const final = await stream.finalChatCompletion();
    const strip = (calls: unknown) =>
      (calls as Array<{ type: string; function: { name: string; arguments: string } }>).map((c) => ({
        type: c.type,
        name: c.function.name,
        arguments: c.function.arguments,
      }));
    expect(final.choices[0].finish_reason).toBe("tool_calls");
    expect(strip(final.choices[0].message.tool_calls)).toEqual(strip(whole.choices[0].message.tool_calls));
    expectValidCalls(final.choices[0].message.tool_calls as never);
    expect(chunks).toBeGreaterThan(3); // the arguments came in pieces, not in one chunk
  });

  it("thinking on (the model may open a thought, which stays free): the call still comes, valid", async () => {
    const r = await post({
      tools: TOOLS,
      tool_choice: { type: "function", function: { name: "add" } },
      reasoning_effort: "high",
      max_tokens: 120,
    });
    expect(r.status).toBe(200);
    const choice = r.json.choices[0];
    expect(choice.finish_reason).toBe("tool_calls");
    expectValidCalls(choice.message.tool_calls);
  });
});

describe("a call cut off is no call", () => {
  const ADD_CHOICE = { type: "function", function: { name: "add" } } as const;

  it("by max_tokens: finish_reason length, the call's text as content, no half-JSON tool_calls (whole)", async () => {
    const whole = await post({ tools: TOOLS, tool_choice: ADD_CHOICE, max_tokens: 48 });
    expect(whole.status).toBe(200);
    const choice = whole.json.choices[0];
    expect(choice.finish_reason).toBe("length");
    expect(choice.message.tool_calls, JSON.stringify(choice.message)).toBeUndefined();
    expect(choice.message.content).toMatch(/^<tool_call>\n\{"name": "add", "arguments": \{/);
    // Streamed: the name and first arguments went out as they came; the finish reason says the call is cut.
    const stream = client.chat.completions.stream({ ...BASE, tools: TOOLS, tool_choice: ADD_CHOICE, max_tokens: 48 });
    const final = await stream.finalChatCompletion();
    expect(final.choices[0].finish_reason).toBe("length");
  });

  it("by a stop string: finish_reason stop naming it, the call's text as content (whole); streamed, not tool_calls", async () => {
    // "}}" ends every call to add ({"a": .., "b": ..} and the call object's brace): the stop string cuts the call.
    const body = { tools: TOOLS, tool_choice: ADD_CHOICE, stop: ["}}"] };
    const whole = await post(body);
    expect(whole.status).toBe(200);
    const choice = whole.json.choices[0];
    expect(choice).toMatchObject({ finish_reason: "stop", stop_reason: "}}" });
    expect(choice.message.tool_calls, JSON.stringify(choice.message)).toBeUndefined();
    expect(choice.message.content).toMatch(/^<tool_call>\n\{"name": "add", "arguments": \{"a": \d+, "b": \d+$/);
    const final = await client.chat.completions
      .stream({ ...BASE, ...body, tool_choice: ADD_CHOICE })
      .finalChatCompletion();
    expect(final.choices[0].finish_reason).toBe("stop");
    // Without the stop string the same call is complete, and is a call.
    const full = await post({ tools: TOOLS, tool_choice: ADD_CHOICE });
    expect(full.json.choices[0].finish_reason).toBe("tool_calls");
    expectValidCalls(full.json.choices[0].message.tool_calls);
  });
});

describe("the grammar of a forced call", () => {
  it("compiles against the vocabulary once: the structural tag, not each tool's schema besides", async () => {
    // The engine's compiled-grammar cache (ModelSlot is internal: reached for its stats only).
    const engine = server.state.target!.engine as unknown as {
      slots: Array<{ grammars(f: string): { stats: { compiles: number } } }>;
    };
    const stats = engine.slots[0].grammars("test").stats;
    // Schemas no other test sends, so nothing is cached yet.
    const fresh = (k: number) => ({
      type: "object",
      properties: { [`v${k}`]: { type: "integer", minimum: 0, maximum: 9 } },
      required: [`v${k}`],
      additionalProperties: false,
    });
    const tools = [1, 2].map((k) => ({ type: "function", function: { name: `f${k}`, parameters: fresh(k + 100) } }));
    const before = stats.compiles;
    const r = await post({ tools, tool_choice: "required", parallel_tool_calls: false });
    expect(r.status, JSON.stringify(r.json)).toBe(200);
    expect(r.json.choices[0].finish_reason, JSON.stringify(r.json)).toBe("tool_calls");
    expect(stats.compiles - before).toBe(1);
  });
});

describe('tool_choice "auto" enforces strict and parallel_tool_calls false', () => {
  it("each is generated under a grammar (compiled for the request), and the answer is text or one valid call", async () => {
    const engine = server.state.target!.engine as unknown as {
      slots: Array<{ grammars(f: string): { stats: { compiles: number } } }>;
    };
    const stats = engine.slots[0].grammars("test").stats;
    const fresh = (k: number) => ({ ...ADD, properties: { ...ADD.properties, [`c${k}`]: { type: "boolean" } } });
    for (const [k, extra] of [
      [1, { parallel_tool_calls: false }],
      [2, { strict: true }],
    ] as const) {
      const tools = [
        {
          type: "function",
          function: { name: "add", parameters: fresh(k), ...("strict" in extra ? { strict: true } : {}) },
        },
      ];
      const before = stats.compiles;
      const r = await post({
        tools,
        ...("parallel_tool_calls" in extra ? extra : {}),
        max_tokens: 24,
        temperature: 1,
        seed: k,
      });
      expect(r.status, JSON.stringify(r.json)).toBe(200);
      expect(stats.compiles - before, JSON.stringify(extra)).toBe(1); // the request's grammar (none before)
      const msg = r.json.choices[0].message;
      if (msg.tool_calls !== undefined) {
        expect(msg.tool_calls).toHaveLength(1);
        expect(ajv.validate(fresh(k), JSON.parse(msg.tool_calls[0].function.arguments))).toBe(true);
      }
    }
  });
});

describe("tool turns and choices", () => {
  it("an assistant turn with tool_calls and a role tool answer render through the template (200, longer prompt)", async () => {
    const first = await post({ tools: TOOLS, tool_choice: "required", parallel_tool_calls: false });
    const call = first.json.choices[0].message.tool_calls[0];
    const followUp = await post({
      tools: TOOLS,
      messages: [
        ...ASK,
        { role: "assistant", content: null, tool_calls: [call] },
        { role: "tool", tool_call_id: call.id, content: '{"forecast": "sunny"}' },
      ],
      max_tokens: 8,
    });
    expect(followUp.status, JSON.stringify(followUp.json)).toBe(200);
    const toolsOnly = await post({ tools: TOOLS, max_tokens: 1 });
    // The call and the tool's answer are in the prompt (<tool_call> ... <tool_response> ...).
    expect(followUp.json.usage.prompt_tokens).toBeGreaterThan(toolsOnly.json.usage.prompt_tokens + 20);
    const noTools = await post({ max_tokens: 1 });
    expect(toolsOnly.json.usage.prompt_tokens).toBeGreaterThan(noTools.json.usage.prompt_tokens + 50);
  });

  it('tool_choice "none": no constraint, no calls parsed; "auto" answers text or valid calls', async () => {
    const none = await post({ tools: TOOLS, tool_choice: "none", max_tokens: 16 });
    expect(none.status).toBe(200);
    expect(none.json.choices[0].message.tool_calls).toBeUndefined();
    expect(["stop", "length"]).toContain(none.json.choices[0].finish_reason);
    const auto = await post({ tools: TOOLS, max_tokens: 16 });
    expect(auto.status).toBe(200);
    const msg = auto.json.choices[0].message;
    if (msg.tool_calls !== undefined) expectValidCalls(msg.tool_calls);
    else expect(typeof msg.content).toBe("string");
  });

  it("tool_choice auto with a response_format: the answer is either valid calls or valid JSON of the format", async () => {
    const schema = {
      type: "object",
      properties: { ok: { type: "boolean" } },
      required: ["ok"],
      additionalProperties: false,
    };
    for (const seed of [1, 2, 3]) {
      const r = await post({
        tools: TOOLS,
        response_format: { type: "json_schema", json_schema: { name: "ok", schema } },
        temperature: 1,
        seed,
      });
      expect(r.status, JSON.stringify(r.json)).toBe(200);
      const msg = r.json.choices[0].message;
      if (msg.tool_calls !== undefined) expectValidCalls(msg.tool_calls);
      else expect(ajv.validate(schema, JSON.parse(msg.content)), msg.content).toBe(true);
    }
  });

  it("refusals name the field: an unknown named function, a forced call with a format, a bad tool", async () => {
    const unknown = await post({ tools: TOOLS, tool_choice: { type: "function", function: { name: "nope" } } });
    expect(unknown.status).toBe(400);
    expect(unknown.json.error.param).toBe("tool_choice.function.name");
    const both = await post({ tools: TOOLS, tool_choice: "required", response_format: { type: "json_object" } });
    expect(both.status).toBe(400);
    expect(both.json.error.message).toMatch(/tool_choice .* response_format/);
    const bad = await post({ tools: [{ type: "retrieval" }] });
    expect(bad.status).toBe(400);
    expect(bad.json.error.param).toBe("tools[0].type");
    const schema = await post({
      tools: [{ type: "function", function: { name: "f", parameters: { type: "frobnicate" } } }],
      tool_choice: "required",
    });
    expect(schema.status).toBe(400);
    expect(schema.json.error.param).toBe("tools[0].function.parameters");
    // Arguments are an object: a schema of another type is refused (a forced call wrote "" as its arguments).
    for (const parameters of [{ type: "string" }, { type: "array", items: { type: "integer" } }, [], true]) {
      const r = await post({
        tools: [{ type: "function", function: { name: "f", parameters } }],
        tool_choice: "required",
      });
      expect(r.status, JSON.stringify(parameters)).toBe(400);
      expect(r.json.error.param).toBe("tools[0].function.parameters");
      expect(r.json.error.message).toMatch(/arguments are a JSON object/);
    }
    // A keyword XGrammar would ignore is refused by its path in the tool's parameters (forced, or strict under auto).
    const ignored = {
      type: "object",
      properties: { n: { type: "integer", multipleOf: 2 } },
      required: ["n"],
      additionalProperties: false,
    };
    for (const body of [
      {
        tools: [TOOLS[0], { type: "function", function: { name: "f", parameters: ignored } }],
        tool_choice: "required",
      },
      { tools: [TOOLS[0], { type: "function", function: { name: "f", parameters: ignored, strict: true } }] },
    ]) {
      const r = await post(body);
      expect(r.status, JSON.stringify(body)).toBe(400);
      expect(r.json.error.param).toBe("tools[1].function.parameters");
      expect(r.json.error.message).toMatch(/^tools\[1\]\.function\.parameters\.properties\.n\.multipleOf /);
    }
  });
});
