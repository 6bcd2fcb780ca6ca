// The decode GEMV alone: CPU time per gemm call at int4 (grouped, scales by group as a loaded model holds them),
// int8 (per output row, quantize "int8"'s format) and FP8 e4m3 (a scale per row and 128 columns by group, an FP8
// checkpoint as loaded) against bf16 of the same shape, on one thread, weights cycled through COPIES copies so they stream from memory.
// Reports GB/s of weight bytes per CPU-second (robust to other load on a shared machine) and GFLOP/s; the bf16 figure
// is the read bandwidth one core reaches, the int4 / int8 ones' share of it says how far their kernels are from the
// memory limit. (bf16 W here is row-major; a loaded model on an AVX512-BF16 CPU holds it packed in panels.)
//   npx tsx scripts/bench/decodeGemv.ts [--n 8960] [--k 1536] [--group 32] [--m 1] [--copies 4] [--calls 400]
import { parseArgs } from "node:util";
import { loadAddon } from "../../ts/native/loadAddon.js";

const { values } = parseArgs({
  options: {
    n: { type: "string", default: "8960" },
    k: { type: "string", default: "1536" },
    group: { type: "string", default: "32" },
    m: { type: "string", default: "1" },
    copies: { type: "string", default: "4" },
    calls: { type: "string", default: "400" },
  },
});
const [N, K, G, M, copies, calls] = ["n", "k", "group", "m", "copies", "calls"].map((k) =>
  Number(values[k as keyof typeof values]),
);
const addon = loadAddon();
addon.setThreads(1);
let seed = 1;
const rnd = (n: number) =>
  Float32Array.from({ length: n }, () => (seed = (Math.imul(seed, 1103515245) + 12345) >>> 0) / 2 ** 32 - 0.5);
const cpuMs = () => {
  const u = process.cpuUsage();
  return (u.user + u.system) / 1e3;
};
const x = addon.tensor("cpu", "f32", [M, K]);
x.writeF32(rnd(M * K));
const y = addon.tensor("cpu", "f32", [M, N]);
const int4 = Array.from({ length: copies }, () => {
  const w = addon.tensor("cpu", "u8", [N, K / 2]);
  w.write(Uint8Array.from(rnd((N * K) / 2), (v) => Math.floor((v + 0.5) * 256)));
  const s = addon.tensor("cpu", "f32", [(N * K) / G]);
  s.writeF32(rnd((N * K) / G).map((v) => v / 100));
  return { w, s };
});
const int8 = Array.from({ length: copies }, () => {
  const w = addon.tensor("cpu", "i8", [N, K]);
  w.write(Int8Array.from(rnd(N * K), (v) => Math.round(v * 254)));
  const s = addon.tensor("cpu", "f32", [N]);
  s.writeF32(rnd(N).map((v) => v / 100));
  return { w, s };
});
const fp8 = Array.from({ length: copies }, () => {
  const w = addon.tensor("cpu", "u8", [N, K]);
  w.write(Uint8Array.from(rnd(N * K), (v) => Math.floor((v + 0.5) * 256) & 0xfe)); // no NaN code (0x7f / 0xff)
  const s = addon.tensor("cpu", "f32", [N * Math.ceil(K / 128)]);
  s.writeF32(rnd(N * Math.ceil(K / 128)).map((v) => v / 100));
  return { w, s };
});
const bf16 = Array.from({ length: copies }, () => {
  const w = addon.tensor("cpu", "bf16", [N, K]);
  w.writeF32(rnd(N * K));
  return w;
});
let i = 0;
const kinds = {
  int4: {
    bytes: (N * K) / 2 + (4 * N * K) / G,
    call: () => {
      const c = int4[i++ % copies];
      return addon.ops.gemm({ x, w: c.w, wBits: 4, wGroupSize: G, wScales: c.s, wByGroup: 1, y });
    },
  },
  int8: {
    bytes: N * K + 4 * N,
    call: () => {
      const c = int8[i++ % copies];
      return addon.ops.gemm({ x, w: c.w, wScale: c.s, y });
    },
  },
  fp8: {
    bytes: N * K + 4 * N * Math.ceil(K / 128),
    call: () => {
      const c = fp8[i++ % copies];
      return addon.ops.gemm({ x, w: c.w, wFormat: "e4m3", wGroupSize: 128, wScales: c.s, wByGroup: 1, y });
    },
  },
  bf16: { bytes: N * K * 2, call: () => addon.ops.gemm({ x, w: bf16[i++ % copies], y }) },
};
const out: Record<string, unknown> = { N, K, group: G, M, calls };
for (const [name, k] of Object.entries(kinds)) {
  for (let r = 0; r < 20; r++) await k.call();
  const c0 = cpuMs();
  for (let r = 0; r < calls; r++) await k.call();
  const ms = (cpuMs() - c0) / calls;
  out[name] = {
    msPerCall: +ms.toFixed(4),
    gbPerCpuSecond: +(k.bytes / ms / 1e6).toFixed(2),
    gflops: +((2 * M * N * K) / ms / 1e6).toFixed(1),
  };
}
console.log(JSON.stringify(out));
