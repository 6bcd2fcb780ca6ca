// Think markers that are ordinary tokens (Qwen3's and DeepSeek-R1's <think> / </think> are not special: their text is
// in the stream) and a template that opens the thought in the generation prompt (DeepSeek-R1's and QwQ's end with
// "<think>\n"): the thought is split out of the answer, and neither marker's text lands in reasoning or content. With a
// structured answer the format starts after </think>, so the content is exactly the format's.
import { cp, mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { DeliberateServer } from "../../ts/server/index.js";
import { startBundledServer } from "../helpers/bundledServer.js";
import { fixtureDir } from "../model/fixtureCache.js";

const OPEN_THOUGHT = String.raw`{%- for m in messages %}{{ '<|im_start|>' + m['role'] + '\n' + m['content'] + '<|im_end|>\n' }}{%- endfor %}{{ '<|im_start|>assistant\n<think>\n' }}`;

let server: DeliberateServer;
let url: string;
let dir: string;

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), "deliberate-think-"));
  await cp(await fixtureDir("qwen3", "bf16", { headDim: 32, maxPositions: 2048 }), dir, { recursive: true });
  await writeFile(join(dir, "chat_template.jinja"), OPEN_THOUGHT);
  ({ server, url } = await startBundledServer({ modelDir: dir, bundledDir: undefined, servedModelName: "r1" }));
}, 120_000);
afterAll(async () => {
  await server?.close();
  await rm(dir, { recursive: true, force: true });
});

async function chat(body: Record<string, unknown>): Promise<{ reasoning: string; content: string; finish: string }> {
  const r = await fetch(`${url}/v1/chat/completions`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ messages: [{ role: "user", content: "Add 2 and 3." }], temperature: 0, ...body }),
  });
  expect(r.status).toBe(200);
  if (!body.stream) {
    const c = ((await r.json()) as any).choices[0];
    return { reasoning: c.message.reasoning ?? "", content: c.message.content, finish: c.finish_reason };
  }
  let reasoning = "";
  let content = "";
  let finish = "";
  for (const block of (await r.text()).split("\n\n")) {
    if (!block.startsWith("data: {")) continue;
    const c = (JSON.parse(block.slice(6)) as any).choices[0];
    if (c === undefined) continue;
    reasoning += c.delta.reasoning ?? "";
    content += c.delta.content ?? "";
    finish = c.finish_reason ?? finish;
  }
  return { reasoning, content, finish };
}

describe("ordinary-token think markers, a thought the prompt opens", () => {
  it("a structured answer: the thought is reasoning, the content exactly the format (streamed or not)", async () => {
    for (const stream of [false, true]) {
      const r = await chat({ guided_regex: "[a-z]{4}", max_tokens: 30, stream });
      expect(r.finish).toBe("stop");
      expect(r.content).toMatch(/^[a-z]{4}$/);
      expect(r.reasoning).not.toBe("");
      expect(r.reasoning).not.toMatch(/<\/?think>/);
    }
  });

  it("a thought closed by thinking_token_budget: the reasoning holds no marker text", async () => {
    for (const stream of [false, true]) {
      const r = await chat({ thinking_token_budget: 6, max_tokens: 12, stream });
      expect(r.reasoning).not.toBe("");
      expect(r.reasoning).not.toMatch(/<\/?think>/); // (the answer is a random model's: it may write markers)
    }
  });
});
