// Engine throughput vs batch size on a random model of a real model's shape (weights random, shapes exact), and
// llama.cpp's batched decoding of as many sequences on the same weights, in the same run, with the same threads.
//   npm run bench:throughput -- [--json] [--preset smollm-135m|qwen2.5-1.5b | --model DIR] [--device cpu|cuda]
//     [--batches 1,4,16,64] [--prompt-tokens 32] [--max-tokens 32] [--kernel-mode fast|batch-invariant] [--repeats 3]
//     [--threads N] [--peer | --no-peer] [--quantize int8|int4 [--quantize-group 32|64|128]]
// --model DIR: a checkpoint on disk instead (e.g. models/tiny-reasoner, issue 25's other 16-way shape).
// Each row: `batch` concurrent greedy requests (random prompts, eos ignored) submitted at once through the Engine;
// tokensPerSecond = generated tokens / wall time from submit to the last token (prefill included);
// prefillTokensPerSecond = prompt tokens / time until every request had its first token; decodeTokensPerSecond =
// tokens that arrived after that moment / the time from it to the last token (scripts/bench/tokenTimes.ts), and
// decodeTokensPerCpuSecond the same tokens per CPU-second the process got meanwhile.
// The peer (issue 47): llama.cpp through node-llama-cpp on the same checkpoint exported to GGUF (dtypes kept; with
// --quantize int8 / int4 the linear matrices as Q8_0 / Q4_0, as bench:decode does), one context of `batch` sequences
// (scripts/bench/llamaPeer.ts): every prompt prefilled in one llama_decode, then one llama_decode a step for all
// sequences; the same prompts, greedy, end-of-generation tokens fed back like any other, the same thread count.
// On by default on the CPU wherever node-llama-cpp loads (--no-peer skips it; --peer makes a failure to load it an
// error); off with --device cuda (llama.cpp here is its CPU build).
// Each batch runs once untimed on each side (4 tokens a sequence: scratch buffers, the step shapes), then in
// `repeats` rounds: every batch once per round, the two sides alternating which goes first, so that a disturbance of
// the machine hits both alike. Each figure is the median over the rounds with its range; decodeRatio = our median
// decode tokens/s / the peer's, with the range of the rounds' paired ratios. With --json, one JSON object per batch
// per line; otherwise a table.
import { existsSync } from "node:fs";
import { cpus, loadavg, tmpdir } from "node:os";
import { basename, join } from "node:path";
import { parseArgs } from "node:util";
import { Engine } from "../../ts/engine/engine.js";
import { parseKernelMode } from "../../ts/engine/kernelSchedule.js";
import { loadModel } from "../../ts/model/model.js";
import { loadAddon } from "../../ts/native/loadAddon.js";
import { PRESETS } from "../make-fixture.js";
import type { BatchedPeer, PeerModel } from "./llamaPeer.js";
import { benchQuantize, QUANTIZE_PARSE_ARGS } from "./quantizeArgs.js";
import { median, parseRepeats } from "./stats.js";
import { cpuSecondsNow, timeRound, type RoundSample, type TokenTimes } from "./tokenTimes.js";

const { values } = parseArgs({
  options: {
    json: { type: "boolean", default: false },
    preset: { type: "string", default: "smollm-135m" },
    model: { type: "string" },
    device: { type: "string", default: "cpu" },
    batches: { type: "string", default: "1,4,16,64" },
    "prompt-tokens": { type: "string", default: "32" },
    "max-tokens": { type: "string", default: "32" },
    "kernel-mode": { type: "string", default: "fast" },
    repeats: { type: "string", default: "3" },
    threads: { type: "string" },
    peer: { type: "boolean" },
    "no-peer": { type: "boolean" },
    ...QUANTIZE_PARSE_ARGS,
  },
});
const quantize = benchQuantize(values);

const preset = PRESETS[values.preset!];
if (!preset) throw new Error(`--preset ${values.preset}: expected one of ${Object.keys(PRESETS).join(", ")}`);
const device = values.device === "cuda" ? "cuda" : "cpu";
const positiveInt = (flag: string, raw: string | undefined, min = 1): number => {
  const n = Number(raw);
  if (!Number.isInteger(n) || n < min) throw new Error(`--${flag} ${raw}: expected an integer >= ${min}`);
  return n;
};
const batches = values.batches!.split(",").map((b) => positiveInt("batches", b));
const promptTokens = positiveInt("prompt-tokens", values["prompt-tokens"]);
// a decode window needs a token after each stream's first
const maxTokens = positiveInt("max-tokens", values["max-tokens"], 2);
const kernelMode = parseKernelMode(values["kernel-mode"]!);
const repeats = parseRepeats(values.repeats);
const threads = values.threads === undefined ? cpus().length : positiveInt("threads", values.threads);
if (values.peer && values["no-peer"]) throw new Error("--peer and --no-peer: give one");
if (values.peer && device === "cuda")
  throw new Error("--peer with --device cuda: the peer is llama.cpp's CPU build; compare on --device cpu");
const wantPeer = values["no-peer"] ? false : (values.peer ?? device === "cpu");
const log = (msg: string): void => void (values.json ? process.stderr : process.stdout).write(`${msg}\n`);

/** The first id of a random prompt: past byte tokens and specials (any ids work for a random model). */
const firstPromptId = (vocab: number): number => (vocab > 512 ? 256 : 3);

function prompt(i: number, vocab: number): number[] {
  let s = (i + 1) * 2654435761;
  return Array.from({ length: promptTokens }, () => {
    s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
    return firstPromptId(vocab) + (s % (vocab - firstPromptId(vocab)));
  });
}
/** Round `round`'s prompts at `batch`: fresh every round and batch (no prefix-cache hits), the same on both sides. */
const prompts = (batch: number, round: number, vocab: number): number[][] =>
  Array.from({ length: batch }, (_, i) => prompt(i + batch * 1000 + round * 100_000, vocab));

const maxBatch = Math.max(...batches);
const modelName = values.model === undefined ? values.preset! : basename(values.model);
/** What the rows name: the model and, when quantized at load, its weights. */
const modelLabel = modelName + quantize.suffix;

/**
 * llama.cpp on the same weights, or null (no peer asked for, or node-llama-cpp not loadable here and --peer not
 * given). Imported only when wanted, so that the bench runs without node-llama-cpp (a devDependency).
 */
async function openPeer(): Promise<{
  model: PeerModel;
  open: typeof import("./llamaPeer.js").openBatchedPeer;
  weights: string;
} | null> {
  if (!wantPeer) return null;
  try {
    const peer = await import("./llamaPeer.js");
    const q = quantize.load.quantize;
    if (q === "int4" && (quantize.load.quantizeGroupSize ?? 32) !== 32)
      log(`note: llama.cpp's Q4_0 has groups of 32; ours groups of ${quantize.load.quantizeGroupSize}`);
    const gguf =
      values.model === undefined
        ? (await peer.presetCheckpoint(values.preset!, q, true, log)).gguf
        : await peer.checkpointGguf(values.model, q, log);
    return {
      model: await peer.loadPeerModel(gguf, threads),
      open: peer.openBatchedPeer,
      weights: peer.peerWeightsLabel(q),
    };
  } catch (e) {
    if (values.peer) throw e;
    log(`llama.cpp peer skipped (node-llama-cpp did not load: ${(e as Error).message}); --no-peer silences this`);
    return null;
  }
}

/** --model, or the preset's seeded random checkpoint shared with bench:decode (written once). */
async function modelDir(): Promise<string> {
  if (values.model !== undefined) return values.model;
  const dir = join(tmpdir(), `deliberate-bench-${values.preset}`);
  if (existsSync(join(dir, "config.json"))) return dir;
  // the same writer bench:decode and the peer use, without importing node-llama-cpp
  const { makeFixture } = await import("../make-fixture.js");
  log(`writing a random ${values.preset} model to ${dir} ...`);
  await makeFixture({ ...preset!, out: dir });
  return dir;
}

/** One round of `batch` requests through the engine, every token's arrival timed. */
async function oursRound(
  engine: Engine,
  batch: number,
  round: number,
  vocab: number,
  tokens: number,
): Promise<TokenTimes> {
  const firstAt: number[] = [];
  const firstCpuSeconds: number[] = [];
  const tokenAt: number[] = [];
  await Promise.all(
    prompts(batch, round, vocab).map(async (p) => {
      const handle = engine.submit({ prompt: p, maxTokens: tokens, ignoreEos: true });
      let first = true;
      for await (const delta of handle) {
        if (delta.tokens.length === 0) continue;
        const t = performance.now();
        if (first) {
          first = false;
          firstAt.push(t);
          firstCpuSeconds.push(cpuSecondsNow());
        }
        for (let k = 0; k < delta.tokens.length; k++) tokenAt.push(t);
      }
      await handle.result;
    }),
  );
  return { firstAt, firstCpuSeconds, tokenAt };
}

loadAddon().setThreads(threads);
const dir = await modelDir();
const model = await loadModel(dir, {
  device,
  ...quantize.load,
  pageSize: 16,
  kvPages: Math.ceil((maxBatch * (promptTokens + maxTokens)) / 16) + 64,
});
const vocab = model.config.vocabSize;
const peer = await openPeer();
const rows = [];
try {
  await using engine = new Engine({ models: { name: modelName, model }, kernelMode });
  const peers = new Map<number, BatchedPeer>();
  const ours = new Map<number, RoundSample[]>(batches.map((b) => [b, []]));
  const theirs = new Map<number, RoundSample[]>(batches.map((b) => [b, []]));
  try {
    const round = (batch: number, r: number, side: "ours" | "peer", tokens = maxTokens): Promise<RoundSample> =>
      timeRound(batch, promptTokens, tokens, () =>
        side === "ours"
          ? oursRound(engine, batch, r, vocab, tokens)
          : peers.get(batch)!.run(prompts(batch, r, vocab), tokens),
      );
    // warm-up: each batch once on each side, untimed, with a few decode steps (scratch buffers, the prefill's and a
    // decode step's shapes); a round index no timed round uses: other prompts
    const warmTokens = Math.min(maxTokens, 4);
    for (const batch of batches) {
      await round(batch, repeats + 7, "ours", warmTokens);
      if (peer) {
        peers.set(
          batch,
          await peer.open(peer.model, batch, {
            contextSize: promptTokens + maxTokens + 1,
            // every prompt in one llama_decode, as our engine's default 2048-token step budget takes 64 x 32
            batchSize: Math.max(batch, batch * promptTokens),
            threads,
          }),
        );
        await round(batch, repeats + 7, "peer", warmTokens);
      }
    }
    for (let r = 0; r < repeats; r++) {
      for (const batch of batches) {
        // alternate which side goes first, so that neither always runs right after the other's batch
        const order: Array<"ours" | "peer"> = peer ? (r % 2 === 0 ? ["ours", "peer"] : ["peer", "ours"]) : ["ours"];
        for (const side of order) {
          const got = await round(batch, r, side);
          (side === "ours" ? ours : theirs).get(batch)!.push(got);
          // progress (stderr under --json): a long run on a loaded machine shows where it is
          if (peer)
            log(
              `round ${r + 1} batch ${batch} ${side === "ours" ? "ours" : "llama.cpp"}: decode ${got.decodeTokensPerSecond.toFixed(1)} tok/s, prefill ${got.prefillTokensPerSecond.toFixed(1)} (load ${loadavg()[0].toFixed(2)})`,
            );
        }
      }
    }
  } finally {
    for (const p of peers.values()) await p.dispose();
  }
  for (const batch of batches) {
    const got = ours.get(batch)!;
    const peerGot = theirs.get(batch)!;
    const med = (xs: RoundSample[], k: keyof RoundSample, digits = 2): number =>
      Number(median(xs.map((x) => x[k])).toFixed(digits));
    const range = (xs: number[], digits = 2): [number, number] => [
      Number(Math.min(...xs).toFixed(digits)),
      Number(Math.max(...xs).toFixed(digits)),
    ];
    const side = (xs: RoundSample[]) => ({
      tokensPerSecond: med(xs, "tokensPerSecond"),
      prefillTokensPerSecond: med(xs, "prefillTokensPerSecond"),
      decodeTokensPerSecond: med(xs, "decodeTokensPerSecond"),
      decodeTokensPerSecondRange: range(xs.map((x) => x.decodeTokensPerSecond)),
      decodeTokensPerCpuSecond: med(xs, "decodeTokensPerCpuSecond"),
      seconds: med(xs, "seconds", 3),
      cpuSeconds: med(xs, "cpuSeconds", 3),
      tokensPerCpuSecond: med(xs, "tokensPerCpuSecond"),
    });
    const mine = side(got);
    const peerSide = peer ? side(peerGot) : null;
    const row = {
      model: modelLabel,
      device,
      threads,
      batch,
      ...mine,
      tokensPerSecondRange: range(got.map((x) => x.tokensPerSecond)),
      promptTokens,
      maxTokens,
      kernelMode,
      kvDtype: model.kv.dtype,
      repeats,
      peer: peerSide && {
        engine: "llama.cpp (node-llama-cpp, CPU)",
        weights: peer!.weights,
        ...peerSide,
      },
      decodeRatio: peerSide && Number((mine.decodeTokensPerSecond / peerSide.decodeTokensPerSecond).toFixed(3)),
      // each round's ours / peer: the spread the ratio of medians hides
      decodeRatioRange:
        peerSide &&
        range(
          got.map((x, i) => x.decodeTokensPerSecond / peerGot[i]!.decodeTokensPerSecond),
          3,
        ),
      decodeCpuRatio:
        peerSide && Number((mine.decodeTokensPerCpuSecond / peerSide.decodeTokensPerCpuSecond).toFixed(3)),
      loadAverage1m: Number(loadavg()[0].toFixed(2)),
    };
    rows.push(row);
    if (values.json) console.log(JSON.stringify(row));
    else {
      log(
        `${modelLabel} ${device} ${threads}t batch ${String(batch).padStart(3)}: ${row.tokensPerSecond.toFixed(1).padStart(8)} tok/s (${row.tokensPerSecondRange.join("-")} over ${repeats}), prefill ${row.prefillTokensPerSecond.toFixed(1)}, decode ${row.decodeTokensPerSecond.toFixed(1)} tok/s (${row.decodeTokensPerSecondRange.join("-")}) (${row.seconds}s wall, ${row.cpuSeconds}s CPU, load ${row.loadAverage1m})`,
      );
      if (peerSide)
        log(
          `${" ".repeat(modelLabel.length)}   llama.cpp batch ${String(batch).padStart(3)}: ${peerSide.tokensPerSecond.toFixed(1).padStart(8)} tok/s, prefill ${peerSide.prefillTokensPerSecond.toFixed(1)}, decode ${peerSide.decodeTokensPerSecond.toFixed(1)} tok/s (${peerSide.decodeTokensPerSecondRange.join("-")}); decode ours/llama.cpp ${row.decodeRatio}x (rounds ${row.decodeRatioRange!.join("-")}), per CPU-second ${row.decodeCpuRatio}x`,
        );
    }
  }
} finally {
  model.dispose();
  await peer?.model.dispose();
}
if (!values.json) {
  const one = rows.find((r) => r.batch === 1);
  const sixteen = rows.find((r) => r.batch === 16);
  if (one && sixteen) {
    const ratio = (k: "tokensPerSecond" | "decodeTokensPerSecond" | "tokensPerCpuSecond"): string =>
      (sixteen[k] / one[k]).toFixed(2);
    log(
      `16-way / single-stream (medians): ${ratio("tokensPerSecond")}x end to end, ${ratio("decodeTokensPerSecond")}x decode, ${ratio("tokensPerCpuSecond")}x per CPU-second`,
    );
  }
}
