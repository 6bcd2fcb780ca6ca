// Programs over HTTP, what a client of an OpenAI server expects of them: n refused by name (a program answers with one
// choice), the program echoed as asked, usage with completion_tokens_details, and program_options.cap bounded by the
// server's program token budget with a 400 naming it.
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
