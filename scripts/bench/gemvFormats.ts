// The decode GEMV (M = 1) of each linear-weight format on the same shape: weight bytes read per second.
//   npx tsx scripts/bench/gemvFormats.ts [--threads N] [--rounds 3] [--layers 48] [--json]
// A pass runs the GEMV over `layers` weights [N, K] = [4096, 4096] in turn (as a decode step walks its layers), so
// the working set (0.8 GB at 1 byte a weight) exceeds the caches; a round times the median of >= 3 passes per format,
// the formats in turn; rounds repeat that (--rounds), and each figure is the median (min-max) of the rounds' figures.
// Formats: bf16 row-major (the gemm op's; a loaded model packs bf16 on AVX512-BF16 CPUs), int8 per output row (what
// quantize "int8" holds: i8 + an f32 scale a row), FP8 e4m3 with an f32 scale per row and 128 columns (an FP8
// checkpoint as loaded), int4 symmetric groups of 32 (quantize "int4"). Bytes counted: codes and scales.
import { loadavg } from "node:os";
import { parseArgs } from "node:util";
import { loadAddon } from "../../ts/native/loadAddon.js";
import type { NativeTensor } from "../../ts/native/addonTypes.js";
import { median } from "./stats.js";

const { values } = parseArgs({
  options: {
    threads: { type: "string", default: "1" },
    rounds: { type: "string", default: "3" },
    layers: { type: "string", default: "48" },
    json: { type: "boolean" },
  },
});
const addon = loadAddon();
const threads = addon.setThreads(Number(values.threads));
const rounds = Number(values.rounds),
  layers = Number(values.layers);
const N = 4096,
  K = 4096;

/** Bytes 0..255 in a fixed pseudo-random order, repeated (no NaN e4m3 code: 0x7f / 0xff map to 0x7e / 0xfe). */
function codes(n: number, seed: number): Uint8Array {
  const out = new Uint8Array(n);
  let s = seed >>> 0;
  const head = Math.min(n, 1 << 16);
  for (let i = 0; i < head; i++) {
    const c = (s = (Math.imul(s, 1664525) + 1013904223) >>> 0) >>> 24;
    out[i] = (c & 0x7f) === 0x7f ? c - 1 : c;
  }
  for (let filled = head; filled < n; filled *= 2) out.copyWithin(filled, 0, Math.min(filled, n - filled));
  return out;
}

interface Format {
  name: string;
  bytes: number;
  make(seed: number): { fields: Record<string, unknown>; tensors: NativeTensor[] };
}

const scales = (n: number) => {
  const t = addon.tensor("cpu", "f32", [n]);
  t.writeF32(new Float32Array(n).fill(1 / 4096));
  return t;
};
const FORMATS: Format[] = [
  {
    name: "bf16",
    bytes: 2 * N * K,
    make(seed) {
      // bf16 words with exponents in a normal range: the codes as the low byte of 0x3c00 | code
      const c = codes(N * K, seed);
      const w = addon.tensor("cpu", "bf16", [N, K]);
      w.write(Uint16Array.from(c, (b) => 0x3c00 | ((b & 0x80) << 8) | (b & 0x7f)));
      return { fields: { w }, tensors: [w] };
    },
  },
  {
    name: "int8 per row",
    bytes: N * K + 4 * N,
    make(seed) {
      const w = addon.tensor("cpu", "i8", [N, K]);
      w.write(codes(N * K, seed).map((b) => (b === 0x80 ? 0x81 : b)));
      const wScale = scales(N);
      return { fields: { w, wScale }, tensors: [w, wScale] };
    },
  },
  {
    name: "fp8 e4m3 g128",
    bytes: N * K + 4 * N * (K / 128),
    make(seed) {
      const w = addon.tensor("cpu", "u8", [N, K]);
      w.write(codes(N * K, seed));
      const wScales = scales((N * K) / 128);
      return { fields: { w, wFormat: "e4m3", wGroupSize: 128, wScales, wByGroup: 1 }, tensors: [w, wScales] };
    },
  },
  {
    name: "int4 g32",
    bytes: (N * K) / 2 + 4 * ((N * K) / 32),
    make(seed) {
      const w = addon.tensor("cpu", "u8", [N, K / 2]);
      w.write(codes((N * K) / 2, seed));
      const wScales = scales((N * K) / 32);
      return { fields: { w, wBits: 4, wGroupSize: 32, wScales, wByGroup: 1 }, tensors: [w, wScales] };
    },
  },
];

const x = addon.tensor("cpu", "f32", [1, K]);
x.writeF32(Float32Array.from({ length: K }, (_, k) => Math.sin(k) * 0.5));
const y = addon.tensor("cpu", "f32", [1, N]);

/** Median seconds of one pass over the layers' weights (after a warm-up pass). */
async function passSeconds(ws: Record<string, unknown>[]): Promise<number> {
  const pass = async () => {
    for (const fields of ws)
      await addon.ops.gemm({ x, y, splitK: 1, ...fields } as Parameters<typeof addon.ops.gemm>[0]);
  };
  await pass();
  const times: number[] = [];
  for (let i = 0; i < 3; i++) {
    const t = performance.now();
    await pass();
    times.push((performance.now() - t) / 1e3);
  }
  return median(times);
}

const gbps = new Map<string, number[]>(FORMATS.map((f) => [f.name, []]));
const loadBefore = loadavg()[0];
for (let r = 0; r < rounds; r++)
  for (const f of FORMATS) {
    const made = Array.from({ length: layers }, (_, l) => f.make(l + 1));
    const s = await passSeconds(made.map((m) => m.fields));
    gbps.get(f.name)!.push((f.bytes * layers) / s / 1e9);
    for (const m of made) for (const t of m.tensors) t.dispose();
  }
const loadAfter = loadavg()[0];
const out = FORMATS.map((f) => {
  const v = gbps.get(f.name)!;
  return {
    format: f.name,
    bytesPerWeight: +(f.bytes / (N * K)).toFixed(4),
    gbps: +median(v).toFixed(2),
    min: +Math.min(...v).toFixed(2),
    max: +Math.max(...v).toFixed(2),
    usPerLayer: +((f.bytes / (median(v) * 1e9)) * 1e6).toFixed(0),
  };
});
const meta = { N, K, layers, threads, rounds, simd: addon.listDevices().cpu.simd, load: [loadBefore, loadAfter] };
if (values.json) console.log(JSON.stringify({ ...meta, rows: out }));
else {
  console.log(JSON.stringify(meta));
  for (const r of out)
    console.log(
      `${r.format.padEnd(14)} ${String(r.bytesPerWeight).padEnd(7)} B/w  ${r.gbps} GB/s (${r.min}-${r.max})  ${r.usPerLayer} us/layer`,
    );
}
x.dispose();
y.dispose();
