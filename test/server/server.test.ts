// The OpenAI-compatible server end to end: the real `openai` client (and raw HTTP where the client hides what we
// check) against createServer on a loopback port, serving the bundled tiny reasoner through the real engine.
import { request as httpRequest } from "node:http";
import OpenAI from "openai";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { bundledModelDir, Engine, loadModel, type Model } from "../../ts/index.js";
import { createServer, type DeliberateServer } from "../../ts/server/index.js";

const MODEL = "tiny-reasoner";
const QUESTION = "What is 7*(8+5)-19?";
const ask = (content = QUESTION) => [{ role: "user" as const, content }];

let server: DeliberateServer;
let url: string;
let client: OpenAI;

async function until(ok: () => boolean, what: string, ms = 20_000): Promise<void> {
  const end = Date.now() + ms;
  while (!ok()) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

async function post(
  path: string,
  body: unknown,
  headers: Record<string, string> = {},
): Promise<{ status: number; headers: Headers; json: any }> {
  const r = await fetch(url + path, {
    method: "POST",
    headers: { "content-type": "application/json", ...headers },
    body: JSON.stringify(body),
  });
  const text = await r.text();
  return { status: r.status, headers: r.headers, json: text === "" ? null : JSON.parse(text) };
}

/** Reads an SSE response's data payloads (raw fetch: what the wire carries). */
async function sse(path: string, body: unknown): Promise<unknown[]> {
  const r = await fetch(url + path, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify(body),
  });
  expect(r.headers.get("content-type")).toMatch(/^text\/event-stream/);
  const text = await r.text();
  const out: unknown[] = [];
  for (const block of text.split("\n\n")) {
    if (!block.startsWith("data: ")) continue;
    const data = block.slice(6);
    out.push(data === "[DONE]" ? "[DONE]" : JSON.parse(data));
  }
  return out;
}

function engineOf(s: DeliberateServer): Engine {
  return s.state.target!.engine;
}

beforeAll(async () => {
  server = await createServer({ modelDir: bundledModelDir, bundledDir: bundledModelDir });
  url = await server.listen({ port: 0 });
  await until(() => server.state.target !== null, "the model to load");
  client = new OpenAI({ baseURL: `${url}/v1`, apiKey: "unused", maxRetries: 0 });
}, 60_000);

afterAll(async () => {
  await server?.close();
});

describe("OpenAI-compatible routes with the openai client", () => {
  it("chat: reasoning split from the answer, usage with reasoning tokens", async () => {
    const r = await client.chat.completions.create({ model: MODEL, messages: ask(), temperature: 0, max_tokens: 300 });
    expect(r.object).toBe("chat.completion");
    expect(r.id).toMatch(/^chatcmpl-/);
    const msg = r.choices[0].message as (typeof r.choices)[0]["message"] & {
      reasoning: string;
      reasoning_content: string;
    };
    expect(msg.content).toBe(" \\boxed{72}");
    expect(msg.reasoning).toMatch(/^8\+5=13\n/);
    expect(msg.reasoning_content).toBe(msg.reasoning);
    expect(r.choices[0].finish_reason).toBe("stop");
    expect(r.usage!.prompt_tokens).toBeGreaterThan(0);
    expect(r.usage!.total_tokens).toBe(r.usage!.prompt_tokens + r.usage!.completion_tokens);
    const reasoning = r.usage!.completion_tokens_details!.reasoning_tokens!;
    expect(reasoning).toBeGreaterThan(10);
    expect(reasoning).toBeLessThan(r.usage!.completion_tokens);
    // No temperature: the model's generation_config.json (do_sample: false, so greedy), as generate() reads it.
    const dflt = await client.chat.completions.create({ model: MODEL, messages: ask(), max_tokens: 300 });
    expect((dflt.choices[0].message as typeof msg).reasoning).toBe(msg.reasoning);
    // include_reasoning: false drops the thought from the message (the tokens still count).
    const hidden = await client.chat.completions.create({
      model: MODEL,
      messages: ask(),
      temperature: 0,
      max_tokens: 300,
      include_reasoning: false,
    } as never);
    expect((hidden as typeof r).choices[0].message.content).toBe(" \\boxed{72}");
    expect("reasoning" in (hidden as typeof r).choices[0].message).toBe(false);
  });

  it("completions: text, n, logprobs in the completions format, echo", async () => {
    const prompt = "<|bos|><|user|>What is 2+3?<|assistant|>";
    const r = await client.completions.create({
      model: MODEL,
      prompt,
      max_tokens: 8,
      temperature: 0,
      n: 2,
      logprobs: 2,
      echo: true,
    });
    expect(r.object).toBe("text_completion");
    expect(r.choices.map((c) => c.index)).toEqual([0, 1]);
    expect(r.choices[0].text.startsWith("<|bos|><|user|>What is 2+3?<|assistant|>")).toBe(true);
    expect(r.choices[0].text).toBe(r.choices[1].text); // greedy: both samples agree
    const lp = r.choices[0].logprobs!;
    expect(lp.tokens).toHaveLength(8);
    expect(lp.token_logprobs).toHaveLength(8);
    expect(Object.keys(lp.top_logprobs![0])).toHaveLength(2);
    expect(r.usage!.completion_tokens).toBe(16);
  });

  it("streams chat chunks with role first, reasoning then content, finish and usage last", async () => {
    const stream = await client.chat.completions.create({
      model: MODEL,
      messages: ask("What is 3+4*2?"),
      temperature: 0,
      stream: true,
      stream_options: { include_usage: true },
    });
    let reasoning = "";
    let content = "";
    let role: string | undefined;
    let finish: string | null = null;
    let usage: OpenAI.CompletionUsage | undefined | null;
    let afterFinish = 0;
    for await (const c of stream) {
      if (c.choices.length === 0) {
        usage = c.usage;
        continue;
      }
      const d = c.choices[0].delta as { role?: string; content?: string | null; reasoning?: string };
      role ??= d.role;
      if (finish !== null) afterFinish++;
      reasoning += d.reasoning ?? "";
      content += d.content ?? "";
      finish = c.choices[0].finish_reason ?? finish;
    }
    expect(role).toBe("assistant");
    expect(reasoning).toBe("2*4=8\n3+8=11\ncheck: 11-8=3\ncheck: 4*2=8\n");
    expect(content).toBe(" \\boxed{11}");
    expect(finish).toBe("stop");
    expect(afterFinish).toBe(0);
    expect(usage!.completion_tokens).toBeGreaterThan(usage!.completion_tokens_details!.reasoning_tokens!);
  });

  it("n = 4 samples four choices; the same seed gives the same text", async () => {
    const params = { model: MODEL, messages: ask(), temperature: 1, n: 4, seed: 1234, max_tokens: 200 };
    const a = await client.chat.completions.create(params);
    const b = await client.chat.completions.create(params);
    expect(a.choices.map((c) => c.index)).toEqual([0, 1, 2, 3]);
    const text = (r: typeof a) =>
      r.choices.map((c) => `${(c.message as { reasoning?: string }).reasoning}|${c.message.content}`);
    expect(text(b)).toEqual(text(a));
    expect(new Set(text(a)).size).toBeGreaterThan(1); // sample i uses seed + i
  });

  it("a deterministic request is bitwise identical alone and among 16 concurrent requests", async () => {
    const det = {
      model: MODEL,
      messages: ask("What is 68*23-509?"),
      temperature: 0.8,
      seed: 7,
      max_tokens: 200,
      logprobs: true,
      deterministic: true,
    } as never;
    const alone = (await client.chat.completions.create(det)) as OpenAI.ChatCompletion;
    const noise = Array.from({ length: 15 }, (_, i) =>
      client.chat.completions.create({
        model: MODEL,
        messages: ask(`What is ${i + 3}*${i + 11}-${i}?`),
        temperature: 1,
        seed: i,
        max_tokens: 150,
        n: 1 + (i % 3),
      }),
    );
    const busy = (await client.chat.completions.create(det)) as OpenAI.ChatCompletion;
    await Promise.all(noise);
    const bytes = (r: OpenAI.ChatCompletion) =>
      JSON.stringify([
        (r.choices[0].message as { reasoning?: string }).reasoning,
        r.choices[0].message.content,
        r.choices[0].logprobs!.content!.map((t) => [t.token, t.logprob]),
      ]);
    expect(bytes(busy)).toBe(bytes(alone));
  });

  it("runs a reasoning program: the answer, certaindex, rounds and tokens", async () => {
    const r = (await client.chat.completions.create({
      model: MODEL,
      messages: ask(),
      seed: 3,
      program: "sc",
      program_options: { cap: 8, policy: "baseline-even" },
    } as never)) as OpenAI.ChatCompletion & {
      deliberate: {
        program: string;
        answer: string;
        certaindex: number;
        rounds: number;
        tokens_used: number;
        token_budget: number;
        stop_reason: string;
        knob: { used: number; max: number };
      };
    };
    expect(r.deliberate.program).toBe("sc");
    expect(r.deliberate.answer).toBe("72");
    expect(r.choices[0].message.content).toBe("72");
    expect(r.deliberate.stop_reason).toBe("cap");
    expect(r.deliberate.knob).toEqual({ used: 8, max: 8 });
    expect(r.deliberate.rounds).toBeGreaterThanOrEqual(2);
    expect(r.deliberate.certaindex).toBeGreaterThan(0.5);
    expect(r.usage!.completion_tokens).toBe(r.deliberate.tokens_used);
    expect(r.deliberate.tokens_used).toBeLessThanOrEqual(r.deliberate.token_budget);
    // Streaming a program: one chunk per round, then the answer.
    const chunks = await sse("/v1/chat/completions", {
      model: MODEL,
      messages: ask(),
      seed: 3,
      program: "sc",
      program_options: { cap: 8, policy: "baseline-even" },
      stream: true,
    });
    const rounds = chunks.filter((c) => (c as { deliberate?: { round?: number } }).deliberate?.round !== undefined);
    expect(rounds).toHaveLength(r.deliberate.rounds);
    expect(chunks.at(-1)).toBe("[DONE]");
    const last = chunks.at(-2) as { choices: Array<{ delta: { content: string }; finish_reason: string }> };
    expect(last.choices[0]).toMatchObject({ delta: { content: "72" }, finish_reason: "stop" });
    const bad = await post("/v1/chat/completions", { model: MODEL, messages: ask(), program: "beams" });
    expect(bad.status).toBe(400);
    expect(bad.json.error.param).toBe("program");
  });

  it("control reasoning_end closes the thought mid-stream; the answer follows", async () => {
    const full = await client.chat.completions.create({
      model: MODEL,
      messages: ask(),
      temperature: 0,
      max_tokens: 300,
    });
    const fullReasoning = (full.choices[0].message as unknown as { reasoning: string }).reasoning;
    const stream = await client.chat.completions.create({
      model: MODEL,
      messages: ask(),
      temperature: 0,
      max_tokens: 300,
      stream: true,
    });
    let reasoning = "";
    let content = "";
    let sent = false;
    let closed: any = null;
    for await (const c of stream) {
      const d = (c.choices[0]?.delta ?? {}) as { reasoning?: string; content?: string };
      reasoning += d.reasoning ?? "";
      content += d.content ?? "";
      if (!sent && reasoning.length >= 6) {
        sent = true;
        closed = (await post("/v1/chat/completions/control", { id: c.id, action: "reasoning_end" })).json;
      }
    }
    expect(closed).toMatchObject({ action: "reasoning_end", ok: true, closed: 1 });
    expect(fullReasoning.startsWith(reasoning)).toBe(true);
    expect(reasoning.length).toBeLessThan(fullReasoning.length);
    expect(content).toMatch(/\\boxed\{-?\d+\}/);
    const gone = await post("/v1/chat/completions/control", { id: "chatcmpl-missing", action: "reasoning_end" });
    expect(gone.status).toBe(404);
    // thinking_token_budget closes the thought the same way, by itself.
    const capped = (await client.chat.completions.create({
      model: MODEL,
      messages: ask(),
      temperature: 0,
      max_tokens: 300,
      thinking_token_budget: 8,
    } as never)) as OpenAI.ChatCompletion;
    expect(capped.usage!.completion_tokens_details!.reasoning_tokens).toBe(9); // 8 of thought + the closing token
    expect(capped.choices[0].message.content).toMatch(/\\boxed\{/);
    // reasoning_effort none: the prompt closes the thought; no reasoning at all.
    const none = (await client.chat.completions.create({
      model: MODEL,
      messages: ask(),
      temperature: 0,
      max_tokens: 30,
      reasoning_effort: "none",
    } as never)) as OpenAI.ChatCompletion;
    expect((none.choices[0].message as unknown as { reasoning: string | null }).reasoning).toBeNull();
    expect(none.usage!.completion_tokens_details!.reasoning_tokens).toBe(0);
  });

  it("tokenize / detokenize round-trip; models lists the served model; health is 200", async () => {
    const t = await post("/tokenize", { model: MODEL, messages: ask() });
    expect(t.status).toBe(200);
    expect(t.json.count).toBe(t.json.tokens.length);
    expect(t.json.max_model_len).toBe(512);
    const d = await post("/detokenize", { model: MODEL, tokens: t.json.tokens });
    expect(d.json.prompt).toBe(`<|bos|><|user|>${QUESTION}<|assistant|>`);
    const models = await client.models.list();
    expect(models.data.map((m) => m.id)).toEqual([MODEL]);
    expect((await fetch(`${url}/health`)).status).toBe(200);
  });
});

describe("errors: OpenAI's nested body, the right status, the field named", () => {
  it("400 for invalid fields, naming the field", async () => {
    const cases: Array<[Record<string, unknown>, string, RegExp]> = [
      [{ temperature: -1 }, "temperature", /temperature is -1; expected a number in \[0, 2\]/],
      [{ n: 0 }, "n", /n is 0; expected an integer in \[1, 128\]/],
      [{ messages: [] }, "messages", /expected a non-empty array of messages/],
      [{ messages: [{ role: "robot", content: "x" }] }, "messages[0].role", /messages\[0\]\.role is "robot"/],
      [{ top_logprobs: 3 }, "top_logprobs", /top_logprobs needs logprobs: true/],
      [{ presence_penalty: 0.5 }, "presence_penalty", /expected 0 \(not supported by this server\)/],
      [
        { stop_token_ids: [999999] },
        "stop_token_ids",
        /request\.stopTokenIds\[\] is 999999; expected an integer in \[0, 104\]/,
      ],
    ];
    for (const [patch, param, message] of cases) {
      const r = await post("/v1/chat/completions", { model: MODEL, messages: ask(), max_tokens: 4, ...patch });
      expect(r.status, JSON.stringify(patch)).toBe(400);
      expect(r.json.error.type).toBe("invalid_request_error");
      expect(r.json.error.param).toBe(param);
      expect(r.json.error.message).toMatch(message);
    }
    // the openai client raises BadRequestError with the same body
    await expect(
      client.chat.completions.create({ model: MODEL, messages: ask(), temperature: 5 }),
    ).rejects.toMatchObject({ status: 400, error: { param: "temperature" } });
  });

  it("400 for prompt + max_tokens over the context, in vLLM's words", async () => {
    const r = await post("/v1/chat/completions", { model: MODEL, messages: ask(), max_tokens: 600 });
    expect(r.status).toBe(400);
    expect(r.json.error.code).toBe("context_length_exceeded");
    expect(r.json.error.message).toMatch(
      /^This model's maximum context length is 512 tokens\. However, you requested \d+ tokens \(\d+ in the messages, 600 in the completion\)\. Please reduce the length of the messages or completion\.$/,
    );
    // A program's thought counts the room its probe suffix and answer need after it.
    const program = await post("/v1/chat/completions", {
      model: MODEL,
      messages: ask(),
      max_tokens: 480,
      program: "sc",
    });
    expect(program.status).toBe(400);
    expect(program.json.error.message).toMatch(
      /However, you requested \d+ tokens \(\d+ in the messages, 504 in the completion\)/,
    );
    const long = await post("/v1/completions", { model: MODEL, prompt: "1+".repeat(400) });
    expect(long.status).toBe(400);
    expect(long.json.error.message).toMatch(/However, your request has \d+ input tokens/);
  });

  it("library errors map by type: the field's wire name and the error's code; a plain engine throw is a 500", async () => {
    const bad = await post("/v1/chat/completions", {
      model: MODEL,
      messages: ask(),
      max_tokens: 4,
      stop_token_ids: [1, 999999],
    });
    expect(bad.status).toBe(400);
    expect(bad.json.error).toMatchObject({
      type: "invalid_request_error",
      param: "stop_token_ids",
      code: "invalid_option",
    });
    // A KV pool of 2 pages (32 tokens): a longer prompt fits the context (512) but not the pool.
    const model: Model = await loadModel(bundledModelDir, { kvPages: 2 });
    const engine = new Engine({ models: { model } });
    const small = await createServer({ target: { engine, model, modelDir: bundledModelDir } });
    const surl = await small.listen({ port: 0 });
    const complete = async (): Promise<{ status: number; error: Record<string, unknown> }> => {
      const r = await fetch(`${surl}/v1/completions`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ model: MODEL, prompt: "1+".repeat(40), max_tokens: 4 }),
      });
      return { status: r.status, error: ((await r.json()) as { error: Record<string, unknown> }).error };
    };
    try {
      const pool = await complete();
      expect(pool.status).toBe(400);
      expect(pool.error).toMatchObject({ type: "invalid_request_error", param: null, code: "kv_exhausted" });
      expect(pool.error.message).toMatch(/^KV pool too small: the prompt \(\d+ tokens\) needs \d+ pages/);
      // Not a DeliberateError: a bug in the engine, not the client's fault.
      const submit = engine.submit;
      engine.submit = () => {
        throw new Error("boom");
      };
      const bug = await complete();
      engine.submit = submit;
      expect(bug.status).toBe(500);
      expect(bug.error).toMatchObject({ type: "server_error", message: "internal error: boom" });
      await engine.dispose();
      const gone = await complete();
      expect(gone.status).toBe(503);
      expect(gone.error).toMatchObject({ type: "service_unavailable_error", code: "disposed" });
    } finally {
      await small.close();
      await engine.dispose();
      model.dispose();
    }
  });

  it("404 for an unknown model, 401 for a bad key, 503 + Retry-After when the queue is full", async () => {
    await expect(client.chat.completions.create({ model: "gpt-9", messages: ask() })).rejects.toMatchObject({
      status: 404,
      error: { code: "model_not_found", param: "model" },
    });
    const model: Model = await loadModel(bundledModelDir);
    const engine = new Engine({ models: { model }, maxBatchSeqs: 1 });
    const guarded = await createServer({
      target: { engine, model, modelDir: bundledModelDir },
      apiKey: "sekret",
      maxQueue: 1,
    });
    const gurl = await guarded.listen({ port: 0 });
    try {
      const bad = new OpenAI({ baseURL: `${gurl}/v1`, apiKey: "wrong", maxRetries: 0 });
      await expect(bad.models.list()).rejects.toMatchObject({ status: 401, error: { type: "authentication_error" } });
      expect((await fetch(`${gurl}/health`)).status).toBe(200); // only /v1 needs the key
      const good = new OpenAI({ baseURL: `${gurl}/v1`, apiKey: "sekret", maxRetries: 0 });
      // One running (maxBatchSeqs 1), one waiting: the queue is full.
      const running = good.chat.completions.create({
        model: MODEL,
        messages: ask(),
        max_tokens: 400,
        temperature: 1,
        seed: 1,
        ignore_eos: true,
      } as never);
      await until(() => engine.metrics().running === 1, "the first request to run");
      const waiting = good.chat.completions.create({ model: MODEL, messages: ask(), max_tokens: 4 });
      await until(() => engine.metrics().waiting === 1, "the second request to wait");
      const r = await fetch(`${gurl}/v1/chat/completions`, {
        method: "POST",
        headers: { "content-type": "application/json", authorization: "Bearer sekret" },
        body: JSON.stringify({ model: MODEL, messages: ask() }),
      });
      expect(r.status).toBe(503);
      expect(r.headers.get("retry-after")).toBe("1");
      expect(((await r.json()) as { error: { type: string } }).error.type).toBe("service_unavailable_error");
      await Promise.all([running, waiting]);
    } finally {
      await guarded.close();
      await engine.dispose();
      model.dispose();
    }
  });
});

describe("disconnects and metrics", () => {
  it("a client that disconnects aborts its request and frees its pages; other streams finish untouched", async () => {
    const engine = engineOf(server);
    const other = client.chat.completions.create({
      model: MODEL,
      messages: ask(),
      temperature: 0,
      max_tokens: 300,
      stream: true,
    });
    const leavers = Array.from(
      { length: 6 },
      (_, i) =>
        new Promise<void>((resolve, reject) => {
          const req = httpRequest(
            `${url}/v1/chat/completions`,
            { method: "POST", headers: { "content-type": "application/json" } },
            (res) => {
              let seen = 0;
              res.on("data", () => {
                if (++seen === 2 + i) {
                  req.destroy();
                  resolve();
                }
              });
              res.on("error", () => undefined);
            },
          );
          req.on("error", () => undefined);
          req.end(
            JSON.stringify({
              model: MODEL,
              messages: ask(),
              temperature: 1,
              seed: i,
              max_tokens: 400,
              ignore_eos: true,
              stream: true,
            }),
          );
          setTimeout(() => reject(new Error("no chunks")), 20_000);
        }),
    );
    await Promise.all(leavers);
    let text = "";
    for await (const c of await other) text += c.choices[0]?.delta?.content ?? "";
    expect(text).toBe(" \\boxed{72}");
    await until(() => engine.metrics().running === 0 && engine.metrics().waiting === 0, "aborted requests to leave");
    expect(engine.metrics().models[0].kvPagesUsed).toBe(0);
  });

  it("the metrics scrape parses and counts what was served", async () => {
    const parse = async (): Promise<Map<string, number>> => {
      const text = await (await fetch(`${url}/metrics`)).text();
      const m = new Map<string, number>();
      for (const line of text.split("\n")) {
        if (line.startsWith("#") || line.trim() === "") continue;
        const match = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})? (\S+)$/.exec(line);
        expect(match, line).not.toBeNull();
        m.set(match![1] + (match![2] ?? ""), Number(match![3]));
      }
      return m;
    };
    const before = await parse();
    const label = `{model_name="${MODEL}"}`;
    const get = (m: Map<string, number>, k: string): number => m.get(k) ?? 0;
    const r = await client.chat.completions.create({
      model: MODEL,
      messages: ask(),
      temperature: 0,
      max_tokens: 300,
      n: 2,
    });
    const after = await parse();
    expect(
      get(after, `vllm:generation_tokens_total${label}`) - get(before, `vllm:generation_tokens_total${label}`),
    ).toBe(r.usage!.completion_tokens);
    // vLLM counts each of n samples as a request of its own: the prompt twice, two latency samples.
    expect(get(after, `vllm:prompt_tokens_total${label}`) - get(before, `vllm:prompt_tokens_total${label}`)).toBe(
      2 * r.usage!.prompt_tokens,
    );
    const stop = `vllm:request_success_total{model_name="${MODEL}",finished_reason="stop"}`;
    expect(get(after, stop) - get(before, stop)).toBe(2);
    expect(
      get(after, `vllm:e2e_request_latency_seconds_count${label}`) -
        get(before, `vllm:e2e_request_latency_seconds_count${label}`),
    ).toBe(2);
    expect(get(after, `vllm:time_to_first_token_seconds_count${label}`)).toBeGreaterThan(0);
    expect(get(after, `vllm:inter_token_latency_seconds_count${label}`)).toBeGreaterThan(0);
    expect(get(after, `vllm:prefix_cache_queries_total${label}`)).toBeGreaterThan(0);
    for (const k of ["vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc"])
      expect(after.has(k + label), k).toBe(true);
    expect(get(after, `deliberate:programs_running${label}`)).toBe(0);
    expect([...after.keys()].some((k) => k.startsWith("deliberate:tokens_saved_total"))).toBe(true);
  });
});
