// Certaindex benchmark (Dynasor, measured on the arithmetic task's test split).
//   npm run bench:certaindex -- [--json] [--model DIR] [--n 100] [--cal 60] [--max-tokens 160] [--interval 16]
//     [--cot-max-tokens 256] [--concurrency 8] [--no-live] [--out bench]
// SC: every question runs once with 32 branches (branch i uses seed i, so the first C branches ARE a cap-C run);
// per cap C ∈ {4, 8, 16, 32} (rounds of C/4 branches) the traces are replayed under baseline-even (run to the cap),
// certaindex (threshold on H̃) and baseline-length (threshold on the length signal). Thresholds are calibrated on
// the validation split (no accuracy loss allowed there) and evaluated on the test split. At the cap where
// baseline-even accuracy peaks, the calibrated certaindex policy is also run live on the engine.
// CoT: every question thinks greedily to the end with a probe every `interval` tokens; without probing it costs
// the whole thought, with probing it stops at the first probe where the exit rule holds (probe tokens counted).
// The live CotProbe program is run too. Writes bench/certaindex.{md,json} and bench/certaindex-sc.svg.
import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { calibrate, evaluatePolicy, type ProgramTrace } from "../../ts/certaindex/calibrate.js";
import type { PolicySpec } from "../../ts/certaindex/policies.js";
import { shouldExitOnProbes } from "../../ts/certaindex/probe.js";
import { clusterAnswers, entropyCertaindex } from "../../ts/certaindex/signals.js";
import { Engine } from "../../ts/engine/engine.js";
import { loadModel } from "../../ts/model/model.js";
import { CotProbe } from "../../ts/programs/cotProbe.js";
import { ProgramRuntime } from "../../ts/programs/runtime.js";
import { SelfConsistency, type Branch } from "../../ts/programs/selfConsistency.js";
import { answersEquivalent } from "../../ts/tasks/arith/answer.js";
import { problemSet, type ArithProblem } from "../../ts/tasks/arith/problems.js";
import { machine, pool, resolveBenchModel } from "./benchModel.js";
import { lineChart } from "./svg.js";

const { values } = parseArgs({
  options: {
    json: { type: "boolean", default: false },
    model: { type: "string" },
    n: { type: "string", default: "100" },
    cal: { type: "string", default: "60" },
    "max-tokens": { type: "string", default: "160" },
    interval: { type: "string", default: "16" },
    "cot-max-tokens": { type: "string", default: "256" },
    concurrency: { type: "string", default: "8" },
    "no-live": { type: "boolean", default: false },
    out: { type: "string", default: "bench" },
  },
});
const log = (m: string): void => void (values.json ? process.stderr : process.stdout).write(`${m}\n`);
const N = Number(values.n);
const CAL = Number(values.cal);
const MAX_TOKENS = Number(values["max-tokens"]);
const INTERVAL = Number(values.interval);
const COT_MAX = Number(values["cot-max-tokens"]);
const CONC = Number(values.concurrency);
const CAPS = [4, 8, 16, 32];
const eq = (a: string, b: string): boolean => answersEquivalent(a, b);
const started = Date.now();

const bm = await resolveBenchModel(values.model, log);
const model = await loadModel(bm.dir, { kvPages: 8192, pageSize: 16 });
const engine = new Engine({ models: { model } });
const runtime = new ProgramRuntime(engine);
const promptOf = (p: ArithProblem): number[] | string =>
  model.tokenizer.chatTemplate === null ? p.question : model.tokenizer.encodeChat([{ role: "user", content: p.question }]);
const test = problemSet({ split: "test", n: N, seed: 1 });
const validation = problemSet({ split: "validation", n: CAL, seed: 1 });

// ---- SC: one 32-branch run per question, replayed per cap and policy.
async function branchesOf(p: ArithProblem): Promise<Branch[]> {
  const sc = new SelfConsistency({ prompt: promptOf(p), maxBranches: 32, branchesPerRound: 8, maxTokens: MAX_TOKENS, temperature: 0.8, seed: 0 });
  await runtime.run(sc, { policy: { kind: "baseline-even" } });
  return sc.state.branches;
}

function traceOf(branches: readonly Branch[], cap: number): ProgramTrace {
  const per = Math.max(1, cap / 4);
  const steps = [];
  for (let used = per; used <= cap; used += per) {
    const b = branches.slice(0, used);
    const answers = b.map((x) => x.answer);
    const tokens = b.reduce((s, x) => s + x.tokens, 0);
    steps.push({ used, certaindex: entropyCertaindex(answers, eq), answer: clusterAnswers(answers, eq)[0]?.answer ?? null, tokensUsed: tokens, lengthSignal: 1 - tokens / used / MAX_TOKENS });
  }
  return { steps };
}

log(`SC: ${validation.length} validation + ${test.length} test questions × 32 branches on ${bm.label}`);
const calBranches = await pool(validation, CONC, branchesOf);
const testBranches = await pool(test, CONC, branchesOf);
const testLabels = test.map((p) => p.answer);
const calLabels = validation.map((p) => p.answer);

interface Point { program: string; cap: number; policy: string; accuracy: number; meanTokens: number; calibrated?: PolicySpec }
const points: Point[] = [];
const calibrated = new Map<number, PolicySpec>();
for (const cap of CAPS) {
  const tr = testBranches.map((b) => traceOf(b, cap));
  const cr = calBranches.map((b) => traceOf(b, cap));
  const even = evaluatePolicy({ kind: "baseline-even" }, tr, testLabels, eq);
  points.push({ program: "sc", cap, policy: "baseline-even", ...even });
  for (const kind of ["threshold", "baseline-length"] as const) {
    const c = calibrate(cr, calLabels, { kind, equivalent: eq });
    const o = evaluatePolicy(c.policy, tr, testLabels, eq);
    points.push({ program: "sc", cap, policy: kind === "threshold" ? "certaindex" : "baseline-length", ...o, calibrated: c.policy });
    if (kind === "threshold") calibrated.set(cap, c.policy);
  }
}
const evens = points.filter((p) => p.policy === "baseline-even");
const peak = evens.reduce((a, b) => (b.accuracy > a.accuracy ? b : a));
const at = (policy: string, cap: number): Point => points.find((p) => p.policy === policy && p.cap === cap)!;
const scSummary = {
  program: "sc",
  cap: peak.cap,
  tokenSavings: 1 - at("certaindex", peak.cap).meanTokens / peak.meanTokens,
  accuracyDelta: (at("certaindex", peak.cap).accuracy - peak.accuracy) * 100,
  policy: calibrated.get(peak.cap),
};

// Live check: the calibrated policy on the engine, at the summary cap.
let scLive: { accuracy: number; meanTokens: number } | null = null;
if (!values["no-live"]) {
  log(`SC live at cap ${peak.cap} with ${JSON.stringify(calibrated.get(peak.cap))}`);
  const live = await pool(test, CONC, async (p) => {
    const sc = new SelfConsistency({ prompt: promptOf(p), maxBranches: peak.cap, branchesPerRound: Math.max(1, peak.cap / 4), maxTokens: MAX_TOKENS, temperature: 0.8, seed: 0 });
    return runtime.run(sc, { policy: calibrated.get(peak.cap) });
  });
  scLive = { accuracy: live.filter((r, i) => r.answer !== null && eq(r.answer, test[i].answer)).length / N, meanTokens: live.reduce((s, r) => s + r.tokensUsed, 0) / N };
}

// ---- CoT with and without probing.
log(`CoT: ${test.length} questions, greedy, probe every ${INTERVAL} tokens`);
const cot = await pool(test, CONC, async (p) => {
  const c = new CotProbe({ prompt: promptOf(p), interval: INTERVAL, maxTokens: COT_MAX });
  await runtime.run(c, { policy: { kind: "baseline-even" } });
  return c;
});
let plainCorrect = 0, plainTokens = 0, probedCorrect = 0, probedTokens = 0;
cot.forEach((c, i) => {
  const s = c.state;
  const mainAnswer = c.answer();
  const ok = (a: string | null): boolean => a !== null && eq(a, test[i].answer);
  plainCorrect += ok(mainAnswer) ? 1 : 0;
  plainTokens += s.mainTokens;
  const exit = s.probes.findIndex((_, k) => shouldExitOnProbes(s.probes.slice(0, k + 1)));
  const probeCost = (k: number): number => s.probeTokens.slice(0, k + 1).reduce((a, b) => a + b, 0);
  if (exit >= 0 && s.probeAt[exit] < s.mainTokens) {
    probedCorrect += ok(s.probes[exit]) ? 1 : 0;
    probedTokens += s.probeAt[exit] + probeCost(exit);
  } else {
    probedCorrect += ok(mainAnswer) ? 1 : 0;
    probedTokens += s.mainTokens + probeCost(s.probes.length - 1);
  }
});
const cotPoints = [
  { program: "cot", policy: "no-probe", accuracy: plainCorrect / N, meanTokens: plainTokens / N },
  { program: "cot", policy: "probe", accuracy: probedCorrect / N, meanTokens: probedTokens / N },
];
let cotLive: { accuracy: number; meanTokens: number } | null = null;
if (!values["no-live"]) {
  const live = await pool(test, CONC, (p) => runtime.run(new CotProbe({ prompt: promptOf(p), interval: INTERVAL, maxTokens: COT_MAX })));
  cotLive = { accuracy: live.filter((r, i) => r.answer !== null && eq(r.answer, test[i].answer)).length / N, meanTokens: live.reduce((s, r) => s + r.tokensUsed, 0) / N };
}
const cotSummary = { program: "cot", tokenSavings: 1 - cotPoints[1].meanTokens / cotPoints[0].meanTokens, accuracyDelta: (cotPoints[1].accuracy - cotPoints[0].accuracy) * 100 };

await engine.dispose();
model.dispose();

// ---- Report.
const result = {
  date: new Date().toISOString(),
  machine: machine(),
  model: bm.label,
  split: "test",
  n: N,
  calibration: { split: "validation", n: CAL },
  maxTokensPerBranch: MAX_TOKENS,
  cotInterval: INTERVAL,
  points: [...points.map(({ calibrated: _c, ...p }) => p), ...cotPoints],
  calibratedPolicies: Object.fromEntries(calibrated),
  live: { sc: scLive && { cap: peak.cap, ...scLive }, cot: cotLive },
  summary: [scSummary, cotSummary],
  wallSeconds: (Date.now() - started) / 1000,
};
const pct = (x: number): string => `${(x * 100).toFixed(1)}%`;
const md = [
  `# Certaindex benchmark — ${bm.label}`,
  "",
  `${result.date}, ${result.machine}. Command: \`npm run bench:certaindex -- --json\` (${N} test questions, thresholds calibrated on ${CAL} validation questions, ${MAX_TOKENS} tokens per branch, CoT probe every ${INTERVAL} tokens). Wall ${result.wallSeconds.toFixed(0)} s.`,
  "",
  "| program | cap | policy | accuracy | mean tokens |",
  "| --- | --- | --- | --- | --- |",
  ...points.map((p) => `| sc | ${p.cap} | ${p.policy}${p.calibrated && p.calibrated.kind !== "baseline-even" ? ` (${"threshold" in p.calibrated ? `≥${p.calibrated.threshold.toFixed(3)} from ${p.calibrated.detectAt}` : ""})` : ""} | ${pct(p.accuracy)} | ${p.meanTokens.toFixed(1)} |`),
  ...cotPoints.map((p) => `| cot | – | ${p.policy} | ${pct(p.accuracy)} | ${p.meanTokens.toFixed(1)} |`),
  "",
  `Live runs: SC cap ${peak.cap} certaindex ${scLive ? `${pct(scLive.accuracy)}, ${scLive.meanTokens.toFixed(1)} tokens` : "skipped"}; CoT probing ${cotLive ? `${pct(cotLive.accuracy)}, ${cotLive.meanTokens.toFixed(1)} tokens (includes the main branch's overshoot while probes decode)` : "skipped"}.`,
  "",
  "| program | token savings | accuracy delta (points) |",
  "| --- | --- | --- |",
  ...result.summary.map((s) => `| ${s.program}${"cap" in s ? ` (cap ${s.cap})` : ""} | ${pct(s.tokenSavings)} | ${s.accuracyDelta.toFixed(2)} |`),
  "",
  "![SC tokens to accuracy](certaindex-sc.svg)",
  "",
].join("\n");
const svg = lineChart(
  ["baseline-even", "certaindex", "baseline-length"].map((policy) => ({
    name: policy,
    points: points.filter((p) => p.policy === policy).map((p) => [p.meanTokens, p.accuracy * 100] as const),
  })),
  { title: `SC tokens → accuracy (${bm.isTinyReasoner ? "tiny reasoner" : "RANDOM fixture"})`, xLabel: "mean generated tokens per question", yLabel: "accuracy (%)" },
);
mkdirSync(values.out!, { recursive: true });
writeFileSync(join(values.out!, "certaindex.md"), md);
writeFileSync(join(values.out!, "certaindex.json"), `${JSON.stringify(result, null, 2)}\n`);
writeFileSync(join(values.out!, "certaindex-sc.svg"), svg);
if (values.json) console.log(JSON.stringify(result));
else log(md);
