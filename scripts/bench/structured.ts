// Constrained decoding's cost (issue 44): a realistic JSON Schema answer against free decoding of as many tokens, at
// each batch size, on the bundled tiny reasoner and on a Qwen2.5-sized vocabulary (151,936 rows, 151,643 realistic
// byte-level token strings: scripts/fixture/filler.ts) over a small random model whose step is mostly its LM head.
//   npm run bench:structured -- [--models tiny,qwen150k] [--batches 1,16,64] [--repeats 3] [--max-tokens 160]
//     [--schemas strict,bounded] [--temperature 0] [--tiny-thought free|none] [--threads N] [--fixture DIR] [--profile]
//     [--late-masks auto|on|off] [--jump-forward on|off] [--local-compile-ms MS] [--json] [--out FILE]
// Each cell: `batch` requests submitted at once (greedy unless --temperature; distinct prompts), first constrained (the schema
// below; the fixture with thought "none", so every generated token is masked; the tiny reasoner with its thought free
// by default), then free with ignoreEos and each request's maxTokens set to the token count its constrained twin made:
// the same tokens, the same steps, the same batch at every step. One untimed pair, then --repeats pairs in alternating
// order. Per run: wall time, forward calls (steps) and their time, the time each step waits for its masks before
// its forward (ModelSlot's prepareConstraints: the constrained rows' SequenceConstraint.prepare, XGrammar on a grammar
// host thread or this one, ts/grammar/host.ts) and the time this thread spends on the masks computed while the forward
// runs (ModelSlot's fillLateMasks: the rows matched on this thread, on a CPU model; --late-masks off puts them back
// before the forward; auto, the engine's default, turns them on where a core is left to the JS thread), measured by wrapping the methods here, so the engine itself carries no counter. The ratio is
// constrained over free wall time per token, pair by pair.
// Jump-forward (ModelSlot.jumpForward, on by default): a constrained row's forced tokens are appended without a step
// and go through the next forward as one chunk, so a constrained run takes fewer steps than its free twin; the masks
// it computes at each step's end count in the mask time. --jump-forward off: one token a step, as free decoding.
// --profile: the native forward op by op (profileTable.ts), free against constrained, each cell's last pair.
// Grammar compile time: the first prepareStructured of a model (XGrammar's tokenizer info over the vocabulary, the
// compiler, the sandbox's parse, the compile), a new schema on the warm compiler, and a cached one.
import { existsSync } from "node:fs";
import { writeFile } from "node:fs/promises";
import { cpus, loadavg, tmpdir } from "node:os";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { bundledModelDir } from "../../ts/bundledModel.js";
import { Engine } from "../../ts/engine/engine.js";
import type { GenerateRequest } from "../../ts/engine/request.js";
import { jumpForwardDefaults, lateMaskDefaults, ModelSlot } from "../../ts/engine/modelSlot.js";
import { SequenceConstraint } from "../../ts/grammar/constraint.js";
import { grammarSetDefaults } from "../../ts/grammar/grammars.js";
import type { StructuredOutput } from "../../ts/grammar/types.js";
import { loadModel, type Model } from "../../ts/model/model.js";
import { loadAddon } from "../../ts/native/loadAddon.js";
import { makeFixture, type FixtureOptions } from "../make-fixture.js";
import type { ProfileEntry } from "../../ts/native/addonTypes.js";
import { machine } from "./benchModel.js";
import { profileTable } from "./profileTable.js";
import { formatSpread, median, parseRepeats, spreadOf } from "./stats.js";

const { values } = parseArgs({
  options: {
    models: { type: "string", default: "tiny,qwen150k" },
    schemas: { type: "string", default: "strict,bounded" },
    batches: { type: "string", default: "1,16,64" },
    repeats: { type: "string", default: "3" },
    "max-tokens": { type: "string", default: "160" },
    temperature: { type: "string", default: "0" },
    "tiny-thought": { type: "string", default: "free" },
    threads: { type: "string" },
    fixture: { type: "string" },
    profile: { type: "boolean", default: false },
    "late-masks": { type: "string", default: "auto" },
    "jump-forward": { type: "string", default: "on" },
    // grammarSetDefaults.localCompileMs: grammars that compiled on a host within this many ms are matched on this
    // thread (LocalHost); -1 keeps every grammar on its host thread, a large value matches every one here.
    "local-compile-ms": { type: "string" },
    json: { type: "boolean", default: false },
    out: { type: "string" },
  },
});
const batches = values.batches!.split(",").map(Number);
const repeats = parseRepeats(values.repeats);
const maxTokens = Number(values["max-tokens"]);
const temperature = Number(values.temperature);
const tinyThought = values["tiny-thought"] as "free" | "none";
const lateMasks = values["late-masks"]!;
if (!["auto", "on", "off"].includes(lateMasks)) throw new Error("--late-masks must be auto, on or off");
lateMaskDefaults.enabled = lateMasks === "auto" ? "auto" : lateMasks === "on";
const jumpForward = values["jump-forward"]!;
if (!["on", "off"].includes(jumpForward)) throw new Error("--jump-forward must be on or off");
jumpForwardDefaults.enabled = jumpForward === "on";
if (values["local-compile-ms"] !== undefined) {
  const ms = Number(values["local-compile-ms"]);
  if (!(ms >= -1)) throw new Error(`--local-compile-ms must be a number >= -1, got ${values["local-compile-ms"]}`);
  grammarSetDefaults.localCompileMs = ms;
}

const threads = values.threads === undefined ? cpus().length : Number(values.threads);
for (const [flag, v] of [["--max-tokens", maxTokens], ["--threads", threads], ...batches.map((b) => ["--batches", b])])
  if (!Number.isInteger(v) || (v as number) < 1) throw new Error(`${flag} must be positive integers, got ${v}`);
if (!(temperature >= 0)) throw new Error(`--temperature must be >= 0, got ${values.temperature}`);
if (tinyThought !== "free" && tinyThought !== "none") throw new Error("--tiny-thought must be free or none");
const log = (m: string): void => void process.stderr.write(`${m}\n`);
const f1 = (x: number) => x.toFixed(1);
const f3 = (x: number) => x.toFixed(3);

/** The Qwen2.5-vocabulary fixture: small layers (hidden 256), so the 151,936-row LM head is most of a CPU step. */
const QWEN150K: Omit<FixtureOptions, "out"> = {
  arch: "qwen2",
  dtype: "bf16",
  layers: 4,
  hidden: 256,
  heads: 4,
  kvHeads: 2,
  intermediate: 768,
  vocab: 151936,
  regularVocab: 151643,
  filler: "words",
  maxPositions: 4096,
  tieEmbeddings: true,
};

// What an app asks for, in OpenAI strict mode's subset: an enum, bounded integers, a nested object, an array with
// bounds, nullable fields, strings. Fields in generation order, strings last: a random model rarely closes a string
// (one token in hundreds ends it), so it walks the structure first and then writes its title to the token budget.
const STRICT = {
  type: "object",
  properties: {
    kind: { type: "string", enum: ["book", "film", "album", "game"] },
    year: { type: "integer", minimum: 1900, maximum: 2030 },
    rating: { type: "integer", minimum: 1, maximum: 10 },
    author: {
      type: "object",
      properties: {
        born: { type: "integer", minimum: 1800, maximum: 2020 },
        alive: { type: "boolean" },
        country: { anyOf: [{ type: "string", enum: ["FR", "JP", "US"] }, { type: "null" }] },
      },
      required: ["born", "alive", "country"],
      additionalProperties: false,
    },
    tags: {
      type: "array",
      items: { type: "string", enum: ["classic", "new", "award", "series"] },
      minItems: 1,
      maxItems: 3,
    },
    notes: { type: ["string", "null"] },
    title: { type: "string" },
  },
  required: ["kind", "year", "rating", "author", "tags", "notes", "title"],
  additionalProperties: false,
};

// The same kind of object with every string's length bounded (maxLength): a random model completes it within the
// budget, and XGrammar's mask inside a bounded string is far dearer (bench/RESULTS.md).
const BOUNDED = {
  type: "object",
  properties: {
    title: { type: "string", maxLength: 24 },
    kind: { type: "string", enum: ["book", "film", "album", "game"] },
    year: { type: "integer", minimum: 1900, maximum: 2030 },
    rating: { type: "integer", minimum: 1, maximum: 10 },
    author: {
      type: "object",
      properties: {
        name: { type: "string", maxLength: 20 },
        country: { anyOf: [{ type: "string", maxLength: 12 }, { type: "null" }] },
      },
      required: ["name", "country"],
      additionalProperties: false,
    },
    tags: { type: "array", items: { type: "string", maxLength: 12 }, minItems: 1, maxItems: 4 },
    summary: { anyOf: [{ type: "string", maxLength: 48 }, { type: "null" }] },
  },
  required: ["title", "kind", "year", "rating", "author", "tags", "summary"],
  additionalProperties: false,
};

const SCHEMAS: Record<string, object> = { strict: STRICT, bounded: BOUNDED };
const schemaNames = values.schemas!.split(",");
for (const n of schemaNames)
  if (!(n in SCHEMAS)) throw new Error(`--schemas: expected strict and/or bounded, got ${n}`);

// The mask's time, read around the engine: the wait of each step for its masks before the forward (ModelSlot's
// prepareConstraints) and at its end (ModelSlot's jumpForward: the next masks, to find forced tokens), this thread's
// time on the masks handed over while the forward runs (ModelSlot's fillLateMasks), the constrained rows (maskAt calls: one a row and step, by the runner or fillLateMasks) and the rows
// masked (maskAt returning a mask, not null).
const timers = { prepareMs: 0, lateMs: 0, prepareCalls: 0, maskedRows: 0, forwardMs: 0, forwards: 0 };
function timed<A extends unknown[], R>(fn: (...a: A) => Promise<R>, ms: "prepareMs" | "forwardMs") {
  return async function (this: unknown, ...args: A): Promise<R> {
    const t = performance.now();
    try {
      return await fn.apply(this, args);
    } finally {
      timers[ms] += performance.now() - t;
      if (ms === "forwardMs") timers.forwards++;
    }
  };
}
{
  const slot = ModelSlot.prototype as unknown as {
    prepareConstraints: (...a: unknown[]) => Promise<void>;
    fillLateMasks: (...a: unknown[]) => unknown;
    jumpForward: (...a: unknown[]) => Promise<unknown>;
  };
  slot.prepareConstraints = timed(slot.prepareConstraints, "prepareMs");
  slot.jumpForward = timed(slot.jumpForward, "prepareMs"); // the next masks, computed at the step's end
  const fill = slot.fillLateMasks;
  slot.fillLateMasks = function (this: unknown, ...a: unknown[]) {
    const t = performance.now();
    try {
      return fill.apply(this, a);
    } finally {
      timers.lateMs += performance.now() - t;
    }
  };
  const proto = SequenceConstraint.prototype;
  const maskAt = proto.maskAt;
  proto.maskAt = function (this: SequenceConstraint, position: number) {
    const m = maskAt.call(this, position);
    timers.prepareCalls++;
    if (m) timers.maskedRows++;
    return m;
  };
}

interface Run {
  wallMs: number;
  /** This process's CPU time (all threads): less swayed than wall time by other work on a shared machine. */
  cpuMs: number;
  tokens: number;
  steps: number;
  forwardMs: number;
  /** The steps' waits for their masks before the forward. */
  prepareMs: number;
  /** This thread's time on masks handed over while the forward ran. */
  lateMs: number;
  /** Constrained rows (one a row and step). */
  prepareCalls: number;
  /** Rows the forward masked. */
  maskedRows: number;
  /** Per request: generated tokens. */
  lengths: number[];
  /** Constrained runs: answers that parse as JSON, of those that ended with "stop". */
  validJson: number;
  stopped: number;
  /** --profile: the native forward's time op by op. */
  profile?: ProfileEntry[];
}

/** What follows the thought (all of the text without one). */
function answerText(text: string): string {
  const end = text.lastIndexOf("</think>");
  return end < 0 ? text : text.slice(end + "</think>".length);
}

async function run(engine: Engine, model: Model, requests: GenerateRequest[]): Promise<Run> {
  for (const k of Object.keys(timers) as (keyof typeof timers)[]) timers[k] = 0;
  if (values.profile) model.takeProfile();
  const c0 = process.cpuUsage();
  const t0 = performance.now();
  const outs = await Promise.all(requests.map((r) => engine.submit(r).result));
  const wallMs = performance.now() - t0;
  const cpu = process.cpuUsage(c0);
  const cpuMs = (cpu.user + cpu.system) / 1000;
  let validJson = 0,
    stopped = 0;
  for (const o of outs) {
    const s = o.samples[0];
    if (s.finishReason !== "stop") continue;
    stopped++;
    try {
      JSON.parse(answerText(s.text));
      validJson++;
    } catch {
      // counted as invalid
    }
  }
  const lengths = outs.map((o) => o.samples[0].tokens.length);
  return {
    wallMs,
    cpuMs,
    tokens: lengths.reduce((a, b) => a + b, 0),
    steps: timers.forwards,
    forwardMs: timers.forwardMs,
    prepareMs: timers.prepareMs,
    lateMs: timers.lateMs,
    prepareCalls: timers.prepareCalls,
    maskedRows: timers.maskedRows,
    lengths,
    validJson,
    stopped,
    profile: values.profile ? model.takeProfile() : undefined,
  };
}

interface Cell {
  model: string;
  schema: string;
  batch: number;
  constrained: Run[];
  free: Run[];
  /** Constrained over free wall time per token, pair by pair. */
  ratios: number[];
  /** The same in CPU time. */
  cpuRatios: number[];
}

interface Compile {
  schema: string;
  /** The model's first prepareStructured (its compiler made then) for the first schema; for the others, their first. */
  firstMs: number;
  newSchemaMs: number[];
  cachedMs: number[];
  stats: { compiles: number; cacheHits: number };
}

/** A variant of `schema` (another rating bound): a new grammar for the cache. */
const variant = (schema: typeof STRICT | typeof BOUNDED, i: number) => ({
  ...schema,
  properties: { ...schema.properties, rating: { type: "integer", minimum: 1, maximum: 11 + i } },
});

async function compileTimes(engine: Engine, name: string): Promise<Compile> {
  const schema = SCHEMAS[name] as typeof STRICT;
  const time = async (schema: object): Promise<number> => {
    const t = performance.now();
    await engine.prepareStructured({ type: "json_schema", schema: schema as Record<string, unknown> });
    return performance.now() - t;
  };
  const firstMs = await time(schema);
  const newSchemaMs: number[] = [];
  for (let i = 0; i < Math.max(3, repeats); i++) newSchemaMs.push(await time(variant(schema, i)));
  const cachedMs: number[] = [];
  for (let i = 0; i < 20; i++) cachedMs.push(await time(schema));
  // The engine's GrammarSet (ModelSlot is internal: reached here for its stats only).
  const slot = (engine as unknown as { slots: ModelSlot[] }).slots[0];
  return { schema: name, firstMs, newSchemaMs, cachedMs, stats: { ...slot.grammars("bench").stats } };
}

const THINGS = ["a novel", "a film", "an album", "a board game", "a video game", "a cookbook", "a poem", "a play"];
/** Request i's question: arithmetic for the tiny reasoner (what it thinks about before answering), else any. */
const question = (model: string, i: number): string =>
  model === "tiny"
    ? `What is ${(i * 37) % 90} + ${(i * 53 + 11) % 90}?`
    : `Describe ${THINGS[i % THINGS.length]} (number ${i}) as JSON.`;

async function benchModel(
  name: string,
  dir: string,
  thought: "free" | "none",
): Promise<{ cells: Cell[]; compile: Compile[] }> {
  const maxBatch = Math.max(...batches);
  const model: Model = await loadModel(dir, { kvPages: maxBatch * (Math.ceil((96 + maxTokens) / 16) + 2) });
  const forward = model.forward.bind(model);
  model.forward = timed(values.profile ? (b) => forward({ ...b, profile: true }) : forward, "forwardMs");
  const engine = new Engine({ models: { model } });
  try {
    const compile: Compile[] = [];
    const cells: Cell[] = [];
    for (const schemaName of schemaNames) {
      const k = await compileTimes(engine, schemaName);
      compile.push(k);
      log(
        `${name} ${schemaName}: compile first ${k.firstMs.toFixed(0)} ms, new schema ${formatSpread(k.newSchemaMs, f1)} ms, cached ${formatSpread(k.cachedMs, f3)} ms`,
      );
      const structured: StructuredOutput = {
        type: "json_schema",
        schema: SCHEMAS[schemaName] as Record<string, unknown>,
        thought,
      };
      for (const batch of batches) cells.push(await benchCell(engine, model, name, schemaName, structured, batch));
    }
    return { cells, compile };
  } finally {
    await engine.dispose();
    model.dispose();
  }
}

/** One (model, schema, batch): a warm-up pair, then `repeats` pairs of constrained and free runs, order alternating. */
async function benchCell(
  engine: Engine,
  model: Model,
  name: string,
  schema: string,
  structured: StructuredOutput,
  batch: number,
): Promise<Cell> {
  const constrained: GenerateRequest[] = Array.from({ length: batch }, (_, i) => ({
    prompt: model.tokenizer.applyChatTemplate([{ role: "user", content: question(name, i) }]),
    maxTokens,
    temperature,
    seed: 1000 + i,
    structured,
  }));
  const freeOf = (c: Run): GenerateRequest[] =>
    constrained.map(({ structured: _s, ...r }, i) => ({ ...r, maxTokens: c.lengths[i], ignoreEos: true }));
  const warm = await run(engine, model, constrained);
  await run(engine, model, freeOf(warm));
  const cell: Cell = { model: name, schema, batch, constrained: [], free: [], ratios: [], cpuRatios: [] };
  for (let r = 0; r < repeats; r++) {
    let c: Run, f: Run;
    if (r % 2 === 0) {
      c = await run(engine, model, constrained);
      f = await run(engine, model, freeOf(c));
    } else {
      f = await run(engine, model, freeOf(warm));
      c = await run(engine, model, constrained);
    }
    cell.constrained.push(c);
    cell.free.push(f);
    cell.ratios.push(c.wallMs / c.tokens / (f.wallMs / f.tokens));
    cell.cpuRatios.push(c.cpuMs / c.tokens / (f.cpuMs / f.tokens));
    if (r === repeats - 1 && c.profile && f.profile)
      log(
        `${profileTable(f.profile, `${name} ${schema} batch ${batch} free`)}\n${profileTable(c.profile, "constrained")}`,
      );
    log(
      `${name} ${schema} batch ${batch} repeat ${r + 1}: constrained ${c.tokens} tokens ${c.wallMs.toFixed(0)} ms (${c.steps} steps, mask ${c.prepareMs.toFixed(0)} ms + ${c.lateMs.toFixed(0)} ms in forward), free ${f.tokens} tokens ${f.wallMs.toFixed(0)} ms (${f.steps} steps): ratio ${cell.ratios[r].toFixed(3)} (CPU time ${cell.cpuRatios[r].toFixed(3)}), load ${loadavg()[0].toFixed(2)}`,
    );
  }
  return cell;
}

async function fixtureDir(): Promise<string> {
  const dir = values.fixture ?? join(tmpdir(), "deliberate-bench", "qwen150k-words-seed1");
  if (!existsSync(join(dir, "config.json"))) {
    log(`writing the 150k-vocabulary fixture to ${dir} ...`);
    await makeFixture({ ...QWEN150K, out: dir, seed: 1 });
  }
  return dir;
}

loadAddon().setThreads(threads);
const results: Array<{ model: string; cells: Cell[]; compile: Compile[] }> = [];
for (const m of values.models!.split(",")) {
  if (m === "tiny") results.push({ model: m, ...(await benchModel(m, bundledModelDir, tinyThought)) });
  else if (m === "qwen150k") results.push({ model: m, ...(await benchModel(m, await fixtureDir(), "none")) });
  else throw new Error(`--models: expected tiny and/or qwen150k, got ${m}`);
}

// The report: one row per cell, each figure the median of the repeats with their range.
const spread = (runs: Run[], f: (r: Run) => number, digits: number): string =>
  formatSpread(spreadOf(runs.map(f)), (x) => x.toFixed(digits));
const mid = (runs: Run[], f: (r: Run) => number): number => median(runs.map(f));
const table = (header: string[], body: Array<Array<string | number>>): string[] => [
  `| ${header.join(" | ")} |`,
  `| ${header.map(() => "---").join(" | ")} |`,
  ...body.map((r) => `| ${r.join(" | ")} |`),
];
const cells = results.flatMap((r) => r.cells);
const stepRows = table(
  [
    "model",
    "schema",
    "batch",
    "tokens / run",
    "steps",
    "masked",
    "step ms free",
    "step ms constrained",
    "tok/s free",
    "tok/s constrained",
    "mask wait us / row",
    "mask % of wall",
    "masks in forward us / row",
    "forward ms / step free / constr.",
    "constrained / free",
    "in CPU time",
  ],
  cells.map(({ model, schema, batch, constrained: C, free: F, ratios, cpuRatios }) => [
    model,
    schema,
    batch,
    `${mid(C, (r) => r.tokens)} / ${mid(F, (r) => r.tokens)}`,
    mid(C, (r) => r.steps),
    `${((100 * mid(C, (r) => r.maskedRows)) / mid(C, (r) => r.tokens)).toFixed(0)}%`,
    spread(F, (r) => r.wallMs / r.steps, 2),
    spread(C, (r) => r.wallMs / r.steps, 2),
    spread(F, (r) => (1000 * r.tokens) / r.wallMs, 0),
    spread(C, (r) => (1000 * r.tokens) / r.wallMs, 0),
    spread(C, (r) => (1000 * r.prepareMs) / Math.max(1, r.prepareCalls), 0),
    spread(C, (r) => (100 * r.prepareMs) / r.wallMs, 1),
    spread(C, (r) => (1000 * r.lateMs) / Math.max(1, r.prepareCalls), 1),
    `${mid(F, (r) => r.forwardMs / r.steps).toFixed(2)} / ${mid(C, (r) => r.forwardMs / r.steps).toFixed(2)}`,
    `**${formatSpread(ratios, f3)}**`,
    formatSpread(cpuRatios, f3),
  ]),
);
const compileRows = table(
  ["model", "schema", "first ms", "new schema ms (warm compiler)", "cached ms", "GrammarSet.stats after"],
  results.flatMap(({ model, compile }) =>
    compile.map((k) => [
      model,
      k.schema,
      k.firstMs.toFixed(0),
      formatSpread(k.newSchemaMs, f1),
      formatSpread(k.cachedMs, f3),
      `${k.stats.compiles} compiles, ${k.stats.cacheHits} hits`,
    ]),
  ),
);
const valid = cells.map(({ model, schema, batch, constrained: C }) => {
  const v = C.reduce((a, r) => a + r.validJson, 0);
  const s = C.reduce((a, r) => a + r.stopped, 0);
  return `${model} ${schema} batch ${batch}: ${s} of ${C.length * batch} answers complete, ${v} of them parse as JSON`;
});
const header =
  `${machine()}, ${threads} threads, load ${loadavg()[0].toFixed(2)}; temperature ${temperature}, max ${maxTokens} ` +
  `tokens, ${repeats} repeats; tiny thought ${tinyThought}, qwen150k thought none; late masks ${values["late-masks"]}; jump-forward ${jumpForward}; grammars matched here ` +
  `when compiled within ${grammarSetDefaults.localCompileMs} ms`;
console.log([header, "", ...stepRows, "", ...compileRows, "", ...valid].join("\n"));
const json = { machine: machine(), threads, temperature, maxTokens, repeats, tinyThought, schemas: SCHEMAS, results };
if (values.json) console.log(JSON.stringify(json));
if (values.out !== undefined) await writeFile(values.out, JSON.stringify(json, null, 2) + "\n");
