// JSON Schemas before XGrammar (ts/grammar/schemaCheck.ts): each keyword @mlc-ai/web-xgrammar 0.1.27 would ignore is
// refused by its JSON path, with XGrammar's own acceptance of a violating instance pinned beside it (so a build that
// starts honouring one shows here); what OpenAI strict mode accepts passes, and the rewrites of number and integer
// bounds are checked against ajv on XGrammar's grammar.
import { Ajv2020 } from "ajv/dist/2020.js";
import { describe, expect, it } from "vitest";
import { InvalidOptionError } from "../../ts/errors/index.js";
import { grammarSource } from "../../ts/grammar/grammars.js";
import { substituteNumbers } from "../../ts/grammar/numberRange.js";
import { checkJsonSchema } from "../../ts/grammar/schemaCheck.js";
import { loadXGrammar } from "../../ts/grammar/xgrammar.js";

const FIELD = "request.structured";

/** JSON as XGrammar's JSON Schema grammars write it (no indent: ", " and ": " separators). */
function fmt(v: unknown): string {
  if (Array.isArray(v)) return `[${v.map(fmt).join(", ")}]`;
  if (v !== null && typeof v === "object")
    return `{${Object.entries(v)
      .map(([k, x]) => `${JSON.stringify(k)}: ${fmt(x)}`)
      .join(", ")}}`;
  return JSON.stringify(v);
}

/** Whether XGrammar's grammar for `schema` (as given, unchecked) accepts the JSON text. */
async function xgAccepts(schema: unknown, text: string): Promise<boolean> {
  const xg = await loadXGrammar();
  const g = await xg.Grammar.fromJSONSchema(JSON.stringify(schema), false, -1);
  try {
    return await xg.Testings.isGrammarAcceptString(g, text);
  } finally {
    g.dispose();
  }
}

/** The refusal grammarSource gives `schema`: its field. */
function refusal(schema: unknown): string | null {
  try {
    grammarSource({ type: "json_schema", schema: schema as Record<string, unknown> }, FIELD);
    return null;
  } catch (e) {
    expect(e).toBeInstanceOf(InvalidOptionError);
    return (e as InvalidOptionError).field;
  }
}

const obj = (x: unknown): Record<string, unknown> => ({
  type: "object",
  properties: { x },
  required: ["x"],
  additionalProperties: false,
});

// [what, schema of property x, a value of x XGrammar accepts though the schema forbids it, the field refused]
const IGNORED: Array<[string, unknown, string, string]> = [
  ["not", { type: "integer", not: { const: 3 } }, "3", "x.not"],
  ["if/then", { type: "string", if: { maxLength: 1 }, then: { const: "a" } }, '"b"', "x.if"],
  [
    "dependentRequired",
    {
      type: "object",
      properties: { a: { type: "integer" }, b: { type: "integer" } },
      required: ["a"],
      dependentRequired: { a: ["b"] },
    },
    '{"a":1}',
    "x.dependentRequired",
  ],
  ["multipleOf", { type: "integer", multipleOf: 3 }, "4", "x.multipleOf"],
  ["allOf with two members", { allOf: [{ type: "integer" }, { type: "string" }] }, "1", "x.allOf"],
  ["a $ref's sibling", { $ref: "#/$defs/n", maximum: 1 }, "5", "x.maximum"],
  ["keywords beside anyOf", { type: "integer", minimum: 5, anyOf: [{ type: "integer" }] }, "1", "x.type"],
  ["keywords beside enum", { type: "integer", enum: [1, 2, 3], minimum: 2 }, "1", "x.minimum"],
  ["a type list's keywords", { type: ["integer", "null"], minimum: 3 }, "1", "x.minimum"],
  ["a type keyword with no type", { maxLength: 2 }, '"abc"', "x.maxLength"],
  ["minLength beside pattern", { type: "string", pattern: "^a(b|c)+$", minLength: 3 }, '"ab"', "x.minLength"],
  ["format regex", { type: "string", format: "regex" }, '"("', "x.format"],
  ["oneOf with overlapping branches", { oneOf: [{ type: "integer" }, { type: "number" }] }, "1", "x.oneOf"],
];

describe("JSON Schema keywords XGrammar would ignore are refused by their path", () => {
  for (const [what, x, violating, field] of IGNORED) {
    it(what, async () => {
      const schema = { ...obj(x), $defs: { n: { type: "integer" } } };
      const value = { x: JSON.parse(violating) as unknown };
      if (!field.endsWith("format")) expect(new Ajv2020({ strict: false }).validate(schema, value)).toBe(false);
      expect(await xgAccepts(schema, fmt(value))).toBe(true); // why it is refused
      expect(refusal(schema)).toBe(`${FIELD}.schema.properties.${field}`);
    });
  }

  it("each of the rest by name, wherever it sits; messages say what to do", () => {
    for (const key of [
      "else",
      "dependentSchemas",
      "propertyNames",
      "unevaluatedProperties",
      "unevaluatedItems",
      "contains",
      "uniqueItems",
      "$dynamicRef",
    ])
      expect(refusal({ type: "array", items: { type: "object", [key]: {} } })).toBe(`${FIELD}.schema.items.${key}`);
    expect(refusal({ $ref: "https://example.com/s.json" })).toBe(`${FIELD}.schema.$ref`);
    expect(refusal({ $defs: { a: { type: "integer" } }, $ref: "#/$defs/b" })).toBe(`${FIELD}.schema.$ref`);
    expect(refusal({ anyOf: [{ type: "string" }, { type: "string", format: "color" }] })).toBe(
      `${FIELD}.schema.anyOf[1].format`,
    );
    expect(refusal({ type: "object", properties: { "a b": { not: {} } } })).toBe(
      `${FIELD}.schema.properties["a b"].not`,
    );
    expect(() => grammarSource({ type: "json_schema", schema: obj({ not: {} }) }, FIELD)).toThrow(
      /request\.structured\.schema\.properties\.x\.not XGrammar cannot exclude values/,
    );
    // A structural tag's schemas too (the server's forced tool calls).
    expect(() =>
      grammarSource(
        {
          type: "structural_tag",
          structuralTag: { type: "structural_tag", format: { type: "json_schema", json_schema: obj({ not: {} }) } },
        },
        FIELD,
      ),
    ).toThrow(/request\.structured\.structuralTag\.format\.json_schema\.properties\.x\.not/);
  });
});

describe("what OpenAI strict mode accepts passes", () => {
  const STRICT = {
    $schema: "https://json-schema.org/draft/2020-12/schema",
    title: "Order",
    description: "an order",
    type: "object",
    properties: {
      id: { type: "string", pattern: "^[A-Z]{2}[0-9]{3}$", description: "the id", examples: ["AB123"] },
      name: { type: "string", minLength: 1, maxLength: 20 },
      kind: { type: "string", enum: ["book", "film"] },
      version: { const: 2 },
      qty: { type: "integer", minimum: 1, maximum: 99 },
      score: { type: "number", minimum: 0, maximum: 1 },
      weight: { type: "number", minimum: 0 },
      note: { type: ["string", "null"] },
      tags: { type: "array", items: { type: "string", enum: ["a", "b"] }, minItems: 1, maxItems: 3 },
      owner: { $ref: "#/$defs/person" },
      either: { anyOf: [{ type: "integer" }, { type: "null" }], default: null },
      shape: {
        oneOf: [
          {
            type: "object",
            properties: { kind: { const: "circle" }, r: { type: "integer" } },
            required: ["kind", "r"],
          },
          { $ref: "#/$defs/square" },
        ],
      },
      mail: { type: "string", format: "email" },
    },
    required: ["id", "name", "kind", "version", "qty", "score", "weight", "note", "tags", "owner", "either", "shape"],
    additionalProperties: false,
    $defs: {
      person: {
        type: "object",
        properties: { first: { type: "string" }, child: { anyOf: [{ $ref: "#/$defs/person" }, { type: "null" }] } },
        required: ["first", "child"],
        additionalProperties: false,
      },
      square: {
        type: "object",
        properties: { kind: { const: "square" }, side: { type: "integer" } },
        required: ["kind", "side"],
        additionalProperties: false,
      },
    },
  };

  it("objects, arrays with bounds, enums, const, anyOf, nullable types, $defs / $ref, string and number bounds, annotations", () => {
    expect(refusal(STRICT)).toBeNull();
    expect(refusal(true)).toBeNull();
    expect(refusal({ oneOf: [{ type: "string" }, { type: "integer" }, { const: null }] })).toBeNull();
    // Pydantic's discriminated union: oneOf of $refs told apart by a const, OpenAPI's discriminator beside it.
    const pet = (kind: string) => ({
      type: "object",
      title: kind,
      properties: { kind: { const: kind, title: "Kind", type: "string" }, name: { type: "string" } },
      required: ["kind", "name"],
    });
    const pydantic = {
      $defs: { Cat: pet("cat"), Dog: pet("dog") },
      properties: {
        pet: {
          oneOf: [{ $ref: "#/$defs/Cat" }, { $ref: "#/$defs/Dog" }],
          discriminator: { propertyName: "kind", mapping: { cat: "#/$defs/Cat", dog: "#/$defs/Dog" } },
          title: "Pet",
        },
        age: { minimum: 0, type: "integer", title: "Age" },
        color: { $ref: "#/$defs/Cat", description: "an annotation beside a $ref" },
      },
      required: ["pet", "age", "color"],
      title: "Owner",
      type: "object",
      "x-vendor": { not: "an assertion: JSON Schema does not define x-vendor" },
    };
    expect(refusal(pydantic)).toBeNull();
    expect(refusal({ oneOf: [pet("cat"), pet("cat")] })).toBe(`${FIELD}.schema.oneOf`);
  });

  it("number ranges and integer exclusive bounds are rewritten into forms XGrammar keeps, checked against ajv", async () => {
    const ajv = new Ajv2020({ strict: false });
    const cases: Array<[Record<string, unknown>, string[]]> = [
      [{ type: "number", minimum: 0, maximum: 1 }, ["0", "0.5", "1", "1.0", "1.5", "1.01", "2", "-0.5", "0.999"]],
      [{ type: "number", minimum: 2, maximum: 10 }, ["1.9", "2", "9.99", "10", "10.5", "11", "5.25"]],
      [{ type: "number", minimum: 3, maximum: 3 }, ["3", "3.5", "2.9"]],
      [{ type: "integer", exclusiveMinimum: 3 }, ["2", "3", "4", "100"]],
      [{ type: "integer", minimum: 4 }, ["2", "3", "4", "100"]],
      [{ type: "integer", minimum: -5 }, ["-6", "-5", "0", "5"]],
      [{ type: "integer", maximum: -4 }, ["-2", "-4", "-5", "0"]],
      [{ type: "number", minimum: 4 }, ["2", "3.9", "4", "4.5", "100"]],
      [{ type: "number", maximum: 3 }, ["-2", "2.9", "3", "3.5", "4"]],
      [{ type: "integer", exclusiveMinimum: 1.5, exclusiveMaximum: 7 }, ["1", "2", "6", "7"]],
    ];
    for (const [schema, probes] of cases) {
      const rewritten = checkJsonSchema(schema, "s");
      for (const p of probes) {
        const valid = ajv.validate(schema, JSON.parse(p));
        const accepted = await xgAccepts(rewritten, p);
        if (accepted) expect(valid, `${JSON.stringify(schema)} accepts ${p}`).toBe(true);
        if (/^-?[0-9]+$/.test(p) && valid) expect(accepted, `${JSON.stringify(schema)} refuses ${p}`).toBe(true);
      }
    }
    // As given, XGrammar lets these by: the reason for the rewrites.
    expect(await xgAccepts({ type: "number", minimum: 0, maximum: 1 }, "1.5")).toBe(true);
    expect(await xgAccepts({ type: "integer", exclusiveMinimum: 3 }, "3")).toBe(true);
    expect(await xgAccepts({ type: "integer", minimum: 4 }, "2")).toBe(true);
    expect(await xgAccepts({ type: "number", minimum: 4 }, "3.9")).toBe(true);
  });

  it("a pattern repeating one character class takes minLength / maxLength: one bounded repetition, exact against ajv", async () => {
    const ajv = new Ajv2020({ strict: false });
    const xg = await loadXGrammar();
    const cases: Array<Record<string, unknown>> = [
      { type: "string", pattern: "^[a-z]+$", minLength: 2, maxLength: 4 },
      { type: "string", pattern: "^[a-z0-9-]*$", maxLength: 3 },
      { type: "string", pattern: "\\d{2,}", minLength: 3, maxLength: 5 },
      { type: "string", pattern: "^[^-]{1,6}$", minLength: 2 },
      { type: "string", pattern: "^\\w+$", minLength: 1, maxLength: 2 },
    ];
    // Random strings over an alphabet that hits each class and misses it (é: a code point outside ASCII).
    let seed = 7;
    const rand = (n: number) => ((seed = (seed * 1103515245 + 12345) % 2 ** 31), seed % n);
    const alphabet = ["a", "z", "0", "7", "-", "é", "_", "Q"];
    const samples = Array.from({ length: 300 }, () =>
      Array.from({ length: rand(8) }, () => alphabet[rand(alphabet.length)]).join(""),
    );
    for (const schema of cases) {
      const rewritten = checkJsonSchema(schema, "s") as Record<string, unknown>;
      expect(rewritten.minLength ?? rewritten.maxLength).toBeUndefined();
      const g = await xg.Grammar.fromJSONSchema(JSON.stringify(rewritten), false, -1);
      try {
        for (const text of samples) {
          const valid = ajv.validate(schema, text);
          const anchored = ajv.validate(
            { ...schema, pattern: `^(?:${String(schema.pattern).replace(/^\^|\$$/g, "")})$` },
            text,
          );
          const accepted = await xg.Testings.isGrammarAcceptString(g, JSON.stringify(text));
          if (accepted) expect(valid, `${JSON.stringify(schema)} accepts ${text}`).toBe(true);
          // XGrammar matches a pattern against the whole string: every whole match is accepted.
          if (anchored) expect(accepted, `${JSON.stringify(schema)} refuses ${text}`).toBe(true);
        }
      } finally {
        g.dispose();
      }
    }
    // Bounds that leave nothing, and patterns of another shape, are refused by name.
    expect(refusal(obj({ type: "string", pattern: "^[a-z]{5,}$", maxLength: 3 }))).toBe(
      `${FIELD}.schema.properties.x.maxLength`,
    );
    expect(refusal(obj({ type: "string", pattern: "^ab+$", maxLength: 3 }))).toBe(
      `${FIELD}.schema.properties.x.maxLength`,
    );
    expect(refusal(obj({ type: "string", format: "email", maxLength: 3 }))).toBe(
      `${FIELD}.schema.properties.x.maxLength`,
    );
  });

  it("exclusive, negative and fractional number bounds (zod's positive(), negative(), gt()) are exact through EBNF, against ajv", async () => {
    const ajv = new Ajv2020({ strict: false });
    const xg = await loadXGrammar();
    const cases: Array<Record<string, unknown>> = [
      { type: "number", exclusiveMinimum: 0 }, // zod .positive()
      { type: "number", exclusiveMaximum: 0 }, // zod .negative()
      { type: "number", minimum: 0, exclusiveMaximum: 1 },
      { type: "number", minimum: -10, maximum: 10 },
      { type: "number", minimum: 1.5 },
      { type: "number", maximum: -2.5 },
      { type: "number", exclusiveMinimum: -2.5, exclusiveMaximum: 0.5 },
      { type: "number", exclusiveMinimum: 0.1, maximum: 12.25 },
      { type: "number", minimum: 3, exclusiveMinimum: 4, maximum: 100, exclusiveMaximum: 99.5 }, // the tighter of each
      { type: "number", minimum: -0.001, maximum: -0.001 },
    ];
    // Values near every bound and far from them, integer and fractional, both signs, trailing zeros.
    let seed = 3;
    const rand = (n: number) => ((seed = (seed * 1103515245 + 12345) % 2 ** 31), seed % n);
    const texts = ["0", "0.0", "1", "-1", "0.5", "0.50", "-0.5", "10", "-10", "10.0", "-10.5", "1.5", "1.49", "-2.5"];
    texts.push(
      "-2.50",
      "-2.4999",
      "0.1",
      "0.1001",
      "12.25",
      "12.26",
      "99.5",
      "99.49",
      "4",
      "4.0001",
      "-0.001",
      "-0.0010",
    );
    for (let i = 0; i < 250; i++) {
      const int = String(rand(4) === 0 ? rand(200) : rand(14));
      const frac = rand(2) === 0 ? "" : "." + String(rand(10 ** (1 + rand(4))));
      const text = (rand(2) === 0 ? "-" : "") + int + frac;
      if (!/^-0(\.0*)?$/.test(text)) texts.push(text);
    }
    for (const x of cases) {
      const source = grammarSource({ type: "json_schema", schema: obj(x) }, FIELD);
      expect(source.kind === "json_schema" && source.numbers?.length, JSON.stringify(x)).toBe(1);
      const g0 = await xg.Grammar.fromJSONSchema((source as { text: string }).text, false, -1);
      const ebnf = substituteNumbers(g0.toString(), (source as { numbers: string[] }).numbers);
      g0.dispose();
      const g = await xg.Grammar.fromEBNF(ebnf);
      try {
        for (const text of texts) {
          const valid = ajv.validate(x, JSON.parse(text));
          const accepted = await xg.Testings.isGrammarAcceptString(g, `{"x": ${text}}`);
          expect(accepted, `${JSON.stringify(x)} on ${text}`).toBe(valid);
        }
      } finally {
        g.dispose();
      }
    }
    // A range in $defs: every reference gets it; an unused definition's placeholder is nowhere in the grammar.
    const defs = {
      type: "object",
      properties: { a: { $ref: "#/$defs/u" }, b: { $ref: "#/$defs/u" } },
      required: ["a", "b"],
      additionalProperties: false,
      $defs: { u: { type: "number", exclusiveMinimum: 0 }, unused: { type: "number", exclusiveMaximum: 0 } },
    };
    const source = grammarSource({ type: "json_schema", schema: defs }, FIELD) as { text: string; numbers: string[] };
    expect(source.numbers.length).toBe(2);
    const g0 = await xg.Grammar.fromJSONSchema(source.text, false, -1);
    const g = await xg.Grammar.fromEBNF(substituteNumbers(g0.toString(), source.numbers));
    g0.dispose();
    for (const [text, valid] of [
      ['{"a": 1, "b": 0.5}', true],
      ['{"a": 1, "b": 0}', false],
      ['{"a": -1, "b": 1}', false],
    ] as const)
      expect(await xg.Testings.isGrammarAcceptString(g, text), text).toBe(valid);
    g.dispose();
    // As given, XGrammar lets these by: the reason for the EBNF.
    expect(await xgAccepts(obj({ type: "number", minimum: -10, maximum: 10 }), '{"x": -10.5}')).toBe(true);
    expect(await xgAccepts(obj({ type: "number", minimum: 1.5 }), '{"x": 1.2}')).toBe(true);
    expect(await xgAccepts(obj({ type: "number", maximum: -2.5 }), '{"x": -2}')).toBe(true);
    expect(await xgAccepts(obj({ type: "number", exclusiveMinimum: 0 }), '{"x": 0}')).toBe(true);
    // Where EBNF cannot go (a structural tag's schemas), refused by name; a range with no number too.
    const tag = {
      type: "structural_tag",
      format: { type: "json_schema", json_schema: obj({ type: "number", exclusiveMinimum: 0 }) },
    };
    expect(() => grammarSource({ type: "structural_tag", structuralTag: tag }, FIELD)).toThrow(
      /structuralTag\.format\.json_schema\.properties\.x\.exclusiveMinimum is 0: .*use type integer, or give the schema as a json_schema format/,
    );
    expect(refusal(obj({ type: "number", exclusiveMinimum: 2, maximum: 2 }))).toBe(
      `${FIELD}.schema.properties.x.exclusiveMinimum`,
    );
  });
});
