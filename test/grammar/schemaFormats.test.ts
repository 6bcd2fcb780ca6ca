// String formats, format beside pattern, required names missing from properties, draft-7 tuples, zod records and
// property names XGrammar cannot write (ts/grammar/schemaCheck.ts): each rewrite is judged by ajv with ajv-formats
// (a validator nobody here wrote) on the schema as the client gave it, both on XGrammar's acceptance of probe strings
// and on answers the bundled tiny reasoner samples under the grammar.
import { Ajv2020 } from "ajv/dist/2020.js";
import addFormatsModule from "ajv-formats";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { z } from "zod";
import { bundledModelDir } from "../../ts/bundledModel.js";
import { Engine } from "../../ts/engine/engine.js";
import { InvalidOptionError } from "../../ts/errors/index.js";
import { grammarSource } from "../../ts/grammar/grammars.js";
import { checkJsonSchema } from "../../ts/grammar/schemaCheck.js";
import { loadXGrammar } from "../../ts/grammar/xgrammar.js";
import { loadModel, type Model } from "../../ts/model/model.js";

const FIELD = "request.structured";
const addFormats = ((addFormatsModule as unknown as { default?: unknown }).default ?? addFormatsModule) as (
  a: Ajv2020,
) => void;
const ajv = new Ajv2020({ strict: false });
addFormats(ajv);

/** The refusal grammarSource gives `schema`: its field and message (null: accepted). */
function refusal(schema: unknown): { field: string | null; message: string } | null {
  try {
    grammarSource({ type: "json_schema", schema: schema as Record<string, unknown> }, FIELD);
    return null;
  } catch (e) {
    expect(e).toBeInstanceOf(InvalidOptionError);
    return { field: (e as InvalidOptionError).field, message: (e as Error).message };
  }
}

/** Whether XGrammar's grammar for the checked `schema` accepts each JSON text. */
async function accepts(schema: unknown, texts: string[]): Promise<boolean[]> {
  const xg = await loadXGrammar();
  const g = await xg.Grammar.fromJSONSchema(JSON.stringify(checkJsonSchema(schema, "s")), false, -1);
  try {
    const out: boolean[] = [];
    for (const t of texts) out.push(await xg.Testings.isGrammarAcceptString(g, t));
    return out;
  } finally {
    g.dispose();
  }
}

const zodSchema = (s: z.ZodType): Record<string, unknown> => {
  const { $schema: _, ...rest } = z.toJSONSchema(s) as Record<string, unknown>;
  return rest;
};

// Probe strings per format: valid ones, and ones XGrammar's own format grammar let by (found probing 0.1.27).
const PROBES: Record<string, string[]> = {
  ipv4: ["1.2.3.4", "57.090.90.009", "256.1.1.1", "01.1.1.1", "255.255.255.255"],
  date: ["2024-02-29", "2023-02-29", "2023-04-31", "1900-02-29", "2000-02-29", "2023-13-01"],
  "date-time": ["2024-01-01T00:00:00Z", "2023-02-29T00:00:00Z", "2024-01-01T24:00:00Z", "2024-01-01T00:00:00+01:00"],
  time: ["20:04:05Z", "20:04:60+01:00", "20:04:05.5+01:00", "24:00:00Z", "20:04:05"],
  email: ["a@b.cc", "a@b", '"a b"@c.dd', "a@b-.cc", "a.b@c.dd", "a..b@c.dd"],
  uuid: ["123e4567-e89b-12d3-a456-426614174000", "123e4567-e89b-02d3-a456-426614174000", "123e4567e89b12d3a4564266"],
  ipv6: ["::1", "1:2:3:4:5:6:7:8", "1::", "1:2:3:4:5:6:7:8:9", "1::2::3", "fe80::1"],
};

describe("string formats", () => {
  it("each format XGrammar writes too loosely is a pattern: what the grammar accepts, ajv-formats validates", async () => {
    for (const format of ["ipv4", "date", "date-time", "time", "email"]) {
      const schema = { type: "string", format };
      const texts = PROBES[format];
      const ok = await accepts(
        schema,
        texts.map((t) => JSON.stringify(t)),
      );
      texts.forEach((t, i) => {
        if (ok[i]) expect(ajv.validate(schema, t), `${format} accepts ${t}`).toBe(true);
      });
      expect(
        ok.some((a) => a),
        format,
      ).toBe(true); // the format still has values
    }
    expect(refusal({ type: "string", format: "hostname" })).toMatchObject({ field: `${FIELD}.schema.format` });
  });

  it("zod 4's pattern beside its format is kept (the format's strings include it); any other pairing is refused", async () => {
    const cases: Array<[string, z.ZodType]> = [
      ["date-time", z.iso.datetime()],
      ["date-time", z.iso.datetime({ offset: true })],
      ["date", z.iso.date()],
      ["uuid", z.uuid()],
      ["uuid", z.guid()],
      ["email", z.email()],
      ["ipv4", z.ipv4()],
      ["ipv6", z.ipv6()],
    ];
    for (const [format, zs] of cases) {
      const schema = zodSchema(zs);
      expect(schema.format).toBe(format);
      expect(schema.pattern).toBeTypeOf("string");
      expect(refusal(schema), format).toBeNull();
      const texts = [...(PROBES[format] ?? []), ...(format === "date-time" ? PROBES.date : [])];
      const ok = await accepts(
        schema,
        texts.map((t) => JSON.stringify(t)),
      );
      texts.forEach((t, i) => {
        if (ok[i]) expect(ajv.validate(schema, t), `${format} (zod) accepts ${t}`).toBe(true);
      });
      expect(
        ok.some((a) => a),
        format,
      ).toBe(true);
    }
    // Before: the pattern was dropped, so the grammar let a date-time by that zod's own pattern refuses.
    const other = { type: "string", format: "date", pattern: "^2024-" };
    expect(refusal(other)).toMatchObject({ field: `${FIELD}.schema.pattern` });
  });
});

describe("object and array shapes validators read one way and XGrammar another", () => {
  it("a required name missing from properties is added (any value); with additionalProperties false it is refused", async () => {
    const schema = { type: "object", properties: {}, required: ["zz"] };
    const ok = await accepts(schema, ["{}", '{"zz": 1}', '{"zz": {"a": [true]}}']);
    expect(ok).toEqual([false, true, true]);
    const typed = { type: "object", properties: { a: { type: "integer" } }, required: ["a", "b"] };
    expect(await accepts(typed, ['{"a": 1}', '{"a": 1, "b": "x"}'])).toEqual([false, true]);
    const extraTyped = { ...typed, additionalProperties: { type: "string" } };
    expect(await accepts(extraTyped, ['{"a": 1, "b": 2}', '{"a": 1, "b": "x"}'])).toEqual([false, true]);
    const closed = { type: "object", properties: {}, required: ["zz"], additionalProperties: false };
    const r = refusal(closed);
    expect(r).toMatchObject({ field: `${FIELD}.schema.required` });
    expect(r!.message).toMatch(/"zz"/);
  });

  it("zod's record (propertyNames of type string) and the AI SDK's draft-7 tuple are accepted, exact against ajv", async () => {
    const record = zodSchema(z.record(z.string(), z.number().int()));
    expect(record.propertyNames).toEqual({ type: "string" });
    expect(refusal(record)).toBeNull();
    const texts = ['{"a": 1, "b": 2}', '{"a": "x"}', "{}"];
    const ok = await accepts(record, texts);
    texts.forEach((t, i) => expect(ok[i], t).toBe(ajv.validate(record, JSON.parse(t))));
    // draft 7: items as an array, additionalItems for the rest (validated by ajv's draft-7 class as given).
    const tuple = { type: "array", items: [{ type: "string" }, { type: "integer" }], additionalItems: false };
    const { Ajv: Ajv7 } = await import("ajv");
    const ajv7 = new Ajv7({ strict: false });
    expect(refusal(tuple)).toBeNull();
    const tupleTexts = ['["a", 1]', '["a", 1, 2]', '[1, "a"]', '["a"]'];
    const tok = await accepts(tuple, tupleTexts);
    tupleTexts.forEach((t, i) => {
      if (tok[i]) expect(ajv7.validate(tuple, JSON.parse(t)), t).toBe(true);
    });
    expect(tok[0]).toBe(true);
    const rest = { type: "array", items: [{ type: "string" }], additionalItems: { type: "integer" } };
    expect(await accepts(rest, ['["a", 1, 2]', '["a", "b"]'])).toEqual([true, false]);
  });

  it("a property name with a quote or a backslash is refused naming the property (was a bare EBNF lexer error)", () => {
    for (const name of ['a"b', "a\\b"]) {
      const schema = { type: "object", properties: { [name]: { type: "string" } }, required: [name] };
      const r = refusal(schema);
      expect(r?.field).toBe(`${FIELD}.schema.properties[${JSON.stringify(name)}]`);
      expect(r?.message).toMatch(/quote, a backslash/);
    }
  });
});

describe("sampled answers", () => {
  let model: Model;
  let engine: Engine;
  beforeAll(async () => {
    model = await loadModel(bundledModelDir, { kvPages: 256 });
    engine = new Engine({ models: { model } });
  });
  afterAll(async () => {
    await engine?.dispose();
    model?.dispose();
  });

  it("every answer the tiny reasoner samples under these schemas validates with ajv and ajv-formats", async () => {
    const { Ajv: Ajv7 } = await import("ajv");
    const ajv7 = new Ajv7({ strict: false });
    addFormats(ajv7 as unknown as Ajv2020);
    const draft2020 = [z.iso.datetime(), z.iso.datetime({ offset: true }), z.uuid(), z.email(), z.iso.date(), z.ipv4()]
      .map(zodSchema)
      .concat(["ipv4", "time", "date", "email", "date-time"].map((format) => ({ type: "string", format })))
      .concat([zodSchema(z.record(z.string(), z.boolean())), { type: "object", properties: {}, required: ["zz"] }]);
    const draft7 = [
      { type: "array", items: [{ type: "string", format: "date" }, { type: "boolean" }], additionalItems: false },
    ];
    let stops = 0;
    for (const [k, schema] of [...draft2020, ...draft7].entries()) {
      const validate = k < draft2020.length ? ajv.compile(schema) : ajv7.compile(schema);
      const out = await engine.submit({
        prompt: "<think></think>",
        maxTokens: 60,
        n: 4,
        temperature: 0.7,
        seed: 3 + k,
        structured: { type: "json_schema", schema, thought: "none" },
      }).result;
      for (const s of out.samples) {
        if (s.finishReason !== "stop") continue;
        stops++;
        expect(validate(JSON.parse(s.text)), `${JSON.stringify(schema)}: ${s.text}`).toBe(true);
      }
    }
    expect(stops).toBeGreaterThan(20); // of 56 samples: most end within the budget
  }, 120_000);
});
