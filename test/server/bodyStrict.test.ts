// The generation bodies are strict (issue 49 review): a field /v1/completions or /v1/chat/completions does not name
// is a 400 naming it as `param`, never silently ignored (reasoning_effort, bad_words or tools on /v1/completions
// changed nothing before, though the client meant them to change the output). Fields the openai client (v6) and
// vLLM's clients send that change nothing in the output are accepted. Real openai client, the bundled tiny reasoner.
import OpenAI from "openai";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { DeliberateServer } from "../../ts/server/index.js";
import { startBundledServer } from "../helpers/bundledServer.js";

const MODEL = "tiny-reasoner";
let server: DeliberateServer;
let client: OpenAI;

beforeAll(async () => {
  const s = await startBundledServer();
  server = s.server;
  client = new OpenAI({ baseURL: `${s.url}/v1`, apiKey: "none", maxRetries: 0 });
}, 60_000);

afterAll(async () => {
  await server?.close();
});

/** The 400 a request gets, as the openai client throws it. */
async function refusal(p: Promise<unknown>): Promise<{ status: number; param: string | null; message: string }> {
  try {
    await p;
  } catch (e) {
    const err = e as InstanceType<typeof OpenAI.APIError>;
    return { status: err.status!, param: err.param ?? null, message: err.message };
  }
  throw new Error("the request was served");
}

const completion = (extra: Record<string, unknown>) =>
  client.completions.create({ model: MODEL, prompt: "1+1=", max_tokens: 2, ...extra } as never);
const chat = (extra: Record<string, unknown>) =>
  client.chat.completions.create({
    model: MODEL,
    messages: [{ role: "user", content: "1+1" }],
    max_tokens: 2,
    ...extra,
  } as never);

describe("/v1/completions: a field that would change the output is refused by name", () => {
  for (const [field, value] of [
    ["reasoning_effort", "low"],
    ["bad_words", ["2"]],
    ["tools", [{ type: "function", function: { name: "f", parameters: {} } }]],
    ["tool_choice", "required"],
    ["thinking_token_budget", 4],
    ["some_future_field", 1],
    ["allowed_token_ids", [1, 2]],
  ] as const)
    it(`${field}`, async () => {
      const r = await refusal(completion({ [field]: value }));
      expect(r.status).toBe(400);
      expect(r.param).toBe(field);
      expect(r.message).toContain(field);
    });

  it("what openai v6 completions.create sends, and vLLM's neutral extras, are accepted", async () => {
    const r = await completion({
      best_of: 1,
      echo: false,
      frequency_penalty: 0,
      presence_penalty: 0,
      logit_bias: {},
      logprobs: 1,
      n: 1,
      seed: 1,
      stop: ["\n\n"],
      stream: false,
      suffix: null,
      temperature: 0,
      top_p: 1,
      user: "u",
      top_k: -1,
      min_p: 0,
      repetition_penalty: 1,
      stop_token_ids: [],
      ignore_eos: false,
      priority: 0,
      program_id: "p1",
      request_id: "r1",
      cache_salt: "s",
      skip_special_tokens: true,
      spaces_between_special_tokens: true,
      add_special_tokens: true,
      bad_words: [],
      truncate_prompt_tokens: null,
      prompt_logprobs: null,
      return_tokens_as_token_ids: false,
    });
    expect((r as { choices: unknown[] }).choices).toHaveLength(1);
  });
});

describe("/v1/chat/completions: strict the same way", () => {
  for (const [field, value] of [
    ["bad_words", ["2"]],
    ["some_future_field", 1],
    ["verbosity", "low"],
    ["modalities", ["text", "audio"]],
    ["echo", true],
  ] as const)
    it(`${field}`, async () => {
      const r = await refusal(chat({ [field]: value }));
      expect(r.status).toBe(400);
      expect(r.param).toBe(field);
    });

  it("what openai v6 chat.completions.create sends at values that change nothing is accepted", async () => {
    const r = await chat({
      frequency_penalty: 0,
      presence_penalty: 0,
      logit_bias: {},
      logprobs: false,
      max_completion_tokens: 2,
      metadata: { a: "b" },
      modalities: ["text"],
      n: 1,
      parallel_tool_calls: true,
      prediction: { type: "content", content: "2" },
      prompt_cache_key: "k",
      prompt_cache_retention: "in-memory",
      safety_identifier: "s",
      seed: 1,
      service_tier: "auto",
      stop: null,
      store: false,
      stream: false,
      temperature: 0,
      top_p: 1,
      user: "u",
      verbosity: "medium",
      audio: null,
      web_search_options: null,
      priority: 0,
      request_id: "r",
      skip_special_tokens: true,
      add_generation_prompt: true,
      chat_template_kwargs: {},
    });
    expect((r as { choices: unknown[] }).choices).toHaveLength(1);
  });

  it("inside messages, content parts and stream_options a key not served is refused by name", async () => {
    for (const [extra, param] of [
      [{ messages: [{ role: "user", content: "1+1", weight: 2 }] }, "messages[0].weight"],
      [
        { messages: [{ role: "user", content: [{ type: "text", text: "1+1", lang: "en" }] }] },
        "messages[0].content[0].lang",
      ],
      [
        {
          messages: [
            { role: "assistant", content: "2", refusal: "no" },
            { role: "user", content: "1+1" },
          ],
        },
        "messages[0].refusal",
      ],
      [
        { messages: [{ role: "assistant", content: null, function_call: { name: "f", arguments: "{}" } }] },
        "messages[0].function_call",
      ],
      [{ stream: true, stream_options: { include_usage: true, chunk_size: 4 } }, "stream_options.chunk_size"],
    ] as const) {
      const r = await refusal(chat(extra));
      expect(r.status, param).toBe(400);
      expect(r.param, param).toBe(param);
    }
  });

  it("an earlier answer sent back as the openai client returned it (refusal, annotations) is accepted", async () => {
    const first = await chat({ temperature: 0 });
    const message = (first as OpenAI.Chat.Completions.ChatCompletion).choices[0].message;
    const r = await chat({
      messages: [
        { role: "user", content: [{ type: "text", text: "1+1", cache_control: { type: "ephemeral" } }] },
        { ...message, refusal: null, annotations: [], audio: null, function_call: null },
        { role: "user", content: "2+2" },
      ],
      stream: false,
      stream_options: null,
    });
    expect((r as { choices: unknown[] }).choices).toHaveLength(1);
    const streamed = await chat({ stream: true, stream_options: { include_usage: true, include_obfuscation: false } });
    for await (const _ of streamed as unknown as AsyncIterable<unknown>);
  });
});
