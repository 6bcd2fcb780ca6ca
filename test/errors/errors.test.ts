// Library errors by type: each DeliberateError class is thrown where the docs promise it (docs/errors.md), with
// its stable code and the field at fault, and the messages stay the sentences the other tests assert on.
import { cp, rm, truncate, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Engine } from "../../ts/engine/engine.js";
import {
  ContextLengthError,
  DeliberateError,
  DisposedError,
  GrammarHostError,
  InvalidOptionError,
  KvExhaustedError,
  ModelFormatError,
  NativeError,
  NotFoundError,
  UnsupportedError,
  type DeliberateErrorCode,
} from "../../ts/errors/index.js";
import { bundledModelDir } from "../../ts/model/bundled.js";
import { loadModel } from "../../ts/model/model.js";
import { openModelFiles } from "../../ts/model/modelFiles.js";
import { parseProgramKind } from "../../ts/programs/registry.js";
import { SelfConsistency } from "../../ts/programs/selfConsistency.js";
import { fromDeliberateError, wireParam } from "../../ts/server/errors.js";
import { PagedToyModel } from "../helpers/pagedToyModel.js";
import { cleanupFixtures, tempDir, tempFixture } from "../model/fixtures.js";

/** What `f` throws (synchronously or by rejecting); fails the test if it does not. */
async function thrown(f: () => unknown): Promise<DeliberateError> {
  try {
    await f();
  } catch (e) {
    expect(e).toBeInstanceOf(DeliberateError);
    return e as DeliberateError;
  }
  throw new Error("expected a throw");
}

const tokens = (n: number): number[] => Array.from({ length: n }, (_, i) => 1 + (i % 60));

describe("the classes", () => {
  it("are Errors with a name, a code, the field (null when none) and the cause", () => {
    const cause = new Error("inner");
    const cases: Array<[DeliberateError, string, DeliberateErrorCode]> = [
      [new InvalidOptionError("m", { field: "request.topK" }), "InvalidOptionError", "invalid_option"],
      [new ContextLengthError("m"), "ContextLengthError", "context_length"],
      [new KvExhaustedError("m"), "KvExhaustedError", "kv_exhausted"],
      [new ModelFormatError("m", { cause }), "ModelFormatError", "model_format"],
      [new DisposedError("m"), "DisposedError", "disposed"],
      [new UnsupportedError("m"), "UnsupportedError", "unsupported"],
      [new NotFoundError("m"), "NotFoundError", "not_found"],
      [new NativeError("m", { cause }), "NativeError", "native"],
      [new GrammarHostError("m", { cause }), "GrammarHostError", "grammar_host"],
    ];
    for (const [e, name, code] of cases) {
      expect(e).toBeInstanceOf(Error);
      expect(e).toBeInstanceOf(DeliberateError);
      expect(e.name).toBe(name);
      expect(e.code).toBe(code);
      expect(String(e)).toBe(`${name}: m`);
      expect(e.stack).toMatch(new RegExp(`^${name}: m\\n`));
    }
    expect(cases[0][0].field).toBe("request.topK");
    expect(cases[1][0].field).toBeNull();
    expect(cases[3][0].cause).toBe(cause);
    expect("cause" in cases[1][0]).toBe(false);
    expect(cases[0][0]).not.toBeInstanceOf(ContextLengthError);
  });
});

describe("the engine", () => {
  const engine = (numPages = 64, maxContextTokens = 4096) =>
    new Engine({ models: { name: "toy", model: new PagedToyModel(numPages, 4, maxContextTokens) } });

  it("a bad request field: InvalidOptionError naming it", async () => {
    await using e = engine();
    const ids = await thrown(() => e.submit({ prompt: [1, 2], stopTokenIds: [3, 999] }));
    expect(ids).toBeInstanceOf(InvalidOptionError);
    expect(ids).toMatchObject({ code: "invalid_option", field: "request.stopTokenIds[]" });
    expect(ids.message).toMatch(/^request\.stopTokenIds\[\] is 999; expected an integer in \[0, 63\]/);
    const prompt = await thrown(() => e.submit({ prompt: [1, 64] }));
    expect(prompt).toMatchObject({ code: "invalid_option", field: "request.prompt[1]" });
    // The schema's failures (parseOptions) carry the path too.
    expect(await thrown(() => e.submit({ prompt: [1], temperature: -1 }))).toMatchObject({
      code: "invalid_option",
      field: "request.temperature",
    });
    expect(await thrown(() => e.submit({ prompt: [1], maxTokenz: 3 } as never))).toMatchObject({
      code: "invalid_option",
      field: "request.maxTokenz",
    });
    const options = await thrown(() => new Engine({ models: { model: new PagedToyModel(8) }, maxBatchTokens: 0 }));
    expect(options).toMatchObject({ code: "invalid_option", field: "Engine: options.maxBatchTokens" });
    expect(options.message).toMatch(/^Engine: options\.maxBatchTokens is 0;/);
    // A field the model cannot serve: a structured output on a model loaded without a tokenizer's vocabulary.
    const format = await thrown(
      async () => await e.submit({ prompt: [1], structured: { type: "choice", choices: ["a"] } }).result,
    );
    expect(format).toBeInstanceOf(UnsupportedError);
    expect(format).toMatchObject({ code: "unsupported", field: "request.structured" });
  });

  it("a bad fork: InvalidOptionError naming fork.length; a foreign handle: NotFoundError", async () => {
    await using e = engine();
    const parent = e.submit({ prompt: tokens(6), maxTokens: 4, ignoreEos: true });
    await parent.result;
    const fork = await thrown(() => e.fork(parent, { length: 999 }));
    expect(fork).toMatchObject({ code: "invalid_option", field: "fork.length" });
    expect(fork.message).toMatch(/^fork\.length is 999; expected an integer in \[1, 10\]/);
    await using other = engine();
    const foreign = await thrown(() => other.fork(parent, {}));
    expect(foreign).toBeInstanceOf(NotFoundError);
  });

  it("a prompt over the model's context: ContextLengthError", async () => {
    await using e = engine(64, 16);
    const err = await thrown(() => e.submit({ prompt: tokens(16) }));
    expect(err).toBeInstanceOf(ContextLengthError);
    expect(err).toMatchObject({ code: "context_length", field: "request.prompt" });
    expect(err.message).toMatch(/^request: the prompt is 16 tokens and model "toy"'s context is 16 tokens/);
  });

  it("a prompt over the KV pool: KvExhaustedError at submit; a sequence that outgrows it fails with one", async () => {
    await using e = engine(4); // 16 token slots
    const err = await thrown(() => e.submit({ prompt: tokens(17) }));
    expect(err).toBeInstanceOf(KvExhaustedError);
    expect(err.message).toMatch(/^KV pool too small: the prompt \(17 tokens\) needs 5 pages/);
    const grows = await thrown(() => e.submit({ prompt: tokens(10), maxTokens: 20, ignoreEos: true }).result);
    expect(grows).toBeInstanceOf(KvExhaustedError);
    expect(grows.message).toMatch(/^KV pool exhausted: sequence \d+ needs 5 pages/);
  });

  it("an unknown model: NotFoundError (not_found); after dispose: DisposedError", async () => {
    const e = engine();
    const model = await thrown(() => e.submit({ prompt: [1], model: "nope" }));
    expect(model).toBeInstanceOf(NotFoundError);
    expect(model).toMatchObject({ code: "not_found", field: "request.model" });
    expect((await thrown(() => e.tokenizer("nope"))).code).toBe("not_found");
    await e.dispose();
    const disposed = await thrown(() => e.submit({ prompt: [1] }));
    expect(disposed).toBeInstanceOf(DisposedError);
    expect(disposed.message).toBe("Engine.submit: the engine is disposed");
  });
});

describe("the model loader and the native boundary", () => {
  let good: string;
  beforeAll(async () => {
    good = (await tempFixture({ arch: "qwen2", dtype: "f32", layers: 1 })).dir;
  });
  afterAll(cleanupFixtures);

  async function broken(mutate: (dir: string) => Promise<void>): Promise<string> {
    const dir = await tempDir("deliberate-errors-");
    await cp(good, dir, { recursive: true });
    await mutate(dir);
    return dir;
  }

  it("a corrupt config.json, a truncated safetensors file, a missing file or folder: ModelFormatError", async () => {
    const config = await thrown(async () =>
      openModelFiles(await broken((d) => writeFile(join(d, "config.json"), "{ not json"))),
    );
    expect(config).toBeInstanceOf(ModelFormatError);
    expect(config.message).toMatch(/config\.json: not valid JSON/);
    expect(config.cause).toBeInstanceOf(SyntaxError);
    const weights = await thrown(async () =>
      openModelFiles(await broken((d) => truncate(join(d, "model.safetensors"), 4))),
    );
    expect(weights).toBeInstanceOf(ModelFormatError);
    expect(weights.message).toMatch(/model\.safetensors: only 4 bytes, too short for a safetensors header/);
    const tokenizer = await thrown(async () => openModelFiles(await broken((d) => rm(join(d, "tokenizer.json")))));
    expect(tokenizer).toMatchObject({ code: "model_format" });
    expect(tokenizer.message).toMatch(/tokenizer\.json: file not found/);
    expect((await thrown(() => openModelFiles(join(good, "nowhere")))).code).toBe("model_format");
  });

  it("loadModel's options: InvalidOptionError naming the option", async () => {
    const err = await thrown(() => loadModel(good, { pageSize: 0 }));
    expect(err).toMatchObject({ code: "invalid_option", field: "loadModel: pageSize" });
  });

  it("a native call that fails: NativeError with the addon's message and its error as cause; a disposed model: DisposedError", async () => {
    const model = await loadModel(bundledModelDir, { kvPages: 4 });
    const err = await thrown(() => model.readKvPages(Int32Array.of(99)));
    expect(err).toBeInstanceOf(NativeError);
    expect(err.message).toBe("readPages: pages[0] = 99 is not a page id in [0, 4)");
    expect(err.cause).toBeInstanceOf(Error);
    expect((err.cause as Error).message).toBe(err.message);
    expect(err.cause).not.toBeInstanceOf(DeliberateError);
    const forward = await thrown(() =>
      model.forward({ sequences: [{ tokens: Int32Array.of(1), startPos: 0, blockTable: Int32Array.of(99) }] } as never),
    );
    expect(forward).toBeInstanceOf(NativeError);
    expect(forward.message).toMatch(/^forward: sequence 0: blockTable\[0\] = 99 is not a page id/);
    model.dispose();
    expect(await thrown(() => model.readKvPages(Int32Array.of(0)))).toBeInstanceOf(DisposedError);
  });
});

describe("programs", () => {
  it("option validation: InvalidOptionError naming the option", async () => {
    expect(await thrown(() => parseProgramKind("beams"))).toMatchObject({ code: "invalid_option", field: "program" });
    const sc = await thrown(() => new SelfConsistency({ prompt: [1], maxBranches: 0 }));
    expect(sc).toMatchObject({ code: "invalid_option", field: "sc.maxBranches" });
    expect(sc.message).toBe("sc.maxBranches must be an integer ≥ 1, got 0");
  });
});

describe("the server's mapping, by code", () => {
  it("status, type, param (the wire name) and code for each code", () => {
    const cases: Array<[DeliberateError, number, string]> = [
      [new InvalidOptionError("m", { field: "request.stopTokenIds[2]" }), 400, "invalid_request_error"],
      [new ContextLengthError("m", { field: "request.prompt" }), 400, "invalid_request_error"],
      [new KvExhaustedError("m"), 400, "invalid_request_error"],
      [new UnsupportedError("m", { field: "request.captureHidden" }), 400, "invalid_request_error"],
      [new NotFoundError("m", { field: "request.model" }), 404, "not_found_error"],
      [new DisposedError("m"), 503, "service_unavailable_error"],
      [new NativeError("m"), 500, "server_error"],
      [new ModelFormatError("m"), 500, "server_error"],
    ];
    for (const [e, status, type] of cases) {
      const api = fromDeliberateError(e, "messages");
      expect(api.status, e.name).toBe(status);
      expect(api.body().error).toMatchObject({ message: "m", type, code: e.code });
    }
    expect(cases.map(([e]) => fromDeliberateError(e, "messages").param)).toEqual([
      "stop_token_ids",
      "messages",
      null,
      "capture_hidden",
      "model",
      null,
      null,
      null,
    ]);
  });

  it("wireParam: the request's top-level field in snake_case; fields outside the request are not the client's", () => {
    expect(wireParam("request.stopTokenIds[]")).toBe("stop_token_ids");
    expect(wireParam("request.confidence.topK")).toBe("confidence");
    expect(wireParam("request.maxTokens")).toBe("max_tokens");
    expect(wireParam("request.prompt[3]")).toBe("prompt");
    expect(wireParam("request.prompt", "messages")).toBe("messages");
    expect(wireParam("fork.length")).toBeNull();
    expect(wireParam("Engine: options.maxBatchTokens")).toBeNull();
    expect(wireParam(null)).toBeNull();
  });
});

describe("KV pages taken now, not too few", () => {
  /** A toy model that passes for a GPU one, so unfused verify passes reserve their fixed-shape scratch pages. */
  function gpuToy(numPages: number): PagedToyModel {
    return Object.assign(new PagedToyModel(numPages, 4), { device: "cuda" as const });
  }

  it("the verifier's scratch pages held by other requests: KvExhaustedError, transient, a 503 with Retry-After", async () => {
    const model = gpuToy(40);
    const engine = new Engine({ models: { model }, fuseVerify: false, verifyWindow: 8, verifyGroup: 4 });
    try {
      const hog = engine.submit({ prompt: tokens(140), maxTokens: 8, ignoreEos: true });
      for await (const _ of hog) break; // its prompt's pages are taken
      const err = await thrown(() => engine.submit({ prompt: tokens(3), maxTokens: 4, deterministic: true }));
      expect(err).toBeInstanceOf(KvExhaustedError);
      expect((err as KvExhaustedError).transient).toBe(true);
      const api = fromDeliberateError(err, "messages");
      expect(api.status).toBe(503);
      expect(api.headers["retry-after"]).toBe("1");
      await hog.result;
      // The pages came back: the same request now runs.
      expect(
        (await engine.submit({ prompt: tokens(3), maxTokens: 4, deterministic: true }).result).tokens,
      ).toHaveLength(4);
    } finally {
      await engine.dispose();
    }
  });

  it("a pool smaller than the scratch pages: not transient, a 400", async () => {
    const engine = new Engine({ models: { model: gpuToy(6) }, fuseVerify: false, verifyWindow: 8, verifyGroup: 4 });
    try {
      const err = await thrown(() => engine.submit({ prompt: tokens(3), maxTokens: 4, deterministic: true }));
      expect(err).toBeInstanceOf(KvExhaustedError);
      expect((err as KvExhaustedError).transient).toBe(false);
      expect(fromDeliberateError(err, "messages").status).toBe(400);
    } finally {
      await engine.dispose();
    }
  });
});
