// A Qwen3 model served: its thinking switch. reasoning_effort "none" (or a zero thinking budget) renders the chat
// template with enable_thinking false, as vLLM passes it, so the prompt carries Qwen3's own empty, closed thought
// (not one the server appends); chat_template_kwargs { enable_thinking: false } gives the same prompt; with thinking
// on, the prompt ends at the assistant turn and the model opens its thought itself.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { loadModel } from "../../ts/model/model.js";
import type { DeliberateServer } from "../../ts/server/index.js";
import { startBundledServer } from "../helpers/bundledServer.js";
import { fixtureDir } from "../model/fixtureCache.js";

let server: DeliberateServer;
let url: string;
let closedThoughtTokens: number; // "<think>\n\n</think>\n\n" in the fixture's tokens

beforeAll(async () => {
  const dir = await fixtureDir("qwen3", "bf16", { headDim: 32 });
  const model = await loadModel(dir);
  closedThoughtTokens = model.tokenizer.encode("<think>\n\n</think>\n\n", { addSpecialTokens: false }).length;
  model.dispose();
  ({ server, url } = await startBundledServer({ modelDir: dir, bundledDir: undefined }));
}, 120_000);
afterAll(async () => {
  await server?.close();
});

async function promptTokens(extra: Record<string, unknown>): Promise<{ prompt: number; reasoning: unknown }> {
  const r = await fetch(`${url}/v1/chat/completions`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({
      messages: [{ role: "user", content: "What is 2+3?" }],
      max_tokens: 4,
      temperature: 0,
      ...extra,
    }),
  });
  const json = (await r.json()) as {
    usage: { prompt_tokens: number };
    choices: Array<{ message: { reasoning?: unknown } }>;
  };
  expect(r.status, JSON.stringify(json)).toBe(200);
  return { prompt: json.usage.prompt_tokens, reasoning: json.choices[0].message.reasoning ?? null };
}

describe("Qwen3's thinking switch", () => {
  it("reasoning_effort none renders enable_thinking false: the template's closed thought, nothing appended", async () => {
    const on = await promptTokens({});
    const off = await promptTokens({ reasoning_effort: "none" });
    const kwargs = await promptTokens({ chat_template_kwargs: { enable_thinking: false } });
    expect(off.prompt).toBe(on.prompt + closedThoughtTokens);
    expect(kwargs.prompt).toBe(off.prompt);
    expect(off.reasoning).toBeNull();
    // /tokenize renders the same template variables (vLLM's chat_template_kwargs there too).
    const count = async (extra: Record<string, unknown>): Promise<number> => {
      const r = await fetch(`${url}/tokenize`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ messages: [{ role: "user", content: "What is 2+3?" }], ...extra }),
      });
      return ((await r.json()) as { count: number }).count;
    };
    expect(await count({})).toBe(on.prompt);
    expect(await count({ chat_template_kwargs: { enable_thinking: false } })).toBe(off.prompt);
  });
});
