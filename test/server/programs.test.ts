// Programs over HTTP, what a client of an OpenAI server expects of them: n refused by name (a program answers with one
// choice), the program echoed as asked, usage with completion_tokens_details, and program_options.cap bounded by the
// server's program token budget with a 400 naming it. A structured answer (response_format, vLLM's guided_json): the
// program's branches answer in the format and the content is the voted, schema-valid JSON (checked by ajv); a program
// whose early exit needs an answer anchor refuses it by name.
import { Ajv } from "ajv";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { DeliberateServer } from "../../ts/server/index.js";
import { startBundledServer } from "../helpers/bundledServer.js";

let server: DeliberateServer;
let url: string;

beforeAll(async () => {
  ({ server, url } = await startBundledServer());
}, 60_000);
afterAll(async () => {
  await server?.close();
});

async function chat(body: Record<string, unknown>): Promise<{ status: number; json: any }> {
  const res = await fetch(`${url}/v1/chat/completions`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({
      model: "tiny-reasoner",
      messages: [{ role: "user", content: "What is 7*(8+5)-19?" }],
      ...body,
    }),
  });
  return { status: res.status, json: await res.json() };
}

describe("programs over HTTP", () => {
  it("n > 1 with a program is a 400 naming n, not one choice", async () => {
    const r = await chat({ program: "sc", program_options: { cap: 2 }, n: 2 });
    expect(r.status).toBe(400);
    expect(r.json.error).toMatchObject({ type: "invalid_request_error", param: "n" });
    expect(r.json.error.message).toMatch(/send n requests/);
  });

  it.each([
    ["logprobs", { logprobs: true }],
    ["top_logprobs", { logprobs: false, top_logprobs: 3 }],
    ["stop", { stop: ["1"] }],
    ["stop_token_ids", { stop_token_ids: [3] }],
    ["top_p", { top_p: 0.5 }],
    ["top_k", { top_k: 5 }],
    ["ignore_eos", { ignore_eos: true }],
    ["thinking_token_budget", { thinking_token_budget: 8 }],
  ])("%s with a program is a 400 naming it, not an answer that ignored it", async (field, extra) => {
    const r = await chat({ program: "sc", program_options: { cap: 2 }, ...extra });
    expect(r.status).toBe(400);
    expect(r.json.error).toMatchObject({ type: "invalid_request_error", param: field });
    expect(r.json.error.message).toMatch(/without program/);
  });

  it("neutral values of those fields pass", async () => {
    const r = await chat({
      program: "sc",
      program_options: { cap: 2 },
      top_p: 1,
      top_k: -1,
      stop: [],
      logprobs: false,
    });
    expect(r.status).toBe(200);
  });

  it("echoes the program asked for, names the variant that ran, and reports reasoning tokens", async () => {
    const r = await chat({ program: "deepconf", program_options: { cap: 4 } });
    expect(r.status).toBe(200);
    expect(r.json.deliberate).toMatchObject({ program: "deepconf", resolved_program: "deepconf-low" });
    const usage = r.json.usage;
    expect(usage.completion_tokens).toBeGreaterThan(0);
    expect(usage.completion_tokens_details).toEqual({ reasoning_tokens: usage.completion_tokens });
  });

  it("program_options.cap past the server's program token budget is a 400 naming it and the limit", async () => {
    const r = await chat({ program: "sc", program_options: { cap: 1e9 }, reasoning_effort: "max" });
    expect(r.status).toBe(400);
    expect(r.json.error).toMatchObject({ type: "invalid_request_error", param: "program_options.cap" });
    expect(r.json.error.message).toMatch(/maxProgramTokens/);
    // A short max_tokens does not buy a huge cap: each branch also spends the reserve after its thought.
    const short = await chat({ program: "sc", program_options: { cap: 8192 }, max_tokens: 1 });
    expect(short.status).toBe(400);
    expect(short.json.error.param).toBe("program_options.cap");
  });
});

const SCHEMA = {
  type: "object",
  properties: {
    answer: { type: "integer", minimum: 0, maximum: 999 }, // the tiny model would write digits to the budget
    unit: { type: "string", enum: ["apples", "pears"] },
  },
  required: ["answer", "unit"],
  additionalProperties: false,
} as const;
const RESPONSE_FORMAT = { type: "json_schema", json_schema: { name: "count", strict: true, schema: SCHEMA } };

describe("programs with a structured answer over HTTP", () => {
  const validate = new Ajv().compile(SCHEMA);

  it("sc, deepconf and duchess with response_format json_schema answer with the voted schema-valid JSON", async () => {
    for (const program of ["sc", "deepconf", "duchess"]) {
      const r = await chat({ program, program_options: { cap: 2 }, max_tokens: 120, response_format: RESPONSE_FORMAT });
      expect(r.status, JSON.stringify(r.json)).toBe(200);
      const content = r.json.choices[0].message.content as string;
      expect(validate(JSON.parse(content)), `${program}: ${content}`).toBe(true);
      expect(r.json.deliberate.answer).toBe(content);
      expect(r.json.choices[0].finish_reason).toBe("stop");
    }
  });

  it("json_object and vLLM's guided_json constrain the program's answer too", async () => {
    const obj = await chat({
      program: "sc",
      program_options: { cap: 2 },
      max_tokens: 120,
      response_format: { type: "json_object" },
    });
    expect(obj.status).toBe(200);
    const parsed = JSON.parse(obj.json.choices[0].message.content) as unknown;
    expect(typeof parsed === "object" && parsed !== null && !Array.isArray(parsed)).toBe(true);
    const guided = await chat({ program: "sc", program_options: { cap: 2 }, max_tokens: 120, guided_json: SCHEMA });
    expect(guided.status).toBe(200);
    expect(validate(JSON.parse(guided.json.choices[0].message.content))).toBe(true);
  });

  it("a budget too small for any valid answer: finish_reason length and no half JSON in the content", async () => {
    const r = await chat({
      program: "sc",
      program_options: { cap: 2 },
      max_tokens: 6,
      response_format: RESPONSE_FORMAT,
    });
    expect(r.status).toBe(200);
    expect(r.json.choices[0].finish_reason).toBe("length");
    expect(r.json.choices[0].message.content).toBe("");
    expect(r.json.deliberate.answer).toBeNull();
  });

  it("cot-probe (and the step searches) with response_format: a 400 naming response_format and the programs to use", async () => {
    const r = await chat({ program: "cot-probe", response_format: RESPONSE_FORMAT });
    expect(r.status).toBe(400);
    expect(r.json.error).toMatchObject({ type: "invalid_request_error", param: "response_format" });
    expect(r.json.error.message).toMatch(/program cot-probe does not take structured answers: .*use program sc/);
  });
});
