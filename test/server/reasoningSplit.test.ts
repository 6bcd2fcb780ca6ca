// A generation's thought / answer split on the bundled reasoner: by position in the sample's text, so stop strings
// (whose hold-back delays the thought's last characters past its end token) never move thought text into the answer,
// and a thought closed by the server (thinking budget) hands over its held-back text too. vLLM's stop_reason: the
// stop string or stop token id that ended a sample.
import OpenAI from "openai";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { bundledModelDir, Engine, loadModel, type Model } from "../../ts/index.js";
import { Generation, type ThinkTokens } from "../../ts/server/generation.js";
import type { DeliberateServer } from "../../ts/server/index.js";
import { startBundledServer } from "../helpers/bundledServer.js";

let model: Model;
let engine: Engine;
let think: ThinkTokens;
let prompt: number[];

beforeAll(async () => {
  model = await loadModel(bundledModelDir);
  engine = new Engine({ models: { model } });
  think = { start: model.tokenizer.tokenToId("<think>")!, end: model.tokenizer.tokenToId("</think>")! };
  prompt = model.tokenizer.encodeChat([{ role: "user", content: "What is 9*13-6-19?" }]);
});
afterAll(async () => {
  await engine.dispose();
  model.dispose();
});

interface Split {
  tokens: number[];
  reasoning: string;
  content: string;
  finishReason: string | undefined;
  stoppedBy: string | number | undefined;
}

async function run(request: { stop?: string[]; stopTokenIds?: number[] }, thinkingBudget?: number): Promise<Split> {
  const gen = new Generation(
    engine,
    { prompt, maxTokens: 120, temperature: 0, ...request },
    { think, promptOpensThought: prompt.at(-1) === think.start, thinkingBudget, codec: model.tokenizer },
  );
  let reasoning = "";
  let content = "";
  const tokens: number[] = [];
  for await (const e of gen.stream()) {
    if (e.kind === "error") throw e.error;
    reasoning += e.reasoning;
    content += e.content;
    tokens.push(...e.tokens);
  }
  return { tokens, reasoning, content, finishReason: gen.finishReasons()[0], stoppedBy: gen.stopReasons()[0] };
}

describe("reasoning split", () => {
  it("is the same with stop strings that never match, however long", async () => {
    const plain = await run({});
    expect(plain.reasoning.length).toBeGreaterThan(10);
    expect(plain.content).toMatch(/\\boxed\{/);
    for (const stop of [["zz"], ["zzzzzzzzzz"], ["zzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzz"]]) {
      const split = await run({ stop });
      expect(split, JSON.stringify(stop)).toEqual(plain);
    }
  });

  it("a stop string in the answer cuts the answer, leaves the thought whole and is the stop reason", async () => {
    const plain = await run({});
    const split = await run({ stop: ["boxed"] });
    expect(split.reasoning).toBe(plain.reasoning);
    expect(plain.content.startsWith(split.content)).toBe(true);
    expect(split.content).not.toContain("boxed");
    expect(split).toMatchObject({ finishReason: "stop", stoppedBy: "boxed" });
  });

  it("a stop token id the request gave is the stop reason; eos is none (vLLM's stop_reason)", async () => {
    const plain = await run({});
    expect(plain.finishReason).toBe("stop"); // at eos
    expect(plain.stoppedBy).toBeUndefined();
    const id = plain.tokens[8];
    const split = await run({ stopTokenIds: [id] });
    expect(split).toMatchObject({
      finishReason: "stop",
      stoppedBy: id,
      tokens: plain.tokens.slice(0, plain.tokens.indexOf(id) + 1),
    });
  });

  it("a thought the server closes (thinking budget) keeps its held-back text in the reasoning", async () => {
    const budgetOnly = await run({}, 12);
    const withStop = await run({ stop: ["zzzzzzzzzz"] }, 12);
    expect(withStop.reasoning).toBe(budgetOnly.reasoning);
    expect(withStop.content).toBe(budgetOnly.content);
    expect(budgetOnly.reasoning.length).toBeGreaterThan(0);
  });
});

describe("over HTTP (the openai client)", () => {
  let server: DeliberateServer;
  let client: OpenAI;
  beforeAll(async () => {
    let url: string;
    ({ server, url } = await startBundledServer());
    client = new OpenAI({ baseURL: `${url}/v1`, apiKey: "unused", maxRetries: 0 });
  }, 60_000);
  afterAll(async () => {
    await server?.close();
  });

  const ask = { model: "tiny-reasoner", messages: [{ role: "user" as const, content: "What is 9*13-6-19?" }] };
  type Message = { content: string | null; reasoning?: string };

  it("a stop string that never matches changes neither reasoning nor content; one that matches is stop_reason", async () => {
    const plain = await client.chat.completions.create({ ...ask, temperature: 0, max_tokens: 120 });
    const never = await client.chat.completions.create({
      ...ask,
      temperature: 0,
      max_tokens: 120,
      stop: ["zzzzzzzzzz"],
    });
    const plainMessage = plain.choices[0].message as Message;
    expect((never.choices[0].message as Message).reasoning).toBe(plainMessage.reasoning);
    expect(never.choices[0].message.content).toBe(plainMessage.content);
    expect(plain.choices[0]).toMatchObject({ finish_reason: "stop", stop_reason: null });

    const cut = await client.chat.completions.create({ ...ask, temperature: 0, max_tokens: 120, stop: ["boxed"] });
    expect(cut.choices[0]).toMatchObject({ finish_reason: "stop", stop_reason: "boxed" });
    expect((cut.choices[0].message as Message).reasoning).toBe(plainMessage.reasoning);

    const stream = await client.chat.completions.create({
      ...ask,
      temperature: 0,
      max_tokens: 120,
      stop: ["boxed"],
      stream: true,
    });
    let last: unknown;
    for await (const chunk of stream) if (chunk.choices[0]?.finish_reason) last = chunk.choices[0];
    expect(last).toMatchObject({ finish_reason: "stop", stop_reason: "boxed" });
  });
});
