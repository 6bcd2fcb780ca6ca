// reasoning_effort as an early-exit policy and usage that shows the savings, with the real openai client against
// createServer on the bundled tiny reasoner (its calibration's effort section): a plain request at low closes a
// settled thought early and answers after it (streamed: reasoning deltas, then content), probes counted as reasoning
// tokens, thinking_token_budget still the hard cap; a program reports reasoning tokens, the tokens saved against its
// cap (the rounds not taken), branches, certaindex at exit, and /metrics sums the saving per program kind.
import { readFileSync } from "node:fs";
import OpenAI from "openai";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { BUNDLED_CALIBRATION_FILE, parseCalibration } from "../../ts/certaindex/calibrationFile.js";
import type { DeliberateServer } from "../../ts/server/index.js";
import { startBundledServer } from "../helpers/bundledServer.js";

const MODEL = "tiny-reasoner";
/** Its greedy thought settles on 215 (right) well before it ends. */
const SETTLES = "What is 92+41*3?";
const ask = (content = SETTLES) => [{ role: "user" as const, content }];

const bundled = parseCalibration(readFileSync(BUNDLED_CALIBRATION_FILE, "utf8"), BUNDLED_CALIBRATION_FILE);

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

interface EffortUsage {
  reasoning_effort: string;
  probes: number;
  probe_tokens: number;
  dropped_tokens: number;
  certaindex: number | null;
  early_exit: boolean;
  tokens_saved: number;
}
const effortOf = (u: unknown): EffortUsage | undefined => (u as { deliberate?: EffortUsage }).deliberate;
const reasoningOf = (u: OpenAI.CompletionUsage | undefined): number => u!.completion_tokens_details!.reasoning_tokens!;

async function metric(name: string): Promise<number> {
  const text = await (await fetch(`${url}/metrics`)).text();
  const line = text.split("\n").find((l) => l.startsWith(name));
  return line === undefined ? 0 : Number(line.slice(line.lastIndexOf(" ") + 1));
}

describe("reasoning_effort on a plain request", () => {
  it("low closes a settled thought early with the same answer as high; probes are reasoning tokens", async () => {
    const run = (reasoning_effort: "low" | "high") =>
      client.chat.completions.create({
        model: MODEL,
        messages: ask(),
        temperature: 0,
        max_tokens: 300,
        reasoning_effort,
      });
    const high = await run("high");
    const low = await run("low");
    const answer = (r: OpenAI.ChatCompletion): string | null => r.choices[0].message.content;
    expect(answer(high)).toBe(" \\boxed{215}");
    expect(answer(low)).toBe(" \\boxed{215}");
    expect(low.choices[0].finish_reason).toBe("stop");
    // high does not probe: plain decoding.
    expect(effortOf(high.usage)).toEqual({
      reasoning_effort: "high",
      probes: 0,
      probe_tokens: 0,
      dropped_tokens: 0,
      certaindex: null,
      early_exit: false,
      tokens_saved: 0,
    });
    const e = effortOf(low.usage)!;
    expect(e).toMatchObject({ reasoning_effort: "low", early_exit: true, certaindex: 1 });
    expect(e.probes).toBeGreaterThanOrEqual(2);
    expect(e.probe_tokens).toBeGreaterThan(0);
    // The thought the client saw is shorter than high's, probes and dropped tokens included in the reasoning tokens.
    const lowThought = (low.choices[0].message as unknown as { reasoning: string }).reasoning;
    const highThought = (high.choices[0].message as unknown as { reasoning: string }).reasoning;
    expect(highThought.startsWith(lowThought.replace(/\n$/, ""))).toBe(true);
    expect(lowThought.length).toBeLessThan(highThought.length);
    expect(reasoningOf(low.usage)).toBeGreaterThan(e.probe_tokens + e.dropped_tokens);
    expect(low.usage!.completion_tokens).toBeLessThan(high.usage!.completion_tokens);
    expect(low.usage!.completion_tokens).toBeGreaterThanOrEqual(reasoningOf(low.usage));
    // The saving against the thought's cap (max_tokens here): what the thought did not spend of it.
    expect(e.tokens_saved).toBe(300 - reasoningOf(low.usage));
    // No effort: no usage.deliberate.
    const plain = await client.chat.completions.create({
      model: MODEL,
      messages: ask(),
      temperature: 0,
      max_tokens: 300,
    });
    expect(effortOf(plain.usage)).toBeUndefined();
    expect(plain.usage!.completion_tokens).toBe(high.usage!.completion_tokens);
  });

  it("streams the reasoning deltas, then the content; the usage chunk reports the probes", async () => {
    const stream = await client.chat.completions.create({
      model: MODEL,
      messages: ask(),
      temperature: 0,
      max_tokens: 300,
      reasoning_effort: "low",
      stream: true,
      stream_options: { include_usage: true },
    });
    const order: Array<"reasoning" | "content"> = [];
    let reasoning = "";
    let content = "";
    let usage: OpenAI.CompletionUsage | undefined;
    let finish: string | null = null;
    for await (const c of stream) {
      if (c.usage) usage = c.usage;
      const d = c.choices[0]?.delta as { reasoning?: string; content?: string } | undefined;
      if (d?.reasoning) (order.push("reasoning"), (reasoning += d.reasoning));
      if (d?.content) (order.push("content"), (content += d.content));
      finish = c.choices[0]?.finish_reason ?? finish;
    }
    expect(order[0]).toBe("reasoning");
    expect(order.lastIndexOf("reasoning")).toBeLessThan(order.indexOf("content")); // no thought after the answer began
    expect(content).toBe(" \\boxed{215}");
    expect(finish).toBe("stop");
    const whole = await client.chat.completions.create({
      model: MODEL,
      messages: ask(),
      temperature: 0,
      max_tokens: 300,
      reasoning_effort: "low",
    });
    expect(reasoning).toBe((whole.choices[0].message as unknown as { reasoning: string }).reasoning);
    expect(effortOf(usage)).toMatchObject({ reasoning_effort: "low", early_exit: true });
    expect(reasoningOf(usage)).toBe(reasoningOf(whole.usage));
  });

  it("/metrics counts the probes and dropped tokens as generated, as usage does", async () => {
    for (const n of [1, 2]) {
      const before = await metric("vllm:generation_tokens_total");
      const r = await client.chat.completions.create({
        model: MODEL,
        messages: ask(),
        temperature: 0,
        max_tokens: 300,
        reasoning_effort: "low",
        n,
      });
      expect(effortOf(r.usage)!.probe_tokens).toBeGreaterThan(0);
      // The metrics are counted once every source has settled, just after the response.
      let after = before;
      for (let i = 0; i < 200 && after === before; i++) {
        await new Promise((res) => setTimeout(res, 10));
        after = await metric("vllm:generation_tokens_total");
      }
      expect(after - before).toBe(r.usage!.completion_tokens);
    }
  });

  it("thinking_token_budget stays the hard cap beside the effort", async () => {
    const r = await client.chat.completions.create({
      model: MODEL,
      messages: ask(),
      temperature: 0,
      max_tokens: 300,
      reasoning_effort: "medium",
      thinking_token_budget: 20,
    } as OpenAI.ChatCompletionCreateParamsNonStreaming);
    const e = effortOf(r.usage)!;
    // The thought closes at 20 tokens (+ its end marker): at most one probe fits before it (medium probes every 24).
    expect(e.early_exit).toBe(false);
    expect(reasoningOf(r.usage) - e.probe_tokens - e.dropped_tokens).toBeLessThanOrEqual(21);
    expect(r.choices[0].message.content).toMatch(/\S/);
  });
});

describe("reasoning.effort on the Responses API", () => {
  it("low closes the thought early there too; the probes are in the reasoning tokens", async () => {
    const run = (effort: "low" | "high") =>
      client.responses.create({
        model: MODEL,
        input: SETTLES,
        temperature: 0,
        max_output_tokens: 300,
        reasoning: { effort },
      });
    const [low, high] = [await run("low"), await run("high")];
    expect(low.output_text).toBe(" \\boxed{215}");
    expect(high.output_text).toBe(" \\boxed{215}");
    expect(low.usage!.output_tokens).toBeLessThan(high.usage!.output_tokens);
    expect(low.usage!.output_tokens_details.reasoning_tokens).toBeLessThan(
      high.usage!.output_tokens_details.reasoning_tokens,
    );
  });
});

describe("reasoning_effort with deterministic", () => {
  it("low / medium are refused by name (their exit point would depend on the load); high is served", async () => {
    for (const reasoning_effort of ["low", "medium"] as const) {
      const err = await client.chat.completions
        .create({
          model: MODEL,
          messages: ask(),
          max_tokens: 50,
          reasoning_effort,
          deterministic: true,
        } as OpenAI.ChatCompletionCreateParamsNonStreaming)
        .catch((e: unknown) => e);
      expect(err).toBeInstanceOf(OpenAI.BadRequestError);
      expect((err as InstanceType<typeof OpenAI.BadRequestError>).param).toBe("reasoning_effort");
    }
    const high = await client.chat.completions.create({
      model: MODEL,
      messages: ask(),
      temperature: 0,
      max_tokens: 300,
      reasoning_effort: "high",
      deterministic: true,
    } as OpenAI.ChatCompletionCreateParamsNonStreaming);
    expect(high.choices[0].message.content).toBe(" \\boxed{215}");
  });
});

describe("reasoning_effort with a structured answer", () => {
  it("does not probe: the probe's boxed answer is not the format's", async () => {
    const r = await client.chat.completions.create({
      model: MODEL,
      messages: ask(),
      temperature: 0,
      max_tokens: 200,
      reasoning_effort: "low",
      response_format: { type: "json_object" },
    });
    expect(effortOf(r.usage)).toMatchObject({ reasoning_effort: "low", probes: 0, early_exit: false });
  });
});

describe("usage of a program", () => {
  it("sc at low: reasoning tokens, tokens saved from the rounds not taken, branches; /metrics sums the saving", async () => {
    const key = `deliberate:tokens_saved_total{model_name="${MODEL}",program="sc"}`;
    const before = await metric(key);
    const r = (await client.chat.completions.create({
      model: MODEL,
      messages: ask("What is 5+1?"),
      max_tokens: 120,
      seed: 1,
      reasoning_effort: "low",
      program: "sc",
      program_options: { cap: 8 },
    } as OpenAI.ChatCompletionCreateParamsNonStreaming)) as OpenAI.ChatCompletion & { deliberate: any };
    const d = r.deliberate;
    expect(d.stop_reason).toBe("certain");
    // The calibration's policy for sc at low, else the fallback.
    expect(d.policy).toEqual(bundled.effort?.low?.programs?.sc ?? { kind: "threshold", threshold: 0.5, detectAt: 1 });
    expect(d.tokens_saved).toBe(Math.round(((d.knob.max - d.knob.used) * d.tokens_used) / d.knob.used));
    expect(d.tokens_saved).toBeGreaterThan(0);
    expect(d.branches_started).toBe(d.knob.used);
    expect(d.branches_pruned).toBeGreaterThanOrEqual(0);
    expect(d.certaindex_at_exit).toBe(d.certaindex);
    expect(reasoningOf(r.usage)).toBe(d.tokens_used);
    expect(r.usage!.completion_tokens).toBe(d.tokens_used);
    expect((await metric(key)) - before).toBe(d.tokens_saved);
  });

  it("sc at high runs to its cap and saves nothing", async () => {
    const r = (await client.chat.completions.create({
      model: MODEL,
      messages: ask("What is 5+1?"),
      max_tokens: 120,
      seed: 1,
      reasoning_effort: "high",
      program: "sc",
      program_options: { cap: 4 },
    } as OpenAI.ChatCompletionCreateParamsNonStreaming)) as OpenAI.ChatCompletion & { deliberate: any };
    expect(r.deliberate).toMatchObject({
      stop_reason: "cap",
      policy: { kind: "baseline-even" },
      tokens_saved: 0,
      branches_started: 4,
      branches_pruned: 0,
    });
    expect(reasoningOf(r.usage)).toBe(r.deliberate.tokens_used);
  });
});
