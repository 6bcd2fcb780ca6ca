// Jump-forward decoding of structured outputs (ModelSlot.jumpForward, jumpForwardDefaults): where a constrained
// sequence's next mask allows exactly one token, it is appended without a sample and the forced run goes through the
// next forward as one chunk. On the bundled tiny reasoner (real native forward, real XGrammar; its 105-id vocabulary
// forces most of a JSON answer: keys, quotes, the rest of an enum value): every output is the same with jump-forward
// on and off (tokens, finish reasons, logprobs, streamed text), greedy and sampled, thought free and "none", at batch 1
// and in a mixed batch, in both kernel modes; with it on the same outputs take fewer forwards, whose rows carry the
// forced runs; a stop string or the token budget inside a forced run ends the sample where it ends with it off;
// requests that read more than the token (top logprobs, deterministic) are never jumped.
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { bundledModelDir } from "../../ts/bundledModel.js";
import { Engine } from "../../ts/engine/engine.js";
import type { KernelMode } from "../../ts/engine/kernelSchedule.js";
import { jumpForwardDefaults } from "../../ts/engine/modelSlot.js";
import type { GenerateRequest } from "../../ts/engine/request.js";
import { loadModel, type Model } from "../../ts/model/model.js";
import type { NativeForwardBatch } from "../../ts/native/addonTypes.js";
import { MEDIA_SCHEMA_WITH_NOTE } from "./mediaSchema.js";

let model: Model;
/** Forwards since the last reset, and the longest row any of them fed. */
const seen = { forwards: 0, longestRow: 0, multiTokenRows: 0 };

beforeAll(async () => {
  model = await loadModel(bundledModelDir, { kvPages: 1024 });
  const forward = model.forward.bind(model);
  model.forward = (batch: NativeForwardBatch) => {
    seen.forwards++;
    for (const s of batch.sequences) {
      const n = s.tokens.length;
      seen.longestRow = Math.max(seen.longestRow, n);
      if (n > 1 && s.startPos > 0) seen.multiTokenRows++;
    }
    return forward(batch);
  };
});
afterAll(() => model?.dispose());
const saved = { ...jumpForwardDefaults };
afterEach(() => {
  Object.assign(jumpForwardDefaults, saved);
});

const prompt = (q: string): string => model.tokenizer.applyChatTemplate([{ role: "user", content: q }]);
const SCHEMA = MEDIA_SCHEMA_WITH_NOTE;

/**
 * The same logprobs up to the last bits: a forced run's KV is computed as one chunk where it was token by token, which
 * may round differently (the tokens are the same; forced tokens' logprobs are exactly 0 either way).
 */
function expectCloseLogprobs(a: Array<Array<number[] | null>>, b: Array<Array<number[] | null>>): void {
  expect(a.map((r) => r.map((l) => l?.length))).toEqual(b.map((r) => r.map((l) => l?.length)));
  a.forEach((r, i) => r.forEach((l, j) => l?.forEach((v, k) => expect(Math.abs(v - b[i][j]![k])).toBeLessThan(1e-5))));
}

/** A mixed batch: greedy and sampled constrained rows (n = 3), thought free and "none", a regex, free rows. */
const mixed = (): GenerateRequest[] => [
  ...Array.from({ length: 4 }, (_, i) => ({
    prompt: prompt(`What is ${i * 7} + ${i + 3}?`),
    maxTokens: 120,
    logprobs: 0,
    structured: {
      type: "json_schema" as const,
      schema: SCHEMA,
      thought: i % 2 === 0 ? ("free" as const) : ("none" as const),
    },
  })),
  {
    prompt: prompt("What is 9 + 9?"),
    maxTokens: 120,
    temperature: 0.8,
    seed: 5,
    n: 3,
    structured: { type: "json_schema", schema: SCHEMA },
  },
  {
    prompt: prompt("What is 4 + 4?"),
    maxTokens: 60,
    structured: { type: "regex", pattern: "the answer is [0-9]{1,3} (apples|pears)", thought: "none" },
  },
  { prompt: prompt("What is 2 + 5?"), maxTokens: 60, ignoreEos: true },
  { prompt: prompt("What is 3 + 6?"), maxTokens: 60, temperature: 0.8, seed: 9 },
];

async function runAll(jump: boolean, requests: GenerateRequest[], kernelMode: KernelMode = "fast") {
  jumpForwardDefaults.enabled = jump;
  const engine = new Engine({ models: { model }, kernelMode });
  try {
    Object.assign(seen, { forwards: 0, longestRow: 0, multiTokenRows: 0 });
    const handles = requests.map((r) => engine.submit(r));
    // What streamed, per request and sample, joined: it must be the final text.
    const streamed = handles.map(async (h) => {
      const text: string[] = [];
      for await (const d of h) text[d.sample] = (text[d.sample] ?? "") + d.text;
      return text;
    });
    const outs = await Promise.all(handles.map((h) => h.result));
    const texts = await Promise.all(streamed);
    outs.forEach((o, i) => o.samples.forEach((s, j) => expect(texts[i][j] ?? "").toBe(s.text)));
    return {
      samples: outs.map((o) => o.samples.map((s) => ({ tokens: s.tokens, finish: s.finishReason, text: s.text }))),
      logprobs: outs.map((o) => o.samples.map((s) => s.logprobs?.map((l) => l.logprob) ?? null)),
      ...seen,
    };
  } finally {
    await engine.dispose();
  }
}

describe("jump-forward: a structured output's forced tokens appended without a step", () => {
  it("every output is the same on and off, in fewer forwards whose rows carry the forced runs", async () => {
    const on = await runAll(true, mixed());
    const off = await runAll(false, mixed());
    expect(on.samples).toEqual(off.samples);
    expectCloseLogprobs(on.logprobs, off.logprobs);
    expect(off.multiTokenRows).toBe(0);
    expect(on.multiTokenRows).toBeGreaterThan(0);
    expect(on.longestRow).toBeGreaterThan(3); // `", "year": ` and the like, in one row
    expect(on.forwards).toBeLessThan(off.forwards * 0.8);
    // The answers complete and hold the format: forced runs did not cut or garble them.
    for (const s of on.samples.slice(0, 4).flat()) {
      expect(s.finish).toBe("stop");
      const answer = s.text.slice(s.text.indexOf("{"));
      expect(Object.keys(JSON.parse(answer))).toEqual(["kind", "year", "tags", "note"]);
    }
    // logprobs: one per token, the forced ones 0 (the constrained distribution's)
    on.logprobs.slice(0, 4).forEach((r, i) => expect(r[0]?.length).toBe(on.samples[i][0].tokens.length));
  });

  it("alone and batch-invariant: the same outputs on and off", async () => {
    const one = [mixed()[1]];
    expect((await runAll(true, one)).samples).toEqual((await runAll(false, one)).samples);
    const on = await runAll(true, mixed(), "batch-invariant");
    const off = await runAll(false, mixed(), "batch-invariant");
    expect(on.samples).toEqual(off.samples);
    expect(on.forwards).toBeLessThan(off.forwards);
  });

  it("a stop string or the token budget inside a forced run ends the sample where it ends with jump-forward off", async () => {
    const base = mixed()[1]; // thought "none": `{"kind": "` is forced from the first token
    const cases: GenerateRequest[] = [
      { ...base, stop: ['"year'] },
      { ...base, maxTokens: 5 },
      { ...base, maxTokens: 14 },
    ];
    const on = await runAll(true, cases);
    const off = await runAll(false, cases);
    expect(on.samples).toEqual(off.samples);
    expect(on.samples[0][0].finish).toBe("stop");
    expect(on.samples[0][0].text).not.toContain('"year');
    expect(on.samples[1][0].finish).toBe("length");
    expect(on.samples[1][0].tokens.length).toBe(5);
    expect(on.samples[2][0].tokens.length).toBe(14);
  });

  it("requests that read more than the token are not jumped: top logprobs, deterministic", async () => {
    const base = mixed()[1];
    for (const r of [
      { ...base, logprobs: 2 },
      { ...base, deterministic: true },
    ] as GenerateRequest[]) {
      const on = await runAll(true, [r]);
      const off = await runAll(false, [r]);
      expect(on.samples).toEqual(off.samples);
      expect(on.multiTokenRows).toBe(0);
      expect(on.forwards).toBe(off.forwards);
    }
  });
});
