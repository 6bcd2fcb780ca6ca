// What determinism on demand costs: an offline batch with a share of `deterministic: true` requests (decode-
// verify-rollback), against the same batch with none and against kernelMode "batch-invariant" (every request on
// the fixed schedule, the SGLang / vLLM deterministic-mode baseline).
//   npm run bench:determinism -- [--json] [--preset smollm-135m] [--layers N] [--device cpu|cuda] [--requests 256]
//     [--prompt-tokens 128] [--max-tokens 128] [--ratios 0,0.02,0.1,0.5,1] [--verify-window 32] [--verify-group 8]
//     [--verify fused,separate] [--repeats 1] [--max-batch-seqs 256]
// --verify: where the verify rows run, one set of decode-verify-rollback rows per choice, side by side in one run:
// fused into the steps' forwards (the engine's default) or as passes of their own (fuseVerify: false, LLM-42's
// padded fixed-shape passes on the GPU). The 0% row is the same work either way and runs once.
// --max-batch-seqs caps the sequences per step (engine maxBatchSeqs): the offline batch then runs at that
// concurrency, where (on the GPU, <= 64 rows) fast steps use split-K and batch-invariant mode's fixed schedule costs.
// --repeats N runs every row N times in interleaved rounds (row order fixed within a round) and reports each row's
// median, with the range in tokensPerSecondRange: on a shared box single rows swing by tens of percent.
// Rows {mode, deterministicRatio, tokensPerSecond, ratioToNonDeterministic, rollbacks, recomputedFraction, ...}:
// tokensPerSecond = generated tokens / wall time from submit to the last result; recomputedFraction = fast-path
// tokens rolled back / tokens the deterministic requests generated. On a shared CPU box also compare
// tokensPerCpuSecond (what the process actually got).
import { existsSync } from "node:fs";
import { loadavg, tmpdir } from "node:os";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { Engine } from "../../ts/engine/engine.js";
import type { KernelMode } from "../../ts/engine/kernelSchedule.js";
import { loadModel, type Model } from "../../ts/model/model.js";
import { makeFixture, PRESETS } from "../make-fixture.js";
import { benchQuantize, QUANTIZE_PARSE_ARGS } from "./quantizeArgs.js";
import { median, parseRepeats } from "./stats.js";

const { values } = parseArgs({
  options: {
    json: { type: "boolean", default: false },
    preset: { type: "string", default: "smollm-135m" },
    layers: { type: "string" },
    device: { type: "string", default: "cpu" },
    requests: { type: "string", default: "256" },
    "prompt-tokens": { type: "string", default: "128" },
    "max-tokens": { type: "string", default: "128" },
    ratios: { type: "string", default: "0,0.02,0.1,0.5,1" },
    "verify-window": { type: "string", default: "32" },
    "verify-group": { type: "string", default: "8" },
    verify: { type: "string", default: "fused,separate" },
    repeats: { type: "string", default: "1" },
    "max-batch-seqs": { type: "string", default: "256" },
    ...QUANTIZE_PARSE_ARGS,
  },
});
const quantize = benchQuantize(values);
const preset = PRESETS[values.preset!];
if (!preset) throw new Error(`--preset ${values.preset}: expected one of ${Object.keys(PRESETS).join(", ")}`);
const layers = values.layers === undefined ? preset.layers! : Number(values.layers);
const device = values.device === "cuda" ? "cuda" : "cpu";
const numRequests = Number(values.requests);
const promptTokens = Number(values["prompt-tokens"]);
const maxTokens = Number(values["max-tokens"]);
const ratios = values.ratios!.split(",").map(Number);
const verifyWindow = Number(values["verify-window"]);
const verifyGroup = Number(values["verify-group"]);
const verifyPlacements = values.verify!.split(",").map((v) => {
  if (v !== "fused" && v !== "separate")
    throw new Error(`--verify ${values.verify}: expected a list of fused, separate`);
  return v;
});
const maxBatchSeqs = Number(values["max-batch-seqs"]);
const repeats = parseRepeats(values.repeats);
const log = (msg: string): void => void (values.json ? process.stderr : process.stdout).write(`${msg}\n`);

async function presetDir(): Promise<string> {
  const dir = join(tmpdir(), "deliberate-bench", `${values.preset}-${layers}l-seed1`);
  if (!existsSync(join(dir, "config.json"))) {
    log(`writing random ${values.preset} (${layers} layers) checkpoint to ${dir} ...`);
    await makeFixture({ ...preset, layers, out: dir, seed: 1 });
  }
  return dir;
}

function prompt(i: number, vocab: number): number[] {
  let s = (i + 1) * 2654435761;
  return Array.from({ length: promptTokens }, () => {
    s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
    return 256 + (s % (vocab - 256));
  });
}

/** Whether request i of n is deterministic at this ratio (spread evenly over the batch). */
const isDeterministic = (i: number, ratio: number): boolean => Math.floor((i + 1) * ratio) > Math.floor(i * ratio);

async function runRow(model: Model, mode: KernelMode, ratio: number, verify: "fused" | "separate" = "fused") {
  await using engine = new Engine({
    models: { model },
    kernelMode: mode,
    verifyWindow,
    verifyGroup,
    fuseVerify: verify === "fused",
    maxBatchSeqs,
  });
  const vocab = model.config.vocabSize;
  await engine.submit({ prompt: prompt(99_999, vocab), maxTokens: 4, ignoreEos: true }).result; // warm-up
  const start = performance.now();
  const cpuStart = process.cpuUsage();
  const outs = await Promise.all(
    Array.from(
      { length: numRequests },
      (_, i) =>
        engine.submit({
          prompt: prompt(i, vocab),
          maxTokens,
          ignoreEos: true,
          deterministic: isDeterministic(i, ratio),
        }).result,
    ),
  );
  const seconds = (performance.now() - start) / 1000;
  const cpu = process.cpuUsage(cpuStart);
  const cpuSeconds = (cpu.user + cpu.system) / 1e6;
  const generated = outs.reduce((n, o) => n + o.tokens.length, 0);
  const det = outs.filter((o) => o.determinism !== undefined);
  const detGenerated = det.reduce((n, o) => n + o.tokens.length, 0);
  const recomputed = det.reduce((n, o) => n + o.determinism!.recomputedTokens, 0);
  const exact = det.reduce((n, o) => n + o.determinism!.exactTokens, 0);
  return {
    mode: mode === "fast" ? "decode-verify-rollback" : "batch-invariant",
    verify: mode === "fast" && ratio > 0 ? verify : "-",
    deterministicRatio: det.length / numRequests,
    tokensPerSecond: Number((generated / seconds).toFixed(2)),
    ratioToNonDeterministic: 0,
    rollbacks: det.reduce((n, o) => n + o.determinism!.rollbacks, 0),
    recomputedFraction: detGenerated === 0 ? 0 : Number((recomputed / detGenerated).toFixed(5)),
    /** Share of the deterministic requests' tokens committed as exact decodes (no verify row). */
    exactFraction: detGenerated === 0 ? 0 : Number((exact / detGenerated).toFixed(5)),
    verifyPasses: det.reduce((n, o) => n + o.determinism!.verifyPasses, 0),
    tokensPerCpuSecond: Number((generated / cpuSeconds).toFixed(2)),
    ratioPerCpuSecond: 0,
    seconds: Number(seconds.toFixed(2)),
    cpuSeconds: Number(cpuSeconds.toFixed(2)),
    loadAverage1m: Number(loadavg()[0].toFixed(2)),
    model: `${values.preset}${layers === preset.layers ? "" : `-${layers}l`}${quantize.suffix}`,
    device,
    requests: numRequests,
    promptTokens,
    maxTokens,
    verifyWindow,
    verifyGroup,
    maxBatchSeqs,
  };
}

const model = await loadModel(await presetDir(), {
  device,
  ...quantize.load,
  pageSize: 16,
  kvPages: Math.ceil((numRequests * (promptTokens + maxTokens + verifyWindow)) / 16) + 64 + verifyGroup * 3,
});
try {
  const configs: Array<{ mode: KernelMode; ratio: number; verify: "fused" | "separate" }> = [];
  for (const verify of verifyPlacements)
    for (const ratio of ratios)
      if (ratio > 0 || verify === verifyPlacements[0]) configs.push({ mode: "fast", ratio, verify });
  configs.push({ mode: "batch-invariant", ratio: 1, verify: "fused" });
  const runs: Array<Array<Awaited<ReturnType<typeof runRow>>>> = configs.map(() => []);
  for (let round = 0; round < repeats; round++) {
    for (const [i, c] of configs.entries()) {
      runs[i].push(await runRow(model, c.mode, c.ratio, c.verify));
      if (repeats > 1)
        log(`round ${round + 1}/${repeats}: ${c.mode} ${c.verify} ${c.ratio}: ${runs[i][round].tokensPerSecond} tok/s`);
    }
  }
  const rows = runs.map((rs) => {
    const mid = rs.slice().sort((a, b) => a.tokensPerSecond - b.tokensPerSecond)[(rs.length - 1) >> 1];
    return {
      ...mid,
      tokensPerSecond: Number(median(rs.map((r) => r.tokensPerSecond)).toFixed(2)),
      tokensPerSecondRange: [
        Math.min(...rs.map((r) => r.tokensPerSecond)),
        Math.max(...rs.map((r) => r.tokensPerSecond)),
      ],
      tokensPerCpuSecond: Number(median(rs.map((r) => r.tokensPerCpuSecond)).toFixed(2)),
      repeats,
    };
  });
  const base = rows.find((r) => r.mode === "decode-verify-rollback" && r.deterministicRatio === 0) ?? rows[0];
  for (const r of rows) {
    r.ratioToNonDeterministic = Number((r.tokensPerSecond / base.tokensPerSecond).toFixed(3));
    r.ratioPerCpuSecond = Number((r.tokensPerCpuSecond / base.tokensPerCpuSecond).toFixed(3));
    if (values.json) console.log(JSON.stringify(r));
    else {
      log(
        `${`${r.mode}${r.verify === "-" ? "" : ` (${r.verify})`}`.padEnd(33)} det ${(100 * r.deterministicRatio).toFixed(0).padStart(3)}%: ${r.tokensPerSecond.toFixed(1).padStart(7)} tok/s ` +
          `(${r.ratioToNonDeterministic.toFixed(2)}x; per CPU-s ${r.ratioPerCpuSecond.toFixed(2)}x; range ${r.tokensPerSecondRange.join("-")}), rollbacks ${r.rollbacks}, ` +
          `recomputed ${(100 * r.recomputedFraction).toFixed(2)}%, exact ${(100 * r.exactFraction).toFixed(1)}%, ${r.verifyPasses} row-passes, ${r.seconds}s wall, load ${r.loadAverage1m}`,
      );
    }
  }
} finally {
  model.dispose();
}
