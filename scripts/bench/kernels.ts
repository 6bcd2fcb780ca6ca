// CPU kernel benchmark: `npm run bench:kernels [-- --json] [-- --quick] [-- --threads N]`.
//   gemm            GFLOP/s of Y = X . W^T against numpy's matmul (OpenBLAS) on the same shapes in the same run
//   gemv            decode shapes (M <= 8, bf16 W larger than the L3): W bytes read per second, against a plain
//                   memory copy (bytes copied per second, 1 and 2 threads, the better one)
//   attentionDecode GB/s of KV read, bf16 paged cache
// Every figure is the median of repeated runs (wall clock). --threads N sets both our pool and OpenBLAS's
// (default: all cores). With --json: one JSON array on stdout.
import { spawnSync } from "node:child_process";
import { Worker } from "node:worker_threads";
import { loadAddon } from "../../ts/native/loadAddon.js";
import type { DType, NativeTensor } from "../../ts/native/addonTypes.js";
import { median } from "./stats.js";

const addon = loadAddon();
const json = process.argv.includes("--json");
const quick = process.argv.includes("--quick");
const minSeconds = quick ? 0.2 : 1;
const threadsArg = process.argv.indexOf("--threads");
const threads = addon.setThreads(threadsArg > 0 ? Number(process.argv[threadsArg + 1]) : 0);

/** Median seconds per call of fn (after one warm-up), repeating until minSeconds and at least 5 runs. */
async function medianSeconds(fn: () => Promise<unknown> | unknown): Promise<number> {
  await fn();
  const times: number[] = [];
  const start = performance.now();
  while (times.length < 5 || (performance.now() - start) / 1e3 < minSeconds) {
    const t = performance.now();
    await fn();
    times.push((performance.now() - t) / 1e3);
    if (times.length >= 200) break;
  }
  return median(times);
}

function filled(dtype: DType, shape: number[], seed: number): NativeTensor {
  const t = addon.tensor("cpu", dtype, shape);
  const n = shape.reduce((a, b) => a * b, 1);
  const v = new Float32Array(n);
  let s = seed >>> 0;
  for (let i = 0; i < n; i++) v[i] = ((s = (Math.imul(s, 1664525) + 1013904223) >>> 0) / 4294967296 - 0.5) * 0.1;
  t.writeF32(v);
  return t;
}

/** numpy matmul GFLOP/s (median) per [M, N, K] in a python3 child, with OPENBLAS_CORETYPE / L2_SIZE unset. */
function numpyGflops(shapes: [number, number, number][]): { gflops: number[]; kernel: string } {
  const script = `
import json, sys, time, ctypes, glob, os
import numpy as np
core = "?"
for lib in glob.glob(os.path.join(os.path.dirname(np.__file__), "..", "numpy.libs", "*openblas*")):
    for name in ("scipy_openblas_get_corename64_", "openblas_get_corename64_", "openblas_get_corename"):
        f = getattr(ctypes.CDLL(lib), name, None)
        if f is not None:
            f.restype = ctypes.c_char_p
            core = f().decode()
            break
out = []
for M, N, K in json.loads(sys.argv[1]):
    rng = np.random.default_rng(0)
    x = (rng.random((M, K), dtype=np.float32) - 0.5) * 0.1
    w = (rng.random((N, K), dtype=np.float32) - 0.5) * 0.1
    x @ w.T
    times, start = [], time.perf_counter()
    while len(times) < 5 or time.perf_counter() - start < float(sys.argv[2]):
        t = time.perf_counter(); x @ w.T; times.append(time.perf_counter() - t)
        if len(times) >= 200: break
    times.sort()
    out.append(2 * M * N * K / times[len(times) // 2] / 1e9)
print(json.dumps({"gflops": out, "kernel": f"OpenBLAS {core}, numpy {np.__version__}"}))
`;
  const env = { ...process.env };
  delete env.OPENBLAS_CORETYPE;
  delete env.OPENBLAS_L2_SIZE;
  env.OPENBLAS_NUM_THREADS = String(threads);
  const r = spawnSync("python3", ["-c", script, JSON.stringify(shapes), String(minSeconds)], { env, encoding: "utf8" });
  if (r.status !== 0) throw new Error(`numpy reference failed: ${r.stderr || r.error?.message}`);
  return JSON.parse(r.stdout) as { gflops: number[]; kernel: string };
}

/** Plain copy bandwidth (bytes copied per second) with `threads` worker threads each copying a slice. */
async function copyGbps(bytes: number, threads: number): Promise<number> {
  const src = new SharedArrayBuffer(bytes),
    dst = new SharedArrayBuffer(bytes);
  new Uint8Array(src).fill(1);
  const code = `
    const { parentPort, workerData: { src, dst, lo, hi } } = require("node:worker_threads");
    const a = new Uint8Array(src, lo, hi - lo), b = new Uint8Array(dst, lo, hi - lo);
    parentPort.on("message", () => { b.set(a); parentPort.postMessage(0); });`;
  const workers = Array.from({ length: threads }, (_, i) => {
    const lo = Math.floor((bytes * i) / threads / 64) * 64,
      hi = i === threads - 1 ? bytes : Math.floor((bytes * (i + 1)) / threads / 64) * 64;
    return new Worker(code, { eval: true, workerData: { src, dst, lo, hi } });
  });
  const round = () => Promise.all(workers.map((w) => new Promise((r) => (w.once("message", r), w.postMessage(0)))));
  const s = await medianSeconds(round);
  await Promise.all(workers.map((w) => w.terminate()));
  return bytes / s / 1e9;
}

interface Row {
  op: string;
  [k: string]: string | number;
}

async function benchGemm(rows: Row[]): Promise<void> {
  const N = 2048,
    K = 2048;
  const cases: [number, DType][] = [
    [1, "f32"],
    [8, "f32"],
    [64, "f32"],
    [256, "f32"],
    [1, "bf16"],
    [8, "bf16"],
    [64, "bf16"],
    [256, "bf16"],
  ];
  const shapes = [...new Set(cases.map(([M]) => M))].map((M) => [M, N, K] as [number, number, number]);
  const ref = numpyGflops(shapes);
  for (const [M, dtype] of cases) {
    const x = filled("f32", [M, K], 1),
      w = filled(dtype, [N, K], 2),
      y = addon.tensor("cpu", "f32", [M, N]);
    const s = await medianSeconds(() => addon.ops.gemm({ x, w, y, splitK: 1 }));
    const gflops = (2 * M * N * K) / s / 1e9;
    const refGflops = ref.gflops[shapes.findIndex(([m]) => m === M)];
    rows.push({
      op: "gemm",
      M,
      N,
      K,
      dtype,
      gflops: round(gflops),
      refGflops: round(refGflops),
      ratio: round(gflops / refGflops, 2),
      reference: `${ref.kernel}, f32`,
    });
    (x.dispose(), w.dispose(), y.dispose());
  }
}

async function benchGemv(rows: Row[]): Promise<void> {
  const N = quick ? 4096 : 8192,
    K = 4096; // bf16 W: 64 MiB, larger than the 48 MiB L3 here
  const wBytes = N * K * 2;
  const copy = Math.max(await copyGbps(wBytes, 1), await copyGbps(wBytes, 2));
  rows.push({
    op: "memcpy",
    bytes: wBytes,
    gbps: round(copy),
    note: "bytes copied per second (read + write = 2x), best of 1 and 2 threads",
  });
  const w = filled("bf16", [N, K], 3);
  for (const M of [1, 4, 8]) {
    const x = filled("f32", [M, K], 4),
      y = addon.tensor("cpu", "f32", [M, N]);
    const s = await medianSeconds(() => addon.ops.gemm({ x, w, y, splitK: 1 }));
    const gbps = wBytes / s / 1e9;
    rows.push({
      op: "gemv",
      M,
      N,
      K,
      dtype: "bf16",
      gflops: round((2 * M * N * K) / s / 1e9),
      gbps: round(gbps),
      copyGbps: round(copy),
      ratio: round(gbps / copy, 2),
    });
    (x.dispose(), y.dispose());
  }
  w.dispose();
}

async function benchDecode(rows: Row[]): Promise<void> {
  const Hq = 32,
    Hk = 8,
    D = 128,
    P = 16;
  for (const [batch, ctx] of [
    [1, 4096],
    [8, 1024],
    [8, 4096],
  ]) {
    const pagesPer = Math.ceil(ctx / P),
      numPages = batch * pagesPer;
    const kCache = filled("bf16", [numPages, P, Hk, D], 5),
      vCache = filled("bf16", [numPages, P, Hk, D], 6);
    const t = (shape: number[], v: number[]) => {
      const r = addon.tensor("cpu", "i32", shape);
      r.write(Int32Array.from(v));
      return r;
    };
    const indptr = t(
      [batch + 1],
      Array.from({ length: batch + 1 }, (_, b) => b * pagesPer),
    );
    const indices = t(
      [numPages],
      Array.from({ length: numPages }, (_, i) => i),
    );
    const lastPageLen = t([batch], Array(batch).fill(ctx - (pagesPer - 1) * P));
    const q = filled("f32", [batch, Hq, D], 7),
      out = addon.tensor("cpu", "f32", [batch, Hq, D]);
    for (const kvSplits of [1, 4]) {
      const s = await medianSeconds(() =>
        addon.ops.attentionDecode({ q, out, kCache, vCache, indptr, indices, lastPageLen, kvSplits }),
      );
      const kvBytes = batch * ctx * Hk * D * 2 * 2;
      rows.push({
        op: "attentionDecode",
        batch,
        ctx,
        Hq,
        Hk,
        D,
        dtype: "bf16",
        kvSplits,
        ms: round(s * 1e3, 3),
        gbps: round(kvBytes / s / 1e9),
      });
    }
    for (const x of [kCache, vCache, indptr, indices, lastPageLen, q, out]) x.dispose();
  }
}

function round(v: number, digits = 1): number {
  const f = 10 ** digits;
  return Math.round(v * f) / f;
}

const rows: Row[] = [];
await benchGemm(rows);
await benchGemv(rows);
await benchDecode(rows);
const simd = addon.listDevices().cpu;
if (json) console.log(JSON.stringify(rows.map((r) => ({ ...r, simd: simd.simd, threads: simd.threads }))));
else {
  console.log(`CPU: ${simd.threads} threads, ${simd.simd}`);
  for (const r of rows)
    console.log(
      Object.entries(r)
        .map(([k, v]) => `${k}=${v}`)
        .join("  "),
    );
}
