// DUCHESS benchmark (issue 20) on the arithmetic task with the bundled tiny reasoner and its trained probe.
//   npm run bench:duchess -- [--json] [--model DIR] [--probe DIR] [--probe-correct DIR] [--n 500] [--caps 4,8,12] [--max-tokens 256]
//     [--tune 100] [--tune-slack 0] [--seed 1] [--concurrency 16] [--serve] [--serve-n 40] [--rates 0.5,0.8,1.1,1.5] [--repeats 3]
//     [--out bench] [--methods sc,dynasor,...] (default: every method, the ablations included)
// 1. (--tune N) DUCHESS's settings chosen on N validation questions at the middle cap: the fewest tokens among the
//    settings at least as accurate as SC there, less --tune-slack points (default 0; the paper tunes on validation
//    the same way), in two stages:
//    the check interval and tau (the probe's validation percentiles 30-80), then branch-out, alpha, beta, lambda;
//    the choice is written into the probe's probe.json (orchestration) and used below.
// 2. Accuracy vs tokens on --n TEST questions, the same questions and seeds for every method, per cap c:
//    SC (c branches, majority), SC + certaindex (Dynasor: the model's calibrated SC policy for cap c when the
//    calibration has one, else SC's default threshold policy), Short-m@k (k = c, m = 3), DUCHESS (c branches), and
//    at the largest cap DUCHESS's ablations (terminate only; + branch-out; + request stop = full).
//    Summary: DUCHESS's tokens saved vs SC at SC's best accuracy (interpolated along DUCHESS's curve), and vs
//    Dynasor at Dynasor's best accuracy.
// 3. (--serve) A Poisson trace of programs against the real engine at each --rates multiple of the measured SC
//    capacity, --repeats times each with a different arrival seed: fcfs (SC to its cap), gang+sjf+certaindex
//    (Dynasor) and DUCHESS under complexity-aware SJF; mean and P90 latency and deadline attainment (deadline =
//    3 × SC's solo latency of the question's level), each point the median of the repeats with min-max shown.
// Writes bench/duchess.{md,json} and bench/duchess-tokens.svg (+ bench/duchess-serving.svg with --serve).
import { mkdirSync, writeFileSync } from "node:fs";
import { loadavg } from "node:os";
import { join, relative } from "node:path";
import { parseArgs } from "node:util";
import { loadCalibration, programCalibration } from "../../ts/certaindex/calibrationFile.js";
import type { PolicySpec } from "../../ts/certaindex/policies.js";
import { Engine } from "../../ts/engine/engine.js";
import { loadModel } from "../../ts/model/model.js";
import { modelHash } from "../../ts/model/modelHash.js";
import { loadProbe, saveProbe, PROBE_SUBDIR, type DuchessProbe } from "../../ts/probe/probeFile.js";
import { DeepConf } from "../../ts/programs/deepconf.js";
import { Duchess, type DuchessOptions } from "../../ts/programs/duchess.js";
import type { Program } from "../../ts/programs/program.js";
import { ProgramRuntime } from "../../ts/programs/runtime.js";
import { SelfConsistency } from "../../ts/programs/selfConsistency.js";
import { ShortMK } from "../../ts/programs/shortMK.js";
import type { SchedulingPolicy } from "../../ts/sched/policy.js";
import { arithTask } from "../../ts/tasks/arith/task.js";
import { problemSet, type ArithProblem } from "../../ts/tasks/arith/problems.js";
import { machine, pool, resolveBenchModel, TINY_REASONER_DIR } from "./benchModel.js";
import {
  formatRange,
  formatSpread,
  mean,
  median,
  parseRepeats,
  percentileNearestRank,
  poissonArrivalsMs,
  runOpenLoop,
} from "./stats.js";
import { lineChart } from "./svg.js";
import { benchQuantize, QUANTIZE_PARSE_ARGS, refuseDefaultWrite } from "./quantizeArgs.js";

const { values } = parseArgs({
  options: {
    json: { type: "boolean", default: false },
    model: { type: "string" },
    probe: { type: "string" },
    "probe-correct": { type: "string" },
    n: { type: "string", default: "500" },
    caps: { type: "string", default: "4,8,12" },
    "max-tokens": { type: "string", default: "256" },
    tune: { type: "string", default: "0" },
    "tune-slack": { type: "string", default: "0" },
    seed: { type: "string", default: "1" },
    concurrency: { type: "string", default: "16" },
    serve: { type: "boolean", default: false },
    "serve-n": { type: "string", default: "40" },
    "serve-cap": { type: "string", default: "8" },
    rates: { type: "string", default: "0.5,0.8,1.1,1.5" },
    repeats: { type: "string", default: "3" },
    out: { type: "string", default: "bench" },
    methods: { type: "string" },
    ...QUANTIZE_PARSE_ARGS,
  },
});
const quantize = benchQuantize(values);
// --tune writes the chosen orchestration into the probe folder
refuseDefaultWrite(quantize, Number(values.tune) > 0 ? "--tune" : undefined, "probe folder", "probe DIR", values.probe);
const log = (m: string): void => void (values.json ? process.stderr : process.stdout).write(`${m}\n`);
const N = Number(values.n);
const CAPS = values.caps!.split(",").map(Number);
const MAX_TOKENS = Number(values["max-tokens"]);
const SEED = Number(values.seed);
const CONC = Number(values.concurrency);
const started = Date.now();
const load1m = (): number => Number(loadavg()[0].toFixed(2));
const loads: number[] = [load1m()];
const task = arithTask;

const resolved = await resolveBenchModel(values.model, log);
const bm = { ...resolved, label: resolved.label + quantize.suffix };
const model = await loadModel(bm.dir, { kvPages: 8192, pageSize: 16, ...quantize.load });
const probeDir = values.probe ?? join(bm.dir, PROBE_SUBDIR);
let probe: DuchessProbe = await loadProbe(probeDir, {
  hash: await modelHash(bm.dir),
  hiddenSize: model.config.hiddenSize,
  numLayers: model.config.numLayers,
});
const cal = loadCalibration(bm.dir, { bundledDir: TINY_REASONER_DIR });
const promptOf = (p: ArithProblem): number[] =>
  model.tokenizer.encodeChat([{ role: "user", content: p.question }], { addGenerationPrompt: true });

type Method =
  | "sc"
  | "dynasor"
  | "short-m@k"
  | "deepconf-low"
  | "deepconf-high"
  | "deepconf-low:offline"
  | "deepconf-high:offline"
  | "duchess"
  | "duchess+confidence"
  | "duchess:paper"
  | "duchess:correct-label"
  | "duchess:terminate"
  | "duchess:+branch-out"
  | "duchess:+request-stop"
  | "duchess:terminate+stop";
const MAIN_METHODS = [
  "sc",
  "dynasor",
  "short-m@k",
  "deepconf-low",
  "deepconf-high",
  "deepconf-low:offline",
  "deepconf-high:offline",
  "duchess",
  "duchess+confidence",
  "duchess:paper",
  "duchess:correct-label",
] as const;
const ABLATION_METHODS = [
  "duchess:terminate",
  "duchess:+branch-out",
  "duchess:+request-stop",
  "duchess:terminate+stop",
] as const;
/** --methods: the methods to run (default: all, ablations included). */
// --probe-correct DIR: a probe trained with the paper's label (`probe train --label correct`) for the
// duchess:correct-label curve, at that probe's own tuned settings (its probe.json orchestration).
const probeCorrect: DuchessProbe | null =
  values["probe-correct"] === undefined
    ? null
    : await loadProbe(values["probe-correct"], {
        hash: await modelHash(bm.dir),
        hiddenSize: model.config.hiddenSize,
        numLayers: model.config.numLayers,
      });
const SELECTED: readonly Method[] =
  values.methods === undefined
    ? [...MAIN_METHODS, ...ABLATION_METHODS].filter((m) => m !== "duchess:correct-label" || probeCorrect !== null)
    : values.methods.split(",").map((m) => {
        if (m === "duchess:correct-label" && probeCorrect === null)
          throw new Error("--methods duchess:correct-label needs --probe-correct DIR");
        if (![...MAIN_METHODS, ...ABLATION_METHODS].includes(m as never))
          throw new Error(
            `--methods: unknown method ${m}; expected some of ${[...MAIN_METHODS, ...ABLATION_METHODS].join(", ")}`,
          );
        return m as Method;
      });
for (const need of ["sc", "dynasor", "duchess"] as const)
  if (!SELECTED.includes(need)) throw new Error(`--methods must include ${need}: the summary compares against it`);
const ABLATIONS: Partial<Record<Method, Partial<DuchessOptions>>> = {
  // DUCHESS with DeepConf's confidence (issue 28): votes and certaindex weighted by each branch's lowest group
  // confidence over 16-token windows (DeepConf's window here), the tuned actions unchanged.
  "duchess+confidence": { confidence: { window: 16 } },
  "duchess:terminate": { branchOut: false, requestStop: false },
  "duchess:+branch-out": { branchOut: true, requestStop: false },
  "duchess:+request-stop": { branchOut: true, requestStop: true },
  "duchess:terminate+stop": { branchOut: false, requestStop: true },
};
interface Built {
  program: Program;
  policy: PolicySpec;
}

/** Dynasor's SC policy for cap c: the calibration's, else SC's own default. */
function dynasorOf(prompt: number[], c: number, seed: number): Built {
  const entry = cal === null ? undefined : programCalibration(cal.calibration, "sc", c);
  const per = entry?.settings.branchesPerRound ?? Math.max(1, Math.floor(c / 4));
  const sc = new SelfConsistency({
    prompt,
    maxBranches: c,
    branchesPerRound: per,
    maxTokens: MAX_TOKENS,
    temperature: 0.8,
    seed,
    task,
  });
  return { program: sc, policy: entry?.policy ?? sc.defaultPolicy };
}

function build(method: Method, p: ArithProblem, c: number, seed: number, over: Partial<DuchessOptions> = {}): Built {
  const prompt = promptOf(p);
  const even: PolicySpec = { kind: "baseline-even" };
  switch (method) {
    case "sc":
      return {
        program: new SelfConsistency({
          prompt,
          maxBranches: c,
          branchesPerRound: c,
          maxTokens: MAX_TOKENS,
          temperature: 0.8,
          seed,
          task,
        }),
        policy: even,
      };
    case "dynasor":
      return dynasorOf(prompt, c, seed);
    case "deepconf-low":
    case "deepconf-high":
    case "deepconf-low:offline":
    case "deepconf-high:offline": {
      // Budget c traces; the warm-up is half of them (the paper's 16 of 512 leaves no online phase at these budgets).
      const variant = method.startsWith("deepconf-low") ? "low" : "high";
      const mode = method.endsWith(":offline") ? "offline" : "online";
      return {
        program: new DeepConf({
          prompt,
          variant,
          mode,
          budget: c,
          warmup: Math.max(1, Math.floor(c / 2)),
          parallel: c,
          maxTokens: MAX_TOKENS,
          temperature: 0.8,
          seed,
          task,
        }),
        policy: even,
      };
    }
    case "short-m@k":
      return {
        program: new ShortMK({ prompt, k: c, m: Math.min(3, c), maxTokens: MAX_TOKENS, temperature: 0.8, seed, task }),
        policy: even,
      };
    case "duchess:paper": {
      // The paper's GSM8K settings whatever the tuning: the training interval, the 70th-percentile tau, alpha 0.6,
      // beta 0.8, lambda 1, every action on.
      const paper = {
        interval: probe.meta.correctness.interval,
        tau: probe.meta.correctness.tau,
        alpha: 0.6,
        beta: 0.8,
        lambda: 1,
        branchOut: true,
        requestStop: true,
      };
      return {
        program: new Duchess({
          prompt,
          probe,
          branches: c,
          maxTokens: MAX_TOKENS,
          temperature: 0.8,
          seed,
          task,
          ...paper,
          ...over,
        }),
        policy: even,
      };
    }
    case "duchess:correct-label":
      return {
        program: new Duchess({
          prompt,
          probe: probeCorrect!,
          branches: c,
          maxTokens: MAX_TOKENS,
          temperature: 0.8,
          seed,
          task,
          ...over,
        }),
        policy: even,
      };
    default:
      // duchess (as tuned) and its ablations.
      return {
        program: new Duchess({
          prompt,
          probe,
          branches: c,
          maxTokens: MAX_TOKENS,
          temperature: 0.8,
          seed,
          task,
          ...ABLATIONS[method],
          ...over,
        }),
        policy: even,
      };
  }
}

interface Point {
  method: Method;
  cap: number;
  accuracy: number;
  meanTokens: number;
  n: number;
  seconds: number;
}

async function measure(
  method: Method,
  problems: readonly ArithProblem[],
  c: number,
  over: Partial<DuchessOptions> = {},
): Promise<Point> {
  await using engine = new Engine({ models: { model } });
  const rt = new ProgramRuntime(engine);
  const t0 = Date.now();
  const rs = await pool(problems, CONC, async (p, i) => {
    const b = build(method, p, c, SEED * 1_000_003 + i * 1000, over);
    const r = await rt.run(b.program, { policy: b.policy });
    return { correct: task.equivalent(r.answer, p.answer), tokens: r.tokensUsed };
  });
  loads.push(load1m());
  return {
    method,
    cap: c,
    accuracy: rs.filter((r) => r.correct).length / rs.length,
    meanTokens: rs.reduce((s, r) => s + r.tokens, 0) / rs.length,
    n: rs.length,
    seconds: (Date.now() - t0) / 1000,
  };
}

const fmt = (p: Point): string =>
  `${p.method.padEnd(20)} c=${String(p.cap).padStart(2)}: accuracy ${(p.accuracy * 100).toFixed(1)}%, ${p.meanTokens.toFixed(0)} tokens/question (${p.seconds.toFixed(0)} s, load ${load1m()})`;

// ---- 1. Tuning on validation.
const TUNE = Number(values.tune);
const TUNE_SLACK = Number(values["tune-slack"]);
if (!(TUNE_SLACK >= 0)) throw new Error(`--tune-slack must be >= 0 (accuracy points), got ${values["tune-slack"]}`);
interface Setting {
  interval: number;
  tauPercentile: number;
  tau: number;
  branchOut: boolean;
  alpha: number;
  beta: number;
  lambda: number;
}
interface TuneRow extends Setting {
  accuracy: number;
  meanTokens: number;
}
let tuning: { grid: TuneRow[]; sc: Point; chosen: Setting; cap: number } | null = null;
if (TUNE > 0) {
  const c = CAPS[Math.floor(CAPS.length / 2)];
  const val = problemSet({ split: "validation", n: TUNE, seed: SEED + 7 });
  const sc = await measure("sc", val, c);
  log(`tuning on ${TUNE} validation questions at c=${c}; ${fmt(sc)}`);
  const grid: TuneRow[] = [];
  const cm = probe.meta.correctness;
  const taus = Object.entries(cm.tauByPercentile ?? { [String(cm.tauPercentile)]: cm.tau })
    .map(([q, tau]) => ({ q: Number(q), tau }))
    .filter((t) => t.q >= 30 && t.q <= 80);
  const run = async (s: Setting): Promise<TuneRow> => {
    const pt = await measure("duchess", val, c, { ...s, requestStop: true });
    const row = { ...s, accuracy: pt.accuracy, meanTokens: pt.meanTokens };
    grid.push(row);
    log(
      `  interval ${s.interval} tau p${s.tauPercentile} branch-out ${s.branchOut ? "on " : "off"} alpha ${s.alpha} beta ${s.beta} lambda ${s.lambda}: accuracy ${(pt.accuracy * 100).toFixed(1)}%, ${pt.meanTokens.toFixed(0)} tokens`,
    );
    return row;
  };
  // The fewest tokens among the settings at least as accurate as SC on validation, less --tune-slack points; if
  // none is, the most accurate. (With a slack of 1 point the tuning trades a point of accuracy for tokens, and
  // DUCHESS's curve stays a point under SC's, never reaching SC's best: hence the default 0.)
  const within = (g: TuneRow): boolean => g.accuracy >= sc.accuracy - TUNE_SLACK / 100 - 1e-9;
  const choose = (rows: readonly TuneRow[]): TuneRow => {
    const ok = rows.filter(within);
    return (ok.length > 0 ? ok : [...rows].sort((a, b) => b.accuracy - a.accuracy).slice(0, 1)).sort(
      (a, b) => a.meanTokens - b.meanTokens,
    )[0];
  };
  // Two stages (a full grid is ~150 runs): the check interval and tau with no branch-out and a request stop that
  // cannot change the vote (alpha 0.6 > 1/2: consensus stops only on an answer the rest could not outvote; beta 1:
  // no coverage stop), so tau is chosen on what termination alone costs; then, at those, branch-out, alpha / beta
  // and lambda.
  const stage1: TuneRow[] = [];
  for (const interval of [...new Set([cm.interval, Math.max(1, cm.interval / 2)])]) {
    for (const { q, tau } of taus)
      stage1.push(await run({ interval, tauPercentile: q, tau, branchOut: false, alpha: 0.6, beta: 1, lambda: 1 }));
  }
  const first = choose(stage1);
  const stage2: TuneRow[] = [first];
  for (const branchOut of [true, false]) {
    for (const [alpha, beta] of [
      [0.4, 0.8],
      [0.5, 0.75],
      [0.6, 0.8],
      [0.6, 1],
    ] as const) {
      for (const lambda of branchOut ? [0.8, 1] : [1]) {
        if (!branchOut && alpha === first.alpha && beta === first.beta) continue; // stage 1's row
        stage2.push(
          await run({
            interval: first.interval,
            tauPercentile: first.tauPercentile,
            tau: first.tau,
            branchOut,
            alpha,
            beta,
            lambda,
          }),
        );
      }
    }
  }
  const pick = choose(stage2);
  const ok = grid.filter(within);
  const { accuracy: _a, meanTokens: _t, ...chosen } = pick;
  tuning = { grid, sc, chosen, cap: c };
  probe = { ...probe, meta: { ...probe.meta, orchestration: { branches: c, ...chosen } } };
  await saveProbe(probeDir, probe);
  log(
    `chosen: ${JSON.stringify(chosen)} (${ok.length > 0 ? `fewest tokens within ${TUNE_SLACK} points of SC's validation accuracy` : `no setting came within ${TUNE_SLACK} points of SC's accuracy: the most accurate`}); written to ${join(probeDir, "probe.json")}`,
  );
}
const orch = probe.meta.orchestration;
const settingsLine = `block ${probe.meta.correctness.layer}, every ${orch?.interval ?? probe.meta.correctness.interval} tokens, tau ${(orch?.tau ?? probe.meta.correctness.tau).toFixed(4)} (${orch?.tauPercentile ?? probe.meta.correctness.tauPercentile}th percentile of validation predictions), S = ${probe.meta.correctness.consecutive}, alpha ${orch?.alpha ?? 0.6}, beta ${orch?.beta ?? 0.8}, lambda ${orch?.lambda ?? 1}, branch-out ${(orch?.branchOut ?? true) ? "on" : "off"}`;
log(`DUCHESS settings: ${settingsLine}`);

// ---- 2. Accuracy vs tokens on the test split.
const test = problemSet({ split: "test", n: N, seed: SEED });
const points: Point[] = [];
for (const c of CAPS) {
  for (const m of MAIN_METHODS.filter((x) => SELECTED.includes(x))) {
    const pt = await measure(m, test, c);
    points.push(pt);
    log(fmt(pt));
  }
}
const cMax = Math.max(...CAPS);
for (const m of ABLATION_METHODS.filter((x) => SELECTED.includes(x))) {
  const pt = await measure(m, test, cMax);
  points.push(pt);
  log(fmt(pt));
}

/** Tokens a method's curve needs to reach `accuracy` (linear between its caps), or null if it never does. */
function tokensAt(method: Method, accuracy: number): number | null {
  const curve = points.filter((p) => p.method === method).sort((a, b) => a.cap - b.cap);
  for (let i = 0; i < curve.length; i++) {
    if (curve[i].accuracy >= accuracy - 1e-9) {
      if (i === 0) return curve[0].meanTokens;
      const [a, b] = [curve[i - 1], curve[i]];
      const t = (accuracy - a.accuracy) / (b.accuracy - a.accuracy);
      return a.meanTokens + t * (b.meanTokens - a.meanTokens);
    }
  }
  return null;
}
const best = (m: Method): Point =>
  points
    .filter((p) => p.method === m)
    .reduce((a, b) => (b.accuracy > a.accuracy || (b.accuracy === a.accuracy && b.meanTokens < a.meanTokens) ? b : a));
const scBest = best("sc");
const dynBest = best("dynasor");
const dAtSc = tokensAt("duchess", scBest.accuracy);
const dAtDyn = tokensAt("duchess", dynBest.accuracy);
const summary = {
  scBestAccuracy: scBest.accuracy,
  scTokensAtBest: scBest.meanTokens,
  duchessTokensAtScBest: dAtSc,
  savedVsSc: dAtSc === null ? null : 1 - dAtSc / scBest.meanTokens,
  dynasorBestAccuracy: dynBest.accuracy,
  dynasorTokensAtBest: dynBest.meanTokens,
  duchessTokensAtDynasorBest: dAtDyn,
  savedVsDynasor: dAtDyn === null ? null : 1 - dAtDyn / dynBest.meanTokens,
  duchessBestAccuracy: best("duchess").accuracy,
  /** Tokens saved vs SC at SC's best accuracy, per method (null: never reaches it on this curve). */
  savedVsScByMethod: Object.fromEntries(
    (
      [
        "dynasor",
        "short-m@k",
        "deepconf-low",
        "deepconf-high",
        "deepconf-low:offline",
        "deepconf-high:offline",
        "duchess",
        "duchess+confidence",
        "duchess:paper",
        "duchess:correct-label",
      ] as const
    )
      .filter((m) => SELECTED.includes(m))
      .map((m) => {
        const t = tokensAt(m, scBest.accuracy);
        return [m, t === null ? null : 1 - t / scBest.meanTokens];
      }),
  ),
};
const pct = (x: number | null): string => (x === null ? "not reached" : `${(x * 100).toFixed(1)}%`);
log(
  `summary: SC best ${(scBest.accuracy * 100).toFixed(1)}% at ${scBest.meanTokens.toFixed(0)} tokens; DUCHESS there: ${dAtSc?.toFixed(0) ?? "not reached"} tokens (saved ${pct(summary.savedVsSc)}); vs Dynasor best ${(dynBest.accuracy * 100).toFixed(1)}% at ${dynBest.meanTokens.toFixed(0)}: saved ${pct(summary.savedVsDynasor)}`,
);

// ---- 3. Serving.
interface ServeRow {
  system: string;
  rate: number;
  ratePerSecond: number;
  repeats: Array<{ meanMs: number; p90Ms: number; attainment: number; accuracy: number; meanTokens: number }>;
  load: number;
}
const serveRows: ServeRow[] = [];
let capacity = 0;
const soloMs = new Map<number, number>();
const SERVE_CAP = Number(values["serve-cap"]);
if (values.serve) {
  const serveN = Number(values["serve-n"]);
  const repeats = parseRepeats(values.repeats);
  const qs = problemSet({ split: "test", n: serveN, seed: SEED + 11 });
  // Capacity: SC to its cap on these questions, all at once.
  {
    await using engine = new Engine({ models: { model }, maxBatchSeqs: 32 });
    const rt = new ProgramRuntime(engine);
    const t0 = Date.now();
    await pool(qs, 16, (p, i) => rt.run(build("sc", p, SERVE_CAP, i).program, { policy: { kind: "baseline-even" } }));
    capacity = qs.length / ((Date.now() - t0) / 1000);
    for (const level of [1, 2, 3, 4, 5]) {
      const ms: number[] = [];
      for (const p of problemSet({ split: "validation", n: 3, seed: 3, levels: [level as 1] }))
        ms.push((await rt.run(build("sc", p, SERVE_CAP, 0).program, { policy: { kind: "baseline-even" } })).elapsedMs);
      soloMs.set(level, median(ms));
    }
  }
  log(
    `serving: capacity ≈ ${capacity.toFixed(2)} SC programs/s (cap ${SERVE_CAP}); solo SC latency per level ${[...soloMs].map(([l, ms]) => `L${l} ${ms} ms`).join(", ")}`,
  );
  const systems: Array<{ name: string; sched: SchedulingPolicy; method: Method }> = [
    { name: "SC, fcfs", sched: "fcfs", method: "sc" },
    { name: "Dynasor (gang+sjf+certaindex)", sched: "gang+sjf", method: "dynasor" },
    { name: "DeepConf-low, gang", sched: "gang", method: "deepconf-low" },
    { name: "DUCHESS, complexity-aware SJF", sched: "gang+complexity", method: "duchess" },
  ];
  for (const mult of values.rates!.split(",").map(Number)) {
    const rate = mult * capacity;
    for (const sys of systems) {
      const row: ServeRow = { system: sys.name, rate: mult, ratePerSecond: rate, repeats: [], load: 0 };
      for (let rep = 0; rep < repeats; rep++) {
        await using engine = new Engine({ models: { model }, schedulingPolicy: sys.sched, maxBatchSeqs: 32 });
        const rt = new ProgramRuntime(engine);
        const arrivals = poissonArrivalsMs(qs.length, rate, SEED * 7919 + rep * 104729 + Math.round(mult * 1000));
        const rs = await runOpenLoop(qs, arrivals, async (p, i) => {
          const b = build(sys.method, p, SERVE_CAP, i);
          const r = await rt.run(b.program, { policy: b.policy });
          return {
            deadline: 3 * soloMs.get(p.level)!,
            correct: task.equivalent(r.answer, p.answer),
            tokens: r.tokensUsed,
          };
        });
        const lat = rs.map((r) => r.latencyMs);
        row.repeats.push({
          meanMs: mean(lat),
          p90Ms: percentileNearestRank(lat, 90),
          attainment: rs.filter((r) => r.latencyMs <= r.result.deadline).length / rs.length,
          accuracy: rs.filter((r) => r.result.correct).length / rs.length,
          meanTokens: mean(rs.map((r) => r.result.tokens)),
        });
      }
      row.load = load1m();
      loads.push(row.load);
      serveRows.push(row);
      const med = (k: "meanMs" | "p90Ms" | "attainment"): string => {
        const xs = row.repeats.map((r) => r[k]);
        const f = (x: number): string => x.toFixed(k === "attainment" ? 2 : 0);
        return `${f(median(xs))} [${formatRange(xs, f)}]`;
      };
      log(
        `${sys.name.padEnd(32)} rate ${mult}× (${rate.toFixed(2)}/s): mean ${med("meanMs")} ms, p90 ${med("p90Ms")} ms, attainment ${med("attainment")}, load ${row.load}`,
      );
    }
  }
}
model.dispose();

// ---- Reports.
const commandLine = `npm run bench:duchess -- ${process.argv.slice(2).join(" ")}`.trim();
const result = {
  date: new Date().toISOString(),
  machine: machine(),
  loadAverage1m: { min: Math.min(...loads), max: Math.max(...loads) },
  command: commandLine,
  model: bm.label,
  probe: {
    dir: relative(process.cwd(), probeDir),
    correctness: probe.meta.correctness,
    difficulty: probe.meta.difficulty,
    orchestration: probe.meta.orchestration ?? null,
  },
  probeCorrect:
    probeCorrect === null
      ? null
      : {
          dir: values["probe-correct"],
          correctness: probeCorrect.meta.correctness,
          orchestration: probeCorrect.meta.orchestration ?? null,
        },
  n: N,
  caps: CAPS,
  maxTokens: MAX_TOKENS,
  tuning,
  points,
  summary,
  serving: values.serve
    ? {
        cap: SERVE_CAP,
        capacityProgramsPerSecond: capacity,
        soloMsByLevel: Object.fromEntries(soloMs),
        rows: serveRows,
      }
    : null,
  wallSeconds: (Date.now() - started) / 1000,
};
/** The probe as trained and the DUCHESS settings as run, with what the paper-settings and paper-label curves are. */
function probeParagraph(): string {
  const cm = probe.meta.correctness;
  const label =
    cm.label === "settled"
      ? " (a checkpoint is positive when the next 3 CoT probes give the answer the branch ends with; the paper's label asks for the right answer)"
      : " (the paper's: the next 3 CoT probes give the right answer)";
  return [
    `Probe: label ${cm.label ?? "correct"}${label}, block ${cm.layer} (validation AUROC by block ${JSON.stringify(cm.aurocByLayer)}; test AUROC ${cm.testAuroc}), trained on checkpoints every ${cm.interval} tokens;`,
    `difficulty classifier test accuracy ${probe.meta.difficulty?.testAccuracy ?? "—"}, Spearman ${probe.meta.difficulty?.testSpearman ?? "—"}.`,
    `DUCHESS as run: ${settingsLine}${tuning ? ` (tuned on ${TUNE} validation questions at c = ${tuning.cap})` : ""}.`,
    `\`duchess:paper\` is the paper's GSM8K settings whatever the tuning (interval ${cm.interval}, tau at the 70th percentile, alpha 0.6, beta 0.8, lambda 1, branch-out on).${
      probeCorrect
        ? ` \`duchess:correct-label\` is DUCHESS with a probe trained with the paper's label (${values["probe-correct"]}: block ${probeCorrect.meta.correctness.layer}, test AUROC ${probeCorrect.meta.correctness.testAuroc}) at that probe's own tuned settings.`
        : ""
    }`,
  ].join(" ");
}

/** Tokens DUCHESS saves at SC's and at Dynasor's best accuracy, and the ablations at the largest cap. */
function summaryParagraph(): string {
  return [
    `**Summary.** SC's best accuracy ${(scBest.accuracy * 100).toFixed(1)}% (c = ${scBest.cap}) costs ${scBest.meanTokens.toFixed(0)} tokens; DUCHESS reaches it with ${dAtSc?.toFixed(0) ?? "—"} tokens: **${pct(summary.savedVsSc)} saved** (paper 42–63%; target ≥ 40%).`,
    `Dynasor's best ${(dynBest.accuracy * 100).toFixed(1)}% (c = ${dynBest.cap}) costs ${dynBest.meanTokens.toFixed(0)}; DUCHESS there: ${dAtDyn?.toFixed(0) ?? "—"} (${pct(summary.savedVsDynasor)} saved).`,
    `Ablations at c = ${cMax} (tuned interval and tau): terminate only ${pointStr("duchess:terminate")}, + branch-out ${pointStr("duchess:+branch-out")}, + request stop ${pointStr("duchess:+request-stop")}; terminate + request stop without branch-out ${pointStr("duchess:terminate+stop")}.`,
  ].join(" ");
}

const spread = (xs: number[], digits: number): string => formatSpread(xs, (x) => x.toFixed(digits));
const md = [
  `# DUCHESS benchmark — ${bm.label}`,
  "",
  `${result.date}, ${result.machine}, 1-min load average ${result.loadAverage1m.min}–${result.loadAverage1m.max}. Command: \`${commandLine}\`. Wall ${result.wallSeconds.toFixed(0)} s.`,
  "",
  probeParagraph(),
  "",
  `## Accuracy vs tokens (${N} test questions, the same questions and seeds for every method; max ${MAX_TOKENS} tokens per branch)`,
  "",
  "| method | c | accuracy | tokens / question | wall (s) |",
  "| --- | --- | --- | --- | --- |",
  ...points.map(
    (p) =>
      `| ${p.method} | ${p.cap} | ${(p.accuracy * 100).toFixed(1)}% | ${p.meanTokens.toFixed(0)} | ${p.seconds.toFixed(0)} |`,
  ),
  "",
  `Tokens saved vs SC at SC's best accuracy (${(scBest.accuracy * 100).toFixed(1)}%), read along each method's curve: ${Object.entries(
    summary.savedVsScByMethod,
  )
    .map(([m, v]) => `${m} ${pct(v)}`)
    .join(", ")}.`,
  "",
  summaryParagraph(),
  "",
  ...(tuning
    ? [
        `## Tuning (validation, ${TUNE} questions, c = ${tuning.cap}; SC there: ${(tuning.sc.accuracy * 100).toFixed(1)}%, ${tuning.sc.meanTokens.toFixed(0)} tokens; chosen: the fewest tokens within ${TUNE_SLACK} points of SC; two stages: interval and tau at alpha 0.6, beta 1 without branch-out, then branch-out, alpha, beta, lambda at the chosen ones)`,
        "",
        "| interval | tau (percentile) | branch-out | alpha | beta | lambda | accuracy | tokens |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
        ...tuning.grid.map(
          (g) =>
            `| ${g.interval} | ${g.tau.toFixed(3)} (${g.tauPercentile}) | ${g.branchOut ? "on" : "off"} | ${g.alpha} | ${g.beta} | ${g.lambda} | ${(g.accuracy * 100).toFixed(1)}% | ${g.meanTokens.toFixed(0)} |`,
        ),
        "",
      ]
    : []),
  ...(values.serve
    ? [
        `## Serving (${values["serve-n"]} programs per run, c = ${SERVE_CAP}, Poisson arrivals at multiples of the SC capacity ${capacity.toFixed(2)} programs/s, ${values.repeats} repeats per point with different arrival seeds: median (min–max))`,
        "",
        "| system | rate (× capacity) | mean latency (ms) | P90 latency (ms) | deadline attainment | accuracy | tokens / program | load |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
        ...serveRows.map(
          (r) =>
            `| ${r.system} | ${r.rate} | ${spread(
              r.repeats.map((x) => x.meanMs),
              0,
            )} | ${spread(
              r.repeats.map((x) => x.p90Ms),
              0,
            )} | ${spread(
              r.repeats.map((x) => x.attainment),
              2,
            )} | ${spread(
              r.repeats.map((x) => x.accuracy),
              2,
            )} | ${spread(
              r.repeats.map((x) => x.meanTokens),
              0,
            )} | ${r.load} |`,
        ),
        "",
      ]
    : []),
];
function pointStr(m: Method, cap = cMax): string {
  const p = points.find((x) => x.method === m && x.cap === cap);
  return p ? `${(p.accuracy * 100).toFixed(1)}% / ${p.meanTokens.toFixed(0)} tokens` : "—";
}
mkdirSync(values.out!, { recursive: true });
writeFileSync(join(values.out!, "duchess.md"), `${md.join("\n")}\n`);
writeFileSync(join(values.out!, "duchess.json"), `${JSON.stringify(result, null, 2)}\n`);
const series = (
  [
    "sc",
    "dynasor",
    "short-m@k",
    "deepconf-low",
    "deepconf-high",
    "duchess",
    "duchess+confidence",
    "duchess:paper",
    "duchess:correct-label",
  ] as const
)
  .filter((m) => SELECTED.includes(m))
  .map((m) => ({
    name: m,
    points: points
      .filter((p) => p.method === m)
      .sort((a, b) => a.cap - b.cap)
      .map((p) => [p.meanTokens, p.accuracy * 100] as const),
  }));
writeFileSync(
  join(values.out!, "duchess-tokens.svg"),
  lineChart(series, {
    title: `Accuracy vs tokens (${N} test questions, caps ${CAPS.join("/")})`,
    xLabel: "generated tokens per question",
    yLabel: "accuracy (%)",
  }),
);
if (values.serve) {
  const names = [...new Set(serveRows.map((r) => r.system))];
  const s2 = names.map((name) => ({
    name,
    points: serveRows
      .filter((r) => r.system === name)
      .map((r) => [r.ratePerSecond, median(r.repeats.map((x) => x.meanMs))] as const),
  }));
  writeFileSync(
    join(values.out!, "duchess-serving.svg"),
    lineChart(s2, {
      title: "Mean latency vs arrival rate (median of repeats)",
      xLabel: "programs / s",
      yLabel: "mean latency (ms)",
    }),
  );
}
if (values.json) console.log(JSON.stringify(result));
log(
  `wrote ${join(values.out!, "duchess.md")}, duchess.json, duchess-tokens.svg${values.serve ? ", duchess-serving.svg" : ""}`,
);
