// POST /v1/responses, GET /v1/models/{id} and the 404 of an unserved route, with the real openai client (npm 6)
// against the bundled tiny reasoner: a Response answers as chat answers the same messages (one pipeline), its thought
// as a reasoning item; streamed, the client's finalResponse() is the non-streamed Response; max_output_tokens cuts it
// to "incomplete"; fields that need state or tools are 400s naming them; text.format constrains the answer as chat's
// response_format does. Instructions are checked on a Qwen3 fixture, whose template renders a system message (the
// tiny reasoner's drops it).
import { Ajv } from "ajv";
import OpenAI from "openai";
import { zodTextFormat } from "openai/helpers/zod";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { z } from "zod";
import type { DeliberateServer } from "../../ts/server/index.js";
import { startBundledServer } from "../helpers/bundledServer.js";
import { fixtureDir } from "../model/fixtureCache.js";

const MODEL = "tiny-reasoner";
const QUESTION = "What is 7*(8+5)-19?";

let server: DeliberateServer;
let url: string;
let client: OpenAI;

beforeAll(async () => {
  ({ server, url } = await startBundledServer());
  client = new OpenAI({ baseURL: `${url}/v1`, apiKey: "unused", maxRetries: 0 });
}, 60_000);
afterAll(async () => {
  await server?.close();
});

async function post(base: string, path: string, body: unknown): Promise<{ status: number; json: any }> {
  const r = await fetch(base + path, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify(body),
  });
  return { status: r.status, json: await r.json() };
}

type AnyResponse = OpenAI.Responses.Response;
const reasoningOf = (r: AnyResponse): string | undefined => {
  const item = r.output.find((o) => o.type === "reasoning");
  return item?.type === "reasoning" ? item.content?.map((c) => c.text).join("") : undefined;
};
const messageOf = (r: AnyResponse): OpenAI.Responses.ResponseOutputMessage | undefined =>
  r.output.find((o): o is OpenAI.Responses.ResponseOutputMessage => o.type === "message");

/**
 * A Response without what differs between two runs of one request (ids, time, prompt tokens the prefix cache held)
 * and the client's own additions.
 */
function comparable(r: AnyResponse): unknown {
  const { id: _id, created_at: _created, output_text: _text, ...rest } = r as AnyResponse & Record<string, unknown>;
  delete rest.output_parsed;
  return {
    ...rest,
    usage: { ...r.usage, input_tokens_details: undefined },
    output: r.output.map((o) => {
      const { id: _oid, ...item } = o as typeof o & { content?: Array<Record<string, unknown>> };
      if (item.content) item.content = item.content.map(({ parsed: _p, ...c }) => c);
      return item;
    }),
  };
}

describe("GET /v1/models/{id}", () => {
  it("client.models.retrieve gives the model as the list does; another id is a 404 naming the served model", async () => {
    const listed = await client.models.list();
    const model = await client.models.retrieve(MODEL);
    expect(model).toEqual(listed.data[0]);
    expect(model).toMatchObject({ id: MODEL, object: "model", owned_by: "deliberate", max_model_len: 512 });
    await expect(client.models.retrieve("gpt-9")).rejects.toMatchObject({
      status: 404,
      error: { type: "not_found_error", code: "model_not_found", param: "model" },
    });
    await expect(client.models.retrieve("gpt-9")).rejects.toThrow(/tiny-reasoner/);
    // A name with a slash, as curl sends it (unescaped): still this route, still OpenAI's error.
    const slashed = await fetch(`${url}/v1/models/Qwen/Qwen3-0.6B`);
    expect(slashed.status).toBe(404);
    expect(((await slashed.json()) as any).error).toMatchObject({ code: "model_not_found", param: "model" });
  });

  it("an unserved OpenAI route (embeddings) is a 404 that names the model and the routes served", async () => {
    const err = await client.embeddings.create({ model: MODEL, input: "hello" }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(OpenAI.NotFoundError);
    const message = (err as InstanceType<typeof OpenAI.NotFoundError>).message;
    expect(message).toContain("POST /v1/embeddings");
    expect(message).toContain(MODEL);
    for (const route of ["POST /v1/chat/completions", "POST /v1/responses", "GET /v1/models/{id}"])
      expect(message).toContain(route);
  });
});

describe("POST /v1/responses", () => {
  it("string input: the thought as a reasoning item, the answer as output_text, as chat answers", async () => {
    const r = await client.responses.create({
      model: MODEL,
      input: QUESTION,
      temperature: 0,
      metadata: { run: "1" },
    });
    expect(r.object).toBe("response");
    expect(r.id).toMatch(/^resp_[0-9a-f]{32}$/);
    expect(r.status).toBe("completed");
    expect(r.incomplete_details).toBeNull();
    expect(r.metadata).toEqual({ run: "1" });
    expect(r.output.map((o) => o.type)).toEqual(["reasoning", "message"]);
    expect(r.output_text).toBe(" \\boxed{72}");
    const chat = await client.chat.completions.create({
      model: MODEL,
      messages: [{ role: "user", content: QUESTION }],
      temperature: 0,
    });
    const chatMessage = chat.choices[0].message as (typeof chat.choices)[0]["message"] & { reasoning: string };
    expect(reasoningOf(r)).toBe(chatMessage.reasoning);
    expect(r.output_text).toBe(chatMessage.content);
    expect(messageOf(r)).toMatchObject({ role: "assistant", status: "completed" });
    expect(r.usage).toMatchObject({
      input_tokens: chat.usage!.prompt_tokens,
      output_tokens: chat.usage!.completion_tokens,
      total_tokens: chat.usage!.total_tokens,
      output_tokens_details: { reasoning_tokens: chat.usage!.completion_tokens_details!.reasoning_tokens },
    });
    // The same prompt again: served from the prefix cache, and counted.
    const again = await client.responses.create({ model: MODEL, input: QUESTION, temperature: 0 });
    expect(again.usage!.input_tokens_details.cached_tokens).toBeGreaterThan(0);
    expect(again.output).toEqual(r.output.map((o, i) => ({ ...o, id: again.output[i].id })));
  });

  it("messages input (input_text parts, an earlier turn and its reasoning item) renders as chat's messages", async () => {
    const first = await client.responses.create({ model: MODEL, input: QUESTION, temperature: 0 });
    const parts = await client.responses.create({
      model: MODEL,
      input: [{ role: "user", content: [{ type: "input_text", text: QUESTION }] }],
      temperature: 0,
    });
    expect(comparable(parts)).toEqual(comparable(first));
    // A second turn, sent back as the Responses API does: the earlier output items, then the new message.
    const turns = await client.responses.create({
      model: MODEL,
      input: [
        { role: "user", content: QUESTION },
        ...(first.output as OpenAI.Responses.ResponseInputItem[]),
        { role: "user", content: "What is 2+3?" },
      ],
      temperature: 0,
      max_output_tokens: 120,
    });
    const asChat = await client.chat.completions.create({
      model: MODEL,
      messages: [
        { role: "user", content: QUESTION },
        { role: "assistant", content: first.output_text },
        { role: "user", content: "What is 2+3?" },
      ],
      temperature: 0,
      max_tokens: 120,
    });
    expect(turns.usage!.input_tokens).toBe(asChat.usage!.prompt_tokens);
    expect(turns.output_text).toBe(asChat.choices[0].message.content);
  });

  it("streamed: typed events in sequence; finalResponse() equals the non-streamed Response (same seed)", async () => {
    // seed: our extension (the openai client passes unknown fields through).
    const request = { model: MODEL, input: QUESTION, temperature: 1, max_output_tokens: 200, seed: 11 } as {
      model: string;
      input: string;
    };
    const whole = await client.responses.create(request);
    const stream = client.responses.stream(request);
    const events: OpenAI.Responses.ResponseStreamEvent[] = [];
    for await (const e of stream) events.push(e);
    const final = await stream.finalResponse();
    expect(comparable(final)).toEqual(comparable(whole));
    expect(events.map((e) => e.sequence_number)).toEqual(events.map((_, i) => i));
    const types = events.map((e) => e.type);
    expect(types.slice(0, 2)).toEqual(["response.created", "response.in_progress"]);
    expect(types.at(-1)).toBe("response.completed");
    // Each item: added, its part added, deltas, text done, part done, item done; the reasoning item first.
    const outline = types.filter((t, i) => !(t.endsWith(".delta") && types[i - 1] === t));
    expect(outline.slice(2, -1)).toEqual([
      "response.output_item.added",
      "response.content_part.added",
      "response.reasoning_text.delta",
      "response.reasoning_text.done",
      "response.content_part.done",
      "response.output_item.done",
      "response.output_item.added",
      "response.content_part.added",
      "response.output_text.delta",
      "response.output_text.done",
      "response.content_part.done",
      "response.output_item.done",
    ]);
    const joined = (type: string): string =>
      events
        .filter((e) => e.type === type)
        .map((e) => (e as { delta: string }).delta)
        .join("");
    expect(joined("response.reasoning_text.delta")).toBe(reasoningOf(whole));
    expect(joined("response.output_text.delta")).toBe(whole.output_text);
    // for await over create({stream: true}) sees the same events.
    const raw = await client.responses.create({ ...request, stream: true });
    const rawTypes: string[] = [];
    for await (const e of raw) rawTypes.push(e.type);
    expect(rawTypes).toEqual(types);
  });

  it("control by the response's id: reasoning_end closes a streamed thought, abort cancels", async () => {
    const full = await client.responses.create({ model: MODEL, input: QUESTION, temperature: 0 });
    const stream = client.responses.stream({ model: MODEL, input: QUESTION, temperature: 0 });
    let id = "";
    let closed: unknown = null;
    let reasoning = "";
    for await (const e of stream) {
      if (e.type === "response.created") id = e.response.id;
      if (e.type !== "response.reasoning_text.delta") continue;
      reasoning += e.delta;
      if (closed === null && reasoning.length >= 6)
        closed = (await post(url, "/v1/chat/completions/control", { id, action: "reasoning_end" })).json;
    }
    expect(closed).toMatchObject({ action: "reasoning_end", ok: true, closed: 1 });
    const final = await stream.finalResponse();
    expect(reasoningOf(full)!.startsWith(reasoningOf(final)!)).toBe(true);
    expect(reasoningOf(final)!.length).toBeLessThan(reasoningOf(full)!.length);
    // (finalResponse() has no output_text: the openai client adds it to parsed responses only.)
    expect(messageOf(final)?.content[0]).toMatchObject({
      type: "output_text",
      text: expect.stringMatching(/\\boxed\{-?\d+\}/),
    });

    const aborted = client.responses.stream({ model: MODEL, input: QUESTION, temperature: 0 });
    let sent = false;
    for await (const e of aborted) {
      if (e.type === "response.created") id = e.response.id;
      if (!sent && e.type === "response.reasoning_text.delta") {
        sent = true;
        expect((await post(url, "/v1/chat/completions/control", { id, action: "abort" })).json.ok).toBe(true);
      }
    }
    const cancelled = await aborted.finalResponse();
    expect(cancelled.status).toBe("cancelled");
    expect(cancelled.output.at(-1)).toMatchObject({ type: "message", status: "incomplete" });
  });

  it("max_output_tokens cuts the thought: status incomplete (max_output_tokens), streamed the same", async () => {
    const request = { model: MODEL, input: QUESTION, temperature: 0, max_output_tokens: 8 };
    const r = await client.responses.create(request);
    expect(r.status).toBe("incomplete");
    expect(r.incomplete_details).toEqual({ reason: "max_output_tokens" });
    expect(r.usage!.output_tokens).toBe(8);
    expect(r.output.map((o) => [o.type, (o as { status?: string }).status])).toEqual([["reasoning", "incomplete"]]);
    expect(r.output_text).toBe("");
    const final = await client.responses.stream(request).finalResponse();
    expect(comparable(final)).toEqual(comparable(r));
  });

  it("reasoning.effort as chat's reasoning_effort: none has no thought; thinking_token_budget closes it", async () => {
    const none = await client.responses.create({
      model: MODEL,
      input: QUESTION,
      temperature: 0,
      max_output_tokens: 30,
      reasoning: { effort: "none" },
    });
    expect(none.output.map((o) => o.type)).toEqual(["message"]);
    expect(none.usage!.output_tokens_details.reasoning_tokens).toBe(0);
    expect(none.reasoning).toMatchObject({ effort: "none" });
    const capped = await client.responses.create({
      model: MODEL,
      input: QUESTION,
      temperature: 0,
      thinking_token_budget: 8,
    } as OpenAI.Responses.ResponseCreateParamsNonStreaming);
    expect(capped.usage!.output_tokens_details.reasoning_tokens).toBe(9); // 8 of thought + the closing token
    expect(capped.output_text).toMatch(/\\boxed\{/);
  });

  it("text.format json_schema: responses.parse(zodTextFormat(...)) gives the parsed object, valid by ajv", async () => {
    const Count = z.object({ answer: z.number().int().min(0).max(999), unit: z.enum(["apples", "pears"]) });
    const format = zodTextFormat(Count, "count");
    const r = await client.responses.parse({
      model: MODEL,
      input: QUESTION,
      temperature: 0,
      max_output_tokens: 160,
      text: { format },
    });
    expect(r.status).toBe("completed");
    expect(new Ajv().validate(format.schema, r.output_parsed), r.output_text).toBe(true);
    expect(Count.parse(r.output_parsed)).toEqual(r.output_parsed);
    expect(reasoningOf(r) ?? "").toMatch(/\S/); // the thought stayed free
    expect(r.text?.format).toMatchObject({ type: "json_schema", name: "count" });
    // json_object: any JSON object.
    const obj = await client.responses.create({
      model: MODEL,
      input: QUESTION,
      temperature: 0,
      max_output_tokens: 200,
      text: { format: { type: "json_object" } },
    });
    expect(obj.status).toBe("completed");
    const value = JSON.parse(obj.output_text) as unknown;
    expect(typeof value === "object" && value !== null && !Array.isArray(value)).toBe(true);
  });

  it("a stop string that cuts a text.format answer makes the Response incomplete (reason stop), streamed the same", async () => {
    const schema = {
      type: "object",
      properties: { answer: { type: "integer", minimum: 0, maximum: 999 }, unit: { type: "string", enum: ["a", "b"] } },
      required: ["answer", "unit"],
      additionalProperties: false,
    };
    const body = {
      model: MODEL,
      input: QUESTION,
      temperature: 0,
      max_output_tokens: 160,
      text: { format: { type: "json_schema" as const, name: "c", schema } },
      stop: ['"unit"'],
    };
    const r = await post(url, "/v1/responses", body);
    expect(r.status).toBe(200);
    expect(r.json).toMatchObject({
      status: "incomplete",
      incomplete_details: { reason: "stop", stop_reason: '"unit"' },
    });
    const message = r.json.output.at(-1);
    expect(message).toMatchObject({ type: "message", status: "incomplete" });
    expect(() => JSON.parse(message.content[0].text)).toThrow();
    const streamed = await client.responses.stream(body as never).finalResponse();
    expect(streamed).toMatchObject({ status: "incomplete", incomplete_details: { reason: "stop" } });
    // Plain text that a stop string ends is a complete answer; a complete value (no stop) too.
    const plain = await post(url, "/v1/responses", { ...body, text: undefined, stop: ["="] });
    expect(plain.json).toMatchObject({ status: "completed", incomplete_details: null });
    const whole = await post(url, "/v1/responses", { ...body, stop: undefined });
    expect(whole.json.status).toBe("completed");
    expect(new Ajv().validate(schema, JSON.parse(whole.json.output.at(-1).content[0].text))).toBe(true);
  });

  it("fields that need stored state or tools, and bad values, are 400s naming the field", async () => {
    const cases: Array<[Record<string, unknown>, string, RegExp]> = [
      [{ previous_response_id: "resp_1" }, "previous_response_id", /stores no responses/],
      [{ conversation: "conv_1" }, "conversation", /stores no conversations/],
      [{ background: true }, "background", /expected false/],
      [{ tools: [{ type: "function", name: "f", parameters: {} }] }, "tools", /tool calls are not served/],
      [{ tool_choice: "required" }, "tool_choice", /"auto" or "none"/],
      [{ include: ["message.output_text.logprobs"] }, "include", /logprobs is not served/],
      [{ truncation: "auto" }, "truncation", /never truncated/],
      [{ text: { format: { type: "bogus" } } }, "text.format", /json_schema/],
      [{ text: { format: { type: "json_schema", name: "x", schema: 3 } } }, "text.format.schema", /JSON Schema/],
      // A key the format does not name is refused, never dropped; strict is a boolean.
      [{ text: { format: { type: "json_object", schema: {} } } }, "text.format.schema", /not a field/],
      [{ text: { format: { type: "json_schema", name: "x", schema: {}, foo: 1 } } }, "text.format.foo", /not a field/],
      [
        { text: { format: { type: "json_schema", name: "x", schema: {}, strict: "yes" } } },
        "text.format.strict",
        /true or false/,
      ],
      [{ reasoning: { effort: "huge" } }, "reasoning.effort", /"minimal"/],
      [{ temperature: 3 }, "temperature", /\[0, 2\]/],
      [{ max_output_tokens: 0 }, "max_output_tokens", />= 1/],
      [{ max_output_tokens: 100_000 }, "max_output_tokens", /maximum context length is 512/],
      [{ input: "x ".repeat(600) }, "input", /maximum context length is 512/],
      [{ input: [] }, "input", /non-empty array/],
      [{ input: [{ type: "function_call", name: "f", arguments: "{}" }] }, "input[0].type", /tool calls/],
      [{ input: [{ role: "user", content: [{ type: "input_image" }] }] }, "input[0].content[0].type", /text-only/],
      [{ input: [{ role: "tool", content: "x" }] }, "input[0].role", /"user", "assistant"/],
      [{ input: [{ type: "reasoning", summary: [] }] }, "input", /no message/],
      [{ metadata: { k: 1 } }, "metadata", /string values/],
    ];
    for (const [fields, param, message] of cases) {
      const r = await post(url, "/v1/responses", { model: MODEL, input: QUESTION, ...fields });
      expect(r.status, JSON.stringify(fields)).toBe(400);
      expect(r.json.error, JSON.stringify(fields)).toMatchObject({ type: "invalid_request_error", param });
      expect(r.json.error.message, JSON.stringify(fields)).toMatch(message);
    }
    // The openai client surfaces them as BadRequestError with the param.
    await expect(
      client.responses.create({ model: MODEL, input: QUESTION, previous_response_id: "resp_1" }),
    ).rejects.toMatchObject({ status: 400, param: "previous_response_id" });
    await expect(client.responses.create({ model: "gpt-9", input: QUESTION })).rejects.toMatchObject({
      status: 404,
      error: { code: "model_not_found" },
    });
    // store is accepted and ignored: nothing is stored either way.
    const stored = await post(url, "/v1/responses", {
      model: MODEL,
      input: QUESTION,
      max_output_tokens: 4,
      store: true,
    });
    expect(stored.status).toBe(200);
  });
});

describe("POST /v1/responses refuses what it would otherwise ignore", () => {
  it("chat's fields that change the answer are 400s naming them; their neutral values and harmless fields pass", async () => {
    const refused: Array<[string, unknown]> = [
      ["presence_penalty", 0.5],
      ["frequency_penalty", 1],
      ["repetition_penalty", 1.2],
      ["logit_bias", { "50": 100 }],
      ["n", 2],
      ["min_p", 0.1],
      ["min_tokens", 3],
      ["best_of", 2],
      ["use_beam_search", true],
      ["guided_json", { type: "object" }],
      ["guided_regex", "a+"],
      ["response_format", { type: "json_object" }],
      ["structured_outputs", { regex: "a+" }],
      // Not fields of this route at all: refused by name, not ignored.
      ["max_tokens", 4],
      ["messages", [{ role: "user", content: "hi" }]],
      ["reasoning_effort", "low"],
      ["frobnicate", true],
    ];
    for (const [field, value] of refused) {
      const r = await post(url, "/v1/responses", { model: MODEL, input: QUESTION, [field]: value });
      expect(r.status, field).toBe(400);
      expect(r.json.error, field).toMatchObject({ type: "invalid_request_error", param: field });
      expect(r.json.error.message, field).toMatch(new RegExp(field));
    }
    // Inside the nested objects too.
    for (const [fields, param] of [
      [{ reasoning: { effort: "low", budget: 3 } }, "reasoning.budget"],
      [{ text: { format: { type: "text" }, style: "terse" } }, "text.style"],
      [{ input: [{ role: "user", content: QUESTION, weight: 2 }] }, "input[0].weight"],
      [
        { input: [{ role: "user", content: [{ type: "input_text", text: QUESTION, lang: "en" }] }] },
        "input[0].content[0].lang",
      ],
    ] as const) {
      const r = await post(url, "/v1/responses", { model: MODEL, input: QUESTION, ...fields });
      expect(r.status, param).toBe(400);
      expect(r.json.error.param).toBe(param);
    }
    // The openai client sends what it is given: the fields that change nothing in the answer are accepted.
    const ok = await client.responses.create({
      model: MODEL,
      input: QUESTION,
      max_output_tokens: 4,
      store: false,
      metadata: { run: "1" },
      user: "u",
      safety_identifier: "s",
      prompt_cache_key: "k",
      service_tier: "auto",
      parallel_tool_calls: true,
      truncation: "disabled",
      include: ["reasoning.encrypted_content"],
    });
    expect(ok.status).toBe("incomplete");
    const neutral = await post(url, "/v1/responses", {
      model: MODEL,
      input: QUESTION,
      max_output_tokens: 4,
      presence_penalty: 0,
      frequency_penalty: 0,
      repetition_penalty: 1,
      logit_bias: {},
      n: 1,
    });
    expect(neutral.status, JSON.stringify(neutral.json)).toBe(200);
    // ignore_eos is served (as on chat): the answer runs to max_output_tokens.
    const long = await post(url, "/v1/responses", {
      model: MODEL,
      input: QUESTION,
      max_output_tokens: 40,
      temperature: 0,
      reasoning: { effort: "none" },
      ignore_eos: true,
    });
    expect(long.status).toBe(200);
    expect(long.json.usage.output_tokens).toBe(40);
  });
});

describe("instructions", () => {
  let qwen: { server: DeliberateServer; url: string } | null = null;
  beforeAll(async () => {
    const dir = await fixtureDir("qwen3", "bf16", { headDim: 32 });
    qwen = await startBundledServer({ modelDir: dir, bundledDir: undefined });
  }, 120_000);
  afterAll(async () => {
    await qwen?.server.close();
  });

  it("are the system message, before the input (as /tokenize renders it)", async () => {
    const user = "What is 2+3?";
    const count = async (messages: unknown[]): Promise<number> =>
      (await post(qwen!.url, "/tokenize", { messages })).json.count;
    const respond = async (body: Record<string, unknown>): Promise<number> => {
      const r = await post(qwen!.url, "/v1/responses", { input: user, max_output_tokens: 2, temperature: 0, ...body });
      expect(r.status, JSON.stringify(r.json)).toBe(200);
      return r.json.usage.input_tokens;
    };
    const system = "Answer in French.";
    const withInstructions = await respond({ instructions: system });
    expect(withInstructions).toBe(
      await count([
        { role: "system", content: system },
        { role: "user", content: user },
      ]),
    );
    expect(withInstructions).toBeGreaterThan(await respond({}));
    const r = await post(qwen!.url, "/v1/responses", {
      input: user,
      instructions: system,
      max_output_tokens: 2,
    });
    expect(r.json.instructions).toBe(system);
  });
});
