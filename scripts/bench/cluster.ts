// bench:cluster — several `deliberate serve --cluster` replicas behind the router, on loopback: a trace of
// client-driven SC programs (each program: `--rounds` rounds of `--branches` sampled requests sharing one prompt and
// one program_id; programs draw their prompt from `--docs` long shared contexts, so programs share prefixes too) at
// `--concurrency` programs in flight, for round-robin vs program-affinity routing, with 1, 2 and 3 replicas. Each
// replica is its own process, pinned to one core (core i mod the cores this box has): one replica per core is the
// configuration whose throughput should scale. Reports per run: generated tokens/s, programs/s, P90 program and
// request latency, prefix-cache hit rate (Σ cached_tokens / Σ prompt_tokens from the responses' usage), and how much of
// each program landed on one replica; median of `--repeats` with the range. Then a fault run: 2 replicas, affinity,
// replica 2 SIGKILLed when 40% of the programs are done; the client retries a failed request once, as a client would.
//   npm run bench:cluster -- [--replicas 1,2,3] [--policies round-robin,affinity] [--programs 80] [--concurrency 6]
//     [--branches 4] [--rounds 2] [--max-tokens 96] [--docs 40] [--repeats 3] [--no-fault] [--json]
import { readFileSync, writeFileSync } from "node:fs";
import { Agent, request as httpRequest } from "node:http";
import { availableParallelism, cpus } from "node:os";
import { parseArgs } from "node:util";
import { createRouter, type DeliberateRouter, type RoutingPolicy } from "../../ts/cluster/index.js";
import { startNats, startReplica, type NatsHandle, type ReplicaHandle } from "../cluster/localCluster.js";
import { formatSpread, median, parseRepeats, percentileNearestRank } from "./stats.js";

const { values } = parseArgs({
  options: {
    replicas: { type: "string", default: "1,2,3" },
    policies: { type: "string", default: "round-robin,affinity" },
    programs: { type: "string", default: "80" },
    concurrency: { type: "string", default: "6" },
    branches: { type: "string", default: "4" },
    rounds: { type: "string", default: "2" },
    "max-tokens": { type: "string", default: "96" },
    docs: { type: "string", default: "40" },
    repeats: { type: "string", default: "3" },
    "no-fault": { type: "boolean", default: false },
    json: { type: "boolean", default: false },
  },
});
const REPLICAS = values.replicas.split(",").map(Number);
const POLICIES = values.policies.split(",") as RoutingPolicy[];
const PROGRAMS = Number(values.programs);
const CONCURRENCY = Number(values.concurrency);
const BRANCHES = Number(values.branches);
const ROUNDS = Number(values.rounds);
const MAX_TOKENS = Number(values["max-tokens"]);
const DOCS = Number(values.docs);
const REPEATS = parseRepeats(values.repeats);
const CORES = availableParallelism();

// ---- the trace ----

/** A long shared context (~150 tokens of worked sums), distinct from its first characters on. */
function doc(salt: string, d: number): string {
  const lines = [`Notes ${salt}-${d}: worked sums to keep in mind.`];
  for (let i = 0; i < 24; i++)
    lines.push(`${(d * 7 + i * 3) % 50}+${(i * 11 + d) % 40}=${((d * 7 + i * 3) % 50) + ((i * 11 + d) % 40)}`);
  return lines.join("\n");
}

interface RequestRecord {
  program: number;
  replica: string | null;
  status: number;
  error?: string;
  promptTokens: number;
  cachedTokens: number;
  completionTokens: number;
  ms: number;
  startedAt: number;
  retried: boolean;
}

const agent = new Agent({ keepAlive: true, maxSockets: 256 });

function post(
  url: string,
  body: unknown,
): Promise<{ status: number; replica: string | null; json: Record<string, unknown> }> {
  const data = JSON.stringify(body);
  return new Promise((resolve, reject) => {
    const req = httpRequest(
      `${url}/v1/chat/completions`,
      {
        method: "POST",
        agent,
        headers: { "content-type": "application/json", "content-length": Buffer.byteLength(data) },
      },
      (res) => {
        let text = "";
        res.setEncoding("utf8");
        res.on("data", (c: string) => (text += c));
        res.on("end", () => {
          let json: Record<string, unknown> = {};
          try {
            json = JSON.parse(text) as Record<string, unknown>;
          } catch {
            json = { error: { message: text } };
          }
          resolve({
            status: res.statusCode ?? 0,
            replica: (res.headers["x-deliberate-replica"] as string | undefined) ?? null,
            json,
          });
        });
        res.on("error", reject);
      },
    );
    req.on("error", reject);
    req.end(data);
  });
}

interface TraceResult {
  wallMs: number;
  /** CPU time of this process (the router and the client) over the trace. */
  cpuMs: number;
  requests: RequestRecord[];
  programMs: number[];
  programReplicas: Map<number, string[]>;
}

/** Runs the trace through the router at `url`; `onProgress(done)` after each program (the fault run kills there). */
async function runTrace(
  url: string,
  salt: string,
  onProgress?: (done: number) => void,
  programs = PROGRAMS,
): Promise<TraceResult> {
  const requests: RequestRecord[] = [];
  const programMs: number[] = [];
  const programReplicas = new Map<number, string[]>();
  let next = 0;
  let done = 0;
  const t0 = performance.now();
  const cpu0 = process.cpuUsage();
  const one = async (
    program: number,
    prompt: string,
    round: number,
    b: number,
    retried: boolean,
  ): Promise<RequestRecord> => {
    const startedAt = performance.now();
    const body = {
      messages: [{ role: "user", content: prompt }],
      max_tokens: MAX_TOKENS,
      ignore_eos: true,
      temperature: 1,
      top_p: 1,
      top_k: 0,
      seed: program * 1000 + round * 10 + b,
      program_id: `${salt}-p${program}`,
    };
    let rec: RequestRecord;
    try {
      const r = await post(url, body);
      const usage = r.json.usage as
        | { prompt_tokens: number; completion_tokens: number; prompt_tokens_details?: { cached_tokens?: number } }
        | undefined;
      const err = r.json.error as { message?: string } | undefined;
      rec = {
        program,
        replica: r.replica,
        status: r.status,
        error: err?.message,
        promptTokens: usage?.prompt_tokens ?? 0,
        cachedTokens: usage?.prompt_tokens_details?.cached_tokens ?? 0,
        completionTokens: usage?.completion_tokens ?? 0,
        ms: performance.now() - startedAt,
        startedAt,
        retried,
      };
    } catch (e) {
      rec = {
        program,
        replica: null,
        status: 0,
        error: (e as Error).message,
        promptTokens: 0,
        cachedTokens: 0,
        completionTokens: 0,
        ms: performance.now() - startedAt,
        startedAt,
        retried,
      };
    }
    requests.push(rec);
    if (rec.status !== 200 && !retried) {
      await new Promise((r) => setTimeout(r, 100));
      return one(program, prompt, round, b, true);
    }
    return rec;
  };
  const worker = async (): Promise<void> => {
    for (;;) {
      const program = next++;
      if (program >= programs) return;
      const prompt = `${doc(salt, program % DOCS)}\nWhat is ${(program * 13) % 90}+${(program * 29) % 70}?`;
      const start = performance.now();
      const where: string[] = [];
      for (let round = 0; round < ROUNDS; round++) {
        const recs = await Promise.all(
          Array.from({ length: BRANCHES }, (_, b) => one(program, prompt, round, b, false)),
        );
        for (const r of recs) if (r.status === 200 && r.replica !== null) where.push(r.replica);
      }
      programMs.push(performance.now() - start);
      programReplicas.set(program, where);
      onProgress?.(++done);
    }
  };
  await Promise.all(Array.from({ length: CONCURRENCY }, () => worker()));
  const cpu = process.cpuUsage(cpu0);
  return {
    wallMs: performance.now() - t0,
    cpuMs: (cpu.user + cpu.system) / 1000,
    requests,
    programMs,
    programReplicas,
  };
}

/** P90 of a run's latencies; 0 for a run with none. */
const p90 = (xs: number[]): number => (xs.length === 0 ? 0 : percentileNearestRank(xs, 90));

interface RunRow {
  tokensPerSecond: number;
  programsPerSecond: number;
  p90ProgramMs: number;
  p90RequestMs: number;
  prefixHitRate: number;
  /** Mean over programs of the largest share of its requests on one replica. */
  oneReplicaShare: number;
  /** Programs whose every request landed on one replica / all programs. */
  programsOnOneReplica: number;
  failed: number;
  /** Cores the router + client process kept busy (CPU seconds / wall seconds). */
  routerClientCores: number;
  /** Cores nats-server kept busy, and the replicas together (each pinned to one core). */
  natsCores: number;
  replicaCores: number;
}

/** CPU seconds a process has used so far (utime + stime from /proc; 0 where there is no /proc). */
function cpuSeconds(pid: number | undefined): number {
  try {
    const fields = readFileSync(`/proc/${pid}/stat`, "utf8").split(") ")[1].split(" ");
    return (Number(fields[11]) + Number(fields[12])) / 100; // USER_HZ is 100 on Linux
  } catch {
    return 0;
  }
}

function summarize(
  t: TraceResult,
  others: { natsCpuS: number; replicaCpuS: number } = { natsCpuS: 0, replicaCpuS: 0 },
): RunRow {
  const programs = t.programMs.length;
  const ok = t.requests.filter((r) => r.status === 200);
  const tokens = ok.reduce((n, r) => n + r.completionTokens, 0);
  const prompt = ok.reduce((n, r) => n + r.promptTokens, 0);
  const cached = ok.reduce((n, r) => n + r.cachedTokens, 0);
  const shares = [...t.programReplicas.values()].map((where) => {
    const counts = new Map<string, number>();
    for (const w of where) counts.set(w, (counts.get(w) ?? 0) + 1);
    return where.length === 0 ? 0 : Math.max(...counts.values()) / where.length;
  });
  return {
    tokensPerSecond: tokens / (t.wallMs / 1000),
    programsPerSecond: programs / (t.wallMs / 1000),
    p90ProgramMs: p90(t.programMs),
    p90RequestMs: p90(ok.map((r) => r.ms)),
    prefixHitRate: prompt === 0 ? 0 : cached / prompt,
    oneReplicaShare: shares.reduce((a, b) => a + b, 0) / shares.length,
    programsOnOneReplica: shares.filter((s) => s === 1).length / shares.length,
    failed: t.requests.filter((r) => r.status !== 200).length,
    routerClientCores: t.cpuMs / t.wallMs,
    natsCores: (others.natsCpuS * 1000) / t.wallMs,
    replicaCores: (others.replicaCpuS * 1000) / t.wallMs,
  };
}

// ---- runs ----

async function withCluster<T>(n: number, f: (nats: NatsHandle, replicas: ReplicaHandle[]) => Promise<T>): Promise<T> {
  const nats = await startNats();
  const replicas: ReplicaHandle[] = [];
  try {
    for (let i = 0; i < n; i++)
      replicas.push(await startReplica(nats.url, `replica-${i + 1}`, { cpus: String(i % CORES) }));
    return await f(nats, replicas);
  } finally {
    for (const r of replicas) if (r.child.exitCode === null) r.child.kill("SIGKILL");
    await Promise.all(replicas.map((r) => r.exited));
    await nats.stop();
  }
}

async function openRouter(
  natsUrl: string,
  policy: RoutingPolicy,
  n: number,
): Promise<{ router: DeliberateRouter; url: string }> {
  const router = await createRouter({ cluster: natsUrl, policy });
  const url = await router.listen({ port: 0 });
  const t0 = Date.now();
  while (router.view.replicas().filter((r) => !r.report.draining).length < n) {
    if (Date.now() - t0 > 120_000)
      throw new Error(`only ${router.view.replicas().length} of ${n} replicas became live`);
    await new Promise((r) => setTimeout(r, 50));
  }
  return { router, url };
}

type Rows = Record<string, Record<string, RunRow[]>>;
const rows: Rows = {};
for (const n of REPLICAS) {
  rows[n] = {};
  await withCluster(n, async (nats, replicas) => {
    // Warm-up (JIT, page pools) on a trace whose prompts no measured run shares.
    {
      const { router, url } = await openRouter(nats.url, "least-load", n);
      await runTrace(url, "warm", undefined, 16);
      await router.close();
    }
    for (let rep = 0; rep < REPEATS; rep++) {
      // Alternate the policies' order each repeat; a fresh salt per run, so no run finds another's prefixes cached.
      const order = rep % 2 === 0 ? POLICIES : [...POLICIES].reverse();
      for (const policy of order) {
        const { router, url } = await openRouter(nats.url, policy, n);
        const cpu = (): { natsCpuS: number; replicaCpuS: number } => ({
          natsCpuS: cpuSeconds(nats.child.pid),
          replicaCpuS: replicas.reduce((s, r) => s + cpuSeconds(r.child.pid), 0),
        });
        const before = cpu();
        const trace = await runTrace(url, `n${n}-${policy}-r${rep}`);
        const after = cpu();
        const row = summarize(trace, {
          natsCpuS: after.natsCpuS - before.natsCpuS,
          replicaCpuS: after.replicaCpuS - before.replicaCpuS,
        });
        await router.close();
        (rows[n][policy] ??= []).push(row);
        process.stderr.write(
          `${n} replica(s), ${policy}, repeat ${rep + 1}: ${row.tokensPerSecond.toFixed(0)} tok/s, P90 program ${row.p90ProgramMs.toFixed(0)} ms, hit ${(row.prefixHitRate * 100).toFixed(1)}%, on one replica ${(row.programsOnOneReplica * 100).toFixed(0)}%\n`,
        );
      }
    }
  });
}

// ---- the fault run ----

interface FaultResult {
  killedAtMs: number;
  failedRequests: number;
  failedOnVictim: number;
  failedAfterRetry: number;
  rerouted: number;
  /** From the kill until the router's view no longer holds the victim. */
  leftRingMs: number;
  /** From the kill until the first successful request of a program that had run on the victim. */
  firstRecoveredMs: number | null;
  programsCompleted: number;
  row: RunRow;
}

async function faultRun(): Promise<FaultResult> {
  return withCluster(2, async (nats, replicas) => {
    const { router, url } = await openRouter(nats.url, "affinity", 2);
    const victim = replicas[1];
    let killedAt = -1;
    let leftAt = -1;
    router.view.onLeave((id) => {
      if (id === victim.id && leftAt < 0) leftAt = performance.now();
    });
    const t0 = performance.now();
    const trace = await runTrace(url, "fault", (done) => {
      if (killedAt < 0 && done >= Math.floor(PROGRAMS * 0.4)) {
        killedAt = performance.now();
        victim.child.kill("SIGKILL");
      }
    });
    const metricsText = await (await fetch(`${url}/metrics`)).text();
    const rerouted = Number(/deliberate_router_rerouted_total (\d+)/.exec(metricsText)?.[1] ?? 0);
    await router.close();
    const failed = trace.requests.filter((r) => r.status !== 200);
    const victimPrograms = new Set(trace.requests.filter((r) => r.replica === victim.id).map((r) => r.program));
    const recovered = trace.requests
      .filter((r) => r.status === 200 && r.startedAt >= killedAt && victimPrograms.has(r.program))
      .map((r) => r.startedAt + r.ms - killedAt);
    return {
      killedAtMs: killedAt - t0,
      failedRequests: failed.length,
      failedOnVictim: failed.filter((r) => r.error?.includes(victim.id)).length,
      failedAfterRetry: failed.filter((r) => r.retried).length,
      rerouted,
      leftRingMs: leftAt < 0 ? -1 : leftAt - killedAt,
      firstRecoveredMs: recovered.length === 0 ? null : Math.min(...recovered),
      programsCompleted: trace.programMs.length,
      row: summarize(trace),
    };
  });
}

const fault = values["no-fault"] ? null : await faultRun();

// ---- report ----

const pct = (x: number): string => `${(x * 100).toFixed(1)}%`;
const num = (x: number): string => x.toFixed(0);
const cores = (x: number): string => x.toFixed(2);

/** What killing one of two replicas mid-run cost: failed and re-routed requests, the ring's and programs' recovery. */
function faultParagraph(fault: FaultResult): string {
  const recovered = fault.firstRecoveredMs === null ? "never" : `${num(fault.firstRecoveredMs)} ms`;
  return [
    `Fault run (2 replicas, affinity; replica-2 SIGKILLed at ${num(fault.killedAtMs)} ms, 40% of programs done):`,
    `${fault.failedRequests} requests failed (${fault.failedOnVictim} of them named the killed replica; ${fault.failedAfterRetry} failed again on the client's one retry),`,
    `${fault.rerouted} re-routed by the router, the victim left the ring ${num(fault.leftRingMs)} ms after the kill,`,
    `the first request of a program that had run on it succeeded ${recovered} after the kill;`,
    `${fault.programsCompleted}/${PROGRAMS} programs completed, ${num(fault.row.tokensPerSecond)} tok/s over the run.`,
  ].join(" ");
}

const date = new Date().toISOString();
const lines = [
  `# bench:cluster (${date.slice(0, 10)}; ${cpus()[0]?.model ?? "cpu"}, ${CORES} cores; tiny reasoner; each replica pinned to core i mod ${CORES})`,
  "",
  `Trace: ${PROGRAMS} SC programs, ${CONCURRENCY} in flight, ${ROUNDS} rounds × ${BRANCHES} branches (T = 1, ${MAX_TOKENS} tokens each, ignore_eos), prompts = one of ${DOCS} shared ~150-token contexts + a question. Median of ${REPEATS} with the range. Command: \`npm run bench:cluster -- ${process.argv.slice(2).join(" ")}\``,
  "",
  "| replicas | policy | tokens/s | programs/s | P90 program ms | P90 request ms | prefix hit rate | program share on one replica | programs wholly on one replica | router + client cores | nats-server cores | replica cores (sum) |",
  "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
];
for (const n of REPLICAS) {
  for (const policy of POLICIES) {
    const cell = (k: keyof RunRow, f: (x: number) => string): string =>
      formatSpread(
        rows[n][policy].map((r) => r[k]),
        f,
      );
    lines.push(
      `| ${n} | ${policy} | ${cell("tokensPerSecond", num)} | ${cell("programsPerSecond", cores)} | ${cell("p90ProgramMs", num)} | ${cell("p90RequestMs", num)} | ${cell("prefixHitRate", pct)} | ${cell("oneReplicaShare", pct)} | ${cell("programsOnOneReplica", pct)} | ${cell("routerClientCores", cores)} | ${cell("natsCores", cores)} | ${cell("replicaCores", cores)} |`,
    );
  }
}
const scaling: string[] = [];
for (const policy of POLICIES) {
  const one = rows[1]?.[policy];
  for (const n of REPLICAS.filter((x) => x > 1)) {
    const many = rows[n]?.[policy];
    if (one && many)
      scaling.push(
        `${policy}: ${n} replicas / 1 = ${(median(many.map((r) => r.tokensPerSecond)) / median(one.map((r) => r.tokensPerSecond))).toFixed(2)}×${n > CORES ? ` (${n} replicas on ${CORES} cores)` : ""}`,
      );
  }
}
if (scaling.length > 0) lines.push("", `Throughput scaling (medians): ${scaling.join("; ")}.`);
if (fault !== null) lines.push("", faultParagraph(fault));
const md = lines.join("\n");
console.log(md);
if (values.json) {
  writeFileSync(
    "bench/cluster.json",
    JSON.stringify(
      {
        date,
        cores: CORES,
        config: { PROGRAMS, CONCURRENCY, BRANCHES, ROUNDS, MAX_TOKENS, DOCS, REPEATS },
        rows,
        fault,
      },
      null,
      2,
    ) + "\n",
  );
  writeFileSync("bench/cluster.md", md + "\n");
}
process.exit(0);
