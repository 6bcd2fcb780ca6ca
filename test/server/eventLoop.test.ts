// The event loop stays free while a largest-allowed prompt is tokenized: over real HTTP against the bundled tiny
// reasoner (context 512 tokens, body limit 1 MiB), /health keeps answering: no gap between two answers is more than a
// quarter of the whole (or 100 ms): relative, so a machine slowed by other work slows both sides alike.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { DeliberateServer } from "../../ts/server/index.js";
import { startBundledServer } from "../helpers/bundledServer.js";

const MODEL = "tiny-reasoner";
const LIMIT = 1 << 20; // max(1 MiB, 512 context tokens x 32 bytes)

let server: DeliberateServer;
let url: string;

beforeAll(async () => {
  ({ server, url } = await startBundledServer());
}, 60_000);

afterAll(async () => {
  await server?.close();
});

/**
 * Sends `body` to `path` and asks /health every 5 ms until it is answered: the answer and the time from each /health
 * answer to the next. Client and server share this event loop, so a stall of either shows in those gaps (a poll's own
 * latency alone would miss a stall that starts between two polls).
 */
async function pollHealthDuring(
  path: string,
  body: string,
): Promise<{ status: number; error: { code: string; message: string }; gapsMs: number[] }> {
  let done = false;
  const big = fetch(url + path, { method: "POST", headers: { "content-type": "application/json" }, body })
    .then(async (r) => ({
      status: r.status,
      error: ((await r.json()) as { error: { code: string; message: string } }).error,
    }))
    .finally(() => (done = true));
  const gapsMs: number[] = [];
  let last = performance.now();
  while (!done) {
    const r = await fetch(`${url}/health`);
    expect(r.status).toBe(200);
    const now = performance.now();
    gapsMs.push(now - last);
    last = now;
    await new Promise((r) => setTimeout(r, 5));
  }
  return { ...(await big), gapsMs };
}

describe("a largest-allowed body keeps the event loop free", () => {
  it("/health keeps answering (no gap over a quarter of the whole, or 100 ms) while a max-size prompt is tokenized (completions and chat)", async () => {
    // Just under the limit: ~1 M characters, as many tokens (tokenizing them takes ~0.8 s on a 2-core box).
    const prompt = "7*(8+5)-19 ".repeat(Math.floor((LIMIT - 200) / 11));
    for (const [path, body] of [
      ["/v1/completions", JSON.stringify({ model: MODEL, prompt })],
      ["/v1/chat/completions", JSON.stringify({ model: MODEL, messages: [{ role: "user", content: prompt }] })],
    ]) {
      expect(body.length).toBeLessThanOrEqual(LIMIT);
      const r = await pollHealthDuring(path, body);
      expect(r.status, path).toBe(400);
      expect(r.error.code).toBe("context_length_exceeded");
      expect(r.error.message).toMatch(/However, your request has \d{6,} input tokens/);
      // A loop blocked for the tokenization would show one gap as long as the whole; slices of it show many short ones.
      const total = r.gapsMs.reduce((a, b) => a + b, 0);
      expect(Math.max(...r.gapsMs), path).toBeLessThan(Math.max(100, total / 4));
      expect(r.gapsMs.length, path).toBeGreaterThan(5); // /health was asked while the prompt was tokenized
    }
  }, 30_000);

  it("a long prompt tokenized off the loop gets the same ids as in place", async () => {
    const prompt = "What is 7*(8+5)-19? <think>café 漢字 🙂</think>\n".repeat(400);
    const r = await fetch(`${url}/tokenize`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ model: MODEL, prompt }),
    });
    expect(r.status).toBe(200);
    const { tokens } = (await r.json()) as { tokens: number[] };
    expect(tokens).toEqual(server.state.target!.model.tokenizer.encode(prompt));
  });
});
