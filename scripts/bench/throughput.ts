// Engine throughput vs batch size on a random model of a real model's shape (weights random, shapes exact).
//   npm run bench:throughput -- [--json] [--preset smollm-135m|qwen2.5-1.5b | --model DIR] [--device cpu|cuda]
//     [--batches 1,4,16,64] [--prompt-tokens 32] [--max-tokens 32] [--kernel-mode fast|batch-invariant] [--repeats 3]
//     [--quantize int8|int4 [--quantize-group 32|64|128]]
// --model DIR: a checkpoint on disk instead (e.g. models/tiny-reasoner, issue 25's other 16-way shape).
// Each row: `batch` concurrent greedy requests (random prompts, eos ignored) submitted at once; tokensPerSecond =
// generated tokens / wall time from submit to the last result (prefill included); decodeTokensPerSecond = tokens
// after the first of each request / time after every request had its first one. The batches run in `repeats`
// rounds (every batch once per round, so a disturbance of the machine hits all of them alike); each figure is the
// median over the rounds, with the range of tokensPerSecond. With --json, one JSON object
// {model, device, batch, tokensPerSecond, ...} per line; otherwise a table.
import { existsSync } from "node:fs";
import { loadavg, tmpdir } from "node:os";
import { basename, join } from "node:path";
import { parseArgs } from "node:util";
import { Engine } from "../../ts/engine/engine.js";
import { parseKernelMode } from "../../ts/engine/kernelSchedule.js";
import { loadModel } from "../../ts/model/model.js";
import { makeFixture, PRESETS } from "../make-fixture.js";
import { benchQuantize, QUANTIZE_PARSE_ARGS } from "./quantizeArgs.js";
import { median, parseRepeats } from "./stats.js";

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
    ...QUANTIZE_PARSE_ARGS,
  },
});
const quantize = benchQuantize(values);

const preset = PRESETS[values.preset!];
if (!preset) throw new Error(`--preset ${values.preset}: expected one of ${Object.keys(PRESETS).join(", ")}`);
const device = values.device === "cuda" ? "cuda" : "cpu";
const batches = values.batches!.split(",").map(Number);
const promptTokens = Number(values["prompt-tokens"]);
const maxTokens = Number(values["max-tokens"]);
const kernelMode = parseKernelMode(values["kernel-mode"]!);
const repeats = parseRepeats(values.repeats);
const log = (msg: string): void => void (values.json ? process.stderr : process.stdout).write(`${msg}\n`);

/** --model, or the preset's random checkpoint, written once and cached in the temp dir (135M params take a while). */
async function presetDir(): Promise<string> {
  if (values.model !== undefined) return values.model;
  const dir = join(tmpdir(), "deliberate-bench", `${values.preset}-seed1`);
  if (!existsSync(join(dir, "config.json"))) {
    log(`writing random ${values.preset} checkpoint to ${dir} ...`);
    await makeFixture({ ...preset, out: dir, seed: 1 });
  }
  return dir;
}

function prompt(i: number, vocab: number): number[] {
  let s = (i + 1) * 2654435761;
  return Array.from({ length: promptTokens }, () => {
    s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
    // skip byte tokens and specials: any ids work for a random model (a small vocabulary: past the 3 specials)
    const first = vocab > 512 ? 256 : 3;
    return first + (s % (vocab - first));
  });
}

interface Sample {
  tokensPerSecond: number;
  decodeTokensPerSecond: number;
  seconds: number;
  cpuSeconds: number;
  tokensPerCpuSecond: number;
}

const maxBatch = Math.max(...batches);
const modelName = values.model === undefined ? values.preset! : basename(values.model);
/** What the rows name: the model and, when quantized at load, its weights. */
const modelLabel = modelName + quantize.suffix;
const model = await loadModel(await presetDir(), {
  device,
  ...quantize.load,
  pageSize: 16,
  kvPages: Math.ceil((maxBatch * (promptTokens + maxTokens)) / 16) + 64,
});
const vocab = model.config.vocabSize;
const rows = [];
try {
  await using engine = new Engine({ models: { name: modelName, model }, kernelMode });
  await engine.submit({ prompt: prompt(999, vocab), maxTokens: 4, ignoreEos: true }).result; // warm-up
  const samples = new Map<number, Sample[]>(batches.map((b) => [b, []]));
  for (let round = 0; round < repeats; round++) {
    for (const batch of batches) {
      const start = performance.now();
      const cpuStart = process.cpuUsage();
      const firstTokenAt: number[] = [];
      const outs = await Promise.all(
        Array.from({ length: batch }, async (_, i) => {
          // fresh prompts every round: no prefix-cache hits between rounds
          const handle = engine.submit({
            prompt: prompt(i + batch * 1000 + round * 100_000, vocab),
            maxTokens,
            ignoreEos: true,
          });
          for await (const _delta of handle) {
            firstTokenAt.push(performance.now());
            break;
          }
          return handle.result;
        }),
      );
      const end = performance.now();
      const seconds = (end - start) / 1000;
      // Decode phase: from the moment every request has its first token (all prompts prefilled) to the end.
      const decodeSeconds = (end - Math.max(...firstTokenAt)) / 1000;
      const cpu = process.cpuUsage(cpuStart);
      const generated = outs.reduce((n, o) => n + o.tokens.length, 0);
      samples.get(batch)!.push({
        tokensPerSecond: generated / seconds,
        decodeTokensPerSecond: (generated - batch) / decodeSeconds,
        seconds,
        // CPU time this process got (a shared machine may give it far less than threads x wall time).
        cpuSeconds: (cpu.user + cpu.system) / 1e6,
        // Generated tokens per CPU-second: comparable across runs on a contended machine.
        tokensPerCpuSecond: generated / ((cpu.user + cpu.system) / 1e6),
      });
    }
  }
  for (const batch of batches) {
    const got = samples.get(batch)!;
    const med = (k: keyof Sample, digits: number): number => Number(median(got.map((x) => x[k])).toFixed(digits));
    const tps = got.map((x) => x.tokensPerSecond);
    const row = {
      model: modelLabel,
      device,
      batch,
      tokensPerSecond: med("tokensPerSecond", 2),
      decodeTokensPerSecond: med("decodeTokensPerSecond", 2),
      promptTokens,
      maxTokens,
      kernelMode,
      seconds: med("seconds", 3),
      cpuSeconds: med("cpuSeconds", 3),
      tokensPerCpuSecond: med("tokensPerCpuSecond", 2),
      repeats,
      tokensPerSecondRange: [Number(Math.min(...tps).toFixed(2)), Number(Math.max(...tps).toFixed(2))],
      loadAverage1m: Number(loadavg()[0].toFixed(2)),
    };
    rows.push(row);
    if (values.json) console.log(JSON.stringify(row));
    else
      log(
        `${modelLabel} ${device} batch ${String(batch).padStart(3)}: ${row.tokensPerSecond.toFixed(1).padStart(8)} tok/s (${row.tokensPerSecondRange.join("-")} over ${repeats}), decode ${row.decodeTokensPerSecond.toFixed(1)} tok/s (${row.seconds}s wall, ${row.cpuSeconds}s CPU, load ${row.loadAverage1m})`,
      );
  }
} finally {
  model.dispose();
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
