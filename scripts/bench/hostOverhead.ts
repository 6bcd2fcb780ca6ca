// The engine's host work per step, with the forward itself free: a model that answers every step at once, so the
// time per step is what the JS thread spends between GPU steps (scheduling, inputs, outputs, detokenization, stop
// checks). Requests as bench:determinism's offline batch (128 prompt + 128 generated tokens each), greedy.
//   npm run bench:host -- [--batch 256] [--tokens 128] [--tokenizer DIR] [--rounds 2] [--confidence [--pairs 16]] [--json]
// --confidence: instead, DeepConf's confidence tracking and stop rule (request.confidence, window 16, a threshold
// never reached: the bookkeeping runs, no request stops) against plain runs, byte-level detokenizer: --pairs pairs
// in alternating order after two warm-up pairs; reports the median of the per-pair time ratios with a bootstrap 95%
// interval, the ratio of the summed times, and the cost in ns per generated token. One run is ~0.3 s on a 2-core VM
// whose runs differ by +-20% with no change at all, so a 2% effect needs many pairs (the interval says how sure).
// Then, with the mock forward, the tracker's own cost measured inside runs, where that noise cancels: add() works on
// a random half of the steps (the median host segment with it against without it) and report() is timed per
// trace; the line gives both in ns a token and as a share of the median host work a token. Run it with V8's helper
// threads off (concurrent GC and compilation share the two cores with the step):
//   node --single-threaded --max-semi-space-size=64 --import tsx scripts/bench/hostOverhead.ts --confidence --tokens 512 --pairs 32
// --model DIR: the same pairs over the model's real forward on the CPU (the step's native cost of
// the confidence, a top-k over the vocabulary per token, included), then the two parts measured where the noise
// cancels: the native top-k (one decode step forwarded again and again, alternately with and without it) and the
// tracker (host-only runs, as above); their sum against the plain runs' median step is the confidence stop's share
// of a real step. --prompt: prompt tokens (default 128).
// --tokens: generated tokens per request. --tokenizer: a model folder whose tokenizer detokenizes the stream
// (default: the SmolLM-135M-shaped fixture of the other benches, written on first use); each round runs the
// byte-level detokenizer and the windowed one.
import { existsSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { Engine } from "../../ts/engine/engine.js";
import type { EngineModel, ForwardBatch, ForwardResult } from "../../ts/engine/modelTypes.js";
import { engineModelOf } from "../../ts/engine/loadedModel.js";
import { loadModel } from "../../ts/model/model.js";
import { ModelTokenizer } from "../../ts/model/tokenizer.js";
import { ConfidenceTracker } from "../../ts/engine/confidence.js";
import { makeFixture, PRESETS } from "../make-fixture.js";
import { mulberry32 } from "../fixture/random.js";
import { median } from "./stats.js";

const { values } = parseArgs({
  options: {
    batch: { type: "string", default: "256" },
    tokenizer: { type: "string" },
    rounds: { type: "string", default: "2" },
    confidence: { type: "boolean", default: false },
    pairs: { type: "string", default: "16" },
    tokens: { type: "string", default: "128" },
    model: { type: "string" },
    prompt: { type: "string" },
    json: { type: "boolean", default: false },
  },
});
const B = Number(values.batch),
  PROMPT = Number(values.prompt ?? 128),
  MAX_TOKENS = Number(values.tokens),
  PAIRS = Number(values.pairs);
for (const [flag, v] of [
  ["--batch", B],
  ["--prompt", PROMPT],
  ["--tokens", MAX_TOKENS],
  ["--pairs", PAIRS],
] as const)
  if (!Number.isInteger(v) || v < 1) throw new Error(`${flag} must be a positive integer, got ${v}`);
let dir = values.tokenizer ?? values.model;
if (!dir) {
  dir = join(tmpdir(), "deliberate-bench", "smollm-135m-seed1");
  if (!existsSync(join(dir, "config.json"))) await makeFixture({ ...PRESETS["smollm-135m"]!, out: dir, seed: 1 });
}
const tok = await ModelTokenizer.load(dir);
// --model: the real forward (this machine's device), loaded once with room for every run's sequences.
const realModel =
  values.model === undefined
    ? null
    : await loadModel(values.model, { kvPages: B * (Math.ceil((PROMPT + MAX_TOKENS) / 16) + 2) });

/**
 * One timed run after an untimed run of the same kind, so the timed one finds the JIT warm for its own path. No
 * forced full GC between runs: a gc() before each run leaves the runs after it 2-4x slower, even after a warm-up
 * run (batch 64: 0.24-0.52 against 0.115-0.130 ms a step).
 */
async function settledRun(
  windowed: boolean,
  confidence = false,
): Promise<{ steps: number; ms: number; cpuMs: number }> {
  await msPerStep(windowed, confidence, Math.min(MAX_TOKENS, 64));
  return msPerStep(windowed, confidence);
}

/**
 * In-run split (--confidence): while a run's hooks are set, the mock forward times each host segment (from
 * one forward's return to the next forward's call: everything the JS thread does between two steps) and the tracker
 * of DeepConf's confidence works only on a random half of the steps' tokens, so that the two kinds of segment
 * interleave step by step inside one run and share its drift and its GC pauses.
 */
interface StepSplit {
  on: number[]; // ms of each segment whose tokens the tracker worked on
  off: number[];
}
let split: StepSplit | null = null;
/** Use the mock forward even with --model (the tracker's in-run cost is measured on host-only steps). */
let mockForward = false;
let trackerOn = true;
const coin = mulberry32(12345);

async function msPerStep(
  windowed: boolean,
  confidence = false,
  maxTokens = MAX_TOKENS,
): Promise<{ steps: number; ms: number; cpuMs: number }> {
  let steps = 0;
  let segmentStart = -1;
  const model: EngineModel =
    realModel !== null && !mockForward
      ? { ...engineModelOf(realModel), forward: (b) => (steps++, realModel.forward(b)) }
      : {
          numPages: B * (Math.ceil((PROMPT + MAX_TOKENS) / 16) + 2),
          pageSize: 16,
          numLayers: 30,
          vocabSize: tok.vocabSize,
          maxContextTokens: Math.max(4096, PROMPT + MAX_TOKENS + 16),
          eosTokenIds: [],
          device: "cuda",
          async forward(b: ForwardBatch): Promise<ForwardResult[]> {
            steps++;
            if (split !== null && segmentStart >= 0) {
              (trackerOn ? split.on : split.off).push(performance.now() - segmentStart);
            }
            // Built as Model.forward builds a step's results (ts/model/model.ts): one literal, confidence undefined when
            // the sequence did not ask for it.
            const results = b.sequences.map((s) => ({
              token: 300 + ((s.startPos * 7919) % 2000),
              logprob: -1,
              confidence: s.confidenceTopK ? 1 + ((s.startPos * 13) % 7) / 7 : undefined,
            }));
            if (split !== null) {
              trackerOn = coin() < 0.5; // at random: a page is appended every 16th step, which alternation would pair with one side
              segmentStart = performance.now();
            }
            return results;
          },
        };
  const tokenizer =
    realModel !== null && !mockForward
      ? realModel.tokenizer
      : {
          encode: (t: string, o?: { addSpecialTokens?: boolean }) => tok.encode(t, o),
          createDetokenizer: () => tok.createDetokenizer({ windowed }),
        };
  const engine = new Engine({ models: { model, tokenizer }, maxBatchSeqs: B, maxBatchTokens: 1 << 16 });
  const t0 = performance.now();
  const cpu0 = process.cpuUsage();
  const prompt = (i: number) => Array.from({ length: PROMPT }, (_, j) => 300 + ((i * 31 + j) % 1000));
  const conf = confidence ? { confidence: { window: 16, threshold: -1 } } : {};
  await Promise.all(
    Array.from(
      { length: B },
      (_, i) => engine.submit({ prompt: prompt(i), maxTokens, ignoreEos: true, ...conf }).result,
    ),
  );
  const ms = (performance.now() - t0) / steps;
  const cpu = process.cpuUsage(cpu0);
  await engine.dispose();
  return { steps, ms, cpuMs: (cpu.user + cpu.system) / 1000 / steps };
}

/**
 * The tracker's own cost, measured inside runs: add() is wrapped so that it works on a random half of the steps only (the
 * wrapper runs on every step, so the difference is the body's cost, though the wrapper may change how V8 inlines
 * it); report(), once per trace, is timed around each call in one more run where the tracker works on every step
 * (tens of microseconds each, so the timer's cost is negligible). Every request asks for confidence.
 */
async function trackerCost(
  runs: number,
): Promise<{ addNsPerToken: number; reportNsPerToken: number; hostNsPerToken: number; share: number }> {
  const proto = ConfidenceTracker.prototype;
  const add = proto.add,
    report = proto.report;
  let reportMs = 0,
    reportTokens = 0;
  proto.add = function (this: ConfidenceTracker, c: number) {
    return trackerOn ? add.call(this, c) : false;
  };
  proto.report = function (this: ConfidenceTracker) {
    const t0 = performance.now();
    const r = report.call(this);
    reportMs += performance.now() - t0;
    reportTokens += r?.tokens ?? 0;
    return r;
  };
  const total: StepSplit = { on: [], off: [] };
  try {
    for (let r = 0; r < runs + 1; r++) {
      split = { on: [], off: [] };
      reportMs = 0;
      reportTokens = 0;
      await msPerStep(false, true);
      if (r === 0) continue; // warm-up
      total.on.push(...split.on);
      total.off.push(...split.off);
    }
    // report() timed on whole traces: one more run with the tracker working on every step
    split = null;
    trackerOn = true;
    reportMs = 0;
    reportTokens = 0;
    await msPerStep(false, true);
  } finally {
    split = null;
    trackerOn = true;
    proto.add = add;
    proto.report = report;
  }
  // Medians: a step that a GC pause lands in is many times the others, and those pauses would swamp a mean. So
  // neither side counts GC: the tracker's share of it (its values array growing) is not in this figure.
  const onPerStep = median(total.on),
    offPerStep = median(total.off);
  const addNsPerToken = ((onPerStep - offPerStep) / B) * 1e6;
  const reportNsPerToken = (reportMs / reportTokens) * 1e6;
  const hostNsPerToken = (offPerStep / B) * 1e6;
  return {
    addNsPerToken: Math.round(addNsPerToken),
    reportNsPerToken: Math.round(reportNsPerToken),
    hostNsPerToken: Math.round(hostNsPerToken),
    share: round4((addNsPerToken + reportNsPerToken) / hostNsPerToken),
  };
}

if (values.confidence) {
  type Run = Awaited<ReturnType<typeof msPerStep>>;
  const pairs: Array<{ plain: Run; confidence: Run }> = [];
  for (let k = 0; k < PAIRS + 2; k++) {
    const confFirst = k % 2 === 1;
    const a = await settledRun(false, confFirst);
    const b = await settledRun(false, !confFirst);
    if (k >= 2) pairs.push(confFirst ? { plain: b, confidence: a } : { plain: a, confidence: b });
  }
  const wall = overhead(pairs.map((p) => [p.plain.ms, p.confidence.ms]));
  const cpu = overhead(pairs.map((p) => [p.plain.cpuMs, p.confidence.cpuMs]));
  // With the real forward: the native cost itself, forwards alternated step by step; then the tracker on the mock.
  const native = realModel !== null ? await nativeCost(realModel, 4 * PAIRS) : null;
  mockForward = true;
  const tracker = await trackerCost(8);
  mockForward = false;
  // The confidence stop's cost in a real step: the native top-k's extra time plus the tracker's per token, against
  // the plain runs' median engine step.
  const plainStepMs = median(pairs.map((p) => p.plain.ms));
  const trackerMsPerStep = ((tracker.addNsPerToken + tracker.reportNsPerToken) * B) / 1e6;
  const components =
    native === null
      ? null
      : {
          nativeMsPerStep: round4(native.deltaMs),
          trackerMsPerStep: round4(trackerMsPerStep),
          plainStepMs: round4(plainStepMs),
          share: round4((native.deltaMs + trackerMsPerStep) / plainStepMs),
        };
  const line = {
    batch: B,
    tokens: MAX_TOKENS,
    pairs: pairs.length,
    confidenceOverhead: { wall, cpu },
    tracker,
    native,
    components,
  };
  if (values.json) console.log(JSON.stringify(line));
  else {
    const pct = (x: number) => `${((x - 1) * 100).toFixed(1)}%`;
    console.log(
      `batch ${B}, ${MAX_TOKENS} tokens, confidence tracking vs plain (${pairs.length} pairs, alternating, after 2 warm-up pairs; byte-level detokenizer):`,
    );
    for (const [what, o] of [
      ["wall time", wall],
      ["process CPU time", cpu],
    ] as const) {
      console.log(
        `  ${what} per step: median ${pct(o.median)} (95% interval ${pct(o.ci95[0])} to ${pct(o.ci95[1])}), summed ${pct(o.sumRatio)}, ${o.nsPerToken} ns per generated token; pairs ${o.ratios.map((r) => r.toFixed(3)).join(" ")}`,
      );
    }
    if (native !== null && components !== null) {
      console.log(
        `  the native top-${native.topK} and confidence, forwards alternated with and without it (${native.pairs} pairs, batch ${B} decode rows at ${PROMPT} tokens of context): median ${pct(native.median)} of a forward (95% interval ${pct(native.ci95[0])} to ${pct(native.ci95[1])}), ${native.deltaMs.toFixed(3)} ms a step`,
      );
      console.log(
        `  the confidence stop in a real step (native + tracker, against the plain runs' median step of ${plainStepMs.toFixed(2)} ms): ${(components.share * 100).toFixed(2)}%`,
      );
    }
    console.log(
      `  the tracker itself, inside host-only runs (the mock forward; a random half of the steps, 8 runs): add ${tracker.addNsPerToken} ns + report ${tracker.reportNsPerToken} ns a token against ${tracker.hostNsPerToken} ns of host work a token (medians: GC pauses left out of both) = ${pct(1 + tracker.share)}`,
    );
  }
  realModel?.dispose();
} else {
  const best = new Map<string, number>();
  for (let r = 0; r < Number(values.rounds); r++) {
    for (const windowed of [false, true]) {
      const { ms } = await settledRun(windowed);
      const key = windowed ? "windowed" : "byte-level";
      best.set(key, Math.min(best.get(key) ?? Infinity, ms));
    }
  }
  for (const [detokenizer, ms] of best) {
    if (values.json) console.log(JSON.stringify({ batch: B, detokenizer, msPerStep: +ms.toFixed(3), tokenizer: dir }));
    else
      console.log(
        `batch ${B}, ${detokenizer} detokenizer: ${ms.toFixed(3)} ms of host work per step (best of ${values.rounds})`,
      );
  }
}

/**
 * The native side of the confidence stop, measured where the run-to-run noise cancels: one decode step of B rows
 * (each after a PROMPT-token prefill) forwarded again and again at the same positions (the same KV slots rewritten),
 * alternately with confidenceTopK 20 and without, each forward timed; the median of the per-pair ratios with its
 * bootstrap interval, and the median difference in ms.
 */
async function nativeCost(m: NonNullable<typeof realModel>, n: number) {
  const pagesPer = Math.ceil((PROMPT + 1) / 16) + 1;
  const seqs = Array.from({ length: B }, (_, i) => ({
    blockTable: Int32Array.from({ length: pagesPer }, (_, j) => i * pagesPer + j),
    prompt: Int32Array.from({ length: PROMPT }, (_, j) => 300 + ((i * 31 + j) % 1000)),
  }));
  const sampling = { temperature: 0, topK: 0, topP: 1, seed: 0 };
  const first = await m.forward({
    gemmSplitK: 1,
    kvSplits: 1,
    sequences: seqs.map((s) => ({
      tokens: s.prompt,
      startPos: 0,
      blockTable: s.blockTable,
      sampling,
      numTopLogprobs: 0,
      emitToken: true,
    })),
  });
  const step = (topK: number) =>
    m.forward({
      gemmSplitK: 1,
      kvSplits: 1,
      sequences: seqs.map((s, i) => ({
        tokens: Int32Array.of(first[i].token),
        startPos: PROMPT,
        blockTable: s.blockTable,
        sampling,
        numTopLogprobs: 0,
        confidenceTopK: topK,
        emitToken: true,
      })),
    });
  const timed = async (topK: number): Promise<number> => {
    const t0 = performance.now();
    await step(topK);
    return performance.now() - t0;
  };
  for (let k = 0; k < 4; k++) await timed(k % 2 === 0 ? 20 : 0); // warm-up
  const pairs: Array<[number, number]> = [];
  for (let k = 0; k < n; k++) {
    const confFirst = k % 2 === 1;
    const a = await timed(confFirst ? 20 : 0);
    const b = await timed(confFirst ? 0 : 20);
    pairs.push(confFirst ? [b, a] : [a, b]);
  }
  const ratios = pairs.map(([p, c]) => c / p);
  const [lo, hi] = bootstrapMedian(ratios, 2000);
  return {
    topK: 20,
    pairs: n,
    median: round4(median(ratios)),
    ci95: [round4(lo), round4(hi)] as [number, number],
    deltaMs: median(pairs.map(([p, c]) => c - p)),
    plainMs: round4(median(pairs.map(([p]) => p))),
  };
}

/** Paired [plain, confidence] ms per step -> the median ratio with its bootstrap 95% interval, the ratio of the sums
 *  and the difference in ns per generated token. */
function overhead(pairs: Array<[number, number]>) {
  const ratios = pairs.map(([p, c]) => c / p);
  const [lo, hi] = bootstrapMedian(ratios, 2000);
  const plain = pairs.reduce((t, [p]) => t + p, 0),
    conf = pairs.reduce((t, [, c]) => t + c, 0);
  return {
    median: round4(median(ratios)),
    ci95: [round4(lo), round4(hi)] as [number, number],
    sumRatio: round4(conf / plain),
    nsPerToken: Math.round(((conf - plain) / pairs.length / B) * 1e6),
    ratios: ratios.map(round4),
    plainMs: pairs.map(([p]) => round4(p)),
    confidenceMs: pairs.map(([, c]) => round4(c)),
  };
}

function round4(x: number): number {
  return +x.toFixed(4);
}

/** Percentile bootstrap 95% interval of the median (a fixed seed, so the interval is reproducible). */
function bootstrapMedian(xs: readonly number[], resamples: number): [number, number] {
  const rand = mulberry32(0x9e3779b9);
  const medians = Array.from({ length: resamples }, () => median(xs.map(() => xs[Math.floor(rand() * xs.length)])));
  medians.sort((a, b) => a - b);
  return [medians[Math.floor(resamples * 0.025)], medians[Math.ceil(resamples * 0.975) - 1]];
}
