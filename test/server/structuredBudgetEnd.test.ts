// A structured value whose last token is the last max_tokens allows: the sample ends "stop" WITH that token's text
// (ModelSlot.completeFormats ends it "complete": the value's token, no eos). Every budget around the value's length is
// tried on chat, completions and responses, whole and streamed: an answer that ends "stop" (responses: completed) is a
// whole value (ajv), one cut by the budget ends "length" (responses: incomplete), never a cut value presented as whole.
import { Ajv } from "ajv";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { DeliberateServer } from "../../ts/server/index.js";
import { startBundledServer } from "../helpers/bundledServer.js";

let server: DeliberateServer;
let url: string;
const SCHEMA = {
  type: "object",
  properties: { answer: { type: "integer", minimum: 0, maximum: 999 }, ok: { type: "boolean" } },
  required: ["answer", "ok"],
  additionalProperties: false,
};
const validate = new Ajv().compile(SCHEMA);
const whole = (text: string): boolean => {
  try {
    return validate(JSON.parse(text));
  } catch {
    return false;
  }
};

beforeAll(async () => {
  ({ server, url } = await startBundledServer());
}, 60_000);
afterAll(async () => {
  await server?.close();
});

/** One request: whole, or streamed with its deltas joined. Returns the answer text, its end and its logprob tokens. */
async function ask(
  path: string,
  body: Record<string, unknown>,
  stream: boolean,
): Promise<{ text: string; end: string; logprobTokens?: string[] }> {
  const r = await fetch(url + path, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ ...body, stream }),
  });
  expect(r.status).toBe(200);
  if (!stream) {
    const j: any = await r.json();
    if (path === "/v1/responses") {
      const text = j.output.find((o: any) => o.type === "message")?.content?.[0]?.text ?? "";
      return { text, end: j.status };
    }
    const c = j.choices[0];
    const lp = c.logprobs?.tokens ?? c.logprobs?.content?.map((t: any) => t.token);
    return { text: c.text ?? c.message.content ?? "", end: c.finish_reason, logprobTokens: lp };
  }
  let text = "";
  let end = "";
  const lp: string[] = [];
  for (const line of (await r.text()).split("\n")) {
    if (!line.startsWith("data: ") || line === "data: [DONE]") continue;
    const j = JSON.parse(line.slice(6));
    if (path === "/v1/responses") {
      if (j.type === "response.output_text.delta") text += j.delta;
      if (j.type === "response.completed" || j.type === "response.incomplete") end = j.response.status;
      continue;
    }
    const c = j.choices?.[0];
    if (c === undefined) continue;
    text += c.text ?? c.delta?.content ?? "";
    lp.push(...(c.logprobs?.tokens ?? c.logprobs?.content?.map((t: any) => t.token) ?? []));
    if (c.finish_reason) end = c.finish_reason;
  }
  return { text, end, logprobTokens: lp };
}

describe("a value whose last token is the last max_tokens allows", () => {
  it("completions guided_choice: every budget ends stop with the whole choice or length with a prefix", async () => {
    const body = { prompt: "<think></think>Answer:", guided_choice: ["yes", "no"], temperature: 0, logprobs: 1 };
    const free = await ask("/v1/completions", { ...body, max_tokens: 8 }, false);
    expect(free.end).toBe("stop");
    let stops = 0;
    for (const stream of [false, true])
      for (let m = 1; m <= 5; m++) {
        const r = await ask("/v1/completions", { ...body, max_tokens: m }, stream);
        const at = `max_tokens ${m} stream ${stream}: ${JSON.stringify(r.text)} ${r.end}`;
        expect(free.text.startsWith(r.text), at).toBe(true);
        expect(r.end === "stop", at).toBe(r.text === free.text);
        // The value's last token has its logprob: the listed tokens spell the text (an eos, listed as vLLM does, after).
        expect(r.logprobTokens?.join("").replace(/<\|eos\|>$/, ""), at).toBe(r.text);
        if (r.end === "stop") stops++;
      }
    expect(stops).toBeGreaterThan(0);
  });

  for (const path of ["/v1/chat/completions", "/v1/responses"])
    it(`${path} json_schema, thought on: stop / completed exactly when the answer is whole (max_tokens 1..60)`, async () => {
      const body =
        path === "/v1/responses"
          ? {
              input: "What is 7*(8+5)-19?",
              text: { format: { type: "json_schema", name: "x", schema: SCHEMA } },
              temperature: 0,
            }
          : {
              messages: [{ role: "user", content: "What is 7*(8+5)-19?" }],
              response_format: { type: "json_schema", json_schema: { name: "x", schema: SCHEMA } },
              temperature: 0,
            };
      const budget = path === "/v1/responses" ? "max_output_tokens" : "max_tokens";
      const done = path === "/v1/responses" ? "completed" : "stop";
      let stops = 0;
      for (const stream of [false, true])
        for (let m = 1; m <= 60; m++) {
          const r = await ask(path, { ...body, [budget]: m }, stream);
          const at = `${budget} ${m} stream ${stream}: ${JSON.stringify(r.text)} ${r.end}`;
          expect(r.end === done, at).toBe(whole(r.text));
          if (r.end === done) stops++;
        }
      expect(stops).toBeGreaterThan(0); // some budget ends with the value's last token
    }, 120_000);
});
