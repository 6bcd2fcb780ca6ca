// Jump-forward's edge cases (ModelSlot.jumpForward) on the bundled tiny reasoner (real native forward, real
// XGrammar, its character-level vocabulary: most of a format's text is forced): every case ends the same with
// jump-forward on and off — a stop string that ends on the sampled token just before a forced run (and a fork of
// that sample afterwards), a format that cannot go on after a stop string ended the sample, forks that continue an
// inherited format (of a finished parent, and of a running one holding uncomputed forced tokens), every format kind
// (choice, EBNF, regex, json_object, schema), a thought closed near the budget, request stop ids the format forces,
// ignoreEos, budgets ending inside a forced run, a step token budget that splits forced runs, late masks, a verifier
// arriving mid-run, preemption (recompute and swap) of sequences holding forced tokens; and a step's token count
// (iteration_tokens_total) is the tokens its forward fed, so a forced token counts once.
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { bundledModelDir } from "../../ts/bundledModel.js";
import { Engine, type EngineOptions } from "../../ts/engine/engine.js";
import { jumpForwardDefaults, lateMaskDefaults } from "../../ts/engine/modelSlot.js";
import type { GenerateRequest } from "../../ts/engine/request.js";
import { loadModel, type Model } from "../../ts/model/model.js";
import { MEDIA_SCHEMA } from "./mediaSchema.js";

let model: Model;
beforeAll(async () => {
  model = await loadModel(bundledModelDir, { kvPages: 1024 });
});
afterAll(() => model?.dispose());
const saved = { ...jumpForwardDefaults };
const savedLate = lateMaskDefaults.enabled;
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
): Promise<{ samples: Outcome; prompts: number[][]; preemptions: number; swapOuts: number }> {
  jumpForwardDefaults.enabled = jump;
  const engine = new Engine({ ...options, models: { model: m } });
  try {
    // Every format compiled first, so that the requests are admitted in the same step (the same KV pressure each run).
    for (const r of requests)
      if (r.structured !== undefined && r.structured !== null) await engine.prepareStructured(r.structured);
    const handles = requests.map((r) => engine.submit(r));
    await Promise.all(handles.map((h) => h.result));
    const more = after?.(engine, handles) ?? [];
    const outs = await Promise.all([...handles, ...more].map((h) => h.result));
    return {
      samples: outs.map((o) => o.samples.map((s) => ({ tokens: s.tokens, finish: s.finishReason, text: s.text }))),
      prompts: outs.map((o) => o.promptTokens),
      preemptions: engine.modelMetrics().preemptions,
      swapOuts: engine.modelMetrics().kvSwapOuts,
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

  it('a format that cannot go on after a stop string ended the sample: the sample ends "stop", as with it off', async () => {
    // No token spells ☃: after `a` (or `abc`) the format allows nothing, which jump-forward finds at once.
    const outcome = async (jump: boolean, pattern: string, stop: string[]): Promise<unknown> => {
      jumpForwardDefaults.enabled = jump;
      const engine = new Engine({ models: { model } });
      try {
        const r = {
          prompt: prompt("Hi."),
          maxTokens: 10,
          stop,
          structured: { type: "regex" as const, pattern, thought: "none" as const },
        };
        return await engine.submit(r).result.then(
          (o) => o.samples.map((s) => [s.tokens, s.text, s.finishReason]),
          (e: Error) => `${e.name}: ${e.message}`,
        );
      } finally {
        await engine.dispose();
      }
    };
    for (const [pattern, stop] of [
      ["a☃", ["a"]],
      ["abc☃", ["c"]],
      ["abc☃", []],
    ] as const) {
      const on = await outcome(true, pattern, [...stop]);
      expect(on).toEqual(await outcome(false, pattern, [...stop]));
      if (stop.length > 0)
        expect(on).toEqual([[expect.any(Array), pattern.slice(0, pattern.indexOf(stop[0] ?? "")), "stop"]]);
      else expect(on).toMatch(/InvalidOptionError: request.structured: the format cannot go on after 3 answer tokens/);
    }
  });

  const SCHEMA = MEDIA_SCHEMA;

  /** Constrained requests of every format kind, thought free and none, greedy and sampled, near their budgets. */
  const formats = (): GenerateRequest[] => {
    const q = (i: number): string => prompt(`What is ${i} + ${i * 3}?`);
    const quote = model.tokenizer.encode('"', { addSpecialTokens: false })[0];
    return [
      { prompt: q(1), maxTokens: 80, structured: { type: "json_schema", schema: SCHEMA, thought: "none" } },
      {
        prompt: q(2),
        maxTokens: 80,
        temperature: 0.9,
        seed: 4,
        n: 3,
        structured: { type: "json_schema", schema: SCHEMA },
      },
      { prompt: q(3), maxTokens: 40, structured: { type: "choice", choices: ["alpha beta", "alpha gamma", "delta"] } },
      { prompt: q(4), maxTokens: 40, structured: { type: "grammar", grammar: 'root ::= "x=" [0-9]+ ";" " done"' } },
      {
        prompt: q(5),
        maxTokens: 40,
        temperature: 1,
        seed: 8,
        structured: { type: "regex", pattern: "(yes|no), because [a-z]{2,5}", thought: "none" },
      },
      // a thought closed near the budget (answerTokens), its answer mostly forced
      { prompt: q(6), maxTokens: 30, structured: { type: "choice", choices: ["finished now"], answerTokens: 14 } },
      {
        prompt: q(7),
        maxTokens: 24,
        temperature: 1,
        seed: 2,
        structured: { type: "json_schema", schema: SCHEMA, answerTokens: 12 },
      },
      // a forced token that is one of the request's own stop ids ends the sample there
      {
        prompt: q(8),
        maxTokens: 60,
        stopTokenIds: [quote],
        structured: { type: "json_schema", schema: SCHEMA, thought: "none" },
      },
      // ignoreEos: the complete format still ends the sample
      { prompt: q(9), maxTokens: 80, ignoreEos: true, structured: { type: "json_object", thought: "none" } },
      // budgets that end inside or right at the end of a forced run
      ...[10, 17, 23, 31].map((maxTokens) => ({
        prompt: q(maxTokens),
        maxTokens,
        structured: { type: "choice" as const, choices: ["the quick brown fox jumps"], thought: "none" as const },
      })),
      { prompt: q(10), maxTokens: 60 },
    ];
  };

  it("forks that continue an inherited format: mid-answer, with appended text", async () => {
    const r: GenerateRequest = {
      prompt: prompt("Name one."),
      maxTokens: 60,
      temperature: 0.7,
      seed: 11,
      structured: { type: "json_schema", schema: SCHEMA, thought: "none" },
    };
    const forks = (engine: Engine, [h]: ReturnType<Engine["submit"]>[]) => {
      const at = engine.tokenizer()!.encode(prompt("Name one."), { addSpecialTokens: false }).length;
      return [
        engine.fork(h, { length: at + 10 }), // `{"kind": "`: the child samples the value
        engine.fork(h, { length: at + 10, append: "fi" }), // `lm", "year": ` forced after the appended text
        engine.fork(h, { length: at + 3, append: "ind", seed: 5 }),
      ];
    };
    const on = await runAll(true, [r], {}, forks);
    const off = await runAll(false, [r], {}, forks);
    expect(on.samples).toEqual(off.samples);
    expect(on.samples[2][0].text.startsWith('lm", "year": ')).toBe(true);
    for (const o of on.samples) expect(o[0].finish).toBe("stop");
  });

  it("a fork of a running parent holding uncomputed forced tokens", async () => {
    const run = async (jump: boolean) => {
      jumpForwardDefaults.enabled = jump;
      const engine = new Engine({ models: { model } });
      try {
        const r: GenerateRequest = {
          prompt: prompt("Name one."),
          maxTokens: 80,
          structured: { type: "json_schema", schema: SCHEMA, thought: "none" },
        };
        await engine.prepareStructured(r.structured!);
        const h = engine.submit(r);
        const at = engine.tokenizer()!.encode(prompt("Name one."), { addSpecialTokens: false }).length;
        let seen = 0;
        let child: ReturnType<Engine["submit"]> | null = null;
        for await (const d of h) {
          seen += d.tokens.length;
          // The parent streamed past `{"kind": "` and its value's first letter: fork at the value's start.
          if (child === null && seen >= 11) child = engine.fork(h, { length: at + 10, seed: 1, temperature: 1 });
        }
        const outs = await Promise.all([h.result, child!.result]);
        return outs.map((o) => o.samples.map((s) => [s.tokens, s.finishReason]));
      } finally {
        await engine.dispose();
      }
    };
    const on = await run(true);
    expect(on).toEqual(await run(false));
    expect(on.map((o) => o[0][1])).toEqual(["stop", "stop"]);
  });

  it("every format kind, a thought closed near its budget, a forced request stop id, ignoreEos, budgets", async () => {
    const on = await runAll(true, formats());
    const off = await runAll(false, formats());
    expect(on.samples).toEqual(off.samples);
    expect(on.samples[7][0].finish).toBe("stop"); // stopped by the forced quote
    expect(on.samples[7][0].tokens.length).toBeLessThan(4);
  });

  it("a step token budget that splits forced runs (maxBatchTokens 3 and 5)", async () => {
    const off = await runAll(false, formats());
    for (const maxBatchTokens of [3, 5]) {
      // the prompts need chunking too: the budget applies to every row
      const on = await runAll(true, formats(), { maxBatchTokens });
      expect(on.samples).toEqual(off.samples);
    }
  });

  it("with late masks on (the masks of a forced run's sampling row computed while the forward runs)", async () => {
    const off = await runAll(false, formats());
    lateMaskDefaults.enabled = true;
    try {
      const on = await runAll(true, formats());
      expect(on.samples).toEqual(off.samples);
    } finally {
      lateMaskDefaults.enabled = savedLate;
    }
  });

  it("a deterministic request arriving while sequences hold forced tokens (a verifier runs the steps from then on)", async () => {
    const run = async (jump: boolean) => {
      jumpForwardDefaults.enabled = jump;
      const engine = new Engine({ models: { model } });
      try {
        const reqs = formats().slice(0, 3);
        for (const r of reqs) await engine.prepareStructured(r.structured!);
        const handles = reqs.map((r) => engine.submit(r));
        // Once the first answer has started (its forced run appended), a deterministic request makes a verifier.
        for await (const d of handles[0]) if (d.text.includes("{")) break;
        const det = engine.submit({ ...formats()[0], deterministic: true });
        const outs = await Promise.all([...handles, det].map((h) => h.result));
        return outs.map((o) => o.samples.map((s) => ({ tokens: s.tokens, finish: s.finishReason })));
      } finally {
        await engine.dispose();
      }
    };
    const on = await run(true);
    expect(on).toEqual(await run(false));
    expect(on.flat().map((s) => s.finish)).toEqual(["stop", "stop", "stop", "stop", "stop", "stop"]);
  });

  it("preemption, recompute and swap, of sequences holding forced tokens", async () => {
    const small = await loadModel(bundledModelDir, { kvPages: 40, pageSize: 4 });
    try {
      const reqs = (): GenerateRequest[] =>
        formats()
          .slice(0, 9)
          .map((r) => ({ ...r, n: 1 }));
      const off = await runAll(false, reqs(), {}, undefined, small);
      for (const preemption of ["recompute", "swap"] as const) {
        const on = await runAll(true, reqs(), { preemption }, undefined, small);
        expect(on.samples).toEqual(off.samples);
        expect(on.preemptions).toBeGreaterThan(0);
        if (preemption === "swap") expect(on.swapOuts).toBeGreaterThan(0);
      }
    } finally {
      small.dispose();
    }
  });

  it("a step's token count (iteration_tokens_total) counts a forced token once: as a row of the forward that computes it", async () => {
    // Plain path (no verifier): every step's count is the tokens its forward fed, jump-forward on or off.
    const small = await loadModel(bundledModelDir, { kvPages: 256 });
    let fed = 0;
    const forward = small.forward.bind(small);
    small.forward = (batch) => {
      for (const s of batch.sequences) fed += s.tokens.length;
      return forward(batch);
    };
    try {
      for (const jump of [false, true]) {
        fed = 0;
        jumpForwardDefaults.enabled = jump;
        const engine = new Engine({ models: { model: small } });
        try {
          await Promise.all(formats().map((r) => engine.submit(r).result));
          expect(engine.modelMetrics().stepTokensSum).toBe(fed);
        } finally {
          await engine.dispose();
        }
      }
    } finally {
      small.dispose();
    }
  });
});
