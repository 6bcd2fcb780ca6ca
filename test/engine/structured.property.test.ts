// Property: for random JSON Schemas within what the engine accepts (objects, nested objects, arrays with minItems /
// maxItems, enums, const, bounded integers and numbers, strings with minLength / maxLength or a pattern, nullable and
// anyOf members, a oneOf told apart by a const, $defs / $ref, annotations, additionalProperties false), submitted
// together as a batch that mixes schemas, samples (n), temperatures and 0-2 free requests, every completed answer
// validates with ajv (draft 2020-12) and every answer without a number ends with "stop" (a number's fraction has no
// bound, so the tiny model may write digits to the budget). Sizes are bounded (string lengths, ranges, maxItems) so
// each answer fits its budget. fast-check shrinks a failing batch to a smallest one.
import { Ajv2020 } from "ajv/dist/2020.js";
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
  fc
    .tuple(fc.integer({ min: 0, max: 2 }), fc.integer({ min: 1, max: 3 }))
    .map(([lo, span]) => ({ type: "string", minLength: lo, maxLength: lo + span })),
  fc.constantFrom("^[a-c]{1,3}$", "^[0-9]{2}-[a-z]$", "^(yes|no)$").map((pattern) => ({ type: "string", pattern })),
  fc.stringMatching(/^[a-z]{1,4}$/).map((c) => ({ const: c, description: "a constant" })),
  fc
    .tuple(fc.integer({ min: 0, max: 20 }), fc.integer({ min: 0, max: 20 }))
    .map(([lo, span]) => ({ type: "number", minimum: lo, maximum: lo + span, title: "n" })),
  // Ranges XGrammar gets wrong as a schema, written as EBNF (numberRange.ts): negative, fractional, exclusive bounds.
  fc
    .tuple(fc.integer({ min: -400, max: 400 }), fc.integer({ min: 1, max: 400 }), fc.boolean(), fc.boolean())
    .map(([lo, span, openLo, openHi]) => ({
      type: "number",
      [openLo ? "exclusiveMinimum" : "minimum"]: lo / 8,
      [openHi ? "exclusiveMaximum" : "maximum"]: (lo + span) / 8,
    })),
  fc.constant({ type: "number", exclusiveMinimum: 0 }),
  fc
    .tuple(fc.integer({ min: 0, max: 4 }), fc.integer({ min: 2, max: 6 }))
    .map(([lo, span]) => ({ type: "string", pattern: "^[a-c]+$", minLength: lo, maxLength: lo + span })),
  fc.constant({ type: "null" }),
);

/** Two objects told apart by a required const property: a oneOf no value can match twice. */
const tagged = (member: fc.Arbitrary<Schema>): fc.Arbitrary<Schema> =>
  fc.tuple(member, member).map(([x, y]) => ({
    oneOf: [x, y].map((v, i) => ({
      type: "object",
      properties: { kind: { const: `k${i}` }, v },
      required: ["kind", "v"],
      additionalProperties: false,
    })),
  }));

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

/** Top-level objects, members up to one nested object or array deep; some with their first member behind a $ref. */
const schemaArb: fc.Arbitrary<Schema> = fc
  .tuple(object(nullable(fc.oneof(leaf, array(leaf), object(leaf), tagged(leaf)))), fc.boolean())
  .map(([s, viaRef]) => {
    if (!viaRef) return s;
    const props = s.properties as Record<string, Schema>;
    const [first] = Object.keys(props);
    return { ...s, properties: { ...props, [first]: { $ref: "#/$defs/first" } }, $defs: { first: props[first] } };
  });

/** Whether a schema can hold a number (whose fraction has no bound). */
const hasNumber = (s: unknown): boolean => JSON.stringify(s).includes('"type":"number"');

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
    const ajv = new Ajv2020({ strict: false });
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
        fc.array(fc.record({ temperature: fc.constantFrom(0, 1), seed: fc.nat(100) }), { maxLength: 2 }),
        async (cases, frees) => {
          const prompt = model.tokenizer.applyChatTemplate([{ role: "user", content: "What is 6 + 7?" }]);
          const free = Promise.all(frees.map((f) => engine.submit({ prompt, maxTokens: 60, ...f }).result));
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
              const what = `${JSON.stringify(cases[i].schema)} -> ${a}`;
              if (s.finishReason !== "stop" && hasNumber(cases[i].schema)) continue;
              expect(s.finishReason, what).toBe("stop");
              expect(validate(JSON.parse(a)), what).toBe(true);
            }
          });
        },
      ),
      { numRuns: 25, seed: 3 },
    );
  }, 120_000);
});
