// parseEngineOptions: every option checked against one schema, errors in one format (field, value as given, fix),
// defaults filled in. No model needed: a stand-in EngineModel is enough for the checks.
import { fc, test } from "@fast-check/vitest";
import { describe, expect, it } from "vitest";
import { parseEngineOptions } from "../../ts/engine/options.js";
import type { EngineOptions } from "../../ts/engine/engine.js";
import type { EngineModel } from "../../ts/engine/modelTypes.js";
import { Model } from "../../ts/model/model.js";
import { forkOptionsSchema, generateRequestSchema } from "../../ts/options/schemas.js";
import { closest, parseOptions, show } from "../../ts/options/validate.js";

const model = {
  numPages: 8,
  pageSize: 4,
  numLayers: 1,
  vocabSize: 16,
  maxContextTokens: 64,
  eosTokenIds: [],
  forward: async () => [],
} as EngineModel;
const parse = (o: unknown) => () => parseEngineOptions(o as EngineOptions);

describe("parseEngineOptions", () => {
  it("fills in the defaults and names the models", () => {
    const other = { ...model };
    expect(parseEngineOptions({ models: [{ model }, { model: other }, { name: "prm", model }] })).toEqual({
      models: [
        { name: "default", model },
        { name: "model1", model: other },
        { name: "prm", model },
      ],
      kernelMode: "fast",
      scheduler: {
        maxBatchTokens: 2048,
        maxBatchSeqs: 256,
        policy: "fcfs",
        agingTokensPerSecond: 64,
        preemption: "recompute",
      },
      verify: { verifyWindow: 32, verifyGroup: 8, fuseVerify: true },
    });
    const order = () => [];
    const r = parseEngineOptions({
      models: { model },
      kernelMode: "batch-invariant",
      schedulingPolicy: order,
      maxBatchTokens: 64,
      verifyWindow: 2,
      fuseVerify: false,
    });
    expect(r.kernelMode).toBe("batch-invariant");
    expect(r.scheduler).toMatchObject({ maxBatchTokens: 64, policy: order });
    expect(r.verify).toEqual({ verifyWindow: 2, verifyGroup: 8, fuseVerify: false });
  });

  it("names the field, the value as given and the fix", () => {
    expect(parse({ models: { model }, maxBatchTokens: 0 })).toThrow(
      /^Engine: options.maxBatchTokens is 0; expected an integer >= 1 \(tokens per step\)$/,
    );
    expect(parse({ models: { model }, maxBatchSeqs: 2.5 })).toThrow(
      /^Engine: options.maxBatchSeqs is 2.5; expected an integer >= 1/,
    );
    expect(parse({ models: { model }, agingTokensPerSecond: NaN })).toThrow(
      /^Engine: options.agingTokensPerSecond is NaN; expected a finite number >= 0$/,
    );
    expect(parse({ models: { model }, verifyWindow: 1 })).toThrow(
      /^Engine: options.verifyWindow is 1; expected an integer >= 2/,
    );
    expect(parse({ models: { model }, fuseVerify: "yes" })).toThrow(
      /^Engine: options.fuseVerify is "yes"; expected true or false$/,
    );
    expect(parse({ models: { model }, kernelMode: "exact" })).toThrow(
      /^Engine: options.kernelMode is "exact"; expected "fast" or "batch-invariant"$/,
    );
    expect(parse({ models: { model }, schedulingPolicy: "lifo" })).toThrow(
      /^Engine: options.schedulingPolicy is "lifo"; expected one of "fcfs", "lpm", "gang", "sjf", "gang\+sjf", "complexity", "gang\+complexity" or an ordering function$/,
    );
    expect(parse({ models: { model }, maxBatchToken: 64 })).toThrow(
      /^Engine: options.maxBatchToken is not a known field; did you mean maxBatchTokens\?$/,
    );
    expect(parse({ models: { model }, zzz: 1 })).toThrow(
      /^Engine: options.zzz is not a known field; known fields: models, kernelMode/,
    );
    expect(parse(undefined)).toThrow(
      /^Engine: options is undefined; expected an options object such as \{ models: \{ model \} \}$/,
    );
  });

  it("checks the model specs: a bare Model, an empty list, a typo, a missing model, a repeated name", () => {
    const loaded = Object.create(Model.prototype) as Model; // what loadModel() returns, without loading one
    expect(parse({ models: loaded })).toThrow(
      /^Engine: options.models is a Model; expected \{ model \} or a non-empty array of \{ name, model \}/,
    );
    expect(parse({ models: [] })).toThrow(/^Engine: options.models is \[\]; expected \{ model \}/);
    expect(parse({ models: { modle: model } })).toThrow(
      /^Engine: options.models.modle is not a known field; did you mean model\?$/,
    );
    expect(parse({ models: [{ model }, { name: "b" }] })).toThrow(
      /^Engine: options.models\[1\].model is undefined; expected what loadModel\(\) returned/,
    );
    expect(parse({ models: { model, name: "" } })).toThrow(
      /^Engine: options.models.name is ""; expected a non-empty model name$/,
    );
    expect(parse({ models: { model, tokenizer: "gpt2" } })).toThrow(
      /^Engine: options.models.tokenizer is "gpt2"; expected a TextCodec/,
    );
    expect(parse({ models: [{ model }, { name: "default", model }] })).toThrow(
      /^Engine: options.models names "default" twice \(default, default\); give each model a unique name$/,
    );
  });
});

describe("request and fork schemas without an engine (what an HTTP server reuses)", () => {
  it("accept a valid request and reject bad ones in the same format", () => {
    const req = { prompt: "hi", maxTokens: 4, temperature: 0.7, stop: ["\n"], metadata: { priority: 1 } };
    expect(parseOptions(generateRequestSchema, req, "request")).toEqual(req);
    expect(() => parseOptions(generateRequestSchema, { prompt: [1, 2.5] }, "request")).toThrow(
      /^request.prompt is \[1,2.5\]; expected text or an array of integer token ids$/,
    );
    expect(() => parseOptions(generateRequestSchema, { prompt: "x", topP: Infinity }, "request")).toThrow(
      /^request.topP is Infinity; expected a number in \(0, 1\]/,
    );
    expect(() => parseOptions(generateRequestSchema, { prompt: "x", signal: {} }, "request")).toThrow(
      /^request.signal is \{\}; expected an AbortSignal$/,
    );
    expect(() => parseOptions(forkOptionsSchema, { append: "x", length: 0 }, "fork")).toThrow(
      /^fork.length is 0; expected an integer >= 1/,
    );
    expect(() => parseOptions(forkOptionsSchema, { prompt: "x" }, "fork")).toThrow(
      /^fork.prompt is not a known field; known fields: temperature, topK, .*, append, sample$/,
    );
    // A misspelt field is named as such, not reported as the field it was meant to be missing.
    expect(() => parseOptions(generateRequestSchema, { promt: "x" }, "request")).toThrow(
      /^request.promt is not a known field; did you mean prompt\?$/,
    );
  });

  it("prints values as given and suggests only close names", () => {
    expect([NaN, -Infinity, undefined, null, "a", [1], 3n].map(show)).toEqual([
      "NaN",
      "-Infinity",
      "undefined",
      "null",
      '"a"',
      "[1]",
      "3n",
    ]);
    expect(show(new AbortController().signal)).toBe("an AbortSignal");
    expect(show({ a: "x".repeat(100) })).toHaveLength(80);
    expect(closest("maxTokenz", ["maxTokens", "temperature"])).toBe("maxTokens");
    expect(closest("temprature", ["maxTokens", "temperature"])).toBe("temperature");
    expect(closest("banana", ["maxTokens", "temperature"])).toBeNull();
  });
});

// parseOptions checks a request or fork with plain predicates first and asks zod only when one says no (so zod
// writes every error). The plain path must accept nothing zod rejects: for objects of known and unknown fields with
// values of every kind, parseOptions succeeds exactly when the schema does.
describe("parseOptions' plain path", () => {
  const anyValue = fc.oneof(
    fc.constant(undefined),
    fc.constant(null),
    fc.boolean(),
    fc.integer({ min: -3, max: 70 }),
    fc.double(),
    fc.constant(Number.NaN),
    fc.string({ maxLength: 3 }),
    fc.array(fc.integer({ min: -2, max: 5 }), { maxLength: 3 }),
    fc.array(fc.string({ maxLength: 2 }), { maxLength: 2 }),
    fc.record(
      { window: fc.integer({ min: -1, max: 3 }), topK: fc.integer({ min: 0, max: 70 }) },
      { requiredKeys: ["window"] },
    ),
    fc.record({ layer: fc.integer({ min: -2, max: 2 }), every: fc.integer({ min: 0, max: 2 }) }, { requiredKeys: [] }),
    fc.record({ programId: fc.string(), priority: fc.double(), zz: fc.integer() }, { requiredKeys: [] }),
    fc.constant(new AbortController().signal),
    fc.constant([1, 2.5]),
  );
  const keys = [
    "prompt",
    "maxTokens",
    "temperature",
    "topK",
    "topP",
    "seed",
    "stop",
    "stopTokenIds",
    "n",
    "confidence",
    "probe",
    "captureHidden",
    "metadata",
    "signal",
    "append",
    "length",
    "sample",
    "maxTokenz",
    "deterministic",
  ];
  const objects = fc.oneof(fc.dictionary(fc.constantFrom(...keys), anyValue, { maxKeys: 6 }), anyValue);
  for (const [name, schema] of [
    ["request", generateRequestSchema],
    ["fork", forkOptionsSchema],
  ] as const) {
    test.prop([objects], { numRuns: 3000 })(`${name}: accepted exactly when zod accepts`, (v) => {
      let ok = true;
      try {
        parseOptions(schema, v, name);
      } catch {
        ok = false;
      }
      expect(ok).toBe(schema.safeParse(v).success);
    });
  }
  it("accepts a typical request without zod and still names the fix when it does not", () => {
    const req = {
      prompt: [1, 2, 3],
      maxTokens: 8,
      temperature: 0.7,
      metadata: { programId: "p" },
      confidence: { window: 4 },
    };
    expect(parseOptions(generateRequestSchema, req, "request")).toBe(req);
    expect(() => parseOptions(generateRequestSchema, { ...req, confidence: { window: 0 } }, "request")).toThrow(
      "request.confidence.window is 0; expected an integer >= 1 (tokens per group)",
    );
  });
});
