// A driver for profiling constrained decoding's host work (issue 44), not a benchmark: the tiny reasoner, `--batch`
// requests at once with the bench:structured strict schema (thought free), or free requests of as many tokens
// (`--free`), `--rounds` times; prints the wall time per step. Run it under `node --cpu-prof --import tsx` to see where
// the JS thread's time goes in one mode only.
//   npx tsx scripts/bench/structuredDrive.ts [--free] [--batch 16] [--rounds 10] [--max-tokens 160]
//     [--profile] [--threads-report] [--gap-us N] [--pollute-kb N] [--all-allowed]
// Probes of why a constrained forward runs slower than a free one at batch 64 (issue 44), each applied before every
// forward of the timed rounds, in either mode:
//   --profile          the native forward op by op (forward({profile: true}), profileTable.ts), over the timed rounds
//   --threads-report   each thread's CPU time, run-queue wait and voluntary context switches a step
//                      (/proc/self/task/*: schedstat, status), by thread name and id
//   --gap-us N         the JS thread busy for N us on a few bytes (the host gap's length, no cache traffic)
//   --pollute-kb N     the JS thread reads and writes an N KiB buffer (the host gap's cache traffic)
//   --all-allowed      every emitting row carries a mask that allows every id (the masked sampler, no grammar)
//   --compare V,V,...  in one process, each round runs every variant once (the order rotating round by round), so
//                      that load drift touches all alike: free, constrained, gap (free with --gap-us, default 300),
//                      pollute (free with --pollute-kb, default 4096), allowed (free with --all-allowed); prints
//                      each variant's forward time a step and its ratio to free's in the same round
import { readdirSync, readFileSync } from "node:fs";
import { parseArgs } from "node:util";
import { bundledModelDir } from "../../ts/bundledModel.js";
import { Engine } from "../../ts/engine/engine.js";
import type { GenerateRequest } from "../../ts/engine/request.js";
import { loadModel } from "../../ts/model/model.js";
import { profileTable } from "./profileTable.js";

const { values } = parseArgs({
  options: {
    free: { type: "boolean", default: false },
    batch: { type: "string", default: "16" },
    rounds: { type: "string", default: "10" },
    "max-tokens": { type: "string", default: "160" },
    profile: { type: "boolean", default: false },
    "threads-report": { type: "boolean", default: false },
    "gap-us": { type: "string", default: "0" },
    "pollute-kb": { type: "string", default: "0" },
    "all-allowed": { type: "boolean", default: false },
    compare: { type: "string" },
  },
});
const batch = Number(values.batch);
const rounds = Number(values.rounds);
const maxTokens = Number(values["max-tokens"]);
/** The probes applied before each timed forward (mutable: --compare switches them variant by variant). */
const probe = {
  gapUs: Number(values["gap-us"]),
  polluteKb: Number(values["pollute-kb"]),
  allAllowed: values["all-allowed"],
};
const SCHEMA = {
  type: "object",
  properties: {
    kind: { type: "string", enum: ["book", "film", "album", "game"] },
    year: { type: "integer", minimum: 1900, maximum: 2030 },
    rating: { type: "integer", minimum: 1, maximum: 10 },
    tags: { type: "array", items: { type: "string", enum: ["classic", "new"] }, minItems: 1, maxItems: 3 },
    notes: { type: ["string", "null"] },
    title: { type: "string" },
  },
  required: ["kind", "year", "rating", "tags", "notes", "title"],
  additionalProperties: false,
};

/** This (the JS) thread's CPU time in ms: the main thread's task id is the process id (Linux). */
const jsThreadMs = () => Number(readFileSync(`/proc/self/task/${process.pid}/schedstat`, "utf8").split(" ")[0]) / 1e6;
const model = await loadModel(bundledModelDir, { kvPages: batch * (Math.ceil((96 + maxTokens) / 16) + 2) });
let steps = 0;
let forwardMs = 0;
let jsDuringMs = 0;
let probing = false; // the probes run in the timed rounds only
const forward = model.forward.bind(model);
const pollution = new Int32Array((Math.max(probe.polluteKb, values.compare ? 4096 : 0) * 1024) / 4);
let sink = 0;
const allowAll = new Int32Array(Math.ceil(model.config.vocabSize / 32)).fill(-1);
model.forward = (b) => {
  if (probing) {
    if (probe.gapUs > 0) {
      const until = performance.now() + probe.gapUs / 1000;
      while (performance.now() < until) sink++;
    }
    // One read and one write a 64-byte line: the lines leave the forward's data behind in L1/L2.
    const words = Math.min(pollution.length, (probe.polluteKb * 1024) / 4);
    for (let i = 0; i < words; i += 16) pollution[i] += i;
    if (probe.allAllowed)
      for (const s of b.sequences) if (s.emitToken && s.allowedTokens === undefined) s.allowedTokens = allowAll;
    if (values.profile) b = { ...b, profile: true };
  }
  steps++;
  const t = performance.now();
  return forward(b).finally(() => (forwardMs += performance.now() - t));
};
// The JS thread's CPU time from the native call's return (the step dispatched to a libuv thread) to its promise's
// first callback: whatever this thread ran while the forward did (it competes with the forward's threads for cores).
const native = model.native;
const forwardPacked = native.forwardPacked.bind(native);
// (An own property over the addon class's read-only method.)
Object.defineProperty(native, "forwardPacked", {
  value: (...args: Parameters<typeof forwardPacked>) => {
    const p = forwardPacked(...args);
    const c = jsThreadMs();
    return p.then((out) => {
      jsDuringMs += jsThreadMs() - c;
      return out;
    });
  },
});
const engine = new Engine({ models: { model } });
const prompt = (i: number) =>
  model.tokenizer.applyChatTemplate([{ role: "user", content: `What is ${(i * 37) % 90} + ${(i * 53 + 11) % 90}?` }]);
// The free twin makes as many tokens as the constrained run did (ignoreEos), request by request.
const constrained: GenerateRequest[] = Array.from({ length: batch }, (_, i) => ({
  prompt: prompt(i),
  maxTokens,
  structured: { type: "json_schema", schema: SCHEMA },
}));
const lengths = (await Promise.all(constrained.map((r) => engine.submit(r).result))).map(
  (o) => o.samples[0].tokens.length,
);
const free: GenerateRequest[] = constrained.map((r, i) => ({
  prompt: r.prompt,
  maxTokens: lengths[i],
  ignoreEos: true,
}));
const requests = values.free ? free : constrained;
const show = (a: number[], f: number) => {
  const s = [...a].sort((x, y) => x - y);
  return `${s[s.length >> 1].toFixed(f)} (${s[0].toFixed(f)}-${s[s.length - 1].toFixed(f)})`;
};
if (values.compare !== undefined) {
  const names = values.compare.split(",");
  const variants = new Map([
    ["free", { requests: free, gapUs: 0, polluteKb: 0, allAllowed: false }],
    ["constrained", { requests: constrained, gapUs: 0, polluteKb: 0, allAllowed: false }],
    ["gap", { requests: free, gapUs: probe.gapUs || 300, polluteKb: 0, allAllowed: false }],
    ["pollute", { requests: free, gapUs: 0, polluteKb: probe.polluteKb || 4096, allAllowed: false }],
    ["allowed", { requests: free, gapUs: 0, polluteKb: 0, allAllowed: true }],
  ]);
  for (const n of names) if (!variants.has(n)) throw new Error(`--compare: no variant ${n} (${[...variants.keys()]})`);
  const fwBy = new Map(names.map((n) => [n, [] as number[]]));
  const stepBy = new Map(names.map((n) => [n, [] as number[]]));
  const jsBy = new Map(names.map((n) => [n, [] as number[]]));
  const cpuBy = new Map(names.map((n) => [n, [] as number[]]));
  const waitBy = new Map(names.map((n) => [n, [] as number[]]));
  /** The other threads' (the forward's: libuv, the native pool; V8's helpers) CPU and run-queue wait, ns. */
  const nativeThreads = () => {
    let cpu = 0,
      wait = 0;
    for (const [name, t] of threadStats()) if (!name.startsWith("js ")) ((cpu += t.cpu), (wait += t.wait));
    return { cpu, wait };
  };
  const profiles = new Map(names.map((n) => [n, new Map<string, { calls: number; ms: number }>()]));
  probing = true;
  if (values.profile) model.takeProfile();
  for (let r = 0; r < rounds; r++)
    for (let k = 0; k < names.length; k++) {
      const name = names[(r + k) % names.length];
      const v = variants.get(name)!;
      Object.assign(probe, { gapUs: v.gapUs, polluteKb: v.polluteKb, allAllowed: v.allAllowed });
      steps = 0;
      forwardMs = 0;
      const c0 = jsThreadMs();
      const s0 = nativeThreads();
      const t0 = performance.now();
      await Promise.all(v.requests.map((q) => engine.submit(q).result));
      const s1 = nativeThreads();
      cpuBy.get(name)!.push((s1.cpu - s0.cpu) / 1e3 / steps);
      waitBy.get(name)!.push((s1.wait - s0.wait) / 1e3 / steps);
      stepBy.get(name)!.push((performance.now() - t0) / steps);
      fwBy.get(name)!.push(forwardMs / steps);
      jsBy.get(name)!.push(((jsThreadMs() - c0) / steps) * 1000);
      if (values.profile)
        for (const e of model.takeProfile()) {
          const t = profiles.get(name)!.get(e.label) ?? { calls: 0, ms: 0 };
          profiles.get(name)!.set(e.label, { calls: t.calls + e.calls, ms: t.ms + e.ms });
        }
    }
  probing = false;
  console.log(`batch ${batch}, ${rounds} rounds; median (min-max); ratio: to free's forward in the same round`);
  console.log(
    "| variant | step ms | forward ms | forward / free's | JS thread us / step | other threads' CPU us / step | their run-queue wait us / step |",
  );
  console.log("| --- | --- | --- | --- | --- | --- | --- |");
  for (const n of names) {
    const ratio = fwBy.has("free")
      ? show(
          fwBy.get(n)!.map((x, i) => x / fwBy.get("free")![i]),
          3,
        )
      : "-";
    console.log(
      `| ${n} | ${show(stepBy.get(n)!, 3)} | ${show(fwBy.get(n)!, 3)} | ${ratio} | ${show(jsBy.get(n)!, 0)} | ${show(cpuBy.get(n)!, 0)} | ${show(waitBy.get(n)!, 0)} |`,
    );
  }
  if (values.profile) {
    const ops = [...profiles.get(names[0])!.keys()];
    console.log(`\n| op (ms a step) | ${names.join(" | ")} |\n| --- |${names.map(() => " --- |").join("")}`);
    for (const op of ops) {
      const cells = names.map((n) => {
        const e = profiles.get(n)!.get(op);
        const wall = profiles.get(n)!.get("step.wall")!;
        return e ? (e.ms / wall.calls).toFixed(3) : "-";
      });
      console.log(`| ${op} | ${cells.join(" | ")} |`);
    }
  }
  await engine.dispose();
  model.dispose();
  process.exit(0);
}
/** Each thread's name and id, CPU ns, run-queue wait ns and voluntary context switches (Linux /proc). */
function threadStats(): Map<string, { cpu: number; wait: number; switches: number }> {
  const out = new Map<string, { cpu: number; wait: number; switches: number }>();
  for (const tid of readdirSync("/proc/self/task")) {
    try {
      const dir = `/proc/self/task/${tid}`;
      const name = `${tid === String(process.pid) ? "js (main)" : readFileSync(`${dir}/comm`, "utf8").trim()} ${tid}`;
      const [cpu, wait] = readFileSync(`${dir}/schedstat`, "utf8").split(" ").map(Number);
      const switches = Number(/voluntary_ctxt_switches:\s+(\d+)/.exec(readFileSync(`${dir}/status`, "utf8"))![1]);
      out.set(name, { cpu, wait, switches });
    } catch {
      // a thread that ended while read
    }
  }
  return out;
}
const per: number[] = [];
const js: number[] = [];
const fw: number[] = [];
const during: number[] = [];
const before = threadStats();
let allSteps = 0;
probing = true;
if (values.profile) model.takeProfile();
for (let r = 0; r < rounds; r++) {
  steps = 0;
  forwardMs = 0;
  jsDuringMs = 0;
  const c0 = jsThreadMs();
  const t0 = performance.now();
  await Promise.all(requests.map((q) => engine.submit(q).result));
  per.push((performance.now() - t0) / steps);
  js.push(((jsThreadMs() - c0) / steps) * 1000);
  fw.push(forwardMs / steps);
  during.push((jsDuringMs / steps) * 1000);
  allSteps += steps;
}
probing = false;
const after = threadStats();
console.log(
  `${values.free ? "free" : "constrained"} batch ${batch}: ${show(per, 3)} ms a step, forward (as this thread sees it) ${show(fw, 3)} ms, JS thread ${show(js, 0)} us a step (${show(during, 0)} while a forward ran), ${rounds} rounds`,
);
if (values["threads-report"]) {
  console.log("| thread | CPU us / step | run-queue wait us / step | voluntary switches / step |");
  console.log("| --- | --- | --- | --- |");
  for (const [name, a] of [...after].sort((x, y) => y[1].cpu - x[1].cpu)) {
    const b = before.get(name) ?? { cpu: 0, wait: 0, switches: 0 };
    const cpu = (a.cpu - b.cpu) / 1e3 / allSteps;
    if (cpu < 1) continue;
    const wait = (a.wait - b.wait) / 1e3 / allSteps;
    const sw = (a.switches - b.switches) / allSteps;
    console.log(`| ${name} | ${cpu.toFixed(0)} | ${wait.toFixed(0)} | ${sw.toFixed(2)} |`);
  }
}
if (values.profile)
  console.log(profileTable(model.takeProfile(), `${values.free ? "free" : "constrained"} batch ${batch}`));
if (sink < 0) console.log(sink);
await engine.dispose();
model.dispose();
