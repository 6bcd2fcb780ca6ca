// Jump-forward (ModelSlot.jumpForward) through the server: the same responses with it on and off, streamed and not —
// forced tool calls (tool_choice "required", a named function) on a Qwen3 fixture (its <tool_call> syntax under the
// function's parameters schema), chat's response_format and /v1/responses' text.format on the tiny reasoner (thought
// free, then a constrained answer), with their usage (completion and reasoning tokens).
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { jumpForwardDefaults } from "../../ts/engine/modelSlot.js";
import type { DeliberateServer } from "../../ts/server/index.js";
import { startBundledServer } from "../helpers/bundledServer.js";
import { fixtureDir } from "../model/fixtureCache.js";
import { WEATHER } from "./toolSchemas.js";

let tiny: { server: DeliberateServer; url: string };
let qwen: { server: DeliberateServer; url: string };

beforeAll(async () => {
  tiny = await startBundledServer();
  const dir = await fixtureDir("qwen3", "bf16", { headDim: 32, maxPositions: 2048 });
  qwen = await startBundledServer({ modelDir: dir, bundledDir: undefined, servedModelName: "m" });
}, 120_000);
afterAll(async () => {
  await tiny?.server.close();
  await qwen?.server.close();
});
const saved = { ...jumpForwardDefaults };
afterEach(() => {
  Object.assign(jumpForwardDefaults, saved);
});

const TOOLS = [
  { type: "function", function: { name: "get_weather", description: "Forecast", parameters: WEATHER } },
  {
    type: "function",
    function: {
      name: "add",
      description: "Adds",
      parameters: {
        type: "object",
        properties: {
          a: { type: "integer", minimum: 0, maximum: 99 },
          b: { type: "integer", minimum: 0, maximum: 99 },
        },
        required: ["a", "b"],
        additionalProperties: false,
      },
    },
  },
];
const COUNT = {
  type: "object",
  properties: {
    answer: { type: "integer", minimum: 0, maximum: 999 },
    unit: { type: "string", enum: ["apples", "pears"] },
  },
  required: ["answer", "unit"],
  additionalProperties: false,
};

/** The response without what differs between any two calls (ids, timestamps). */
function stable(v: unknown): unknown {
  if (Array.isArray(v)) return v.map(stable);
  if (v === null || typeof v !== "object") return v;
  const out: Record<string, unknown> = {};
  for (const [k, x] of Object.entries(v))
    if (!["id", "created", "created_at", "system_fingerprint", "completed_at", "cached_tokens"].includes(k))
      out[k] = stable(x);
  return out;
}

/** The response (or, streamed, the events' data lines) with jump-forward on and off. */
async function both(url: string, path: string, body: Record<string, unknown>): Promise<unknown[]> {
  const outs: unknown[] = [];
  for (const jump of [true, false]) {
    jumpForwardDefaults.enabled = jump;
    const r = await fetch(`${url}${path}`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify(body),
    });
    expect(r.status).toBe(200);
    if (body.stream !== true) outs.push(stable(await r.json()));
    else {
      // Streamed: the deltas' concatenated content and tool-call arguments, the finish reasons and usage, in order.
      const text = await r.text();
      const events = text
        .split("\n")
        .filter((l) => l.startsWith("data: ") && l !== "data: [DONE]")
        .map((l) => JSON.parse(l.slice(6)) as Record<string, any>);
      const joined: Record<string, string> = {};
      const ends: unknown[] = [];
      for (const e of events) {
        for (const c of e.choices ?? []) {
          joined.content = (joined.content ?? "") + (c.delta?.content ?? "");
          joined.reasoning = (joined.reasoning ?? "") + (c.delta?.reasoning_content ?? c.delta?.reasoning ?? "");
          for (const t of c.delta?.tool_calls ?? [])
            joined[`call${t.index}`] =
              (joined[`call${t.index}`] ?? "") + (t.function?.name ?? "") + (t.function?.arguments ?? "");
          if (c.finish_reason) ends.push(c.finish_reason);
        }
        if (e.usage) ends.push(e.usage);
        if (e.type === "response.completed") ends.push(stable(e.response));
      }
      outs.push({ joined, ends });
    }
  }
  return outs;
}

describe("jump-forward through the server: the same responses on and off", () => {
  const chat = { model: "m", messages: [{ role: "user", content: "Weather in Paris?" }], max_tokens: 200 };
  for (const stream of [false, true])
    it(`forced tool calls: tool_choice required and a named function${stream ? ", streamed" : ""}`, async () => {
      for (const tool_choice of ["required", { type: "function", function: { name: "get_weather" } }])
        for (const sampling of [{ temperature: 0 }, { temperature: 1, seed: 7 }]) {
          const body = { ...chat, ...sampling, tools: TOOLS, tool_choice, stream, reasoning_effort: "none" };
          if (stream) Object.assign(body, { stream_options: { include_usage: true } });
          const [on, off] = await both(qwen.url, "/v1/chat/completions", body);
          expect(on).toEqual(off);
          expect(JSON.stringify(on)).toContain('"tool_calls"'); // the finish reason
        }
    });

  it("chat response_format and /v1/responses text.format after a free thought, with their usage", async () => {
    const question = "What is 7*(8+5)-19?";
    const format = { type: "json_schema", json_schema: { name: "count", schema: COUNT, strict: true } };
    for (const stream of [false, true]) {
      const body = {
        model: "tiny-reasoner",
        messages: [{ role: "user", content: question }],
        max_tokens: 160,
        temperature: 0,
        response_format: format,
        stream,
        ...(stream ? { stream_options: { include_usage: true } } : {}),
      };
      const [on, off] = await both(tiny.url, "/v1/chat/completions", body);
      expect(on).toEqual(off);
      expect(JSON.stringify(on)).toContain("reasoning_tokens");
      const responses = {
        model: "tiny-reasoner",
        input: question,
        temperature: 0.7,
        seed: 3,
        max_output_tokens: 160,
        text: { format: { type: "json_schema", name: "count", schema: COUNT, strict: true } },
        stream,
      };
      const [ron, roff] = await both(tiny.url, "/v1/responses", responses);
      expect(ron).toEqual(roff);
    }
  });
});
