// reasoning_effort's probes are charged against max_tokens (issue 49 review): usage.completion_tokens counts the
// probes' tokens and the tokens an exit drops, so without the charge a low request with max_tokens 17 reported 19.
// Now completion_tokens <= max_tokens always (what every OpenAI client assumes), streamed or not, at every max_tokens
// around the probe points. Real openai client against the bundled tiny reasoner (its calibration's effort section).
import OpenAI from "openai";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { DeliberateServer } from "../../ts/server/index.js";
import { startBundledServer } from "../helpers/bundledServer.js";

const MODEL = "tiny-reasoner";
const SETTLES = "What is 92+41*3?";
/** The request every case sends, greedy; each adds its budget and effort. */
const GREEDY = { model: MODEL, messages: [{ role: "user" as const, content: SETTLES }], temperature: 0 };

let server: DeliberateServer;
let client: OpenAI;

beforeAll(async () => {
  const s = await startBundledServer();
  server = s.server;
  client = new OpenAI({ baseURL: `${s.url}/v1`, apiKey: "unused", maxRetries: 0 });
}, 60_000);
afterAll(async () => {
  await server?.close();
});

describe("max_tokens charges reasoning_effort's probes", () => {
  it("completion_tokens <= max_tokens at low and medium, around every probe point", async () => {
    const over: string[] = [];
    for (const effort of ["low", "medium"] as const)
      for (let max = 14; max <= 80; max += 3) {
        const r = await client.chat.completions.create({
          ...GREEDY,
          max_tokens: max,
          reasoning_effort: effort,
        });
        const used = r.usage!.completion_tokens;
        if (used > max) over.push(`${effort} max_tokens ${max}: completion_tokens ${used}`);
        if (used === max || r.choices[0].finish_reason === "length") continue;
        expect(r.choices[0].finish_reason).toBe("stop");
      }
    expect(over).toEqual([]);
  }, 120_000);

  it("streamed: the usage chunk stays within max_tokens too, and the probes still run", async () => {
    let probes = 0;
    for (const max of [17, 50, 80, 120]) {
      const stream = await client.chat.completions.create({
        ...GREEDY,
        max_tokens: max,
        reasoning_effort: "low",
        stream: true,
        stream_options: { include_usage: true },
      });
      let usage: OpenAI.CompletionUsage | undefined;
      for await (const c of stream) if (c.usage) usage = c.usage;
      expect(usage!.completion_tokens).toBeLessThanOrEqual(max);
      probes += (usage as unknown as { deliberate: { probes: number } }).deliberate.probes;
    }
    expect(probes).toBeGreaterThan(0);
  }, 60_000);
});

describe("/v1/responses reports reasoning.effort's usage.deliberate as chat does", () => {
  it("low: the same probes, exit and tokens saved as chat's reasoning_effort low", async () => {
    const chat = await client.chat.completions.create({
      ...GREEDY,
      max_tokens: 300,
      reasoning_effort: "low",
    });
    const r = await client.responses.create({
      model: MODEL,
      input: SETTLES,
      temperature: 0,
      max_output_tokens: 300,
      reasoning: { effort: "low" },
    });
    const deliberate = (u: unknown) => (u as { deliberate?: Record<string, unknown> }).deliberate;
    expect(deliberate(r.usage)).toMatchObject({ reasoning_effort: "low", early_exit: true });
    expect(deliberate(r.usage)).toEqual(deliberate(chat.usage));
    expect(r.usage!.output_tokens).toBe(chat.usage!.completion_tokens);
    // Without a probing level there is nothing to report.
    const none = await client.responses.create({ model: MODEL, input: SETTLES, max_output_tokens: 8 });
    expect(deliberate(none.usage)).toBeUndefined();
  }, 60_000);
});

describe("logprobs cover the tokens a close of the thought appends", () => {
  /** The entries' tokens joined, the special tokens the text skips (think markers, eos) dropped. */
  const spelled = (c: OpenAI.ChatCompletion.Choice): string =>
    c
      .logprobs!.content!.map((e) => e.token)
      .join("")
      .replace(/<\/?think>|<\|eos\|>/g, "");
  const textOf = (c: OpenAI.ChatCompletion.Choice): string =>
    ((c.message as unknown as { reasoning?: string }).reasoning ?? "") + (c.message.content ?? "");

  it("an early exit's `</think> \\boxed{` and a budget's end of thought have entries (logprob null)", async () => {
    const low = await client.chat.completions.create({
      ...GREEDY,
      max_tokens: 300,
      reasoning_effort: "low",
      logprobs: true,
      top_logprobs: 2,
    });
    const c = low.choices[0];
    expect((low.usage as unknown as { deliberate: { early_exit: boolean } }).deliberate.early_exit).toBe(true);
    expect(spelled(c)).toBe(textOf(c));
    // The appended tokens: scored by no sampling step, so null, with no alternatives.
    const appended = c.logprobs!.content!.filter((e) => e.logprob === null);
    expect(appended.map((e) => e.token).join("")).toContain("</think>");
    expect(appended.map((e) => e.token).join("")).toContain("\\boxed{");
    for (const e of appended) expect(e.top_logprobs).toEqual([]);
    // Every sampled token keeps its number.
    expect(c.logprobs!.content!.filter((e) => typeof e.logprob === "number").length).toBeGreaterThan(0);

    const budget = await client.chat.completions.create({
      ...GREEDY,
      max_tokens: 60,
      logprobs: true,
      thinking_token_budget: 8,
    } as OpenAI.ChatCompletionCreateParamsNonStreaming);
    const b = budget.choices[0];
    expect(spelled(b)).toBe(textOf(b));
    expect(b.logprobs!.content!.filter((e) => e.logprob === null).map((e) => e.token)).toEqual(["</think>"]);
  }, 60_000);

  it("streamed: the chunks' entries spell the deltas", async () => {
    const stream = await client.chat.completions.create({
      ...GREEDY,
      max_tokens: 300,
      reasoning_effort: "low",
      logprobs: true,
      stream: true,
    });
    let text = "";
    let entries = "";
    for await (const ch of stream) {
      const d = ch.choices[0]?.delta as { reasoning?: string; content?: string } | undefined;
      text += (d?.reasoning ?? "") + (d?.content ?? "");
      for (const e of ch.choices[0]?.logprobs?.content ?? []) entries += e.token;
    }
    expect(entries.replace(/<\/?think>|<\|eos\|>/g, "")).toBe(text);
    expect(text).toContain("\\boxed{215}");
  }, 60_000);
});
