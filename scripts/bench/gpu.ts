// Single-stream prefill and decode speed of the native model on CUDA, against the weight-streaming bound.
//   node --import tsx scripts/bench/gpu.ts [--preset qwen2.5-1.5b] [--prompt-tokens 512,2048] [--decode-tokens 128]
//     [--copy-gbs 2970] [--rounds 3] [--batches 1,16,64,128] [--split-ks 1,2,4,8] [--json] [--profile]
//     [--fixed-share 0.1] [--device cuda|cpu]
// The model is a seeded random model of the preset's shape (weights random, shapes exact) written to the temp dir
// on first use. Decode: one token per forward (greedy, the sampled token fed back), every step synchronized and
// read back to JS, as generate() runs; after a 128-token prompt. The bound: every weight byte read once per token
// at the measured device-to-device copy rate (--copy-gbs: bytes read + written per second, e.g. from torch).
// Batched decode sweep: one step of B sequences decoding one token each (after 64-token prefixes), per gemmSplitK,
// so the GPU's fast-mode schedule can be chosen from measurements (bound: the weights read once per step; the KV
// of these short prefixes adds < 5% at batch 64). --profile: then 4 more steps per batch at its fastest splitK with
// forward({profile: true}) (eager, an event between ops), printed op by op: where the step's time goes.
// --fixed-share S: in the batched sweep, the last ceil(S x B) sequences of each step run on the fixed schedule, as
// deterministic requests' exact decodes and verify rows do (fixedSchedule rows: splitK 1, the prefill attention
// kernel), so a run with and one without price them. --device cpu runs the same on the CPU backend (a smoke run).
import { existsSync, readdirSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { chooseSchedule, FIXED_SCHEDULE, type KernelSchedule } from "../../ts/engine/kernelSchedule.js";
import { loadModel, type Model } from "../../ts/model/model.js";
import { loadAddon } from "../../ts/native/loadAddon.js";
import { makeFixture, PRESETS } from "../make-fixture.js";
import { profileTable } from "./profileTable.js";

const { values } = parseArgs({
  options: {
    json: { type: "boolean", default: false },
    preset: { type: "string", default: "qwen2.5-1.5b" },
    "prompt-tokens": { type: "string", default: "512,2048" },
    "decode-tokens": { type: "string", default: "128" },
    "copy-gbs": { type: "string" },
    rounds: { type: "string", default: "3" },
    batches: { type: "string", default: "1,16,64,128" },
    "split-ks": { type: "string", default: "1,2,4,8" },
    profile: { type: "boolean", default: false },
    "fixed-share": { type: "string", default: "0" },
    device: { type: "string", default: "cuda" },
  },
});
if (values.device !== "cpu" && values.device !== "cuda")
  throw new Error(`--device must be cuda or cpu, got ${values.device}`);
const device: "cpu" | "cuda" = values.device;
const fixedShare = Number(values["fixed-share"]);
if (!(fixedShare >= 0 && fixedShare <= 1))
  throw new Error(`--fixed-share must be a number in [0, 1], got ${values["fixed-share"]}`);
const preset = PRESETS[values.preset!];
if (!preset) throw new Error(`--preset must be one of ${Object.keys(PRESETS).join(", ")}`);
const prefillLens = values["prompt-tokens"]!.split(",").map(Number);
const decodeTokens = Number(values["decode-tokens"]);
const rounds = Number(values.rounds);
const copyGBs = values["copy-gbs"] ? Number(values["copy-gbs"]) : undefined;
const log = (m: string): void => void process.stderr.write(`${m}\n`);

const PAGE = 16;
const DECODE_PROMPT = 128;
const dir = join(tmpdir(), "deliberate-bench", `${values.preset}-seed1`);
if (!existsSync(join(dir, "config.json"))) {
  log(`writing random ${values.preset} checkpoint to ${dir} ...`);
  const t = performance.now();
  await makeFixture({ ...preset, out: dir, seed: 1 });
  log(`  ${((performance.now() - t) / 1000).toFixed(1)} s`);
}
const weightBytes = readdirSync(dir)
  .filter((f) => f.endsWith(".safetensors"))
  .reduce((n, f) => n + statSync(join(dir, f)).size, 0);
const maxLen = Math.max(...prefillLens, DECODE_PROMPT + decodeTokens);
const sweepBatches = values.batches!.split(",").map(Number);
const splitKs = values["split-ks"]!.split(",").map(Number);
const SWEEP_PREFIX = 64,
  SWEEP_STEPS = 8;
const PROFILE_STEPS = 4;
const sweepPages = Math.ceil((SWEEP_PREFIX + (rounds + 1) * SWEEP_STEPS * splitKs.length + PROFILE_STEPS) / PAGE);
const kvPages = Math.max(Math.ceil(maxLen / PAGE), Math.max(...sweepBatches) * sweepPages) + 1;
const model = await loadModel(dir, { device, pageSize: PAGE, kvPages, prefillChunkTokens: Math.max(...prefillLens) });
const V = model.config.vocabSize;
const table = Int32Array.from({ length: Math.ceil(maxLen / PAGE) }, (_, i) => i);
const tokens = (n: number, seed: number): Int32Array => {
  let s = seed >>> 0;
  return Int32Array.from({ length: n }, () => ((s = (Math.imul(s, 1664525) + 1013904223) >>> 0), s % V));
};

async function prefillSeconds(n: number, schedule: KernelSchedule): Promise<number> {
  const t = performance.now();
  await model.forward({ ...schedule, sequences: [{ tokens: tokens(n, n), startPos: 0, blockTable: table }] });
  return (performance.now() - t) / 1000;
}

/** Seconds per decode token after a DECODE_PROMPT-token prefill; `fast` picks the schedule per step as the engine does. */
async function decodeSecondsPerToken(m: Model, fast: boolean): Promise<number> {
  let [r] = await m.forward({
    ...FIXED_SCHEDULE,
    sequences: [{ tokens: tokens(DECODE_PROMPT, 5), startPos: 0, blockTable: table }],
  });
  const t = performance.now();
  for (let i = 0; i < decodeTokens; i++) {
    const pos = DECODE_PROMPT + i;
    const schedule = fast
      ? {
          ...chooseSchedule("fast", { numTokens: 1, numDecodeSeqs: 1, maxDecodeKvLen: pos + 1, device }),
          fastSplitK: true,
        }
      : FIXED_SCHEDULE;
    [r] = await m.forward({
      ...schedule,
      sequences: [{ tokens: Int32Array.of(r.token), startPos: pos, blockTable: table }],
    });
  }
  return (performance.now() - t) / 1000 / decodeTokens;
}

/** Milliseconds per step of B one-token decodes, best of `rounds` runs of SWEEP_STEPS steps, per gemmSplitK. */
async function batchedDecodeMs(B: number): Promise<Map<number, number>> {
  const tableOf = (b: number) => Int32Array.from({ length: sweepPages }, (_, i) => b * sweepPages + i);
  for (let b = 0; b < B; b++) {
    await model.forward({
      ...FIXED_SCHEDULE,
      sequences: [{ tokens: tokens(SWEEP_PREFIX, 100 + b), startPos: 0, blockTable: tableOf(b), emitToken: false }],
    });
  }
  let pos = SWEEP_PREFIX;
  const fixedFrom = B - Math.ceil(fixedShare * B); // sequences [fixedFrom, B) on the fixed schedule
  const step = (splitK: number, profile = false) =>
    model.forward({
      gemmSplitK: splitK,
      kvSplits: 1,
      fastSplitK: true, // as the engine's fast mode: splitK an upper bound per GEMM
      profile,
      ...(fixedFrom < B ? { fixedGemmSplitK: FIXED_SCHEDULE.gemmSplitK } : {}),
      sequences: Array.from({ length: B }, (_, b) => ({
        tokens: Int32Array.of(1 + b),
        startPos: pos,
        blockTable: tableOf(b),
        ...(b >= fixedFrom ? { fixedSchedule: true } : {}),
      })),
    });
  const out = new Map<number, number>();
  for (const k of splitKs) {
    let best = Infinity;
    for (let r = 0; r <= rounds; r++) {
      const t = performance.now();
      for (let i = 0; i < SWEEP_STEPS; i++, pos++) await step(k);
      if (r > 0) best = Math.min(best, (performance.now() - t) / SWEEP_STEPS); // round 0 warms up
    }
    out.set(k, best);
  }
  if (values.profile) {
    const k = [...out].reduce((a, b) => (b[1] < a[1] ? b : a))[0];
    model.takeProfile();
    for (let i = 0; i < PROFILE_STEPS; i++, pos++) await step(k, true);
    profiles.push(
      profileTable(
        model.takeProfile(),
        `batch ${B}${fixedFrom < B ? ` (${B - fixedFrom} rows fixed)` : ""}, splitK ${k}, kvSplits 1`,
      ),
    );
  }
  return out;
}
const profiles: string[] = [];

const rows: Array<Record<string, string | number>> = [];
const sweep: Array<{ batch: number; ms: Map<number, number> }> = [];
try {
  const fast = (n: number) => chooseSchedule("fast", { numTokens: n, numDecodeSeqs: 0, maxDecodeKvLen: 0, device });
  for (const n of prefillLens) {
    await prefillSeconds(n, fast(n)); // warm-up: scratch growth, lazy module loads
    let best = Infinity;
    for (let r = 0; r < rounds; r++) best = Math.min(best, await prefillSeconds(n, fast(n)));
    rows.push({
      what: `prefill ${n} tokens`,
      schedule: "fast",
      tokensPerSecond: Math.round(n / best),
      msPerStep: +(best * 1e3).toFixed(2),
    });
  }
  for (const [name, isFast] of [
    ["fast", true],
    ["batch-invariant", false],
  ] as const) {
    await decodeSecondsPerToken(model, isFast);
    let best = Infinity;
    for (let r = 0; r < rounds; r++) best = Math.min(best, await decodeSecondsPerToken(model, isFast));
    const row: Record<string, string | number> = {
      what: `decode (after ${DECODE_PROMPT} tokens)`,
      schedule: name,
      tokensPerSecond: +(1 / best).toFixed(1),
      msPerStep: +(best * 1e3).toFixed(3),
    };
    if (copyGBs) {
      const boundMs = (weightBytes / (copyGBs * 1e9)) * 1e3;
      row.boundMs = +boundMs.toFixed(3);
      row.ofBound = +(boundMs / (best * 1e3)).toFixed(3);
    }
    rows.push(row);
  }
  for (const B of sweepBatches) sweep.push({ batch: B, ms: await batchedDecodeMs(B) });
} finally {
  model.dispose();
}
const dev =
  device === "cuda"
    ? loadAddon().listDevices().cuda.devices[0]
    : { name: `cpu (${loadAddon().listDevices().cpu.simd})` };
if (values.json)
  for (const r of rows)
    console.log(JSON.stringify({ preset: values.preset, device: dev?.name, weightBytes, copyGBs, ...r }));
console.log(
  `\n# Single stream on ${dev?.name ?? "cuda"}: ${values.preset} (random bf16, ${(weightBytes / 1e9).toFixed(3)} GB of weights)`,
);
if (copyGBs)
  console.log(
    `bound: weights / copy rate = ${(weightBytes / 1e9).toFixed(3)} GB / ${copyGBs} GB/s = ${((weightBytes / copyGBs / 1e9) * 1e3).toFixed(3)} ms per token`,
  );
console.log("| step | schedule | tokens/s | ms/step | bound ms | of bound |\n| --- | --- | --- | --- | --- | --- |");
for (const r of rows)
  console.log(
    `| ${r.what} | ${r.schedule} | ${r.tokensPerSecond} | ${r.msPerStep} | ${r.boundMs ?? ""} | ${r.ofBound ?? ""} |`,
  );
console.log(
  `\n# Batched decode step (kvSplits 1, ${SWEEP_PREFIX}-token prefixes${fixedShare > 0 ? `, ${fixedShare} of the rows on the fixed schedule` : ""}): ms per step and tokens/s by gemmSplitK`,
);
console.log(
  `| batch | ${splitKs.map((k) => `splitK ${k}`).join(" | ")} | bound ms |\n| --- |${splitKs.map(() => " --- |").join("")} --- |`,
);
for (const { batch, ms } of sweep) {
  const bound = copyGBs ? ((weightBytes / (copyGBs * 1e9)) * 1e3).toFixed(3) : "";
  console.log(
    `| ${batch} | ${splitKs.map((k) => `${ms.get(k)!.toFixed(3)} (${Math.round((batch * 1e3) / ms.get(k)!)})`).join(" | ")} | ${bound} |`,
  );
}
if (profiles.length)
  console.log(
    `\n# Where a batched decode step's time goes (profiled steps run eagerly, an event between ops)\n\n${profiles.join("\n\n")}`,
  );
