// Every parser and validator a user can reach, fed generated input (fast-check): it accepts or throws an Error whose
// message names the field or the file — never a TypeError from deep inside, never a non-Error, never a crash.
// (issue 27, part: the property suite; the chaos runs, sanitizers and soak are still to come.)
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fc, test } from "@fast-check/vitest";
import { afterAll, describe, expect } from "vitest";
import { parseCalibration } from "../../ts/certaindex/calibrationFile.js";
import { parseGolden } from "../../ts/determinism/golden.js";
import { parsePromptsFile } from "../../ts/determinism/prompts.js";
import { Engine } from "../../ts/engine/engine.js";
import { parseModelConfig } from "../../ts/model/config.js";
import { openSafetensorsFile } from "../../ts/model/safetensors.js";
import { PagedToyModel, toyCodec } from "../helpers/pagedToyModel.js";

const engine = new Engine({ models: { model: new PagedToyModel(256, 4), tokenizer: toyCodec } });
afterAll(() => engine.dispose());

/** Runs `f`; a throw must be an Error whose message matches `names` (and is not a JS engine TypeError/RangeError
 * from inside: those say "Cannot read properties", "is not a function", "is not iterable"). */
function acceptsOrNames(f: () => unknown, names: RegExp): void {
  try {
    f();
  } catch (e) {
    expect(e).toBeInstanceOf(Error);
    const m = (e as Error).message;
    expect(m).not.toMatch(/Cannot read propert|is not a function|is not iterable|undefined is not|null is not/);
    expect(m, m).toMatch(names);
  }
}

async function acceptsOrNamesAsync(f: () => Promise<unknown>, names: RegExp): Promise<void> {
  try {
    await f();
  } catch (e) {
    expect(e).toBeInstanceOf(Error);
    const m = (e as Error).message;
    expect(m).not.toMatch(/Cannot read propert|is not a function|is not iterable|undefined is not|null is not/);
    expect(m, m).toMatch(names);
  }
}

/** Values of every JSON-ish kind, and the JS-only ones users pass by mistake. */
const value = fc.oneof(
  fc.anything(),
  fc.constantFrom(NaN, Infinity, -1, 0, 1.5, 2 ** 60, "", "x", [], [1, 2], [-1], {}, null, undefined),
);
const FIELDS = [
  "prompt",
  "maxTokens",
  "temperature",
  "topK",
  "topP",
  "seed",
  "stop",
  "stopTokenIds",
  "ignoreEos",
  "logprobs",
  "n",
  "deterministic",
  "confidence",
  "probe",
  "metadata",
  "eagerDeltas",
  "maxTokenz",
];

describe("engine.submit / engine.fork validate what they are given", () => {
  test.prop([fc.oneof(value, fc.dictionary(fc.constantFrom(...FIELDS), value, { maxKeys: 5 }))], { numRuns: 300 })(
    "a request of any shape",
    (req) => {
      acceptsOrNames(() => engine.submit(req as never).abort(), /^request/);
    },
  );

  test.prop([fc.dictionary(fc.constantFrom(...FIELDS, "length", "append", "sample"), value, { maxKeys: 4 })], {
    numRuns: 200,
  })("fork options of any shape", (opts) => {
    const parent = engine.submit({ prompt: [1, 2, 3], maxTokens: 2 });
    acceptsOrNames(() => engine.fork(parent, opts as never).abort(), /^(fork|request|Engine\.fork)/);
    parent.abort();
  });
});

describe("model files", () => {
  const config = fc.record(
    {
      architectures: fc.oneof(fc.constant(["LlamaForCausalLM"]), value),
      model_type: fc.oneof(fc.constantFrom("llama", "qwen2", "mistral"), value),
      hidden_size: fc.oneof(fc.constantFrom(64, 128), value),
      num_hidden_layers: fc.oneof(fc.constantFrom(2, 1_000_000_000), value),
      num_attention_heads: fc.oneof(fc.constantFrom(4, 3), value),
      num_key_value_heads: fc.oneof(fc.constantFrom(2, 4), value),
      intermediate_size: fc.oneof(fc.constant(256), value),
      vocab_size: fc.oneof(fc.constant(100), value),
      max_position_embeddings: fc.oneof(fc.constant(512), value),
      rms_norm_eps: fc.oneof(fc.constant(1e-5), value),
      rope_theta: fc.oneof(fc.constant(10000), value),
      torch_dtype: fc.oneof(fc.constantFrom("float32", "bfloat16"), value),
    },
    { requiredKeys: [] },
  );
  test.prop([fc.oneof(config, value)], { numRuns: 300 })("config.json of any content", (json) => {
    acceptsOrNames(() => parseModelConfig(json, "/m/config.json"), /config\.json/);
  });

  const dir = mkdtempSync(join(tmpdir(), "prop-safetensors-"));
  const tensor = fc.record(
    {
      dtype: fc.oneof(fc.constantFrom("F32", "BF16", "F16", "I8", "F64"), value),
      shape: fc.oneof(fc.array(fc.integer({ min: -2, max: 9 }), { maxLength: 3 }), value),
      data_offsets: fc.oneof(fc.tuple(fc.integer({ min: -4, max: 64 }), fc.integer({ min: -4, max: 64 })), value),
    },
    { requiredKeys: [] },
  );
  let k = 0;
  test.prop(
    [
      fc.oneof(fc.dictionary(fc.string({ maxLength: 8 }), fc.oneof(tensor, value), { maxKeys: 3 }), value),
      fc.integer({ min: -8, max: 64 }),
      fc.integer({ min: 0, max: 64 }),
    ],
    { numRuns: 150 },
  )(
    "a safetensors header of any content, with a lying length and any payload size",
    async (header, lengthSkew, payload) => {
      const file = join(dir, `w${k++}.safetensors`);
      const json = Buffer.from(JSON.stringify(header) ?? "undefined");
      const len = Buffer.alloc(8);
      len.writeBigUInt64LE(BigInt(Math.max(0, json.length + lengthSkew)));
      writeFileSync(file, Buffer.concat([len, json, Buffer.alloc(payload)]));
      await acceptsOrNamesAsync(
        async () => (await openSafetensorsFile(file)).close(),
        new RegExp(file.replace(/[.*+?^${}()|[\]\\]/g, "\\$&")),
      );
    },
  );
});

describe("the files the CLI reads", () => {
  const text = fc.oneof(
    fc.string(),
    fc.json(),
    fc.jsonValue().map((v) => JSON.stringify(v)),
  );
  test.prop([text], { numRuns: 200 })("a golden file", (t) =>
    acceptsOrNames(() => parseGolden(t, "golden.json"), /golden\.json/),
  );
  test.prop([text], { numRuns: 200 })("a prompts file", (t) =>
    acceptsOrNames(() => parsePromptsFile(t, "prompts.txt"), /prompts\.txt/),
  );
  test.prop([text], { numRuns: 200 })("a certaindex calibration", (t) =>
    acceptsOrNames(() => parseCalibration(t, "cal.json"), /cal\.json/),
  );
});
