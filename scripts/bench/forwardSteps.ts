// Where a batch's CPU time goes, step by step: one prefill forward of B prompts, then decode forwards at batch B,
// each timed in wall and process CPU time (the random SmolLM-135M-shaped checkpoint of bench:throughput).
//   npx tsx scripts/bench/forwardSteps.ts [--batch 16] [--prompt-tokens 32] [--steps 16] [--threads N (0 = all cores)]
//     [--profile]  (then also the decode steps op by op: forward({profile: true})) [--kv-dtype f32|bf16|f16] [--kv-pages N]
//     [--model DIR]  (a checkpoint on disk instead, e.g. models/tiny-reasoner) [--quantize int8|int4|fp8 [--quantize-group G]]
// The GEMM split and KV splits are those of the engine's fast mode for the step's shape.
import { existsSync } from "node:fs";
import { loadavg, tmpdir } from "node:os";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { chooseSchedule } from "../../ts/engine/kernelSchedule.js";
import { loadModel } from "../../ts/model/model.js";
import { loadAddon } from "../../ts/native/loadAddon.js";
import { makeFixture, PRESETS } from "../make-fixture.js";
import { profileTable } from "./profileTable.js";
import { benchQuantize, QUANTIZE_PARSE_ARGS } from "./quantizeArgs.js";
import { percentileNearestRank } from "./stats.js";

const { values } = parseArgs({
  options: {
    batch: { type: "string", default: "16" },
    "prompt-tokens": { type: "string", default: "32" },
    steps: { type: "string", default: "16" },
    threads: { type: "string", default: "0" },
    profile: { type: "boolean", default: false },
    "kv-dtype": { type: "string", default: "f32" },
    "kv-pages": { type: "string" },
    model: { type: "string" },
    ...QUANTIZE_PARSE_ARGS,
  },
});
const quantize = benchQuantize(values);
const B = Number(values.batch),
  P = Number(values["prompt-tokens"]),
  steps = Number(values.steps);
loadAddon().setThreads(Number(values.threads));
const dir = values.model ?? join(tmpdir(), "deliberate-bench", "smollm-135m-seed1");
if (values.model === undefined && !existsSync(join(dir, "config.json")))
  await makeFixture({ ...PRESETS["smollm-135m"]!, out: dir, seed: 1 });
const pageSize = 16,
  pagesPer = Math.ceil((P + 2 * steps + 1) / pageSize);
const model = await loadModel(dir, {
  device: "cpu",
  pageSize,
  kvPages: values["kv-pages"] ? Number(values["kv-pages"]) : B * pagesPer + 8,
  kvDtype: values["kv-dtype"] as "f32" | "bf16" | "f16",
  ...quantize.load,
});
const vocab = model.config.vocabSize;
const tables = Array.from({ length: B }, (_, b) => Int32Array.from({ length: pagesPer }, (_, i) => b * pagesPer + i));
const sampling = { temperature: 0, topK: 0, topP: 1, seed: 1 };
async function timed(
  label: string,
  seqs: { tokens: Int32Array; startPos: number }[],
  profile = false,
): Promise<number[]> {
  const sched = chooseSchedule("fast", {
    numTokens: seqs.reduce((n, s) => n + s.tokens.length, 0),
    numDecodeSeqs: seqs.every((s) => s.tokens.length === 1) ? seqs.length : 0,
    maxDecodeKvLen: Math.max(...seqs.map((s) => s.startPos + 1)),
  });
  const c0 = process.cpuUsage(),
    t0 = performance.now();
  const out = await model.forward({
    sequences: seqs.map((s, b) => ({ ...s, blockTable: tables[b]!, sampling, emitToken: true })),
    ...sched,
    profile,
  });
  const wall = performance.now() - t0,
    cpu = process.cpuUsage(c0);
  if (label)
    console.log(
      `${label}: ${wall.toFixed(1)} ms wall, ${((cpu.user + cpu.system) / 1e3).toFixed(1)} ms CPU (splitK ${sched.gemmSplitK}, kvSplits ${sched.kvSplits})`,
    );
  return out.map((r) => r.token);
}
let s = 12345;
const first = vocab > 512 ? 256 : 3; // skip byte tokens and specials (a small vocabulary: past the 3 specials)
const prompts = Array.from({ length: B }, () =>
  Int32Array.from({ length: P }, () => first + ((s = (Math.imul(s, 1664525) + 1013904223) >>> 0) % (vocab - first))),
);
console.log(`batch ${B}, prompt ${P}, load ${loadavg()[0].toFixed(2)}`);
let next = await timed(
  `prefill ${B}x${P}`,
  prompts.map((tokens) => ({ tokens, startPos: 0 })),
  values.profile,
);
if (values.profile) console.log(`\n${profileTable(model.takeProfile(), `prefill ${B}x${P} op by op`)}`);
const cpuStart = process.cpuUsage(),
  wallStart = performance.now();
const stepMs: number[] = [];
for (let i = 0; i < steps; i++) {
  const t0 = performance.now();
  next = await timed(
    "",
    next.map((t) => ({ tokens: Int32Array.of(t), startPos: P + i })),
  );
  stepMs.push(performance.now() - t0);
}
const cpu = process.cpuUsage(cpuStart),
  wall = performance.now() - wallStart;
const pct = (q: number) => percentileNearestRank(stepMs, q).toFixed(3);
console.log(
  `decode batch ${B}: ${(wall / steps).toFixed(1)} ms wall, ${((cpu.user + cpu.system) / 1e3 / steps).toFixed(1)} ms CPU per step (${steps} steps, load ${loadavg()[0].toFixed(2)}); step wall p10 / p50 / p90 ${pct(10)} / ${pct(50)} / ${pct(90)} ms`,
);
if (values.profile) {
  for (let i = 0; i < steps; i++)
    next = await timed(
      "",
      next.map((t) => ({ tokens: Int32Array.of(t), startPos: P + steps + i })),
      true,
    );
  console.log(`\n${profileTable(model.takeProfile(), `decode batch ${B} op by op`)}`);
}
model.dispose();
