// The Vercel AI SDK (ai 6 + @ai-sdk/openai-compatible 2) against the server, as a Node app would use it:
// generateObject answers a schema-valid object (on the bundled tiny reasoner), streamText streams the thought and the
// answer, and streamText with a required tool gets a call the SDK assembled from the streamed deltas (on a Qwen3
// fixture, whose template renders tools). A property test sends random small JSON Schemas as response_format (with
// n > 1): every sample's answer validates with ajv.
import { createOpenAICompatible } from "@ai-sdk/openai-compatible";
import { generateObject, jsonSchema, streamText, tool } from "ai";
import { Ajv } from "ajv";
import fc from "fast-check";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { z } from "zod";
import type { DeliberateServer } from "../../ts/server/index.js";
import { startBundledServer } from "../helpers/bundledServer.js";
import { fixtureDir } from "../model/fixtureCache.js";

let tiny: { server: DeliberateServer; url: string };
let qwen: { server: DeliberateServer; url: string };
const ajv = new Ajv();

beforeAll(async () => {
  tiny = await startBundledServer();
  const dir = await fixtureDir("qwen3", "bf16", { headDim: 32, maxPositions: 2048 });
  qwen = await startBundledServer({ modelDir: dir, bundledDir: undefined, servedModelName: "qwen" });
}, 120_000);
afterAll(async () => {
  await tiny?.server.close();
  await qwen?.server.close();
});

// supportsStructuredOutputs: the provider sends response_format json_schema (else json_object and a warning).
const provider = (url: string) =>
  createOpenAICompatible({ name: "deliberate", baseURL: `${url}/v1`, supportsStructuredOutputs: true });

describe("AI SDK", () => {
  it("generateObject returns an object valid by its schema", async () => {
    const schema = z.object({
      answer: z.number().int().min(0).max(500),
      confident: z.boolean(),
      tags: z.array(z.enum(["math", "easy", "hard"])).max(2),
    });
    const { object, finishReason } = await generateObject({
      model: provider(tiny.url)("tiny-reasoner"),
      schema,
      prompt: "What is 7*(8+5)-19?",
      temperature: 0,
      maxOutputTokens: 200,
    });
    expect(finishReason).toBe("stop");
    expect(ajv.validate(z.toJSONSchema(schema, { target: "draft-7" }), object), JSON.stringify(object)).toBe(true);
  });

  it("streamText streams the reasoning and the answer", async () => {
    const result = streamText({
      model: provider(tiny.url)("tiny-reasoner"),
      prompt: "What is 7*(8+5)-19?",
      temperature: 0,
      maxOutputTokens: 120,
    });
    let deltas = 0;
    for await (const _ of result.textStream) deltas++;
    expect(deltas).toBeGreaterThan(1);
    expect(await result.reasoningText).toMatch(/\S/);
    expect(await result.text).toMatch(/\S/);
  });

  it("streamText with toolChoice required: the SDK assembles a call whose input validates", async () => {
    const parameters = {
      type: "object",
      properties: {
        city: { type: "string", enum: ["Paris", "Rome"] },
        days: { type: "integer", minimum: 1, maximum: 5 },
      },
      required: ["city", "days"],
      additionalProperties: false,
    } as const;
    const result = streamText({
      model: provider(qwen.url)("qwen"),
      prompt: "Weather in Paris?",
      tools: { get_weather: tool({ description: "Forecast", inputSchema: jsonSchema(parameters) }) },
      toolChoice: "required",
      temperature: 0,
      maxOutputTokens: 200,
      providerOptions: { deliberate: { reasoning_effort: "none" } },
    });
    const calls = await result.toolCalls;
    expect(await result.finishReason).toBe("tool-calls");
    expect(calls.length).toBeGreaterThan(0);
    for (const c of calls) {
      expect(c.toolName).toBe("get_weather");
      expect(ajv.validate(parameters, c.input), JSON.stringify(c.input)).toBe(true);
    }
  });
});

// Random small schemas: objects of strings (bounded), bounded integers, booleans, string enums, arrays with
// min/maxItems, nullable members (type lists and anyOf) and nested objects, additionalProperties false.
type Schema = Record<string, unknown>;
const leaf: fc.Arbitrary<Schema> = fc.oneof(
  fc.constant({ type: "boolean" }),
  fc
    .tuple(fc.integer({ min: -20, max: 20 }), fc.integer({ min: 0, max: 40 }))
    .map(([lo, span]) => ({ type: "integer", minimum: lo, maximum: lo + span })),
  fc
    .uniqueArray(fc.stringMatching(/^[a-z]{1,4}$/), { minLength: 1, maxLength: 3 })
    .map((e) => ({ type: "string", enum: e })),
  fc.integer({ min: 1, max: 5 }).map((n) => ({ type: "string", maxLength: n })),
);
const nullable = (s: fc.Arbitrary<Schema>) =>
  fc.oneof(
    s,
    s.map((x) => ({ anyOf: [x, { type: "null" }] })),
    // A type list only where the member has no other keyword than its enum: XGrammar ignores keywords beside a type
    // list (bounds, lengths), and the server refuses such a schema by name (ts/grammar/schemaCheck.ts).
    s
      .filter((x) => typeof x.type === "string" && Object.keys(x).every((k) => k === "type" || k === "enum"))
      .map((x) => ({
        ...x,
        type: [x.type, "null"],
        ...("enum" in x ? { enum: [...(x.enum as unknown[]), null] } : {}),
      })),
  );
const object = (member: fc.Arbitrary<Schema>): fc.Arbitrary<Schema> =>
  fc.uniqueArray(fc.constantFrom("a", "b", "id", "name"), { minLength: 1, maxLength: 3 }).chain((keys) =>
    fc.tuple(...keys.map(() => member)).map((vals) => ({
      type: "object",
      properties: Object.fromEntries(keys.map((k, i) => [k, vals[i]])),
      required: keys,
      additionalProperties: false,
    })),
  );
const array = (items: fc.Arbitrary<Schema>) =>
  fc
    .tuple(items, fc.integer({ min: 0, max: 2 }), fc.integer({ min: 0, max: 1 }))
    .map(([it, min, extra]) => ({ type: "array", items: it, minItems: min, maxItems: min + extra }));
const schemaArb = object(nullable(fc.oneof(leaf, array(leaf), object(leaf))));

describe("property: random JSON Schemas as response_format", () => {
  it("every sample's answer (n = 2, sampled) validates with ajv", async () => {
    await fc.assert(
      fc.asyncProperty(schemaArb, fc.integer({ min: 0, max: 1000 }), async (schema, seed) => {
        const r = await fetch(`${tiny.url}/v1/chat/completions`, {
          method: "POST",
          headers: { "content-type": "application/json" },
          body: JSON.stringify({
            messages: [{ role: "user", content: "What is 3+4?" }],
            max_tokens: 200,
            n: 2,
            seed,
            temperature: 1,
            response_format: { type: "json_schema", json_schema: { name: "x", strict: true, schema } },
          }),
        });
        const json = (await r.json()) as any;
        expect(r.status, JSON.stringify(json)).toBe(200);
        const validate = ajv.compile(schema);
        for (const c of json.choices) {
          expect(c.finish_reason, c.message.content).toBe("stop");
          expect(validate(JSON.parse(c.message.content)), `${JSON.stringify(schema)}: ${c.message.content}`).toBe(true);
        }
      }),
      { numRuns: 25, seed: 44 },
    );
  }, 120_000);
});
