// Soak: a long mixed workload through one engine, watching for what only shows over time — requests lost, KV pages
// leaked, memory that grows. C closed-loop clients (default 32) run --requests requests (default 100,000) on the
// bundled tiny reasoner; each request draws its kind from a seeded mix: n > 1 samples, logprobs, a stop string,
// deterministic, aborted mid-stream or on a timer, forked after it finished or while it runs. Every --report-every
// settled requests a checkpoint records RSS, the V8 heap, native (external) memory, KV pages in use and the queues,
// each after a full garbage collection (else RSS follows the collector's timing: ±25% between checkpoints).
// Pass: 0 requests lost (not settled within --deadline-ms), 0 unexpected errors, 0 pages in use once drained, RSS
// growth from the first checkpoint (the warm-up) to the drained engine under 5%.
//   npm run bench:soak -- [--requests 100000] [--clients 32] [--kv-pages 128] [--report-every 10000] [--threads N]
//     [--seed 1] [--deadline-ms 120000] [--json]
// --json writes bench/soak.json and bench/soak.md. The exit status is 1 when a target is missed.
import { writeFileSync } from "node:fs";
import { parseArgs } from "node:util";
import { loadAddon } from "../../ts/native/loadAddon.js";
import { Engine, loadModel, type GenerateRequest, type GenerationOutput, type RequestHandle } from "../../ts/index.js";
import { mulberry32 } from "../fixture/random.js";
import { readSoak, type SoakReading } from "./soakReading.js";

const { values } = parseArgs({
  options: {
    requests: { type: "string", default: "100000" },
    clients: { type: "string", default: "32" },
    "kv-pages": { type: "string", default: "128" },
    "report-every": { type: "string", default: "10000" },
    threads: { type: "string" },
    seed: { type: "string", default: "1" },
    "deadline-ms": { type: "string", default: "120000" },
    json: { type: "boolean", default: false },
  },
});
const positiveInt = (name: string, v: string): number => {
  const n = Number(v);
  if (!Number.isInteger(n) || n < 1) throw new Error(`--${name} is ${v}; expected an integer >= 1`);
  return n;
};
const REQUESTS = positiveInt("requests", values.requests);
const CLIENTS = positiveInt("clients", values.clients);
const KV_PAGES = positiveInt("kv-pages", values["kv-pages"]);
const REPORT_EVERY = positiveInt("report-every", values["report-every"]);
const DEADLINE_MS = positiveInt("deadline-ms", values["deadline-ms"]);
const SEED = positiveInt("seed", values.seed);
const THREADS =
  values.threads === undefined
    ? loadAddon().listDevices().cpu.threads
    : loadAddon().setThreads(positiveInt("threads", values.threads));
const RSS_GROWTH_TARGET = 0.05;

const rng = mulberry32(SEED); // the same mix for the same --seed
const int = (lo: number, hi: number): number => lo + Math.floor(rng() * (hi - lo + 1));

const model = await loadModel(undefined, { kvPages: KV_PAGES });
const engine = new Engine({ models: { model } });
const question = (): string => `What is ${int(2, 999)}${"+-*"[int(0, 2)]}${int(2, 99)}${"+-*"[int(0, 2)]}${int(2, 9)}?`;

type Kind =
  | "plain"
  | "samples"
  | "logprobs"
  | "stop"
  | "deterministic"
  | "abort-stream"
  | "abort-timer"
  | "fork-finished"
  | "fork-running";
// Shares of the mix, in order; "plain" takes the rest.
const MIX: Array<[Kind, number]> = [
  ["samples", 0.12],
  ["logprobs", 0.12],
  ["stop", 0.15],
  ["deterministic", 0.05],
  ["abort-stream", 0.06],
  ["abort-timer", 0.06],
  ["fork-finished", 0.06],
  ["fork-running", 0.04],
];
function drawKind(): Kind {
  let x = rng();
  for (const [kind, share] of MIX) if ((x -= share) < 0) return kind;
  return "plain";
}

const count = { settled: 0, completed: 0, aborted: 0, forks: 0, lost: 0, generatedTokens: 0 };
const errors = new Map<string, number>();
const byKind = new Map<Kind, number>();

/** Resolves with the output, or null when it did not settle within the deadline (lost). */
async function settle(handle: RequestHandle): Promise<GenerationOutput | null> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const deadline = new Promise<null>((resolve) => (timer = setTimeout(() => resolve(null), DEADLINE_MS)));
  try {
    return await Promise.race([handle.result, deadline]);
  } finally {
    clearTimeout(timer);
  }
}

function account(out: GenerationOutput | null): void {
  if (out === null) {
    count.lost++;
    return;
  }
  count.generatedTokens += out.usage.generatedTokens;
  if (out.samples.some((s) => s.finishReason === "aborted")) count.aborted++;
  else count.completed++;
}

/** One request of kind `kind` (and its fork, for the fork kinds); errors are counted by message, never thrown. */
async function runOne(kind: Kind): Promise<void> {
  byKind.set(kind, (byKind.get(kind) ?? 0) + 1);
  const req: GenerateRequest = {
    prompt: model.tokenizer.encodeChat([{ role: "user", content: question() }]),
    maxTokens: int(8, 64),
    temperature: rng() < 0.25 ? 0 : 0.8,
    seed: int(0, 2 ** 31),
    n: kind === "samples" ? int(2, 4) : 1,
    logprobs: kind === "logprobs" ? 2 : undefined,
    stop: kind === "stop" ? ["\n"] : undefined,
    deterministic: kind === "deterministic",
  };
  const abortAt = int(1, req.maxTokens! - 1);
  const timerMs = int(0, 30);
  const forkAt = int(1, 8);
  try {
    const handle = engine.submit(req);
    let timer: ReturnType<typeof setTimeout> | undefined;
    if (kind === "abort-timer") timer = setTimeout(() => handle.abort(), timerMs);
    let child: RequestHandle | undefined;
    if (kind === "abort-stream" || kind === "fork-running") {
      let seen = 0;
      for await (const d of handle) {
        if ((seen += d.tokens.length) < (kind === "abort-stream" ? abortAt : forkAt)) continue;
        if (kind === "abort-stream") handle.abort();
        else child = engine.fork(handle, { maxTokens: 16 });
        break;
      }
    }
    const out = await settle(handle);
    clearTimeout(timer);
    account(out);
    if (kind === "fork-finished" && out !== null) {
      child = engine.fork(handle, {
        length: out.promptTokens.length + Math.floor(out.tokens.length / 2),
        maxTokens: 16,
      });
    }
    if (child) {
      count.forks++;
      account(await settle(child));
    }
  } catch (e) {
    const key = (e instanceof Error ? e.message : String(e)).replace(/\d+/g, "N").slice(0, 160);
    errors.set(key, (errors.get(key) ?? 0) + 1);
  } finally {
    count.settled++;
  }
}

interface Checkpoint extends SoakReading {
  requests: number;
  seconds: number;
  generatedTokens: number;
}
const t0 = performance.now();
function checkpoint(): Checkpoint {
  return {
    requests: count.settled,
    seconds: +((performance.now() - t0) / 1000).toFixed(1),
    ...readSoak(engine),
    generatedTokens: count.generatedTokens,
  };
}

const checkpoints: Checkpoint[] = [];
let next = 0;
let nextReport = REPORT_EVERY;
const client = async (): Promise<void> => {
  while (next < REQUESTS) {
    next++;
    await runOne(drawKind());
    if (count.settled >= nextReport) {
      nextReport += REPORT_EVERY;
      const c = checkpoint();
      checkpoints.push(c);
      console.log(
        `[soak] ${c.requests} requests, ${c.seconds} s: RSS ${c.rssMiB} MiB, heap ${c.heapUsedMiB} MiB, external ${c.externalMiB} MiB, ${c.kvPagesUsed} pages in use, ${c.running} running / ${c.waiting} waiting`,
      );
    }
  }
};
await Promise.all(Array.from({ length: CLIENTS }, client));
const drained = checkpoint();
await engine.dispose();
model.dispose();

const first = checkpoints[0] ?? drained;
const rssGrowth = (drained.rssMiB - first.rssMiB) / first.rssMiB;
const unexpectedErrors = [...errors.values()].reduce((a, b) => a + b, 0);
const pass =
  count.lost === 0 &&
  unexpectedErrors === 0 &&
  drained.kvPagesUsed === 0 &&
  drained.running + drained.waiting === 0 &&
  rssGrowth < RSS_GROWTH_TARGET;
const out = {
  date: new Date().toISOString(),
  requests: REQUESTS,
  clients: CLIENTS,
  kvPages: KV_PAGES,
  threads: THREADS,
  seed: SEED,
  mix: Object.fromEntries(byKind),
  counts: count,
  errors: Object.fromEntries(errors),
  checkpoints,
  drained,
  rssGrowth,
  pass,
};
const lines = [
  `# bench:soak (${out.date.slice(0, 10)}): ${REQUESTS} requests, ${CLIENTS} clients, ${KV_PAGES} KV pages, ${THREADS} CPU thread(s), seed ${SEED}`,
  "",
  `Mix: ${[...byKind].map(([k, n]) => `${k} ${n}`).join(", ")}. Settled ${count.settled} (+ ${count.forks} forks): ${count.completed} completed, ${count.aborted} aborted, ${count.lost} lost, ${unexpectedErrors} errors${unexpectedErrors ? ` (${[...errors].map(([m, n]) => `${n}× ${m}`).join("; ")})` : ""}; ${count.generatedTokens} tokens generated in ${drained.seconds} s.`,
  "",
  "| requests | s | RSS MiB | heap MiB | external MiB | KV pages in use | running | waiting | preemptions |",
  "|---|---|---|---|---|---|---|---|---|",
  ...[...checkpoints, drained].map(
    (c) =>
      `| ${c.requests} | ${c.seconds} | ${c.rssMiB} | ${c.heapUsedMiB} | ${c.externalMiB} | ${c.kvPagesUsed} | ${c.running} | ${c.waiting} | ${c.preemptions} |`,
  ),
  "",
  `RSS growth after warm-up (first checkpoint to drained): ${(100 * rssGrowth).toFixed(2)}% (target < ${100 * RSS_GROWTH_TARGET}%). ${pass ? "All targets met." : "TARGET MISSED."}`,
];
console.log(lines.join("\n"));
if (values.json) {
  writeFileSync("bench/soak.json", `${JSON.stringify(out, null, 1)}\n`);
  writeFileSync("bench/soak.md", `${lines.join("\n")}\n`);
}
process.exitCode = pass ? 0 : 1;
