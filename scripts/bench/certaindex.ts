// Certaindex benchmark (Dynasor) on the arithmetic task: policies calibrated on the VALIDATION split, results on
// the TEST split (no test-set tuning).
//   npm run bench:certaindex -- [--calibrate] [--json] [--model DIR] [--n 500] [--cal 1000] [--tree-n 100]
//     [--max-tokens 448] [--cot-max-tokens 448] [--concurrency 8] [--calibration FILE] [--calibration-out FILE]
//     [--no-live] [--out bench]
// --calibrate: runs every built-in program to its cap on `--cal` validation questions, picks with calibrate() the
// cheapest policy that loses no accuracy there and no question the cap answered right (maxRegressions 0: an
// accuracy-only criterion lets lucky early answers pay for lost ones, which does not carry over to the test
// split) (per SC cap; per probe interval for CoT) and writes the calibration
// JSON the CLI reads (calibration/tiny-reasoner.json for the bundled model, else <model>/certaindex.json), then
// benchmarks. Without it the benchmark reads that file (or --calibration FILE) and fails if there is none.
// SC: every test question runs once with 32 branches (branch i uses seed i, so the first C branches ARE a cap-C
// run); per cap C ∈ {4, 8, 16, 32} (rounds of C/4 branches) the traces are replayed under baseline-even,
// certaindex and baseline-length. At the cap where baseline-even accuracy peaks, the certaindex policy also runs
// live on the engine. CoT: the greedy thought with a probe every `interval` tokens (the calibrated interval);
// without probing it costs the whole thought, with probing it stops where the calibrated policy says (probe tokens
// counted); the live CotProbe program is run too (its main branch keeps decoding while a probe decodes: overshoot).
// Rebase and MCTS: run to their caps on `--tree-n` test questions, replayed under their calibrated policies.
// Writes bench/certaindex.{md,json} and bench/certaindex-sc.svg.
import { existsSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { loadavg } from "node:os";
import { dirname, join, relative } from "node:path";
import { parseArgs } from "node:util";
import {
  calibrate,
  evaluatePolicy,
  replay,
  type CalibrationResult,
  type ProgramTrace,
} from "../../ts/certaindex/calibrate.js";
import {
  CALIBRATION_FORMAT,
  defaultCalibrationOut,
  loadCalibration,
  modelFingerprint,
  parseCalibration,
  RECALIBRATE_COMMAND,
  type CalibrationFile,
  type CalibrationOutcome,
  type ProgramCalibration,
} from "../../ts/certaindex/calibrationFile.js";
import type { PolicySpec } from "../../ts/certaindex/policies.js";
import { DEFAULT_PROBE_RULE, probeCertaindex } from "../../ts/certaindex/probe.js";
import { entropyCertaindex, majorityVote } from "../../ts/certaindex/signals.js";
import { Engine } from "../../ts/engine/engine.js";
import { loadModel } from "../../ts/model/model.js";
import { CotProbe } from "../../ts/programs/cotProbe.js";
import { Mcts } from "../../ts/programs/mcts.js";
import type { Program } from "../../ts/programs/program.js";
import { Rebase } from "../../ts/programs/rebase.js";
import { arithVerifier } from "../../ts/tasks/arith/stepScore.js";
import { ProgramRuntime } from "../../ts/programs/runtime.js";
import { SelfConsistency, type Branch } from "../../ts/programs/selfConsistency.js";
import { answersEquivalent } from "../../ts/tasks/arith/answer.js";
import { problemSet, type ArithProblem } from "../../ts/tasks/arith/problems.js";
import { machine, pool, resolveBenchModel, TINY_REASONER_DIR } from "./benchModel.js";
import { benchQuantize, QUANTIZE_PARSE_ARGS, refuseDefaultWrite } from "./quantizeArgs.js";
import { lineChart } from "./svg.js";

const { values } = parseArgs({
  options: {
    json: { type: "boolean", default: false },
    calibrate: { type: "boolean", default: false },
    calibration: { type: "string" },
    "calibration-out": { type: "string" },
    model: { type: "string" },
    n: { type: "string", default: "500" },
    cal: { type: "string", default: "1000" },
    "tree-n": { type: "string", default: "100" },
    "max-tokens": { type: "string", default: "448" },
    "cot-max-tokens": { type: "string", default: "448" },
    concurrency: { type: "string", default: "8" },
    "no-live": { type: "boolean", default: false },
    out: { type: "string", default: "bench" },
    ...QUANTIZE_PARSE_ARGS,
  },
});
const quantize = benchQuantize(values);
refuseDefaultWrite(
  quantize,
  values.calibrate ? "--calibrate" : undefined,
  "calibration file",
  "calibration-out FILE",
  values["calibration-out"],
);
const log = (m: string): void => void (values.json ? process.stderr : process.stdout).write(`${m}\n`);
const intArg = (name: string): number => {
  const v = Number(values[name as keyof typeof values]);
  if (!Number.isInteger(v) || v < 1)
    throw new Error(`--${name} must be an integer ≥ 1, got ${String(values[name as keyof typeof values])}`);
  return v;
};
const N = intArg("n");
const CAL = intArg("cal");
const TREE_N = intArg("tree-n");
const MAX_TOKENS = intArg("max-tokens");
const COT_MAX = intArg("cot-max-tokens");
const CONC = intArg("concurrency");
const CAPS = [4, 8, 16, 32];
/** The cap `deliberate run --program sc` uses by default (its calibration is the file's programs.sc). */
const SC_DEFAULT_CAP = 16;
/** CoT calibration probes every PROBE_GRID tokens; candidate intervals are its multiples. */
const PROBE_GRID = 4;
const COT_INTERVALS = [4, 8, 12, 16, 24, 32, 64];
/** Probe windows tried with each interval (the paper's 3, and 2 for thoughts whose tail is only a few lines). */
const COT_WINDOWS = [2, 3];
const REBASE_WIDTH = 8;
const MCTS_SIMS = 32;
const MCTS_PER_ROUND = 4;
const eq = (a: string, b: string): boolean => answersEquivalent(a, b);
/** calibrate() options for every program: lose no accuracy and no question the cap answered right. */
const CRITERION = { equivalent: eq, maxRegressions: 0 };
/** Certaindex policies: a threshold per detection step (calibrateStaircase), never worse than one threshold. */
const CERTAINDEX = { ...CRITERION, kind: "curve" as const };
const started = Date.now();
const loads: number[] = [];
const sampleLoad = (): number => {
  const l = Number(loadavg()[0].toFixed(2));
  loads.push(l);
  return l;
};
sampleLoad();

const resolved = await resolveBenchModel(values.model, log);
const bm = { ...resolved, label: resolved.label + quantize.suffix };
const model = await loadModel(bm.dir, { kvPages: 8192, pageSize: 16, ...quantize.load });
const engine = new Engine({ models: { model } });
const runtime = new ProgramRuntime(engine);
const promptOf = (p: ArithProblem): number[] | string =>
  model.tokenizer.chatTemplate === null
    ? p.question
    : model.tokenizer.encodeChat([{ role: "user", content: p.question }]);
const ok = (a: string | null, p: ArithProblem): boolean => a !== null && eq(a, p.answer);

// ---- Traces: one run to the cap per question, recorded so every policy (and every smaller cap) can be replayed.

async function branchesOf(p: ArithProblem): Promise<Branch[]> {
  const sc = new SelfConsistency({
    prompt: promptOf(p),
    maxBranches: 32,
    branchesPerRound: 8,
    maxTokens: MAX_TOKENS,
    temperature: 0.8,
    seed: 0,
  });
  await runtime.run(sc, { policy: { kind: "baseline-even" } });
  return sc.state.branches;
}

/** Branches per round the SC calibration tries at a cap (the finer, the earlier a sure program can stop; the
 * coarser, the fewer sequential rounds). */
function perRoundChoices(cap: number): number[] {
  return [...new Set([cap / 4, cap / 8].filter((x) => Number.isInteger(x) && x >= 1))];
}

function scTrace(branches: readonly Branch[], cap: number, per = Math.max(1, cap / 4)): ProgramTrace {
  const steps = [];
  for (let used = per; used <= cap; used += per) {
    const b = branches.slice(0, used);
    const answers = b.map((x) => x.answer);
    const tokens = b.reduce((s, x) => s + x.tokens, 0);
    steps.push({
      used,
      certaindex: entropyCertaindex(answers, eq),
      answer: majorityVote(answers, eq).answer,
      tokensUsed: tokens,
      lengthSignal: 1 - tokens / used / MAX_TOKENS,
    });
  }
  return { steps };
}

/** The greedy thought with a probe every `interval` tokens, run to its end. */
async function cotRun(p: ArithProblem, interval: number): Promise<CotProbe> {
  const c = new CotProbe({ prompt: promptOf(p), interval, maxTokens: COT_MAX });
  await runtime.run(c, { policy: { kind: "baseline-even" } });
  return c;
}

/** A probed thought as a trace for probes every `interval` tokens (a multiple of the run's own interval): step k =
 * after the k-th probe (tokens: the thought up to it + every probe so far); the last step is the finished thought. */
function cotTrace(
  c: CotProbe,
  runInterval: number,
  interval: number,
  window: number,
): { trace: ProgramTrace; plainTokens: number; plainAnswer: string | null } {
  const s = c.state;
  const plainAnswer = c.answer();
  const every = interval / runInterval;
  const probes: Array<string | null> = [];
  const steps: ProgramTrace["steps"][number][] = [];
  let probeTokens = 0;
  const rule = { ...DEFAULT_PROBE_RULE, window };
  for (let k = every - 1; k < s.probes.length; k += every) {
    if (s.probeAt[k] >= s.mainTokens) break; // the thought ended there: no saving left
    probes.push(s.probes[k]);
    probeTokens += s.probeTokens[k];
    steps.push({
      used: steps.length + 1,
      certaindex: probeCertaindex(probes, rule),
      answer: s.probes[k],
      tokensUsed: s.probeAt[k] + probeTokens,
    });
  }
  steps.push({ used: steps.length + 1, certaindex: 0, answer: plainAnswer, tokensUsed: s.mainTokens + probeTokens });
  return { trace: { steps }, plainTokens: s.mainTokens, plainAnswer };
}

function treeTrace(
  history: ReadonlyArray<{ certaindex: number; answer: string | null; tokensUsed: number; knobUsed: number }>,
): ProgramTrace {
  return {
    steps: history.map((h) => ({
      used: h.knobUsed,
      certaindex: h.certaindex,
      answer: h.answer,
      tokensUsed: h.tokensUsed,
    })),
  };
}

async function treeTraces(kind: "rebase" | "mcts", problems: readonly ArithProblem[]): Promise<ProgramTrace[]> {
  return pool(problems, CONC, async (p) => {
    const prog: Program =
      kind === "rebase"
        ? new Rebase({
            prompt: promptOf(p),
            question: p.question,
            reward: arithVerifier,
            width: REBASE_WIDTH,
            maxTokens: MAX_TOKENS,
            seed: 0,
          })
        : new Mcts({
            prompt: promptOf(p),
            question: p.question,
            reward: arithVerifier,
            maxSimulations: MCTS_SIMS,
            simulationsPerRound: MCTS_PER_ROUND,
            maxTokens: MAX_TOKENS,
            seed: 0,
          });
    const r = await runtime.run(prog, { policy: { kind: "baseline-even" } });
    return treeTrace(r.history);
  });
}

function outcome(
  policy: PolicySpec,
  traces: readonly ProgramTrace[],
  labels: readonly string[],
  baseline?: { accuracy: number; meanTokens: number },
): CalibrationOutcome {
  const o = evaluatePolicy(policy, traces, labels, eq);
  const b = baseline ?? evaluatePolicy({ kind: "baseline-even" }, traces, labels, eq);
  return {
    n: traces.length,
    accuracy: o.accuracy,
    meanTokens: o.meanTokens,
    baselineAccuracy: b.accuracy,
    baselineMeanTokens: b.meanTokens,
    tokenSavings: 1 - o.meanTokens / b.meanTokens,
  };
}

// ---- 1. Calibration on the validation split (--calibrate), or the stored calibration.
let cal: CalibrationFile;
let calFile: string;
let calStale = false;
if (values.calibrate) {
  const validation = problemSet({ split: "validation", n: CAL, seed: 1 });
  const labels = validation.map((p) => p.answer);
  log(`calibrating on ${CAL} validation questions (${bm.label}), load ${sampleLoad()}`);
  const t0 = Date.now();
  const scByCap: NonNullable<CalibrationFile["scByCap"]> = {};
  const calBranches = await pool(validation, CONC, branchesOf);
  for (const cap of CAPS) {
    let best: { per: number; c: CalibrationResult; traces: ProgramTrace[] } | null = null;
    for (const per of perRoundChoices(cap)) {
      const traces = calBranches.map((b) => scTrace(b, cap, per));
      const c = calibrate(traces, labels, CERTAINDEX);
      if (best === null || c.outcome.meanTokens < best.c.outcome.meanTokens) best = { per, c, traces };
    }
    const { per, c, traces } = best!;
    const length = calibrate(traces, labels, { ...CRITERION, kind: "baseline-length" });
    scByCap[String(cap)] = {
      policy: c.policy,
      settings: { maxBranches: cap, branchesPerRound: per, maxTokens: MAX_TOKENS, temperature: 0.8 },
      validation: outcome(c.policy, traces, labels),
      baselineLength: length.policy,
    };
  }
  log(
    `  sc: ${((Date.now() - t0) / 1000).toFixed(0)} s; cap 16 ${JSON.stringify(scByCap["16"].policy)}, saves ${(scByCap["16"].validation.tokenSavings * 100).toFixed(1)}% on validation`,
  );

  // CoT: one run probing every PROBE_GRID tokens serves every interval that is a multiple of it.
  const t1 = Date.now();
  const cotRuns = await pool(validation, CONC, (p) => cotRun(p, PROBE_GRID));
  let cot: ProgramCalibration | null = null;
  for (const interval of COT_INTERVALS)
    for (const window of COT_WINDOWS) {
      const built = cotRuns.map((c) => cotTrace(c, PROBE_GRID, interval, window));
      const traces = built.map((b) => b.trace);
      const plain = {
        accuracy: built.filter((b, i) => ok(b.plainAnswer, validation[i])).length / built.length,
        meanTokens: built.reduce((s, b) => s + b.plainTokens, 0) / built.length,
      };
      const c = calibrate(traces, labels, CERTAINDEX);
      const o = outcome(c.policy, traces, labels, plain);
      if (o.accuracy >= plain.accuracy - 1e-12 && (cot === null || o.meanTokens < cot.validation.meanTokens)) {
        cot = { policy: c.policy, settings: { interval, probeWindow: window, maxTokens: COT_MAX }, validation: o };
      }
    }
  if (cot === null)
    throw new Error("CoT calibration found no setting; this cannot happen (running to the end always qualifies)");
  log(
    `  cot-probe: ${((Date.now() - t1) / 1000).toFixed(0)} s; interval ${cot.settings.interval} window ${cot.settings.probeWindow} ${JSON.stringify(cot.policy)}, saves ${(cot.validation.tokenSavings * 100).toFixed(1)}% vs no probing on validation`,
  );

  const trees: Partial<Record<"rebase" | "mcts", ProgramCalibration>> = {};
  for (const kind of ["rebase", "mcts"] as const) {
    const t2 = Date.now();
    const tv = validation.slice(0, Math.min(CAL, TREE_N * 2));
    const traces = await treeTraces(kind, tv);
    const c = calibrate(
      traces,
      tv.map((p) => p.answer),
      CERTAINDEX,
    );
    trees[kind] = {
      policy: c.policy,
      settings:
        kind === "rebase"
          ? { width: REBASE_WIDTH, maxTokens: MAX_TOKENS }
          : { maxSimulations: MCTS_SIMS, simulationsPerRound: MCTS_PER_ROUND, maxTokens: MAX_TOKENS },
      validation: outcome(
        c.policy,
        traces,
        tv.map((p) => p.answer),
      ),
    };
    log(
      `  ${kind}: ${((Date.now() - t2) / 1000).toFixed(0)} s on ${tv.length} questions; ${JSON.stringify(c.policy)}, saves ${(trees[kind]!.validation.tokenSavings * 100).toFixed(1)}%`,
    );
  }
  calFile = values["calibration-out"] ?? defaultCalibrationOut(bm.dir, TINY_REASONER_DIR);
  // The effort section is calibrated apart (npm run bench:certaindex-effort -- --calibrate): kept when the programs'
  // are redone on the same weights.
  const prior = existsSync(calFile) ? parseCalibration(readFileSync(calFile, "utf8"), calFile) : null;
  const keepEffort =
    prior?.effort !== undefined && prior.model.sha256 === modelFingerprint(bm.dir)
      ? { effort: prior.effort, effortCommand: prior.effortCommand }
      : {};
  cal = {
    format: CALIBRATION_FORMAT,
    version: 1,
    createdAt: new Date().toISOString(),
    command: `${RECALIBRATE_COMMAND}${values.model ? ` --model ${values.model}` : ""} (cal ${CAL}, max-tokens ${MAX_TOKENS}, cot-max-tokens ${COT_MAX})`,
    model: { path: relative(process.cwd(), bm.dir) || ".", sha256: modelFingerprint(bm.dir) },
    split: "validation",
    programs: { sc: scByCap[String(SC_DEFAULT_CAP)], "cot-probe": cot, rebase: trees.rebase, mcts: trees.mcts },
    scByCap,
    ...keepEffort,
  };
  mkdirSync(dirname(calFile), { recursive: true });
  writeFileSync(calFile, `${JSON.stringify(cal, null, 2)}\n`);
  log(`wrote ${calFile}`);
} else {
  const loaded = loadCalibration(bm.dir, { file: values.calibration, bundledDir: TINY_REASONER_DIR });
  if (loaded === null)
    throw new Error(
      `no certaindex calibration for ${bm.dir}; run \`${RECALIBRATE_COMMAND}\` first (or pass --calibration FILE)`,
    );
  cal = loaded.calibration;
  calFile = loaded.file;
  calStale = loaded.stale;
  if (calStale)
    log(
      `WARNING: ${calFile} was calibrated on other weights; the figures below use stale policies. Rerun with --calibrate.`,
    );
}
const scPolicy = (cap: number): ProgramCalibration & { baselineLength?: PolicySpec } => {
  const e = cal.scByCap?.[String(cap)];
  if (e === undefined) throw new Error(`${calFile} has no SC calibration for cap ${cap}; rerun with --calibrate`);
  return e;
};

// ---- 2. SC on the test split.
const test = problemSet({ split: "test", n: N, seed: 1 });
const testLabels = test.map((p) => p.answer);
log(`SC: ${test.length} test questions × 32 branches, load ${sampleLoad()}`);
const testBranches = await pool(test, CONC, branchesOf);

interface Point {
  program: string;
  cap: number;
  policy: string;
  accuracy: number;
  meanTokens: number;
  spec?: PolicySpec;
}
const points: Point[] = [];
for (const cap of CAPS) {
  const entry = scPolicy(cap);
  const tr = testBranches.map((b) => scTrace(b, cap, entry.settings.branchesPerRound as number | undefined));
  points.push({
    program: "sc",
    cap,
    policy: "baseline-even",
    ...evaluatePolicy({ kind: "baseline-even" }, tr, testLabels, eq),
  });
  points.push({
    program: "sc",
    cap,
    policy: "certaindex",
    ...evaluatePolicy(entry.policy, tr, testLabels, eq),
    spec: entry.policy,
  });
  if (entry.baselineLength)
    points.push({
      program: "sc",
      cap,
      policy: "baseline-length",
      ...evaluatePolicy(entry.baselineLength, tr, testLabels, eq),
      spec: entry.baselineLength,
    });
}
const evens = points.filter((p) => p.policy === "baseline-even");
const peak = evens.reduce((a, b) => (b.accuracy > a.accuracy ? b : a));
const at = (policy: string, cap: number): Point => points.find((p) => p.policy === policy && p.cap === cap)!;
const scSummary = {
  program: "sc",
  cap: peak.cap,
  tokenSavings: 1 - at("certaindex", peak.cap).meanTokens / peak.meanTokens,
  accuracyDelta: (at("certaindex", peak.cap).accuracy - peak.accuracy) * 100,
  policy: scPolicy(peak.cap).policy,
};

let scLive: { cap: number; accuracy: number; meanTokens: number; tokenSavings: number; accuracyDelta: number } | null =
  null;
if (!values["no-live"]) {
  const entry = scPolicy(peak.cap);
  log(`SC live at cap ${peak.cap} with ${JSON.stringify(entry.policy)}, load ${sampleLoad()}`);
  const live = await pool(test, CONC, async (p) => {
    const sc = new SelfConsistency({
      prompt: promptOf(p),
      maxBranches: peak.cap,
      branchesPerRound: entry.settings.branchesPerRound,
      maxTokens: MAX_TOKENS,
      temperature: 0.8,
      seed: 0,
    });
    return runtime.run(sc, { policy: entry.policy });
  });
  const accuracy = live.filter((r, i) => ok(r.answer, test[i])).length / N;
  const meanTokens = live.reduce((s, r) => s + r.tokensUsed, 0) / N;
  scLive = {
    cap: peak.cap,
    accuracy,
    meanTokens,
    tokenSavings: 1 - meanTokens / peak.meanTokens,
    accuracyDelta: (accuracy - peak.accuracy) * 100,
  };
}

// ---- 3. CoT with and without probing at the calibrated interval.
const cotCal = cal.programs["cot-probe"];
if (cotCal === undefined) throw new Error(`${calFile} has no cot-probe calibration; rerun with --calibrate`);
const INTERVAL = cotCal.settings.interval;
const WINDOW = cotCal.settings.probeWindow ?? DEFAULT_PROBE_RULE.window;
log(
  `CoT: ${test.length} questions, greedy, probe every ${INTERVAL} tokens, ${JSON.stringify(cotCal.policy)}, load ${sampleLoad()}`,
);
const cot = await pool(test, CONC, (p) => cotRun(p, INTERVAL));
const cotBuilt = cot.map((c) => cotTrace(c, INTERVAL, INTERVAL, WINDOW));
let plainCorrect = 0,
  plainTokens = 0,
  probedCorrect = 0,
  probedTokens = 0,
  ruleCorrect = 0,
  ruleTokens = 0;
// The exit rule alone (exit the first time it fires, from the first probe on), separately from the calibrated
// policy, which may add a cap per probe step: the paper's Dynasor-CoT is the rule.
const RULE_ONLY: PolicySpec = { kind: "threshold", threshold: 1, detectAt: 1 };
cotBuilt.forEach((b, i) => {
  plainCorrect += ok(b.plainAnswer, test[i]) ? 1 : 0;
  plainTokens += b.plainTokens;
  const r = replay(cotCal.policy, b.trace);
  probedCorrect += ok(r.answer, test[i]) ? 1 : 0;
  probedTokens += r.tokensUsed;
  const rule = replay(RULE_ONLY, b.trace);
  ruleCorrect += ok(rule.answer, test[i]) ? 1 : 0;
  ruleTokens += rule.tokensUsed;
});
const cotPoints = [
  { program: "cot", policy: "no-probe", accuracy: plainCorrect / N, meanTokens: plainTokens / N },
  { program: "cot", policy: "probe", accuracy: probedCorrect / N, meanTokens: probedTokens / N },
  { program: "cot", policy: "probe, exit rule alone", accuracy: ruleCorrect / N, meanTokens: ruleTokens / N },
];
const cotSummary = {
  program: "cot",
  interval: INTERVAL,
  tokenSavings: 1 - cotPoints[1].meanTokens / cotPoints[0].meanTokens,
  accuracyDelta: (cotPoints[1].accuracy - cotPoints[0].accuracy) * 100,
  policy: cotCal.policy,
};
let cotLive: { accuracy: number; meanTokens: number; tokenSavings: number; accuracyDelta: number } | null = null;
if (!values["no-live"]) {
  const rule = { ...DEFAULT_PROBE_RULE, window: WINDOW };
  const live = await pool(test, CONC, (p) =>
    runtime.run(new CotProbe({ prompt: promptOf(p), interval: INTERVAL, maxTokens: COT_MAX, rule }), {
      policy: cotCal.policy,
    }),
  );
  const accuracy = live.filter((r, i) => ok(r.answer, test[i])).length / N;
  const meanTokens = live.reduce((s, r) => s + r.tokensUsed, 0) / N;
  cotLive = {
    accuracy,
    meanTokens,
    tokenSavings: 1 - meanTokens / cotPoints[0].meanTokens,
    accuracyDelta: (accuracy - cotPoints[0].accuracy) * 100,
  };
}

// Upper bound for any probing exit rule (diagnostic): probes free, exit at the first probe point (every
// PROBE_GRID tokens) after which every probe already says the final answer.
const grid = await pool(test, CONC, (p) => cotRun(p, PROBE_GRID));
let oracleTokens = 0;
for (const c of grid) {
  const s = c.state;
  const final = c.answer();
  let k = s.probes.length;
  while (
    k > 0 &&
    final !== null &&
    s.probes[k - 1] !== null &&
    eq(s.probes[k - 1]!, final) &&
    s.probeAt[k - 1] < s.mainTokens
  )
    k--;
  oracleTokens += k < s.probes.length ? s.probeAt[k] : s.mainTokens;
}
const cotOracle = {
  probeEvery: PROBE_GRID,
  meanTokens: oracleTokens / N,
  tokenSavings:
    1 -
    oracleTokens /
      Math.max(
        1,
        grid.reduce((a, c) => a + c.state.mainTokens, 0),
      ),
};

// ---- 4. Rebase and MCTS (arith verifier) on the first --tree-n test questions, replayed under their policies.
const treeTest = test.slice(0, Math.min(N, TREE_N));
const treeRows: Array<{ program: string; policy: string; accuracy: number; meanTokens: number; spec?: PolicySpec }> =
  [];
const treeSummary: Array<{ program: string; tokenSavings: number; accuracyDelta: number; policy: PolicySpec }> = [];
for (const kind of ["rebase", "mcts"] as const) {
  const pc = cal.programs[kind];
  if (pc === undefined) continue;
  log(`${kind}: ${treeTest.length} test questions to the cap, load ${sampleLoad()}`);
  const traces = await treeTraces(kind, treeTest);
  const labels = treeTest.map((p) => p.answer);
  const even = evaluatePolicy({ kind: "baseline-even" }, traces, labels, eq);
  const cx = evaluatePolicy(pc.policy, traces, labels, eq);
  treeRows.push(
    { program: kind, policy: "baseline-even", ...even },
    { program: kind, policy: "certaindex", ...cx, spec: pc.policy },
  );
  treeSummary.push({
    program: kind,
    tokenSavings: 1 - cx.meanTokens / even.meanTokens,
    accuracyDelta: (cx.accuracy - even.accuracy) * 100,
    policy: pc.policy,
  });
}

await engine.dispose();
model.dispose();
sampleLoad();

// ---- Report.
const targets = {
  sc: {
    target: "≥ 25% fewer tokens than baseline-even, accuracy within 0.5 points, at the cap where baseline-even peaks",
    met: scSummary.tokenSavings >= 0.25 && scSummary.accuracyDelta >= -0.5,
  },
  scLive: scLive && { met: scLive.tokenSavings >= 0.25 && scLive.accuracyDelta >= -0.5 },
  cot: {
    target: "probing saves ≥ 15% tokens at equal accuracy",
    met: cotSummary.tokenSavings >= 0.15 && cotSummary.accuracyDelta >= 0,
  },
  cotLive: cotLive && { met: cotLive.tokenSavings >= 0.15 && cotLive.accuracyDelta >= 0 },
};
const command = `npm run bench:certaindex --${values.calibrate ? " --calibrate" : ""} --json${values.model ? ` --model ${values.model}` : ""} --n ${N} --cal ${CAL} --tree-n ${TREE_N}`;
const result = {
  date: new Date().toISOString(),
  machine: machine(),
  loadAverage1m: { min: Math.min(...loads), max: Math.max(...loads), samples: loads },
  command,
  model: bm.label,
  split: "test",
  n: N,
  calibration: { file: calFile, stale: calStale, createdAt: cal.createdAt, split: cal.split, programs: cal.programs },
  maxTokensPerBranch: MAX_TOKENS,
  cot: { interval: INTERVAL, window: WINDOW, maxTokens: COT_MAX },
  points: [...points.map(({ spec: _s, ...p }) => p), ...cotPoints],
  tree: { n: treeTest.length, rows: treeRows.map(({ spec: _s, ...r }) => r) },
  live: { sc: scLive, cot: cotLive },
  cotOracle,
  summary: [scSummary, cotSummary, ...treeSummary],
  targets,
  wallSeconds: (Date.now() - started) / 1000,
};
const pct = (x: number): string => `${(x * 100).toFixed(1)}%`;
const specText = (s?: PolicySpec): string => {
  if (s && (s.kind === "threshold" || s.kind === "baseline-length"))
    return ` (≥${s.threshold.toFixed(3)} from ${s.detectAt})`;
  // A staircase (staircaseCurve): every other point is (threshold, the knob step it applies from).
  if (s?.kind === "curve")
    return ` (${
      s.points
        .filter((_, i) => i % 2 === 1)
        .map(([t, u]) => `≥${t.toFixed(3)} from ${u}`)
        .join(", ") || "never stops early"
    })`;
  return "";
};
const yes = (m: boolean | undefined): string => (m ? "**met**" : "**not met**");
const md = [
  `# Certaindex benchmark — ${bm.label}`,
  "",
  `${result.date}, ${result.machine}, 1-min load average ${result.loadAverage1m.min}–${result.loadAverage1m.max} (token counts do not depend on load). Command: \`${command}\`. Wall ${result.wallSeconds.toFixed(0)} s.`,
  "",
  `Policies: calibrated with \`calibrate()\` on the validation split (a certaindex threshold per detection step; no accuracy loss and no question the cap answered right lost there), file \`${relative(process.cwd(), calFile)}\` (${cal.createdAt}${calStale ? ", **STALE: other weights**" : ""}); every figure below is on ${N} test questions (100 per level when n = 500), ${MAX_TOKENS} tokens per SC branch.`,
  "",
  "## Self-consistency (replayed from one 32-branch run per question)",
  "",
  "| cap | policy | accuracy | mean tokens |",
  "| --- | --- | --- | --- |",
  ...points.map(
    (p) => `| ${p.cap} | ${p.policy}${specText(p.spec)} | ${pct(p.accuracy)} | ${p.meanTokens.toFixed(1)} |`,
  ),
  "",
  `Certaindex and baseline-length rows stop only at round ends; branches per round, chosen by the calibration per cap: ${CAPS.map((c) => `cap ${c}: ${scPolicy(c).settings.branchesPerRound}`).join(", ")}.`,
  "",
  `Live (the calibrated policy on the engine, cap ${peak.cap}): ${scLive ? `${pct(scLive.accuracy)}, ${scLive.meanTokens.toFixed(1)} tokens (${pct(scLive.tokenSavings)} fewer than baseline-even, accuracy ${scLive.accuracyDelta >= 0 ? "+" : ""}${scLive.accuracyDelta.toFixed(2)} points)` : "skipped"}.`,
  "",
  `## Chain of thought, greedy, probe every ${INTERVAL} tokens (window ${WINDOW}, policy ${JSON.stringify(cotCal.policy)})`,
  "",
  "| policy | accuracy | mean tokens (probe tokens included) |",
  "| --- | --- | --- |",
  ...cotPoints.map((p) => `| ${p.policy} | ${pct(p.accuracy)} | ${p.meanTokens.toFixed(1)} |`),
  ...(cotLive
    ? [
        `| probe, live CotProbe | ${pct(cotLive.accuracy)} | ${cotLive.meanTokens.toFixed(1)} (includes the main branch's overshoot while probes decode) |`,
      ]
    : []),
  "",
  `Ceiling for any probe exit rule (probes free of cost, exit at the first point — every ${PROBE_GRID} tokens — after which every probe already gives the final answer): ${cotOracle.meanTokens.toFixed(1)} tokens, ${pct(cotOracle.tokenSavings)} fewer than the whole thought.`,
  "",
  `## Rebase (width ${REBASE_WIDTH}) and MCTS (${MCTS_SIMS} simulations) with the arith verifier, ${treeTest.length} test questions`,
  "",
  "| program | policy | accuracy | mean tokens |",
  "| --- | --- | --- | --- |",
  ...treeRows.map(
    (r) => `| ${r.program} | ${r.policy}${specText(r.spec)} | ${pct(r.accuracy)} | ${r.meanTokens.toFixed(1)} |`,
  ),
  "",
  "## Summary",
  "",
  "| program | token savings | accuracy delta (points) | target |",
  "| --- | --- | --- | --- |",
  `| sc (cap ${scSummary.cap}, replay) | ${pct(scSummary.tokenSavings)} | ${scSummary.accuracyDelta.toFixed(2)} | ≥ 25%, ≥ −0.5: ${yes(targets.sc.met)} |`,
  ...(scLive
    ? [
        `| sc (cap ${scLive.cap}, live) | ${pct(scLive.tokenSavings)} | ${scLive.accuracyDelta.toFixed(2)} | ≥ 25%, ≥ −0.5: ${yes(targets.scLive?.met)} |`,
      ]
    : []),
  `| cot probing (replay) | ${pct(cotSummary.tokenSavings)} | ${cotSummary.accuracyDelta.toFixed(2)} | ≥ 15%, ≥ 0: ${yes(targets.cot.met)} |`,
  ...(cotLive
    ? [
        `| cot probing (live) | ${pct(cotLive.tokenSavings)} | ${cotLive.accuracyDelta.toFixed(2)} | ≥ 15%, ≥ 0: ${yes(targets.cotLive?.met)} |`,
      ]
    : []),
  ...treeSummary.map((s) => `| ${s.program} (replay) | ${pct(s.tokenSavings)} | ${s.accuracyDelta.toFixed(2)} | – |`),
  "",
  "![SC tokens to accuracy](certaindex-sc.svg)",
  "",
  `Rerun on a new model: \`${RECALIBRATE_COMMAND}\` (calibrates on validation, writes the calibration file \`deliberate run\` reads, then benchmarks on test); \`npm run bench:certaindex\` alone re-benchmarks with the stored calibration.`,
  "",
].join("\n");
const svg = lineChart(
  ["baseline-even", "certaindex", "baseline-length"].map((policy) => ({
    name: policy,
    points: points.filter((p) => p.policy === policy).map((p) => [p.meanTokens, p.accuracy * 100] as const),
  })),
  {
    title: `SC tokens → accuracy (${bm.isTinyReasoner ? "tiny reasoner" : "RANDOM fixture"}, test split)`,
    xLabel: "mean generated tokens per question",
    yLabel: "accuracy (%)",
  },
);
mkdirSync(values.out!, { recursive: true });
writeFileSync(join(values.out!, "certaindex.md"), md);
writeFileSync(join(values.out!, "certaindex.json"), `${JSON.stringify(result, null, 2)}\n`);
writeFileSync(join(values.out!, "certaindex-sc.svg"), svg);
if (values.json) console.log(JSON.stringify(result));
else log(md);
