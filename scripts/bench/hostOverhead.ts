// The engine's host work per step, with the forward itself free: a model that answers every step at once, so the
// time per step is what the JS thread spends between GPU steps (scheduling, inputs, outputs, detokenization, stop
// checks). Requests as bench:determinism's offline batch (128 prompt + 128 generated tokens each), greedy.
//   npm run bench:host -- [--batch 256] [--tokens 128] [--tokenizer DIR] [--rounds 2] [--confidence [--pairs 4]] [--json]
// --confidence: also runs every request with DeepConf's confidence tracking and stop rule (request.confidence,
// window 16, a threshold never reached: the bookkeeping runs, no request stops) beside the plain runs, byte-level
// detokenizer, alternating, and reports the overhead ratio (the forward returns a token confidence per row);
// --pairs such pairs a round. --tokens: generated tokens per request (longer runs average over GC and JIT noise).
// --tokenizer: a model folder whose tokenizer detokenizes the stream (default: the SmolLM-135M-shaped fixture of
// the other benches, written on first use); each round runs the byte-level detokenizer and the windowed one.
import { existsSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { Engine } from "../../ts/engine/engine.js";
import type { EngineModel, ForwardBatch, ForwardResult } from "../../ts/engine/modelTypes.js";
import { ModelTokenizer } from "../../ts/model/tokenizer.js";
import { makeFixture, PRESETS } from "../make-fixture.js";

const { values } = parseArgs({
  options: {
    batch: { type: "string", default: "256" },
    tokenizer: { type: "string" },
    rounds: { type: "string", default: "2" },
    confidence: { type: "boolean", default: false },
    pairs: { type: "string", default: "4" },
    tokens: { type: "string", default: "128" },
    json: { type: "boolean", default: false },
  },
});
const B = Number(values.batch), PROMPT = 128, MAX_TOKENS = Number(values.tokens), PAIRS = Number(values.pairs);
let dir = values.tokenizer;
if (!dir) {
  dir = join(tmpdir(), "deliberate-bench", "smollm-135m-seed1");
  if (!existsSync(join(dir, "config.json"))) await makeFixture({ ...PRESETS["smollm-135m"]!, out: dir, seed: 1 });
}
const tok = await ModelTokenizer.load(dir);

async function msPerStep(windowed: boolean, confidence = false): Promise<{ steps: number; ms: number }> {
  let steps = 0;
  const model: EngineModel = {
    numPages: B * (Math.ceil((PROMPT + MAX_TOKENS) / 16) + 2), pageSize: 16, numLayers: 30, vocabSize: tok.vocabSize, maxContextTokens: Math.max(4096, PROMPT + MAX_TOKENS + 16), eosTokenIds: [], device: "cuda",
    async forward(b: ForwardBatch): Promise<ForwardResult[]> {
      steps++;
      return b.sequences.map((s) => {
        const r: ForwardResult = { token: 300 + ((s.startPos * 7919) % 2000), logprob: -1 };
        if (s.confidenceTopK) r.confidence = 1 + ((s.startPos * 13) % 7) / 7;
        return r;
      });
    },
  };
  const tokenizer = { encode: (t: string, o?: { addSpecialTokens?: boolean }) => tok.encode(t, o), createDetokenizer: () => tok.createDetokenizer({ windowed }) };
  const engine = new Engine({ models: { model, tokenizer }, maxBatchSeqs: B, maxBatchTokens: 1 << 16 });
  const t0 = performance.now();
  const prompt = (i: number) => Array.from({ length: PROMPT }, (_, j) => 300 + ((i * 31 + j) % 1000));
  const conf = confidence ? { confidence: { window: 16, threshold: -1 } } : {};
  await Promise.all(Array.from({ length: B }, (_, i) => engine.submit({ prompt: prompt(i), maxTokens: MAX_TOKENS, ignoreEos: true, ...conf }).result));
  const ms = (performance.now() - t0) / steps;
  await engine.dispose();
  return { steps, ms };
}

const best = new Map<string, number>();
const confRuns: Array<{ plain: number; confidence: number }> = [];
for (let r = 0; r < Number(values.rounds); r++) {
  for (const windowed of [false, true]) {
    const { ms } = await msPerStep(windowed);
    const key = windowed ? "windowed" : "byte-level";
    best.set(key, Math.min(best.get(key) ?? Infinity, ms));
  }
  if (values.confidence) {
    // Four pairs a round, the order alternating (a run is ~0.1 s: JIT and GC noise is as large as the effect), the
    // first round's pairs a warm-up.
    for (let k = 0; k < PAIRS; k++) {
      const confFirst = k % 2 === 1;
      const a = (await msPerStep(false, confFirst)).ms;
      const b = (await msPerStep(false, !confFirst)).ms;
      if (r > 0) confRuns.push(confFirst ? { plain: b, confidence: a } : { plain: a, confidence: b });
    }
  }
}
if (values.confidence) {
  const ratios = confRuns.map((c) => c.confidence / c.plain).sort((a, b) => a - b);
  const line = { batch: B, confidenceOverhead: { ratios: ratios.map((x) => +x.toFixed(4)), median: +ratios[Math.floor(ratios.length / 2)].toFixed(4), runs: confRuns } };
  if (values.json) console.log(JSON.stringify(line));
  else console.log(`batch ${B}, confidence tracking: ${((ratios[0] - 1) * 100).toFixed(1)}% to ${((ratios[ratios.length - 1] - 1) * 100).toFixed(1)}% more host time per step (median ${((line.confidenceOverhead.median - 1) * 100).toFixed(1)}% of ${ratios.length} pairs in alternating order after a warm-up round; byte-level)`);
}
for (const [detokenizer, ms] of best) {
  if (values.json) console.log(JSON.stringify({ batch: B, detokenizer, msPerStep: +ms.toFixed(3), tokenizer: dir }));
  else console.log(`batch ${B}, ${detokenizer} detokenizer: ${ms.toFixed(3)} ms of host work per step (best of ${values.rounds})`);
}
