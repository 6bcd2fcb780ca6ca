// What the HTTP layer costs: the same streaming workload through `deliberate serve`'s routes (createServer on a
// loopback port, clients in a worker thread so their parsing does not run on the server's event loop, as a separate
// client process would not) and through the in-process engine (engine.submit, deltas iterated), side by side in one
// run, at 1, 8, 32 and 128 concurrent clients: generated tokens/s, TTFT and inter-token latency P50 / P99, and the
// HTTP/in-process ratios. Then 1,000 streaming requests of which about half disconnect at a random chunk: every
// page must be free afterwards and every stream that stayed must end in [DONE] with no error. Then the event loop
// under big bodies: 8 streaming clients while big chat bodies (--big-bytes, each size --big-count times, one after
// another) arrive, with the server's event-loop delay sampled (perf_hooks monitorEventLoopDelay, 10 ms resolution):
// its p99 and max while they mix (target: max <= 100 ms), and what each big body got back.
//   npm run bench:server -- [--model DIR | --preset smollm-135m] [--clients 1,8,32,128] [--tokens 128]
//     [--per-client 4] [--repeats 3] [--disconnects 1000] [--big-bytes 8000000] [--big-count 3] [--threads N]
//     [--device cpu|cuda] [--lengths fixed|mixed] [--json]
// Workload: chat prompts of arithmetic questions (the chat template rendered and tokenized per request on both
// paths, as an embedding user would) on the bundled tiny reasoner (default) or another model, T = 1 with a seed per
// request (--lengths mixed, the default: request i generates between half and one and a half times --tokens, the
// same lengths on both paths, as a served workload's answers vary (vLLM's benchmark_serving draws them from ShareGPT);
// --lengths fixed: every request --tokens, so closed-loop clients finish together and resubmit in bursts, and a
// burst's prefill, and how much of the burst reaches one step, sets TTFT), top_p 1 and top_k 0 (explicit: the server
// otherwise applies the model's generation_config.json, as vLLM does, and a top_p of 0.9 there costs the CPU sampler
// more than the forward on SmolLM-135M) and ignore_eos, so request i generates exactly its length on either path and
// both paths do identical work (the same question, seed and length for request i). The tiny reasoner takes ~0.3 ms a step, so its rows show the HTTP layer's per-token cost at its most visible;
// --preset smollm-135m (a generated SmolLM-135M-shaped checkpoint) shows it beside a step of realistic cost.
import { existsSync, readFileSync, writeFileSync } from "node:fs";
import { request as httpRequest } from "node:http";
import { monitorEventLoopDelay } from "node:perf_hooks";
import { tmpdir } from "node:os";
import { basename, join } from "node:path";
import { parseArgs } from "node:util";
import { Worker } from "node:worker_threads";
import { bundledModelDir, Engine, loadModel } from "../../ts/index.js";
import { loadAddon } from "../../ts/native/loadAddon.js";
import { createServer } from "../../ts/server/index.js";
import { makeFixture, PRESETS } from "../make-fixture.js";
import { formatSpread, median, parseRepeats, percentileNearestRank } from "./stats.js";

const { values } = parseArgs({
  options: {
    clients: { type: "string", default: "1,8,32,128" },
    tokens: { type: "string", default: "128" },
    repeats: { type: "string", default: "3" },
    disconnects: { type: "string", default: "1000" },
    "big-bytes": { type: "string", default: "8000000" },
    "big-count": { type: "string", default: "3" },
    model: { type: "string" },
    preset: { type: "string" },
    "per-client": { type: "string", default: "4" },
    threads: { type: "string" },
    device: { type: "string", default: "cpu" },
    lengths: { type: "string", default: "mixed" },
    json: { type: "boolean", default: false },
  },
});
const LEVELS = values.clients.split(",").map(Number);
const TOKENS = Number(values.tokens);
const REPEATS = parseRepeats(values.repeats);
const DISCONNECTS = Number(values.disconnects);
const PER_CLIENT = Number(values["per-client"]);
const requestsAt = (c: number): number => Math.max(32, PER_CLIENT * c);
if (values.lengths !== "fixed" && values.lengths !== "mixed")
  throw new Error(`--lengths must be fixed or mixed, got ${values.lengths}`);
const MIXED = values.lengths === "mixed";
/** max_tokens of requests base .. base + n - 1: all `tokens`, or (mixed) spread over [tokens / 2, 3 tokens / 2] by a
 *  multiplicative hash (2654435761 is prime, so every residue mod tokens + 1 occurs whatever --tokens is). */
const lengthsFor = (n: number, base: number, tokens: number): number[] =>
  Array.from({ length: n }, (_, i) =>
    MIXED ? Math.max(1, Math.floor(tokens / 2) + (((base + i) * 2654435761) % (tokens + 1))) : tokens,
  );

// --threads: the CPU backend's compute threads. On a 2-core box the HTTP path has two more busy threads (the
// server's event loop, the clients' worker) than the in-process one; with 1 compute thread each path has a core
// for its JS, so the rows compare the HTTP layer's work rather than oversubscription of the cores.
const THREADS = values.threads === undefined ? null : loadAddon().setThreads(Number(values.threads));
let modelDir = values.model ?? bundledModelDir;
if (values.preset !== undefined) {
  const preset = PRESETS[values.preset];
  if (!preset) throw new Error(`--preset must be one of ${Object.keys(PRESETS).join(", ")}`);
  modelDir = join(tmpdir(), "deliberate-bench", `${values.preset}-seed1`);
  if (!existsSync(join(modelDir, "config.json"))) await makeFixture({ ...preset, out: modelDir, seed: 1 });
}
if (values.device !== "cpu" && values.device !== "cuda")
  throw new Error(`--device must be cpu or cuda, got ${values.device}`);
const model = await loadModel(modelDir, { device: values.device });
const engine = new Engine({ models: { model } });
const SERVED = basename(modelDir);
const server = await createServer({ target: { engine, model, modelDir } });
const url = await server.listen({ port: 0 });
await new Promise((r) => setTimeout(r, 200));

// Request i asks question(i mod QUESTIONS) on both paths (the HTTP clients get the list once).
const QUESTIONS = 4096;
const question = (i: number): string => {
  const k = i % QUESTIONS;
  return `What is ${(k % 89) + 11}*${(k % 7) + 3}-${(k * 37) % 101}?`;
};

interface Run {
  tokens: number;
  seconds: number;
  ttftMs: number[];
  itlMs: number[];
  errors: number;
}

// Where the CPU goes during a run (Linux /proc; zeros elsewhere): this process's CPU time (every thread: the event
// loop, the compute threads, the clients' worker on the HTTP path, and the kernel's work in their system calls,
// loopback TCP included), the event loop's thread alone, and the whole machine's busy cores. If the event loop is
// far from busy while the machine is, the HTTP layer's cost is CPU the cores lack, not a serialized JS thread.
interface CpuSnap {
  process: number; // s
  loop: number; // s
  machineBusy: number; // s of all cores
  at: number; // ms
}
const TICK = 0.01; // USER_HZ
function cpuSnap(): CpuSnap {
  const u = process.cpuUsage();
  let loop = 0;
  let machineBusy = 0;
  try {
    const stat = readFileSync(`/proc/self/task/${process.pid}/stat`, "utf8");
    const f = stat.slice(stat.lastIndexOf(") ") + 2).split(" "); // after the thread's name, which may hold ") "
    loop = (Number(f[11]) + Number(f[12])) * TICK; // utime, stime (fields 14 and 15)
    const cpu = readFileSync("/proc/stat", "utf8").split("\n")[0]!.trim().split(/\s+/).slice(1).map(Number);
    // user, nice, system, irq, softirq: not idle or iowait, not steal (time the hypervisor took), not guest (in user)
    machineBusy = (cpu[0]! + cpu[1]! + cpu[2]! + (cpu[5] ?? 0) + (cpu[6] ?? 0)) * TICK;
  } catch {
    // not Linux: process time only
  }
  return { process: (u.user + u.system) / 1e6, loop, machineBusy, at: performance.now() };
}
interface CpuUse {
  processUsPerToken: number;
  loopBusy: number; // share of the wall time
  machineCores: number; // busy cores on average
}
function cpuUse(a: CpuSnap, b: CpuSnap, tokens: number): CpuUse {
  const wall = (b.at - a.at) / 1000;
  return {
    processUsPerToken: ((b.process - a.process) / tokens) * 1e6,
    loopBusy: (b.loop - a.loop) / wall,
    machineCores: (b.machineBusy - a.machineBusy) / wall,
  };
}

/** The in-process path: C closed-loop clients submitting and iterating deltas. */
async function inProcess(c: number, n: number, base: number, maxTokens = TOKENS): Promise<Run> {
  const lengths = lengthsFor(n, base, maxTokens);
  const ttft: number[] = [];
  const itl: number[] = [];
  let tokens = 0;
  let next = 0;
  const t0 = performance.now();
  const client = async (): Promise<void> => {
    for (let i = next++; i < n; i = next++) {
      const start = performance.now();
      const prompt = model.tokenizer.encodeChat([{ role: "user", content: question(base + i) }]);
      const h = engine.submit({ prompt, maxTokens: lengths[i], temperature: 1, seed: base + i, ignoreEos: true });
      let last: number | null = null;
      for await (const d of h) {
        const now = performance.now();
        tokens += d.tokens.length;
        // What the HTTP client times: deltas with text (a token without any, such as a reasoner's opening <think>,
        // sends no SSE event, as in vLLM; counting it here made TTFT one step shorter on this path than on the other).
        if (d.text.length === 0) continue;
        if (last === null) ttft.push(now - start);
        else itl.push(now - last);
        last = now;
      }
    }
  };
  await Promise.all(Array.from({ length: c }, client));
  return { tokens, seconds: (performance.now() - t0) / 1000, ttftMs: ttft, itlMs: itl, errors: 0 };
}

// The HTTP clients: plain JS in one worker thread for the whole bench (fetch + a small SSE reader), same closed
// loop; each run is a message, so no run pays a worker's start-up or a cold client JIT in its CPU figures.
const CLIENT = `
const { parentPort, workerData } = require("node:worker_threads");
const http = require("node:http");
const { url, questions, model } = workerData;
// node:http with keep-alive and a substring scan per event: a client as cheap as a client can be, since on a small
// box it shares the cores with the server (JSON.parse only for the usage event).
const agent = new http.Agent({ keepAlive: true, maxSockets: 1024 });
const target = new URL(url + "/v1/chat/completions");
function one(i, base, maxTokens) {
  return new Promise((resolve, reject) => {
    const start = performance.now();
    const ttft = [], itl = [];
    let tokens = 0, errors = 0, last = null, buf = "";
    const req = http.request(target, { method: "POST", agent, headers: { "content-type": "application/json" } }, (res) => {
      res.setEncoding("utf8");
      res.on("data", (s) => {
        buf += s;
        let k;
        while ((k = buf.indexOf("\\n\\n")) >= 0) {
          const ev = buf.slice(0, k); buf = buf.slice(k + 2);
          if (ev.includes('"usage":')) { tokens += JSON.parse(ev.slice(6)).usage.completion_tokens; continue; }
          if (ev.includes('"error":')) { errors++; continue; }
          if (!ev.includes('"content":"') && !ev.includes('"reasoning":"')) continue;
          if (ev.includes('"content":""') && !ev.includes('"reasoning":"')) continue;
          const now = performance.now();
          if (last === null) ttft.push(now - start); else itl.push(now - last);
          last = now;
        }
      });
      res.on("end", () => resolve({ tokens, errors, ttft, itl }));
      res.on("error", reject);
    });
    req.on("error", reject);
    req.end(JSON.stringify({ model, messages: [{ role: "user", content: questions[(base + i) % questions.length] }],
      max_tokens: maxTokens, temperature: 1, top_p: 1, top_k: 0, seed: base + i, ignore_eos: true, stream: true, stream_options: { include_usage: true } }));
  });
}
parentPort.on("message", ({ c, n, base, lengths }) => {
  (async () => {
    const ttft = [], itl = [];
    let tokens = 0, errors = 0, next = 0;
    const t0 = performance.now();
    const client = async () => {
      for (let i = next++; i < n; i = next++) {
        const r = await one(i, base, lengths[i]);
        tokens += r.tokens; errors += r.errors;
        for (const x of r.ttft) ttft.push(x);
        for (const x of r.itl) itl.push(x);
      }
    };
    await Promise.all(Array.from({ length: c }, client));
    parentPort.postMessage({ tokens, seconds: (performance.now() - t0) / 1000, ttftMs: ttft, itlMs: itl, errors });
  })().catch((e) => parentPort.postMessage({ error: String(e && e.stack || e) }));
});
`;

const clients = new Worker(CLIENT, {
  eval: true,
  workerData: { url, questions: Array.from({ length: QUESTIONS }, (_, i) => question(i)), model: SERVED },
});
function overHttp(c: number, n: number, base: number, tokens = TOKENS): Promise<Run> {
  return new Promise((resolve, reject) => {
    const done = (m: Run & { error?: string }): void => {
      clients.off("error", failed);
      if (m.error) reject(new Error(m.error));
      else resolve(m);
    };
    const failed = (e: Error): void => {
      clients.off("message", done);
      reject(e);
    };
    clients.once("message", done);
    clients.once("error", failed);
    clients.postMessage({ c, n, base, lengths: lengthsFor(n, base, tokens) });
  });
}

interface Row {
  clients: number;
  path: "http" | "engine";
  tokensPerSecond: number[];
  ttftP50: number[];
  ttftP99: number[];
  itlP50: number[];
  itlP99: number[];
  errors: number;
  cpu: CpuUse[];
}

// Warm-up: both paths' per-request code (HTTP parsing, the body schema, the chat template, submit) runs once per
// request, so a few hundred requests pass before V8 optimizes it; a server in service is past that point. Without
// this, the HTTP rows paid the JIT's warm-up and the in-process rows mostly did not (they had a short warm-up).
await overHttp(8, 2000, 200_000, 4);
await inProcess(8, 2000, 300_000, 4);

const rows: Row[] = [];
let base = 0;
for (const c of LEVELS) {
  const n = requestsAt(c);
  const http: Row = {
    clients: c,
    path: "http",
    tokensPerSecond: [],
    ttftP50: [],
    ttftP99: [],
    itlP50: [],
    itlP99: [],
    errors: 0,
    cpu: [],
  };
  const eng: Row = {
    clients: c,
    path: "engine",
    tokensPerSecond: [],
    ttftP50: [],
    ttftP99: [],
    itlP50: [],
    itlP99: [],
    errors: 0,
    cpu: [],
  };
  await inProcess(Math.min(c, 8), Math.min(n, 16), 100_000); // warm-up
  for (let r = 0; r < REPEATS; r++) {
    // Alternate which path goes first, so drift on the shared box does not favour one.
    const order: Array<[Row, (c: number, n: number, b: number) => Promise<Run>]> =
      r % 2 === 0
        ? [
            [http, overHttp],
            [eng, inProcess],
          ]
        : [
            [eng, inProcess],
            [http, overHttp],
          ];
    for (const [row, fn] of order) {
      const before = cpuSnap();
      const run = await fn(c, n, base);
      row.cpu.push(cpuUse(before, cpuSnap(), run.tokens));
      row.tokensPerSecond.push(run.tokens / run.seconds);
      row.ttftP50.push(percentileNearestRank(run.ttftMs, 50));
      row.ttftP99.push(percentileNearestRank(run.ttftMs, 99));
      row.itlP50.push(percentileNearestRank(run.itlMs, 50));
      row.itlP99.push(percentileNearestRank(run.itlMs, 99));
      row.errors += run.errors;
    }
    base += n;
  }
  rows.push(http, eng);
  const f = (x: number[]): string => formatSpread(x, (v) => v.toFixed(1));
  process.stderr.write(
    `clients ${c}: http ${f(http.tokensPerSecond)} tok/s, engine ${f(eng.tokensPerSecond)} tok/s; TTFT P50 http ${f(http.ttftP50)} ms, engine ${f(eng.ttftP50)} ms\n`,
  );
}

// 1,000 requests, about half abandoned at a random chunk.
async function disconnectStorm(total: number): Promise<{
  requests: number;
  abandoned: number;
  completed: number;
  errors: number;
  pagesUsedAfter: number;
  runningAfter: number;
}> {
  let abandoned = 0;
  let completed = 0;
  let errors = 0;
  let next = 0;
  const one = (i: number): Promise<void> =>
    new Promise((resolve) => {
      const leaveAt = i % 2 === 0 ? 1 + ((i * 7919) % 40) : Infinity;
      const req = httpRequest(
        `${url}/v1/chat/completions`,
        { method: "POST", headers: { "content-type": "application/json" } },
        (res) => {
          let chunks = 0;
          let body = "";
          res.on("data", (b: Buffer) => {
            body += b.toString();
            if (++chunks >= leaveAt) {
              abandoned++;
              req.destroy();
              resolve();
            }
          });
          res.on("end", () => {
            if (chunks >= leaveAt) return;
            if (!body.trimEnd().endsWith("data: [DONE]") || body.includes('"error"')) errors++;
            else completed++;
            resolve();
          });
          res.on("error", () => resolve());
        },
      );
      req.on("error", () => resolve());
      req.end(
        JSON.stringify({
          model: SERVED,
          messages: [{ role: "user", content: question(i) }],
          max_tokens: 64,
          temperature: 1,
          seed: i,
          stream: true,
        }),
      );
    });
  await Promise.all(
    Array.from({ length: 32 }, async () => {
      for (let i = next++; i < total; i = next++) await one(i);
    }),
  );
  const end = Date.now() + 10_000;
  while ((engine.metrics().running > 0 || engine.metrics().waiting > 0) && Date.now() < end)
    await new Promise((r) => setTimeout(r, 20));
  const m = engine.metrics();
  return {
    requests: total,
    abandoned,
    completed,
    errors,
    pagesUsedAfter: m.models[0]!.kvPagesUsed,
    runningAfter: m.running,
  };
}
const storm = DISCONNECTS > 0 ? await disconnectStorm(DISCONNECTS) : null;

/** One chat body of about `bytes` bytes (a long user message); resolves with the status and the time to answer. */
function bigRequest(bytes: number): Promise<{ bytes: number; status: number; ms: number; message: string }> {
  const filler = "7*(8+5)-19 ".repeat(Math.ceil(bytes / 11)).slice(0, bytes);
  const body = JSON.stringify({ model: SERVED, messages: [{ role: "user", content: filler }], max_tokens: 8 });
  const start = performance.now();
  return new Promise((resolve) => {
    const req = httpRequest(
      `${url}/v1/chat/completions`,
      { method: "POST", headers: { "content-type": "application/json" } },
      (res) => {
        let text = "";
        res.on("data", (b: Buffer) => (text += b.toString()));
        res.on("end", () => {
          const message = (/"message":"([^"]{0,160})/.exec(text)?.[1] ?? "").replace(/\\n/g, " ");
          resolve({ bytes: body.length, status: res.statusCode ?? 0, ms: performance.now() - start, message });
        });
      },
    );
    // A server that answers before reading the whole body may close the socket under the write: that is an answer.
    req.on("error", (e) =>
      resolve({ bytes: body.length, status: 0, ms: performance.now() - start, message: String(e) }),
    );
    req.end(body);
  });
}

/** The event loop's delay while 8 streaming clients run and the big bodies arrive one after another. */
async function eventLoopUnderBigBodies(): Promise<{
  p99Ms: number;
  maxMs: number;
  big: Array<{ bytes: number; status: number; ms: number; message: string }>;
  streamed: Run;
}> {
  const sizes = values["big-bytes"].split(",").map(Number);
  const count = Number(values["big-count"]);
  const delay = monitorEventLoopDelay({ resolution: 10 });
  delay.enable();
  const normal = overHttp(8, 64, 900_000, 64);
  const big = [];
  for (const bytes of sizes) for (let i = 0; i < count; i++) big.push(await bigRequest(bytes));
  const streamed = await normal;
  delay.disable();
  return { p99Ms: delay.percentile(99) / 1e6, maxMs: delay.max / 1e6, big, streamed };
}
const loop = Number(values["big-count"]) > 0 ? await eventLoopUnderBigBodies() : null;

await clients.terminate();
await server.close();
await engine.dispose();
model.dispose();

const summary = LEVELS.map((c) => {
  const h = rows.find((r) => r.clients === c && r.path === "http")!;
  const e = rows.find((r) => r.clients === c && r.path === "engine")!;
  return {
    clients: c,
    throughputRatio: median(h.tokensPerSecond) / median(e.tokensPerSecond),
    ttftP50AddedMs: median(h.ttftP50) - median(e.ttftP50),
  };
});
const out = {
  date: new Date().toISOString(),
  model: SERVED,
  threads: THREADS ?? loadAddon().listDevices().cpu.threads,
  tokens: TOKENS,
  lengths: values.lengths,
  repeats: REPEATS,
  rows,
  summary,
  storm,
  eventLoop: loop,
};
const stem = `bench/server-${SERVED}${THREADS === null ? "" : `-threads${THREADS}`}${MIXED ? "" : "-fixed"}`;
if (values.json) writeFileSync(`${stem}.json`, `${JSON.stringify(out, null, 1)}\n`);
const f = (x: number[], d = 1): string => formatSpread(x, (v) => v.toFixed(d));
const lines = [
  `# bench:server on ${SERVED} (${out.date.slice(0, 10)}, device ${values.device}, ${MIXED ? `${Math.floor(TOKENS / 2)}-${Math.floor(TOKENS / 2) + TOKENS} (mixed)` : TOKENS} tokens per request, ${out.threads} CPU compute thread(s), ${PER_CLIENT} requests per client (at least 32), median of ${REPEATS} with the range)`,
  "",
  "| clients | path | tokens/s | TTFT P50 ms | TTFT P99 ms | ITL P50 ms | ITL P99 ms | stream errors | process CPU us/token | event loop busy | machine busy cores |",
  "|---|---|---|---|---|---|---|---|---|---|---|",
  ...rows.map(
    (r) =>
      `| ${r.clients} | ${r.path} | ${f(r.tokensPerSecond, 0)} | ${f(r.ttftP50)} | ${f(r.ttftP99)} | ${f(r.itlP50, 2)} | ${f(r.itlP99, 2)} | ${r.errors} | ${f(
        r.cpu.map((x) => x.processUsPerToken),
        0,
      )} | ${f(
        r.cpu.map((x) => 100 * x.loopBusy),
        0,
      )}% | ${f(
        r.cpu.map((x) => x.machineCores),
        2,
      )} |`,
  ),
  "",
  "| clients | HTTP / in-process throughput | TTFT P50 added by HTTP |",
  "|---|---|---|",
  ...summary.map((s) => `| ${s.clients} | ${s.throughputRatio.toFixed(3)} | ${s.ttftP50AddedMs.toFixed(2)} ms |`),
  "",
  storm
    ? `Disconnect storm: ${storm.requests} requests (32 at a time, 64 tokens), ${storm.abandoned} abandoned mid-stream, ${storm.completed} completed, ${storm.errors} streams with an error or no [DONE]; afterwards ${storm.pagesUsedAfter} KV pages in use and ${storm.runningAfter} sequences running.`
    : "",
  "",
  loop
    ? `Event loop under big bodies: 8 streaming clients (64 requests, 64 tokens each: ${loop.streamed.errors} stream errors, TTFT P99 ${percentileNearestRank(loop.streamed.ttftMs, 99).toFixed(1)} ms) while ${loop.big.length} big chat bodies arrived one after another; the server's event-loop delay p99 ${loop.p99Ms.toFixed(1)} ms, max ${loop.maxMs.toFixed(1)} ms (target: max <= 100 ms). Big bodies: ${loop.big.map((b) => `${(b.bytes / 1e6).toFixed(1)} MB -> ${b.status} in ${b.ms.toFixed(0)} ms`).join("; ")}${loop.big[0]?.message ? ` (first answer: "${loop.big[0].message}")` : ""}.`
    : "",
];
console.log(lines.join("\n"));
if (values.json) writeFileSync(`${stem}.md`, `${lines.join("\n")}\n`);
