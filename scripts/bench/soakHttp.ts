// Soak over HTTP: the server's routes (createServer on a loopback port) under C closed-loop clients (default 32,
// node:http with keep-alive) for --minutes (default 30), each request drawn from a seeded mix: streamed or not, n > 1,
// logprobs, a stop string, deterministic, a reasoning program now and then, and disconnects — a stream abandoned
// after a random number of chunks, a non-streamed request abandoned on a random timer. Every --report-minutes
// (default 1) a checkpoint records RSS and the live V8 heap, each after a full garbage collection, KV pages in use
// (the engine's own count, the number /metrics exports as usage), and requests completed / failed / disconnected.
// At the end the clients stop, the engine drains and a last checkpoint is taken.
// Pass: 0 requests lost (a request that neither completed, nor was disconnected by us, nor got a proper HTTP error:
// a 4xx/5xx with an OpenAI error body or an error event in the stream — anything else, a reset we did not cause, a
// stream without [DONE], a body that is not JSON, no answer within --deadline-ms), 0 pages in use once drained,
// RSS growth from the first checkpoint (the warm-up) to the drained server under 5%. Failed requests are listed
// by message; they are not a pass/fail target (an overloaded server may answer 503), but the run says how many.
// The clients run in this process (as in soak.ts, one heap and one RSS to watch), so RSS covers both sides.
//   npx tsx scripts/bench/soakHttp.ts [--minutes 30] [--clients 32] [--kv-pages 128] [--report-minutes 1]
//     [--threads N] [--seed 1] [--deadline-ms 120000] [--note TEXT] [--json]
// --json writes bench/soak-http.json and bench/soak-http.md. The exit status is 1 when a target is missed.
import { writeFileSync } from "node:fs";
import { Agent, request as httpRequest } from "node:http";
import { cpus, loadavg } from "node:os";
import { parseArgs } from "node:util";
import { bundledModelDir, Engine, loadModel } from "../../ts/index.js";
import { loadAddon } from "../../ts/native/loadAddon.js";
import { createServer } from "../../ts/server/index.js";
import { mulberry32 } from "../fixture/random.js";
import { readSoak, type SoakReading } from "./soakReading.js";
import { formatRange } from "./stats.js";

const { values } = parseArgs({
  options: {
    minutes: { type: "string", default: "30" },
    clients: { type: "string", default: "32" },
    "kv-pages": { type: "string", default: "128" },
    "report-minutes": { type: "string", default: "1" },
    threads: { type: "string" },
    seed: { type: "string", default: "1" },
    "deadline-ms": { type: "string", default: "120000" },
    note: { type: "string", default: "" },
    json: { type: "boolean", default: false },
  },
});
const positive = (name: string, v: string): number => {
  const n = Number(v);
  if (!(n > 0) || !Number.isFinite(n)) throw new Error(`--${name} is ${v}; expected a number > 0`);
  return n;
};
const MINUTES = positive("minutes", values.minutes);
const CLIENTS = Math.round(positive("clients", values.clients));
const KV_PAGES = Math.round(positive("kv-pages", values["kv-pages"]));
const REPORT_MS = positive("report-minutes", values["report-minutes"]) * 60_000;
const DEADLINE_MS = positive("deadline-ms", values["deadline-ms"]);
const SEED = Math.round(positive("seed", values.seed));
const THREADS =
  values.threads === undefined
    ? loadAddon().listDevices().cpu.threads
    : loadAddon().setThreads(Math.round(positive("threads", values.threads)));
const RSS_GROWTH_TARGET = 0.05;

const rng = mulberry32(SEED); // the same mix for the same --seed
const int = (lo: number, hi: number): number => lo + Math.floor(rng() * (hi - lo + 1));

const model = await loadModel(undefined, { kvPages: KV_PAGES });
const engine = new Engine({ models: { model } });
const server = await createServer({ target: { engine, model, modelDir: bundledModelDir } });
const url = await server.listen({ port: 0 });
const SERVED = ((await (await fetch(`${url}/v1/models`)).json()) as { data: Array<{ id: string }> }).data[0]!.id;
const agent = new Agent({ keepAlive: true, maxSockets: CLIENTS });

type Kind = "plain" | "samples" | "logprobs" | "stop" | "deterministic" | "program" | "disconnect";
// Shares of the mix, in order; "plain" takes the rest. Each kind is streamed or not at random.
const MIX: Array<[Kind, number]> = [
  ["samples", 0.12],
  ["logprobs", 0.12],
  ["stop", 0.14],
  ["deterministic", 0.05],
  ["program", 0.02],
  ["disconnect", 0.15],
];
function drawKind(): Kind {
  let x = rng();
  for (const [kind, share] of MIX) if ((x -= share) < 0) return kind;
  return "plain";
}

type Outcome = "completed" | "failed" | "disconnected" | "lost";
const count = { started: 0, completed: 0, failed: 0, disconnected: 0, lost: 0, streamed: 0 };
const failures = new Map<string, number>();
const losses = new Map<string, number>();
const byKind = new Map<string, number>();
const tally = (m: Map<string, number>, key: string): void => void m.set(key, (m.get(key) ?? 0) + 1);
const question = (): string => `What is ${int(2, 999)}${"+-*"[int(0, 2)]}${int(2, 99)}${"+-*"[int(0, 2)]}${int(2, 9)}?`;

/** An error body the server built (OpenAI's nested object), or null. */
function errorMessage(text: string): string | null {
  try {
    const m = (JSON.parse(text) as { error?: { message?: unknown } }).error?.message;
    return typeof m === "string" && m.length > 0 ? m : null;
  } catch {
    return null;
  }
}

/** One request over HTTP; resolves to its outcome (never rejects) and records why a failure or a loss happened. */
function runOne(kind: Kind): Promise<Outcome> {
  const stream = kind === "disconnect" ? rng() < 0.7 : rng() < 0.5;
  tally(byKind, `${kind}${stream ? " (stream)" : ""}`);
  if (stream) count.streamed++;
  const body: Record<string, unknown> = {
    model: SERVED,
    messages: [{ role: "user", content: question() }],
    max_tokens: int(8, 64),
    temperature: rng() < 0.25 ? 0 : 0.8,
    seed: int(0, 2 ** 31),
    stream,
    ...(kind === "samples" ? { n: int(2, 3) } : {}),
    ...(kind === "logprobs" ? { logprobs: true, top_logprobs: 2 } : {}),
    ...(kind === "stop" ? { stop: ["\n", "."] } : {}),
    ...(kind === "deterministic" ? { deterministic: true } : {}),
    ...(kind === "program"
      ? { program: "sc", program_options: { cap: 3, policy: "baseline-even" }, max_tokens: 48 }
      : {}),
  };
  const leaveAfterChunks = kind === "disconnect" && stream ? int(1, 24) : Infinity;
  const leaveAfterMs = kind === "disconnect" && !stream ? int(0, 40) : Infinity;
  return new Promise((resolve) => {
    let done = false;
    let timer: ReturnType<typeof setTimeout> | undefined;
    const finish = (o: Outcome, why?: string): void => {
      if (done) return;
      done = true;
      clearTimeout(timer);
      clearTimeout(deadline);
      if (o === "failed") tally(failures, (why ?? "").replace(/\d+/g, "N").slice(0, 160));
      if (o === "lost") tally(losses, (why ?? "").replace(/\d+/g, "N").slice(0, 160));
      count[o]++;
      resolve(o);
    };
    const req = httpRequest(
      `${url}/v1/chat/completions`,
      { method: "POST", agent, headers: { "content-type": "application/json" } },
      (res) => {
        let text = "";
        let chunks = 0;
        res.setEncoding("utf8");
        res.on("data", (s: string) => {
          text += s;
          if (++chunks >= leaveAfterChunks && res.statusCode === 200) {
            req.destroy();
            finish("disconnected");
          }
        });
        res.on("end", () => {
          const status = res.statusCode ?? 0;
          if (status >= 400) {
            const m = errorMessage(text);
            return m === null
              ? finish("lost", `HTTP ${status} without an error body`)
              : finish("failed", `HTTP ${status}: ${m}`);
          }
          if (status !== 200) return finish("lost", `HTTP ${status}`);
          if (!stream) {
            try {
              const r = JSON.parse(text) as { choices?: Array<{ finish_reason?: string }> };
              return r.choices?.length && r.choices.every((c) => typeof c.finish_reason === "string")
                ? finish("completed")
                : finish("lost", "a 200 body without choices and finish reasons");
            } catch {
              return finish("lost", "a 200 body that is not JSON");
            }
          }
          const errorEvent = text.split("\n\n").find((ev) => ev.startsWith("data: {") && ev.includes('"error":'));
          if (errorEvent !== undefined)
            return finish("failed", `stream error: ${errorMessage(errorEvent.slice(6)) ?? errorEvent.slice(0, 120)}`);
          return text.trimEnd().endsWith("data: [DONE]")
            ? finish("completed")
            : finish("lost", "a stream that ended without [DONE]");
        });
        res.on("error", (e) => finish("lost", `response: ${e.message}`));
      },
    );
    req.on("error", (e) => finish("lost", `request: ${e.message}`));
    const deadline = setTimeout(() => {
      req.destroy();
      finish("lost", `no answer within ${DEADLINE_MS} ms`);
    }, DEADLINE_MS);
    if (Number.isFinite(leaveAfterMs))
      timer = setTimeout(() => {
        req.destroy();
        finish("disconnected");
      }, leaveAfterMs);
    req.end(JSON.stringify(body));
  });
}

interface Checkpoint extends SoakReading {
  minute: number;
  requests: number;
  completed: number;
  failed: number;
  disconnected: number;
  lost: number;
  generatedTokens: number;
}
const t0 = performance.now();
function checkpoint(): Checkpoint {
  return {
    minute: +((performance.now() - t0) / 60_000).toFixed(2),
    requests: count.completed + count.failed + count.disconnected + count.lost,
    completed: count.completed,
    failed: count.failed,
    disconnected: count.disconnected,
    lost: count.lost,
    ...readSoak(engine),
    generatedTokens: engine.metrics().generatedTokens,
  };
}
const print = (c: Checkpoint, label: string): void =>
  console.log(
    `[soak-http] ${label} ${c.minute} min: ${c.requests} requests (${c.completed} completed, ${c.failed} failed, ${c.disconnected} disconnected, ${c.lost} lost), RSS ${c.rssMiB} MiB, heap ${c.heapUsedMiB} MiB, ${c.kvPagesUsed} pages in use, ${c.running} running / ${c.waiting} waiting`,
  );

const checkpoints: Checkpoint[] = [];
const endAt = Date.now() + MINUTES * 60_000;
const reporter = setInterval(() => {
  const c = checkpoint();
  checkpoints.push(c);
  print(c, "checkpoint");
}, REPORT_MS);
const loadBefore = loadavg();
await Promise.all(
  Array.from({ length: CLIENTS }, async () => {
    while (Date.now() < endAt) {
      count.started++;
      await runOne(drawKind());
    }
  }),
);
clearInterval(reporter);
// Drain: disconnected requests are aborted by the server as their sockets close; wait for the engine to empty.
const drainUntil = Date.now() + 30_000;
while ((engine.metrics().running > 0 || engine.metrics().waiting > 0) && Date.now() < drainUntil)
  await new Promise((r) => setTimeout(r, 50));
agent.destroy();
await new Promise((r) => setTimeout(r, 200));
const drained = checkpoint();
print(drained, "drained");
const loadAfter = loadavg();
await server.close();
await engine.dispose();
model.dispose();

const first = checkpoints[0] ?? drained;
const rssGrowth = (drained.rssMiB - first.rssMiB) / first.rssMiB;
// RSS often falls after the first checkpoint (the allocator hands back warm-up memory), which flatters the target
// figure; growth from the lowest reading to the drained server shows any creep that hides behind that fall.
const lowest = Math.min(...[...checkpoints, drained].map((c) => c.rssMiB));
const rssGrowthFromLowest = (drained.rssMiB - lowest) / lowest;
const heaps = checkpoints.slice(1).map((c) => c.heapUsedMiB);
const pass =
  count.lost === 0 &&
  drained.kvPagesUsed === 0 &&
  drained.running + drained.waiting === 0 &&
  rssGrowth < RSS_GROWTH_TARGET;
const machine = `${cpus().length} × ${cpus()[0]?.model.trim() ?? "CPU"}`;
const load = `load average ${loadBefore[0]!.toFixed(2)} at the start, ${loadAfter[0]!.toFixed(2)} at the end (1-minute)`;
const out = {
  date: new Date().toISOString(),
  minutes: MINUTES,
  clients: CLIENTS,
  kvPages: KV_PAGES,
  threads: THREADS,
  seed: SEED,
  machine,
  load,
  mix: Object.fromEntries(byKind),
  counts: count,
  failures: Object.fromEntries(failures),
  losses: Object.fromEntries(losses),
  checkpoints,
  drained,
  rssGrowth,
  rssGrowthFromLowest,
  pass,
};
const list = (m: Map<string, number>): string => [...m].map(([msg, n]) => `${n}× ${msg}`).join("; ");
/** The drained server against the targets: nothing lost, no page in use, RSS growth under RSS_GROWTH_TARGET. */
function targetsParagraph(): string {
  const heap = heaps.length ? `; live heap from the second checkpoint on ${formatRange(heaps)} MiB` : "";
  return [
    `Last row: drained (clients stopped, engine empty). Lost: ${count.lost} (target 0). Pages in use after drain: ${drained.kvPagesUsed} (target 0).`,
    `RSS growth after warm-up (first checkpoint to drained): ${(100 * rssGrowth).toFixed(2)}% (target < ${100 * RSS_GROWTH_TARGET}%);`,
    `from the lowest reading (${lowest} MiB) to drained: ${(100 * rssGrowthFromLowest).toFixed(2)}%${heap}. ${pass ? "All targets met." : "TARGET MISSED."}`,
  ].join(" ");
}
const lines = [
  `# soak over HTTP (${out.date.slice(0, 10)}): ${MINUTES} min, ${CLIENTS} keep-alive clients, ${KV_PAGES} KV pages, ${THREADS} CPU thread(s), seed ${SEED}`,
  "",
  `Command: \`npx tsx scripts/bench/soakHttp.ts ${process.argv
    .slice(2)
    .map((a) => (/\s/.test(a) ? JSON.stringify(a) : a))
    .join(" ")}\`. Machine: ${machine}; ${load}.${values.note ? ` ${values.note}` : ""}`,
  "",
  `Mix: ${[...byKind].map(([k, n]) => `${k} ${n}`).join(", ")}. ${drained.requests} requests (${count.streamed} streamed): ${count.completed} completed, ${count.disconnected} disconnected by the client, ${count.failed} failed with a proper HTTP error${count.failed ? ` (${list(failures)})` : ""}, ${count.lost} lost${count.lost ? ` (${list(losses)})` : ""}; ${drained.generatedTokens} tokens generated.`,
  "",
  "| minute | requests | completed | failed | disconnected | lost | RSS MiB | heap MiB | external MiB | KV pages in use | running | waiting | preemptions |",
  "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
  ...[...checkpoints, drained].map(
    (c) =>
      `| ${c.minute} | ${c.requests} | ${c.completed} | ${c.failed} | ${c.disconnected} | ${c.lost} | ${c.rssMiB} | ${c.heapUsedMiB} | ${c.externalMiB} | ${c.kvPagesUsed} | ${c.running} | ${c.waiting} | ${c.preemptions} |`,
  ),
  "",
  targetsParagraph(),
];
console.log(lines.join("\n"));
if (values.json) {
  writeFileSync("bench/soak-http.json", `${JSON.stringify(out, null, 1)}\n`);
  writeFileSync("bench/soak-http.md", `${lines.join("\n")}\n`);
}
process.exitCode = pass ? 0 : 1;
