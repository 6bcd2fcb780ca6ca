// Single-stream prefill and decode speed of deliberate vs llama.cpp (node-llama-cpp) on the same weights, in
// the same run, with the same thread count.
//   npm run bench:decode -- [--json] [--preset smollm-135m] [--prompt-tokens 128] [--decode-tokens 64]
//     [--threads N] [--rounds 3] [--device cpu|cuda] [--no-peer] [--kv-dtype f32|bf16|f16] [--quantize int8|int4]
//     [--quantize-group 32|64|128] [--fp8]
// --fp8: ours loads the FP8 e4m3 copy of the preset's checkpoint (128 x 128 block scales, as Qwen3-*-FP8; written once by
// scripts/bench/fp8Checkpoint.ts; the dense projections held as e4m3 codes on the CPU); llama.cpp has no FP8 format and
// gets the same float weights as Q8_0 (about the same bytes a weight: 1.06 against FP8's 1.03).
// --quantize int8: ours loads with quantize: "int8" (dense linear weights int8 per output row); llama.cpp gets the same
// weights with those matrices as Q8_0 (blocks of 32, an f16 scale each; the rest as stored). --quantize int4: ours
// loads with quantize: "int4" (symmetric groups of 32 by default, Q4_0's scheme with an f32 scale), llama.cpp gets
// those matrices as Q4_0 (the same scheme, an f16 scale).
// Rounds alternate deliberate and llama.cpp and each side reports its best round, so that load from other
// processes on a shared machine biases neither side.
// The model is a seeded random model of the preset's shape (scripts/make-fixture.ts), cached in the temp dir;
// llama.cpp gets it through the GGUF export with the checkpoint dtype kept.
import { cpus, loadavg } from "node:os";
import { parseArgs } from "node:util";
import type { Token } from "node-llama-cpp";
import { PRESETS } from "../make-fixture.js";
import { loadModel, type Model } from "../../ts/model/model.js";
import { loadAddon } from "../../ts/native/loadAddon.js";
import type { ModelConfig } from "../../ts/model/config.js";
import { expectedTensors } from "../../ts/model/weights.js";
import { loadPeerModel, peerWeightsLabel, presetCheckpoint } from "./llamaPeer.js";
import { fp8Checkpoint } from "./fp8Checkpoint.js";
import { benchQuantize, QUANTIZE_PARSE_ARGS } from "./quantizeArgs.js";
import { spreadOf } from "./stats.js";

const { values } = parseArgs({
  options: {
    json: { type: "boolean" },
    preset: { type: "string", default: "smollm-135m" },
    "prompt-tokens": { type: "string", default: "128" },
    "decode-tokens": { type: "string", default: "64" },
    threads: { type: "string" },
    rounds: { type: "string", default: "3" },
    device: { type: "string", default: "cpu" },
    "no-peer": { type: "boolean" },
    "kv-dtype": { type: "string" },
    fp8: { type: "boolean" },
    ...QUANTIZE_PARSE_ARGS,
  },
});
const promptTokens = Number(values["prompt-tokens"]);
const decodeTokens = Number(values["decode-tokens"]);
const threads = values.threads ? Number(values.threads) : cpus().length;
const rounds = Number(values.rounds);
const device = values.device as "cpu" | "cuda";
const preset = PRESETS[values.preset!];
if (!preset) throw new Error(`--preset must be one of ${Object.keys(PRESETS).join(", ")}`);

const log = (m: string) => values.json || console.error(m);
const { quantize, quantizeGroupSize } = benchQuantize(values).load;
const fp8 = values.fp8 === true;
if (fp8 && quantize !== undefined) throw new Error("--fp8 loads an FP8 checkpoint as stored; it takes no --quantize");
// the native store of an int4 weight: q 0.5 byte a value, an f32 scale and a u8 zero point per group
const int4Group = quantizeGroupSize ?? 32;

function prompt(vocab: number): number[] {
  let s = 12345;
  return Array.from({ length: promptTokens }, () => {
    s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
    return 300 + (s % (vocab - 300));
  });
}

interface Speed {
  prefillTokensPerSecond: number;
  decodeTokensPerSecond: number;
  /** Tokens per second of this process's CPU time (all threads): robust to other load on a shared machine. */
  prefillTokensPerCpuSecond: number;
  decodeTokensPerCpuSecond: number;
}

const cpuSeconds = () => {
  const u = process.cpuUsage();
  return (u.user + u.system) / 1e6;
};

/** Times prefill (prompt -> first token) and decode (the next decodeTokens tokens) of one greedy sequence. */
async function timeStream(next: () => Promise<boolean>): Promise<Speed> {
  const t0 = performance.now();
  const c0 = cpuSeconds();
  await next(); // first token: the whole prompt's prefill
  const t1 = performance.now();
  const c1 = cpuSeconds();
  for (let i = 0; i < decodeTokens; i++) await next();
  const t2 = performance.now();
  const c2 = cpuSeconds();
  return {
    prefillTokensPerSecond: (promptTokens * 1000) / (t1 - t0),
    decodeTokensPerSecond: (decodeTokens * 1000) / (t2 - t1),
    prefillTokensPerCpuSecond: promptTokens / (c1 - c0),
    decodeTokensPerCpuSecond: decodeTokens / (c2 - c1),
  };
}

async function ours(model: Model, ids: number[]): Promise<Speed> {
  // Model.forward directly (no detokenizer): one forward per token, the prompt as a single prefill step.
  const pages = Int32Array.from(
    { length: Math.ceil((promptTokens + decodeTokens + 1) / model.kv.pageSize) },
    (_, i) => i,
  );
  let pos = 0;
  let input = ids;
  return timeStream(async () => {
    const [r] = await model.forward({
      gemmSplitK: 1,
      kvSplits: 1,
      sequences: [{ tokens: Int32Array.from(input), startPos: pos, blockTable: pages }],
    });
    pos += input.length;
    input = [r.token];
    return true;
  });
}

interface Peer {
  run(): Promise<Speed>;
  dispose(): Promise<void>;
}

async function openPeer(gguf: string, ids: number[]): Promise<Peer> {
  const { model, dispose } = await loadPeerModel(gguf, threads);
  return {
    async run() {
      const context = await model.createContext({ contextSize: 1024, batchSize: Math.max(512, promptTokens), threads });
      const it = context
        .getSequence()
        .evaluate(ids as Token[], { temperature: 0 })
        [Symbol.asyncIterator]();
      const speed = await timeStream(async () => !(await it.next()).done);
      await it.return?.();
      await context.dispose();
      return speed;
    },
    dispose,
  };
}

const best = (xs: Speed[]): Speed => {
  const max = (k: keyof Speed) => Math.max(...xs.map((x) => x[k]));
  return {
    prefillTokensPerSecond: max("prefillTokensPerSecond"),
    decodeTokensPerSecond: max("decodeTokensPerSecond"),
    prefillTokensPerCpuSecond: max("prefillTokensPerCpuSecond"),
    decodeTokensPerCpuSecond: max("decodeTokensPerCpuSecond"),
  };
};
/**
 * Weight bytes one decoded token reads, and all of them: every matrix once, an embedding row (the whole table when it is
 * also the LM head), and of a mixture's experts the expertsPerToken / numExperts share a token routes to.
 */
function weightBytes(config: ModelConfig, bytesPerValue: number): { perToken: number; total: number } {
  let perToken = 0;
  let total = 0;
  // quantize int8: a dense layer's linear weight is 1 byte a value plus an f32 scale per row; int4: half a byte a
  // value plus an f32 scale a group (its zero points are stored too, but a symmetric weight's are never read)
  const linear = /\.(self_attn\.[qkvo]_proj|mlp\.(gate|up|down)_proj)\.weight$/;
  for (const { name, shape } of expectedTensors(config)) {
    const numel = shape.reduce((a, b) => a * b, 1);
    const n =
      quantize === "int8" && linear.test(name)
        ? numel + 4 * shape[0]
        : (fp8 || quantize === "fp8") && linear.test(name)
          ? numel + 4 * shape[0] * Math.ceil(shape[1] / 128)
          : quantize === "int4" && linear.test(name)
            ? numel / 2 + (4 * numel) / int4Group
            : numel * bytesPerValue;
    total += n;
    if (name === "model.embed_tokens.weight" && !config.tieWordEmbeddings) perToken += shape[1] * bytesPerValue;
    else if (name.includes(".mlp.experts.")) perToken += (n * config.moe!.expertsPerToken) / config.moe!.numExperts;
    else perToken += n;
  }
  return { perToken, total };
}

const fmt = (s: Speed) => Object.fromEntries(Object.entries(s).map(([k, v]) => [k, +v.toFixed(2)]));

const preset8 = await presetCheckpoint(values.preset!, fp8 ? "int8" : quantize, !values["no-peer"], log);
const dir = fp8 ? await fp8Checkpoint(preset8.dir, log) : preset8.dir;
const gguf = preset8.gguf;
loadAddon().setThreads(threads);
const kvDtype = values["kv-dtype"] as "f32" | "bf16" | "f16" | undefined;
const rssBefore = process.memoryUsage().rss;
const model = await loadModel(dir, {
  device,
  kvDtype,
  quantize,
  quantizeGroupSize,
  kvPages: Math.ceil((promptTokens + decodeTokens + 1) / 16) + 1,
});
const linearFormat = model.native.info.linearFormat;
// the process's RSS growth over the load: weights (and on the CPU the KV pool, touched lazily) resident
const loadRssBytes = process.memoryUsage().rss - rssBefore;
const ids = prompt(model.config.vocabSize);
const bytes = weightBytes(model.config, preset.dtype === "f32" ? 4 : 2);
const peerModel = values["no-peer"] ? null : await openPeer(gguf, ids);
await ours(model, ids); // warm-up (scratch allocation, page faults)
await peerModel?.run();
const mineRuns: Speed[] = [];
const theirRuns: Speed[] = [];
for (let r = 0; r < rounds; r++) {
  mineRuns.push(await ours(model, ids));
  if (peerModel) theirRuns.push(await peerModel.run());
  log(
    `round ${r + 1}: ours ${JSON.stringify(fmt(mineRuns[r]))}${peerModel ? ` llama.cpp ${JSON.stringify(fmt(theirRuns[r]))}` : ""}`,
  );
}
model.dispose();
await peerModel?.dispose();
const mine = best(mineRuns);
const theirs = peerModel ? best(theirRuns) : null;

const result = {
  model: `${values.preset} (random, ${preset.dtype})`,
  quantize: fp8 ? "fp8 checkpoint (e4m3, 128x128 block scales)" : (quantize ?? null),
  quantizeGroupSize: quantize === "int4" ? int4Group : null,
  peerWeights: values["no-peer"] ? null : peerWeightsLabel(fp8 ? "int8" : quantize),
  linearFormat: linearFormat,
  kvDtype: model.kv.dtype,
  device,
  threads,
  promptTokens,
  decodeTokens,
  rounds,
  decodeTokensPerSecond: +mine.decodeTokensPerSecond.toFixed(2),
  prefillTokensPerSecond: +mine.prefillTokensPerSecond.toFixed(2),
  peerDecodeTokensPerSecond: theirs ? +theirs.decodeTokensPerSecond.toFixed(2) : null,
  peerPrefillTokensPerSecond: theirs ? +theirs.prefillTokensPerSecond.toFixed(2) : null,
  ratio: theirs ? +(mine.decodeTokensPerSecond / theirs.decodeTokensPerSecond).toFixed(3) : null,
  prefillRatio: theirs ? +(mine.prefillTokensPerSecond / theirs.prefillTokensPerSecond).toFixed(3) : null,
  // The same ratios in tokens per CPU-second (each side's best round): the fairer figure on a loaded machine.
  cpuTimeRatio: theirs ? +(mine.decodeTokensPerCpuSecond / theirs.decodeTokensPerCpuSecond).toFixed(3) : null,
  cpuTimePrefillRatio: theirs ? +(mine.prefillTokensPerCpuSecond / theirs.prefillTokensPerCpuSecond).toFixed(3) : null,
  // Every round's decode speed, median (min-max): the spread the best-round figures above hide.
  decodeSpread: spreadOf(mineRuns.map((r) => +r.decodeTokensPerSecond.toFixed(2))),
  peerDecodeSpread: theirs ? spreadOf(theirRuns.map((r) => +r.decodeTokensPerSecond.toFixed(2))) : null,
  loadRssBytes,
  weightBytesPerToken: bytes.perToken,
  weightBytesTotal: bytes.total,
  // weightBytesPerToken at the best decode speed: above the machine's memory bandwidth would mean fewer bytes read
  decodeWeightGBPerSecond: +((bytes.perToken * mine.decodeTokensPerSecond) / 1e9).toFixed(2),
  loadAverage: +loadavg()[0].toFixed(2),
};
console.log(values.json ? JSON.stringify(result) : result);
