// How fast the pre-quantized checkpoint loaders unpack one projection into the grouped format (ts/model/quantized):
// the JS share of loading a GPTQ / AWQ / compressed-tensors / FP8 checkpoint (reading the file and the native copy
// come on top). A Qwen2.5-1.5B MLP projection's shape [8960, 1536] by default, random weights packed as each tool
// writes them (scripts/fixture/quantPack.ts), each layout's decoder timed over --repeats rounds.
//   npx tsx scripts/bench/quantizedLoad.ts [--repeats 5] [--n 8960] [--k 1536] [--json]
import { parseArgs } from "node:util";
import { decodeAwq } from "../../ts/model/quantized/awq.js";
import { decodeCompressedTensors } from "../../ts/model/quantized/compressedTensors.js";
import { decodeFp8 } from "../../ts/model/quantized/fp8.js";
import { decodeGptq } from "../../ts/model/quantized/gptq.js";
import type { LoadedTensors } from "../../ts/model/quantized/tensors.js";
import type { QuantScheme } from "../../ts/model/quantized/quantConfig.js";
import {
  packAwq,
  packCompressedTensors,
  packGptq,
  quantizeFp8Blocks,
  quantizeGrouped,
  randomActOrder,
  type PackedTensor,
} from "../fixture/quantPack.js";
import { formatSpread, parseRepeats, spreadOf } from "./stats.js";

const { values } = parseArgs({
  options: {
    repeats: { type: "string", default: "5" },
    n: { type: "string", default: "8960" },
    k: { type: "string", default: "1536" },
    json: { type: "boolean", default: false },
  },
});
const repeats = parseRepeats(values.repeats);
const N = Number(values.n);
const K = Number(values.k);

let seed = 1;
const W = Float32Array.from({ length: N * K }, () => {
  seed = (Math.imul(seed, 1664525) + 1013904223) >>> 0;
  return seed / 2 ** 32 - 0.5;
});

function loaded(tensors: Record<string, PackedTensor>): LoadedTensors {
  return new Map(
    Object.entries(tensors).map(([role, t]) => [role, { name: role, dtype: t.dtype, shape: t.shape, bytes: t.data }]),
  );
}

interface Case {
  layout: string;
  run: () => unknown;
}

const cases: Case[] = [];
{
  const w = quantizeGrouped(W, N, K, { bits: 4, groupSize: 128, symmetric: true, scaleDtype: "F16" });
  const t = loaded(packGptq(w, true));
  t.delete("g_idx");
  const s: QuantScheme = {
    method: "gptq",
    bits: 4,
    groupSize: 128,
    descAct: false,
    sym: true,
    zeroPointsMinusOne: true,
  };
  cases.push({ layout: "gptq 4-bit g128", run: () => decodeGptq(t, N, K, s) });
}
{
  const perm = randomActOrder(K, 128, 7);
  const w = quantizeGrouped(W, N, K, { bits: 4, groupSize: 128, symmetric: false, scaleDtype: "F16", perm });
  const t = loaded(packGptq(w, false));
  const s: QuantScheme = {
    method: "gptq",
    bits: 4,
    groupSize: 128,
    descAct: true,
    sym: false,
    zeroPointsMinusOne: false,
  };
  cases.push({ layout: "gptq 4-bit g128 act-order", run: () => decodeGptq(t, N, K, s) });
}
{
  const w = quantizeGrouped(W, N, K, { bits: 4, groupSize: 128, symmetric: false, scaleDtype: "F16" });
  const t = loaded(packAwq(w));
  cases.push({ layout: "awq 4-bit g128", run: () => decodeAwq(t, N, K, { method: "awq", bits: 4, groupSize: 128 }) });
}
for (const bits of [4, 8] as const) {
  const w = quantizeGrouped(W, N, K, { bits, groupSize: 128, symmetric: true, scaleDtype: "BF16" });
  const t = loaded(packCompressedTensors(w, true));
  const s: QuantScheme = { method: "compressed-tensors", bits, groupSize: 128, symmetric: true };
  cases.push({ layout: `compressed-tensors W${bits}A16 g128`, run: () => decodeCompressedTensors(t, N, K, s) });
}
{
  const { weight, weight_scale_inv } = quantizeFp8Blocks(W, N, K, [128, 128], "BF16");
  const t = loaded({ weight, weight_scale_inv });
  cases.push({
    layout: "fp8 e4m3 128x128 -> f32",
    run: () => decodeFp8(t, N, K, { method: "fp8", blockSize: [128, 128] }),
  });
}

const rows = [];
for (const c of cases) {
  c.run(); // warm-up
  const ms: number[] = [];
  for (let r = 0; r < repeats; r++) {
    const t0 = performance.now();
    c.run();
    ms.push(performance.now() - t0);
  }
  const mWeightsPerS = ms.map((m) => (N * K) / m / 1e3);
  rows.push({ layout: c.layout, ms: spreadOf(ms), mWeightsPerS: spreadOf(mWeightsPerS) });
  if (!values.json)
    console.log(
      `${c.layout.padEnd(30)} ${formatSpread(ms, (x) => x.toFixed(0))} ms   ${formatSpread(mWeightsPerS, (x) => x.toFixed(0))} M weights/s`,
    );
}
if (values.json) console.log(JSON.stringify({ shape: [N, K], repeats, rows }));
