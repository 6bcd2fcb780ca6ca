// Property: for random JSON Schemas (objects, nested objects, arrays with minItems / maxItems, enums, bounded
// integers, nullable and anyOf members, additionalProperties false), submitted together as a batch that mixes
// schemas, samples (n), temperatures and a free request, every constrained answer ends with "stop" and validates
// with ajv. Sizes are bounded (strings maxLength, integer ranges, array maxItems) so each answer fits its budget.
import { Ajv } from "ajv";
import fc from "fast-check";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { bundledModelDir } from "../../ts/bundledModel.js";
import { Engine } from "../../ts/engine/engine.js";
import type { GenerateRequest } from "../../ts/engine/request.js";
import { loadModel, type Model } from "../../ts/model/model.js";

type Schema = Record<string, unknown>;

const leaf: fc.Arbitrary<Schema> = fc.oneof(
  fc.constant({ type: "boolean" }),
  fc
    .tuple(fc.integer({ min: -50, max: 50 }), fc.integer({ min: 0, max: 60 }))
    .map(([lo, span]) => ({ type: "integer", minimum: lo, maximum: lo + span })),
  fc
    .uniqueArray(fc.stringMatching(/^[a-z]{1,5}$/), { minLength: 1, maxLength: 3 })
    .map((e) => ({ type: "string", enum: e })),
  fc.integer({ min: 1, max: 6 }).map((n) => ({ type: "string", maxLength: n })),
  fc.constant({ type: "null" }),
);

const nullable = (s: fc.Arbitrary<Schema>): fc.Arbitrary<Schema> =>
  fc.oneof(
    s,
    s.map((x) => ({ anyOf: [x, { type: "null" }] })),
  );

const array = (items: fc.Arbitrary<Schema>): fc.Arbitrary<Schema> =>
  fc
    .tuple(items, fc.integer({ min: 0, max: 2 }), fc.integer({ min: 0, max: 1 }))
    .map(([it, min, extra]) => ({ type: "array", items: it, minItems: min, maxItems: min + extra }));

const object = (member: fc.Arbitrary<Schema>): fc.Arbitrary<Schema> =>
  fc.uniqueArray(fc.constantFrom("a", "b", "id", "name", "x"), { minLength: 1, maxLength: 3 }).chain((keys) =>
    fc.tuple(...keys.map(() => member)).map((vals) => ({
      type: "object",
      properties: Object.fromEntries(keys.map((k, i) => [k, vals[i]])),
      required: keys,
      additionalProperties: false,
    })),
  );

/** Top-level objects, members up to one nested object or array deep. */
const schemaArb: fc.Arbitrary<Schema> = object(nullable(fc.oneof(leaf, array(leaf), object(leaf))));

let model: Model;
let engine: Engine;
let thinkEnd: number;

beforeAll(async () => {
  model = await loadModel(bundledModelDir, { kvPages: 512 });
  engine = new Engine({ models: { model } });
  thinkEnd = model.tokenizer.tokenToId("</think>")!;
});
afterAll(async () => {
  await engine?.dispose();
  model?.dispose();
});

function answer(tokens: readonly number[]): string {
  const end = tokens.indexOf(thinkEnd);
  const body = (end < 0 ? tokens : tokens.slice(end + 1)).filter((t) => !model.tokenizer.eosTokenIds.includes(t));
  return model.tokenizer.decode(body, { skipSpecialTokens: true });
}

describe("structured outputs, property", () => {
  it("every answer of a mixed batch of random schemas validates with ajv", async () => {
    const ajv = new Ajv({ strict: false });
    await fc.assert(
      fc.asyncProperty(
        fc.array(
          fc.record({
            schema: schemaArb,
            n: fc.integer({ min: 1, max: 3 }),
            temperature: fc.constantFrom(0, 0.7, 1.2),
            thought: fc.constantFrom("free" as const, "none" as const),
            seed: fc.integer({ min: 0, max: 1000 }),
          }),
          { minLength: 1, maxLength: 4 },
        ),
        async (cases) => {
          const prompt = model.tokenizer.applyChatTemplate([{ role: "user", content: "What is 6 + 7?" }]);
          const free = engine.submit({ prompt, maxTokens: 60, temperature: 1, seed: 3 }).result;
          const runs = cases.map((c) => {
            const req: GenerateRequest = {
              prompt,
              n: c.n,
              seed: c.seed,
              temperature: c.temperature,
              maxTokens: 400,
              structured: { type: "json_schema", schema: c.schema, thought: c.thought, answerTokens: 300 },
            };
            return engine.submit(req).result;
          });
          const outs = await Promise.all(runs);
          await free;
          outs.forEach((out, i) => {
            const validate = ajv.compile(cases[i].schema);
            for (const s of out.samples) {
              const a = answer(s.tokens);
              expect(s.finishReason, `${JSON.stringify(cases[i].schema)} -> ${a}`).toBe("stop");
              expect(validate(JSON.parse(a)), `${JSON.stringify(cases[i].schema)} -> ${a}`).toBe(true);
            }
          });
        },
      ),
      { numRuns: 25, seed: 3 },
    );
  }, 120_000);
});
