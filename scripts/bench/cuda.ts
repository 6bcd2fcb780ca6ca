// CUDA kernel benchmark: times the shipped kernels (build/bench_kernels, CUDA events, median, L2 flushed) and the
// PyTorch references (scripts/bench/cuda_ref.py: cuBLAS, SDPA, device copy) in the same run, then prints rows
//   {op, shape, ms, tflops | gbps, refMs, ratio, fixedMs, fastSchedule}
// ratio: reference time / our time (GEMM, attention vs SDPA) or our bandwidth / copy bandwidth (decode attention).
// ms is the fast schedule (best splitK / kvSplits); fixedMs the fixed one (splitK = 1, kvSplits = 1).
//   npm run bench:cuda -- [--json] [--quick]
import { execFileSync, spawnSync } from "node:child_process";
import { existsSync } from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";

interface Timing {
  op: string;
  shape: string;
  variant: string;
  ms: number;
  flops: number;
  bytes: number;
}
interface RefTiming {
  op: string;
  shape: string;
  ms: number;
  ref?: string;
}
export interface Row {
  op: string;
  shape: string;
  ms: number;
  tflops?: number;
  gbps?: number;
  refMs?: number;
  ratio?: number;
  fixedMs: number;
  fastSchedule: string;
  ref?: string;
}

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..", "..");
const args = process.argv.slice(2);
const quick = args.includes("--quick");

function ours(): Timing[] {
  const bin = path.join(root, "build", "bench_kernels");
  if (!existsSync(bin))
    execFileSync("bash", [path.join(root, "scripts", "device", "build-bench.sh")], { cwd: root, stdio: "inherit" });
  const r = spawnSync(bin, quick ? ["--quick"] : [], { cwd: root, encoding: "utf8", maxBuffer: 1 << 26 });
  if (r.status !== 0) throw new Error(`bench_kernels failed (${r.status}): ${r.stderr}`);
  return JSON.parse(r.stdout) as Timing[];
}

function reference(): RefTiming[] {
  const r = spawnSync(
    process.env.PYTHON ?? "python3",
    [path.join(root, "scripts", "bench", "cuda_ref.py"), ...(quick ? ["--quick"] : [])],
    { cwd: root, encoding: "utf8", maxBuffer: 1 << 26 },
  );
  if (r.status !== 0) {
    console.error(
      `[bench:cuda] no PyTorch reference (${(r.stderr || r.error?.message || "").trim().split("\n").pop()})`,
    );
    return [];
  }
  return JSON.parse(r.stdout.trim().split("\n").pop() ?? "[]") as RefTiming[];
}

export function merge(times: Timing[], refs: RefTiming[]): Row[] {
  const groups = new Map<string, Timing[]>();
  for (const t of times) groups.set(`${t.op}|${t.shape}`, [...(groups.get(`${t.op}|${t.shape}`) ?? []), t]);
  const copy = times.find((t) => t.op === "copy");
  const rows: Row[] = [];
  for (const [key, ts] of groups) {
    const best = ts.reduce((a, b) => (b.ms < a.ms ? b : a));
    const fixed = ts[0];
    const ref = refs.find((r) => `${r.op}|${r.shape}` === key);
    const row: Row = { op: best.op, shape: best.shape, ms: best.ms, fixedMs: fixed.ms, fastSchedule: best.variant };
    if (best.op === "gemm" || best.op === "attentionPrefill") row.tflops = best.flops / best.ms / 1e9;
    else row.gbps = best.bytes / best.ms / 1e6;
    if (best.op === "attentionDecode" && copy) {
      row.refMs = ref?.ms;
      row.ref = `copy ${(copy.bytes / copy.ms / 1e6).toFixed(0)} GB/s; sdpa ${ref ? ref.ms.toFixed(3) + " ms" : "n/a"}`;
      row.ratio = row.gbps! / (copy.bytes / copy.ms / 1e6);
    } else if (ref) {
      row.refMs = ref.ms;
      row.ratio = ref.ms / best.ms;
      if (ref.ref) row.ref = ref.ref;
    }
    rows.push(row);
  }
  return rows;
}

function table(rows: Row[]): string {
  const f = (x: number | undefined, d = 3) => (x === undefined ? "-" : x.toFixed(d));
  const lines = [
    "op               | shape                                  |  ms (fast) | fixed ms | TFLOP/s | GB/s  | ref ms  | ratio | fast schedule",
  ];
  for (const r of rows)
    lines.push(
      `${r.op.padEnd(16)} | ${r.shape.padEnd(38)} | ${f(r.ms, 4).padStart(10)} | ${f(r.fixedMs, 4).padStart(8)} | ${f(r.tflops, 1).padStart(7)} | ${f(r.gbps, 0).padStart(5)} | ${f(r.refMs, 4).padStart(7)} | ${f(r.ratio, 2).padStart(5)} | ${r.fastSchedule}`,
    );
  return lines.join("\n");
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const rows = merge(ours(), reference());
  const device =
    spawnSync("nvidia-smi", ["--query-gpu=name", "--format=csv,noheader"], { encoding: "utf8" }).stdout?.trim() ||
    "unknown GPU";
  if (args.includes("--json")) console.log(JSON.stringify(rows, null, 1));
  console.log(`\n# CUDA kernels on ${device}, ${new Date().toISOString().slice(0, 10)}\n${table(rows)}`);
}
