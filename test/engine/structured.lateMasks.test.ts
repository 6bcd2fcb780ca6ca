// Late masks (ModelSlot.run, lateMaskDefaults): on a CPU model the engine starts a step's forward first and computes
// its constrained rows' masks while it runs (the forward needs them only at the sampler). On the bundled tiny
// reasoner (real native forward, real XGrammar): every output is the same with late masks on and off, constrained,
// free and sampled rows mixed; the forwards did carry late masks; a row whose mask fails while the forward runs fails
// its own request with its typed error and one whose mask never comes fails with a GrammarHostError once the bound
// has passed, the others going on; a deterministic request (its verifier) keeps masks before the forward.
import { availableParallelism } from "node:os";
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from "vitest";
import { bundledModelDir } from "../../ts/bundledModel.js";
import { Engine } from "../../ts/engine/engine.js";
import { jumpForwardDefaults, lateMaskDefaults } from "../../ts/engine/modelSlot.js";
import type { GenerateRequest } from "../../ts/engine/request.js";
import { GrammarHostError, InvalidOptionError } from "../../ts/errors/index.js";
import { SequenceConstraint } from "../../ts/grammar/constraint.js";
import { grammarSetDefaults } from "../../ts/grammar/grammars.js";
import { loadModel, type Model } from "../../ts/model/model.js";
import type { NativeForwardBatch } from "../../ts/native/addonTypes.js";
import { loadAddon } from "../../ts/native/loadAddon.js";

let model: Model;
/** Forwards since the last reset, and how many carried late masks. */
const seen = { forwards: 0, late: 0, lateRows: 0 };

beforeAll(async () => {
  model = await loadModel(bundledModelDir, { kvPages: 512 });
  const forward = model.forward.bind(model);
  model.forward = (batch: NativeForwardBatch) => {
    seen.forwards++;
    if (batch.lateMasks !== undefined) {
      seen.late++;
      seen.lateRows += batch.sequences.filter((s) => s.lateMask !== undefined).length;
    }
    return forward(batch);
  };
});
afterAll(() => model?.dispose());
const saved = { ...lateMaskDefaults };
const savedJump = { ...jumpForwardDefaults };
const savedLocal = grammarSetDefaults.localCompileMs;
beforeEach(() => {
  lateMaskDefaults.enabled = true;
  // Jump-forward computes each row's next mask at the end of its step (to see whether it is forced), so no mask is
  // left for the next forward to wait for: off here, where the late path is what is tested.
  jumpForwardDefaults.enabled = false;
});
afterEach(() => {
  Object.assign(lateMaskDefaults, saved);
  Object.assign(jumpForwardDefaults, savedJump);
  grammarSetDefaults.localCompileMs = savedLocal;
});

const prompt = (q: string): string => model.tokenizer.applyChatTemplate([{ role: "user", content: q }]);
const SCHEMA = {
  type: "object",
  properties: {
    answer: { type: "integer", minimum: 0, maximum: 999 },
    unit: { type: "string", enum: ["apples", "pears"] },
    note: { anyOf: [{ type: "string", maxLength: 8 }, { type: "null" }] },
  },
  required: ["answer", "unit", "note"],
  additionalProperties: false,
} as const;

/** A mixed batch: greedy and sampled constrained rows, a regex, a free thought and "none", free rows. */
const requests = (): GenerateRequest[] => [
  ...Array.from({ length: 5 }, (_, i) => ({
    prompt: prompt(`What is ${i * 7} + ${i + 3}?`),
    maxTokens: 100,
    structured: { type: "json_schema" as const, schema: SCHEMA },
  })),
  {
    prompt: prompt("What is 9 + 9?"),
    maxTokens: 100,
    temperature: 1,
    seed: 5,
    n: 3,
    structured: { type: "json_schema", schema: SCHEMA },
  },
  {
    prompt: prompt("What is 4 + 4?"),
    maxTokens: 60,
    structured: { type: "regex", pattern: "[0-9]{1,3} (apples|pears)", thought: "none" },
  },
  { prompt: prompt("What is 2 + 5?"), maxTokens: 80, ignoreEos: true },
  { prompt: prompt("What is 3 + 6?"), maxTokens: 80, temperature: 0.8, seed: 9 },
];

async function runAll(late: boolean | "auto") {
  lateMaskDefaults.enabled = late;
  grammarSetDefaults.localCompileMs = 60_000; // matched on this thread however long the compile took (a loaded machine)
  const engine = new Engine({ models: { model } });
  try {
    Object.assign(seen, { forwards: 0, late: 0, lateRows: 0 });
    const outs = await Promise.all(requests().map((r) => engine.submit(r).result));
    return { samples: outs.map((o) => o.samples.map((s) => ({ tokens: s.tokens, finish: s.finishReason }))), ...seen };
  } finally {
    await engine.dispose();
  }
}

describe("late masks: a step's constrained masks computed while its forward runs", () => {
  it("every output is the same with late masks on and off; the forwards carried them", async () => {
    const on = await runAll(true);
    const off = await runAll(false);
    expect(on.samples).toEqual(off.samples);
    expect(off.late).toBe(0);
    expect(on.late).toBeGreaterThan(on.forwards / 3);
    expect(on.lateRows).toBeGreaterThan(on.late);
    // The constrained answers are what the format allows.
    for (const s of on.samples.slice(0, 6).flat()) expect(s.finish).not.toBe("aborted");
  });

  it('"auto" (the default) turns them on only where the native pool leaves a core to the JS thread', async () => {
    const cpu = loadAddon().listDevices().cpu;
    const spare = Math.min(availableParallelism(), cpu.cgroupCpuLimit ?? Infinity) > cpu.threads;
    const auto = await runAll("auto");
    expect(auto.late > 0).toBe(spare);
    const threads = cpu.threads;
    try {
      loadAddon().setThreads(1); // a pool of one thread leaves a core on any machine with two
      const one = await runAll("auto");
      expect(one.late > 0).toBe(Math.min(availableParallelism(), cpu.cgroupCpuLimit ?? Infinity) > 1);
    } finally {
      loadAddon().setThreads(threads);
    }
  });

  it("a row whose mask fails while the forward runs fails its own request with its error; the others go on", async () => {
    grammarSetDefaults.localCompileMs = 60_000;
    const engine = new Engine({ models: { model } });
    try {
      Object.assign(seen, { forwards: 0, late: 0, lateRows: 0 });
      const innocent = engine.submit({ prompt: prompt("What is 2 + 2?"), maxTokens: 30, ignoreEos: true }).result;
      const fine = engine.submit({
        prompt: prompt("What is 1 + 2?"),
        maxTokens: 60,
        structured: { type: "json_schema", schema: SCHEMA },
      }).result;
      // No token of the tiny vocabulary spells "\u00e9": the format cannot go on after its first character.
      const stuck = engine.submit({
        prompt: prompt("What is 3 + 3?"),
        maxTokens: 20,
        structured: { type: "choice", choices: ["x\u00e9"], thought: "none" },
      }).result;
      await expect(stuck).rejects.toThrow(InvalidOptionError);
      await expect(stuck).rejects.toThrow(/the format cannot go on/);
      expect((await innocent).samples[0].tokens).toHaveLength(30);
      expect((await fine).samples[0].finishReason).not.toBe("aborted");
      expect(seen.late).toBeGreaterThan(0);
    } finally {
      await engine.dispose();
    }
  });

  it("a mask that never comes fails its request with a GrammarHostError after the bound, not a hang", async () => {
    lateMaskDefaults.waitMs = 50;
    grammarSetDefaults.localCompileMs = 60_000;
    // One constraint (its answerTokens, 7, marks it) never finishes its prepare: as a stalled thread would.
    const proto = SequenceConstraint.prototype;
    const { prepare, prepareNow } = proto;
    const stalled = (c: SequenceConstraint) => c.options.answerTokens === 7;
    proto.prepareNow = function (this: SequenceConstraint, ...a: Parameters<typeof prepareNow>) {
      return stalled(this) ? false : prepareNow.apply(this, a);
    };
    proto.prepare = function (this: SequenceConstraint, ...a: Parameters<typeof prepare>) {
      return stalled(this) ? new Promise<void>(() => undefined) : prepare.apply(this, a);
    };
    const engine = new Engine({ models: { model } });
    try {
      const other = engine.submit({
        prompt: prompt("What is 5 + 2?"),
        maxTokens: 40,
        structured: { type: "json_schema", schema: SCHEMA },
      }).result;
      const t0 = performance.now();
      const late = engine.submit({
        prompt: prompt("What is 6 + 1?"),
        maxTokens: 40,
        structured: { type: "json_schema", schema: SCHEMA, answerTokens: 7 },
      }).result;
      await expect(late).rejects.toThrow(GrammarHostError);
      await expect(late).rejects.toThrow(/was not ready within 50 ms of its step/);
      expect(performance.now() - t0).toBeLessThan(10_000);
      expect((await other).samples[0].finishReason).not.toBe("aborted");
    } finally {
      proto.prepare = prepare;
      proto.prepareNow = prepareNow;
      await engine.dispose();
    }
  });

  it("a deterministic request submitted while a step waits for masks: its verifier runs the step, every mask ready", async () => {
    // One constraint (answerTokens 9) is prepared before the forward, asynchronously, and the deterministic request
    // arrives while the step awaits it: the verifier, made then, runs that step, the late rows' masks computed first.
    const proto = SequenceConstraint.prototype;
    const { prepare, prepareNow } = proto;
    const matchesHere = Object.getOwnPropertyDescriptor(proto, "matchesHere")!;
    const marked = (c: SequenceConstraint) => c.options.answerTokens === 9;
    let hook: (() => void) | null = null;
    Object.defineProperty(proto, "matchesHere", {
      configurable: true,
      get(this: SequenceConstraint) {
        return marked(this) ? false : matchesHere.get!.call(this);
      },
    });
    proto.prepareNow = function (this: SequenceConstraint, ...a: Parameters<typeof prepareNow>) {
      return marked(this) && hook !== null ? false : prepareNow.apply(this, a);
    };
    proto.prepare = async function (this: SequenceConstraint, ...a: Parameters<typeof prepare>) {
      await prepare.apply(this, a);
      if (marked(this) && hook !== null) {
        const h = hook;
        hook = null;
        h();
      }
    };
    grammarSetDefaults.localCompileMs = 60_000; // matched on this thread however long the compile took (a loaded machine)
    const engine = new Engine({ models: { model } });
    try {
      Object.assign(seen, { forwards: 0, late: 0, lateRows: 0 });
      let deterministic: Promise<unknown> | null = null;
      const a = engine.submit({
        prompt: prompt("What is 1 + 1?"),
        maxTokens: 60,
        structured: { type: "json_schema", schema: SCHEMA, answerTokens: 9 },
      }).result;
      const b = engine.submit({
        prompt: prompt("What is 2 + 1?"),
        maxTokens: 60,
        structured: { type: "json_schema", schema: SCHEMA },
      }).result;
      hook = () => {
        deterministic = engine.submit({
          prompt: prompt("What is 3 + 1?"),
          maxTokens: 40,
          temperature: 1,
          seed: 2,
          deterministic: true,
          structured: { type: "json_schema", schema: SCHEMA },
        }).result;
      };
      for (const out of await Promise.all([a, b])) expect(out.samples[0].finishReason).not.toBe("aborted");
      expect(hook).toBeNull(); // it ran
      expect(deterministic).not.toBeNull();
      await expect(deterministic).resolves.toBeDefined();
      expect(seen.late).toBeGreaterThan(0);
    } finally {
      grammarSetDefaults.localCompileMs = savedLocal;
      proto.prepare = prepare;
      proto.prepareNow = prepareNow;
      Object.defineProperty(proto, "matchesHere", matchesHere);
      await engine.dispose();
    }
  });

  it("a deterministic request keeps its masks before the forward (its verify replay sees the same masks)", async () => {
    const engine = new Engine({ models: { model } });
    try {
      const req: GenerateRequest = {
        prompt: prompt("What is 8 + 5?"),
        maxTokens: 80,
        temperature: 1,
        seed: 3,
        deterministic: true,
        structured: { type: "json_schema", schema: SCHEMA },
      };
      Object.assign(seen, { forwards: 0, late: 0, lateRows: 0 });
      const alone = await engine.submit(req).result;
      expect(seen.late).toBe(0);
      const busy = await Promise.all([
        engine.submit(req).result,
        ...Array.from(
          { length: 3 },
          (_, i) =>
            engine.submit({
              prompt: prompt(`What is ${i} + 1?`),
              maxTokens: 60,
              structured: { type: "json_schema", schema: SCHEMA },
            }).result,
        ),
      ]);
      expect(busy[0].samples[0].tokens).toEqual(alone.samples[0].tokens);
    } finally {
      await engine.dispose();
    }
  });
});
