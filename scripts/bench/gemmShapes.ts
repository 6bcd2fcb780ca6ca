// GEMM GFLOP/s on the SmolLM-135M shapes at decode/prefill row counts (bf16 W, f32 X/Y), 1 thread by default.
//   npx tsx scripts/bench/gemmShapes.ts [--threads N] [--rows 1,4,16,64,512] [--split-k 1]
import { parseArgs } from "node:util";
import { loadAddon } from "../../ts/native/loadAddon.js";
import type { DType, NativeTensor } from "../../ts/native/addonTypes.js";

const { values } = parseArgs({
  options: { threads: { type: "string", default: "1" }, rows: { type: "string", default: "1,4,16,32,64,512" }, "split-k": { type: "string", default: "1" }, seconds: { type: "string", default: "0.5" } },
});
const addon = loadAddon();
const threads = addon.setThreads(Number(values.threads));
const minSeconds = Number(values.seconds);

function filled(dtype: DType, shape: number[], seed: number): NativeTensor {
  const t = addon.tensor("cpu", dtype, shape);
  const n = shape.reduce((a, b) => a * b, 1);
  const v = new Float32Array(n);
  let s = seed >>> 0;
  for (let i = 0; i < n; i++) v[i] = ((s = (Math.imul(s, 1664525) + 1013904223) >>> 0) / 4294967296 - 0.5) * 0.1;
  t.writeF32(v);
  return t;
}
async function medianSeconds(fn: () => Promise<unknown>): Promise<number> {
  await fn();
  const times: number[] = [];
  const start = performance.now();
  while (times.length < 5 || (performance.now() - start) / 1e3 < minSeconds) {
    const t = performance.now();
    await fn();
    times.push((performance.now() - t) / 1e3);
  }
  times.sort((a, b) => a - b);
  return times[times.length >> 1];
}
// [name, N, K]: one SmolLM-135M layer's GEMMs and the head.
const shapes: [string, number, number][] = [["q", 576, 576], ["kv", 192, 576], ["o", 576, 576], ["gateUp", 3072, 576], ["down", 576, 1536], ["head", 49152, 576]];
const rowsList = values.rows!.split(",").map(Number);
console.log(`threads ${threads}, splitK ${values["split-k"]}`);
for (const M of rowsList) {
  const parts: string[] = [];
  let flops = 0, secs = 0;
  for (const [name, N, K] of shapes) {
    const x = filled("f32", [M, K], 1), w = filled("bf16", [N, K], 2), y = addon.tensor("cpu", "f32", [M, N]);
    const s = await medianSeconds(() => addon.ops.gemm({ x, w, y, splitK: Math.min(K, Number(values["split-k"])) }));
    parts.push(`${name} ${((2 * M * N * K) / s / 1e9).toFixed(1)}`);
    if (name !== "head") {
      const times = name === "kv" ? 2 : 1;
      flops += times * 2 * M * N * K, secs += times * s;
    }
    x.dispose(), w.dispose(), y.dispose();
  }
  console.log(`M=${String(M).padStart(4)}  layer ${(flops / secs / 1e9).toFixed(1)} GFLOP/s (${(secs * 1e3).toFixed(2)} ms/layer)  | ${parts.join("  ")}`);
}
