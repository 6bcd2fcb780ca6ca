// Forced tool calls in the Llama 3.1 JSON and Mistral [TOOL_CALLS] syntaxes, end to end: a random fixture model
// served with a chat template in each family's style (its tool-call syntax is read from the template), tool_choice
// "required" generates a call in that syntax, the server parses it back into tool_calls whose arguments validate, and
// the openai client's stream helper assembles the same calls from the streamed deltas.
import { cp, mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Ajv } from "ajv";
import OpenAI from "openai";
import { afterAll, describe, expect, it } from "vitest";
import type { DeliberateServer } from "../../ts/server/index.js";
import { startBundledServer } from "../helpers/bundledServer.js";
import { fixtureDir } from "../model/fixtureCache.js";

// ChatML turns with each family's tool instructions (the words vLLM's parsers and the server key on).
const TURNS = String.raw`{%- for m in messages %}{{ '<|im_start|>' + m['role'] + '\n' + m['content'] + '<|im_end|>\n' }}{%- endfor %}{{ '<|im_start|>assistant\n' }}`;
const TEMPLATES = {
  llama3_json:
    String.raw`{%- if tools %}{{ '<|im_start|>system\nEnvironment: ipython\nGiven the following functions, respond with a JSON for a function call: {"name": function name, "parameters": dictionary of argument name and its value}.\n' }}{%- for t in tools %}{{ t | tojson + '\n' }}{%- endfor %}{{ '<|im_end|>\n' }}{%- endif %}` +
    TURNS,
  mistral:
    String.raw`{%- if tools %}{{ '[AVAILABLE_TOOLS]' + (tools | tojson) + '[/AVAILABLE_TOOLS]' }}{%- endif %}` +
    TURNS.replace(
      String.raw`m['content'] + '<|im_end|>\n'`,
      String.raw`(m['content'] if not m.tool_calls else '[TOOL_CALLS]' + (m.tool_calls | tojson)) + '<|im_end|>\n'`,
    ),
};

const ADD = {
  type: "object",
  properties: { a: { type: "integer", minimum: 0, maximum: 99 }, b: { type: "integer", minimum: 0, maximum: 99 } },
  required: ["a", "b"],
  additionalProperties: false,
} as const;
const TOOLS = [
  { type: "function" as const, function: { name: "add", parameters: ADD } },
  {
    type: "function" as const,
    function: { name: "noop", parameters: { type: "object", properties: {}, additionalProperties: false } },
  },
];
const ajv = new Ajv();
const cleanup: Array<() => Promise<unknown>> = [];
afterAll(async () => {
  for (const f of cleanup) await f();
});

async function serve(template: string): Promise<OpenAI> {
  const dir = await mkdtemp(join(tmpdir(), "deliberate-tools-"));
  await cp(await fixtureDir("qwen3", "bf16", { headDim: 32, maxPositions: 2048 }), dir, { recursive: true });
  await writeFile(join(dir, "chat_template.jinja"), template); // found before tokenizer_config.json's
  const { server, url }: { server: DeliberateServer; url: string } = await startBundledServer({
    modelDir: dir,
    bundledDir: undefined,
    servedModelName: "x",
  });
  cleanup.push(
    () => server.close(),
    () => rm(dir, { recursive: true, force: true }),
  );
  return new OpenAI({ baseURL: `${url}/v1`, apiKey: "unused", maxRetries: 0 });
}

describe.each([
  ["llama3_json", /^call_[A-Za-z0-9]{24}$/],
  ["mistral", /^[A-Za-z0-9]{9}$/], // Mistral's templates take 9 alphanumerics only
] as const)("%s syntax", (syntax, idPattern) => {
  it("a forced call parses into tool_calls valid by the schema; streamed, the same calls", async () => {
    const client = await serve(TEMPLATES[syntax]);
    const body = {
      model: "x",
      messages: [{ role: "user" as const, content: "Add 2 and 3." }],
      tools: TOOLS,
      tool_choice: "required" as const,
      max_tokens: 200,
      temperature: 0,
      reasoning_effort: "none" as const, // no thought: the budget is the calls' (up to 4 in a Mistral list)
    };
    const r = await client.chat.completions.create(body);
    const choice = r.choices[0];
    expect(choice.finish_reason).toBe("tool_calls");
    const calls = choice.message.tool_calls as Array<{ id: string; function: { name: string; arguments: string } }>;
    expect(calls.length).toBeGreaterThan(0);
    for (const c of calls) {
      expect(c.id).toMatch(idPattern);
      expect(["add", "noop"]).toContain(c.function.name);
      const schema = c.function.name === "add" ? ADD : TOOLS[1].function.parameters;
      expect(ajv.validate(schema, JSON.parse(c.function.arguments)), c.function.arguments).toBe(true);
    }
    const final = await client.chat.completions.stream(body).finalChatCompletion();
    const strip = (cs: unknown) =>
      (cs as typeof calls).map((c) => ({ name: c.function.name, arguments: c.function.arguments }));
    expect(strip(final.choices[0].message.tool_calls)).toEqual(strip(calls));
    // The call goes back into the next prompt through the template.
    const next = await client.chat.completions.create({
      ...body,
      tool_choice: "none",
      max_tokens: 4,
      messages: [
        ...body.messages,
        { role: "assistant", content: null, tool_calls: choice.message.tool_calls! },
        { role: "tool", tool_call_id: calls[0].id, content: "5" },
      ],
    });
    expect(next.choices[0].message.tool_calls).toBeUndefined();
  });
});
