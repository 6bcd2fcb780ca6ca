// reasoning_effort as early exit (ts/programs/effort.ts) on the arithmetic task: tokens and accuracy per effort level
// against plain decoding, through the server's own Generation (the same object POST /v1/chat/completions drives;
// no HTTP), greedy, one stream per question.
//   npm run bench:certaindex-effort -- [--calibrate] [--model DIR] [--n 500] [--cal 1000] [--max-tokens 448]
//     [--concurrency 8] [--low-tolerance 0.02] [--repeats 1] [--calibration FILE] [--json]
// --calibrate: on `--cal` VALIDATION questions, runs the greedy thought with a probe every 4 tokens (CotProbe, to its
// end), replays every (interval, window, agree) probe rule on those traces, and writes the `effort` section of the
// model's calibration file (calibration/tiny-reasoner.json for the bundled model; the other sections are kept):
//   medium: the cheapest rule that loses no accuracy and no question the whole thought answered right;
//   low:    the cheapest rule within --low-tolerance accuracy of the whole thought (the answer "has settled");
//   high:   no probing: the thought runs to its end or its hard cap (plain decoding).
// SC at each level (`--program-cal` validation questions at the file's SC cap): low the cheapest threshold policy
// within the tolerance of the cap's accuracy, high the cap, medium the file's calibrated SC policy (not repeated).
// Then (always) the TEST split: every question decoded plainly and under each level, `--repeats` times (token counts
// of greedy decoding do not depend on load, but the tokens an exit drops — decoded while its probe ran — do).
import { existsSync, readFileSync, writeFileSync } from "node:fs";
import { loadavg } from "node:os";
import { parseArgs } from "node:util";
import {
  CALIBRATION_FORMAT,
  defaultCalibrationOut,
  loadCalibration,
  modelFingerprint,
  parseCalibration,
  type CalibrationFile,
  type EffortCalibration,
} from "../../ts/certaindex/calibrationFile.js";
import { DEFAULT_PROBE_RULE, probeCertaindex, type ProbeRule } from "../../ts/certaindex/probe.js";
import { Engine } from "../../ts/engine/engine.js";
import { loadModel } from "../../ts/model/model.js";
import { CotProbe } from "../../ts/programs/cotProbe.js";
import { ProgramRuntime } from "../../ts/programs/runtime.js";
import { SelfConsistency } from "../../ts/programs/selfConsistency.js";
import { calibrate } from "../../ts/certaindex/calibrate.js";
import { entropyCertaindex, majorityVote } from "../../ts/certaindex/signals.js";
import { EFFORT_LEVELS, resolveEffort, type EffortLevel } from "../../ts/programs/effort.js";
import { Generation } from "../../ts/server/generation.js";
import { answersEquivalent, extractAnswer } from "../../ts/tasks/arith/answer.js";
import { problemSet, type ArithProblem } from "../../ts/tasks/arith/problems.js";
import { machine, pool, resolveBenchModel } from "./benchModel.js";
import { benchQuantize, QUANTIZE_PARSE_ARGS, refuseDefaultWrite } from "./quantizeArgs.js";

const { values } = parseArgs({
  options: {
    calibrate: { type: "boolean", default: false },
    calibration: { type: "string" },
    model: { type: "string" },
    n: { type: "string", default: "500" },
    cal: { type: "string", default: "1000" },
    "max-tokens": { type: "string", default: "448" },
    concurrency: { type: "string", default: "8" },
    "low-tolerance": { type: "string", default: "0.02" },
    repeats: { type: "string", default: "1" },
    "program-cal": { type: "string", default: "300" },
    json: { type: "boolean", default: false },
    ...QUANTIZE_PARSE_ARGS,
  },
});
const quantize = benchQuantize(values);
refuseDefaultWrite(
  quantize,
  values.calibrate ? "--calibrate" : undefined,
  "calibration file",
  "calibration FILE",
  values.calibration,
);
const log = (m: string): void => void (values.json ? process.stderr : process.stdout).write(`${m}\n`);
const N = Number(values.n);
const CAL = Number(values.cal);
const MAX_TOKENS = Number(values["max-tokens"]);
const CONC = Number(values.concurrency);
const LOW_TOL = Number(values["low-tolerance"]);
const REPEATS = Number(values.repeats);
const PROGRAM_CAL = Number(values["program-cal"]);
/** Calibration traces probe every GRID tokens; candidate intervals are its multiples. */
const GRID = 4;
const INTERVALS = [4, 8, 12, 16, 24, 32];
const RULES: Array<{ window: number; agree: number }> = [
  { window: 2, agree: 2 },
  { window: 3, agree: 2 },
  { window: 3, agree: 3 },
  { window: 4, agree: 3 },
  { window: 4, agree: 4 },
];
const loads: number[] = [];
const load = (): number => {
  const l = Number(loadavg()[0].toFixed(2));
  loads.push(l);
  return l;
};
load();
const started = Date.now();

const bm = await resolveBenchModel(values.model, log);
const model = await loadModel(bm.dir, { kvPages: 8192, pageSize: 16, ...quantize.load });
const engine = new Engine({ models: { model } });
const think = model.tokenizer.thinkTokens();
if (think === null) throw new Error(`${bm.dir}: the model has no think tokens; reasoning_effort's probing needs them`);
const promptOf = (p: ArithProblem): number[] => model.tokenizer.encodeChat([{ role: "user", content: p.question }]);
const ok = (a: string | null, p: ArithProblem): boolean => a !== null && answersEquivalent(a, p.answer);

// ---- Calibration (validation split): probe traces replayed under each rule.

interface Candidate {
  interval: number;
  window: number;
  agree: number;
  accuracy: number;
  meanTokens: number;
  regressions: number;
}

function replayRule(c: CotProbe, interval: number, rule: ProbeRule): { answer: string | null; tokens: number } {
  const s = c.state;
  const every = interval / GRID;
  const probes: Array<string | null> = [];
  let probeTokens = 0;
  for (let k = every - 1; k < s.probes.length; k += every) {
    if (s.probeAt[k] >= s.mainTokens) break;
    probes.push(s.probes[k]);
    probeTokens += s.probeTokens[k];
    // Live, an exit also drops the tokens the thought decoded while its last probe ran and decodes the answer after
    // the suffix: about the last probe's tokens each.
    if (probeCertaindex(probes, rule) >= 1)
      return { answer: s.probes[k], tokens: s.probeAt[k] + probeTokens + 2 * s.probeTokens[k] };
  }
  return { answer: extractAnswer(s.mainText), tokens: s.mainTokens + probeTokens };
}

let calibration: CalibrationFile | null = null;
const calFileOut = (): string =>
  values.calibration ?? defaultCalibrationOut(bm.dir, bm.isTinyReasoner ? bm.dir : undefined);
let calFile: string;
if (values.calibrate) {
  const validation = problemSet({ split: "validation", n: CAL, seed: 1 });
  log(`calibrating on ${CAL} validation questions (probe every ${GRID} tokens), load ${load()}`);
  const traces = await pool(validation, CONC, async (p) => {
    const c = new CotProbe({ prompt: promptOf(p), interval: GRID, maxTokens: MAX_TOKENS });
    await new ProgramRuntime(engine).run(c, { policy: { kind: "baseline-even" } });
    return c;
  });
  const plainRight = traces.map((c, i) => ok(extractAnswer(c.state.mainText), validation[i]));
  const plainAccuracy = plainRight.filter(Boolean).length / CAL;
  const plainTokens = traces.reduce((t, c) => t + c.state.mainTokens, 0) / CAL;
  const candidates: Candidate[] = [];
  for (const interval of INTERVALS)
    for (const r of RULES) {
      const rule: ProbeRule = { ...DEFAULT_PROBE_RULE, window: r.window, agree: r.agree };
      let right = 0;
      let tokens = 0;
      let regressions = 0;
      traces.forEach((c, i) => {
        const x = replayRule(c, interval, rule);
        const good = ok(x.answer, validation[i]);
        right += good ? 1 : 0;
        if (plainRight[i] && !good) regressions++;
        tokens += x.tokens;
      });
      candidates.push({ interval, ...r, accuracy: right / CAL, meanTokens: tokens / CAL, regressions });
    }
  const cheapest = (f: (c: Candidate) => boolean): Candidate | undefined =>
    candidates.filter(f).sort((a, b) => a.meanTokens - b.meanTokens)[0];
  const medium = cheapest((c) => c.regressions === 0 && c.accuracy >= plainAccuracy - 1e-12);
  const low = cheapest((c) => c.accuracy >= plainAccuracy - LOW_TOL);
  const entry = (c: Candidate | undefined, what: string): EffortCalibration => {
    if (c === undefined) throw new Error(`no probe rule met the ${what} criterion on validation`);
    return {
      policy: { kind: "threshold", threshold: 1, detectAt: c.agree },
      settings: { interval: c.interval, probeWindow: c.window, probeAgree: c.agree, maxTokens: MAX_TOKENS },
      validation: {
        n: CAL,
        accuracy: c.accuracy,
        meanTokens: c.meanTokens,
        baselineAccuracy: plainAccuracy,
        baselineMeanTokens: plainTokens,
        tokenSavings: 1 - c.meanTokens / plainTokens,
      },
    };
  };
  const effort: NonNullable<CalibrationFile["effort"]> = {
    low: entry(low, `low (accuracy within ${LOW_TOL})`),
    medium: entry(medium, "medium (no accuracy or question lost)"),
    high: {
      policy: { kind: "baseline-even" },
      settings: { interval: 0, maxTokens: MAX_TOKENS },
      validation: {
        n: CAL,
        accuracy: plainAccuracy,
        meanTokens: plainTokens,
        baselineAccuracy: plainAccuracy,
        baselineMeanTokens: plainTokens,
        tokenSavings: 0,
      },
    },
  };
  // Programs at each level: SC (its calibrated cap and rounds) replayed on `--program-cal` validation questions;
  // low: the cheapest threshold policy within the same tolerance of the cap's accuracy, high: the cap.
  const scCal = (existsSync(calFileOut()) ? parseCalibration(readFileSync(calFileOut(), "utf8"), calFileOut()) : null)
    ?.programs.sc;
  if (scCal !== undefined) {
    const cap = scCal.settings.maxBranches;
    const per = scCal.settings.branchesPerRound;
    const qs = validation.slice(0, PROGRAM_CAL);
    log(`  sc: ${qs.length} validation questions at cap ${cap} (${per} a round), load ${load()}`);
    const scTraces = await pool(qs, CONC, async (p) => {
      const sc = new SelfConsistency({
        prompt: promptOf(p),
        maxBranches: cap,
        branchesPerRound: per,
        maxTokens: scCal.settings.maxTokens ?? MAX_TOKENS,
        temperature: scCal.settings.temperature ?? 0.8,
        seed: 0,
      });
      await new ProgramRuntime(engine).run(sc, { policy: { kind: "baseline-even" } });
      const steps = [];
      for (let used = per; used <= cap; used += per) {
        const b = sc.state.branches.slice(0, used);
        const answers = b.map((x) => x.answer);
        steps.push({
          used,
          certaindex: entropyCertaindex(answers, answersEquivalent),
          answer: majorityVote(answers, answersEquivalent).answer,
          tokensUsed: b.reduce((t, x) => t + x.tokens, 0),
        });
      }
      return { steps };
    });
    const lowSc = calibrate(
      scTraces,
      qs.map((p) => p.answer),
      { equivalent: answersEquivalent, kind: "threshold", maxAccuracyLoss: LOW_TOL },
    );
    effort.low!.programs = { sc: lowSc.policy };
    effort.high!.programs = { sc: { kind: "baseline-even" } };
    log(
      `  sc low: ${JSON.stringify(lowSc.policy)}, accuracy ${(lowSc.outcome.accuracy * 100).toFixed(1)}% (cap ${(lowSc.baseline.accuracy * 100).toFixed(1)}%), saves ${(lowSc.tokenSavings * 100).toFixed(1)}%`,
    );
  }
  for (const l of EFFORT_LEVELS) {
    const v = effort[l]!.validation;
    log(
      `  ${l}: ${JSON.stringify(effort[l]!.settings)} accuracy ${(v.accuracy * 100).toFixed(1)}% (whole thought ${(plainAccuracy * 100).toFixed(1)}%), ${v.meanTokens.toFixed(1)} tokens (${(v.tokenSavings * 100).toFixed(1)}% fewer)`,
    );
  }
  calFile = calFileOut();
  const base: CalibrationFile = existsSync(calFile)
    ? parseCalibration(readFileSync(calFile, "utf8"), calFile)
    : {
        format: CALIBRATION_FORMAT,
        version: 1,
        createdAt: new Date().toISOString(),
        command: "",
        model: { path: bm.dir, sha256: modelFingerprint(bm.dir) },
        split: "validation",
        programs: {},
      };
  calibration = {
    ...base,
    effort,
    effortCommand: `npm run bench:certaindex-effort -- --calibrate (cal ${CAL}, max-tokens ${MAX_TOKENS}, low-tolerance ${LOW_TOL}) at ${new Date().toISOString()}`,
  };
  writeFileSync(calFile, `${JSON.stringify(calibration, null, 2)}\n`);
  parseCalibration(readFileSync(calFile, "utf8"), calFile);
  log(`wrote ${calFile}`);
} else {
  const loaded = loadCalibration(bm.dir, {
    file: values.calibration,
    bundledDir: bm.isTinyReasoner ? bm.dir : undefined,
  });
  calibration = loaded?.calibration ?? null;
  calFile = loaded?.file ?? "(none: FALLBACK_EFFORT)";
}

// ---- Test split, through Generation.

interface Outcome {
  right: boolean;
  completion: number;
  reasoning: number;
  probes: number;
  dropped: number;
  exited: boolean;
}

async function decode(p: ArithProblem, level: EffortLevel | null): Promise<Outcome> {
  const prompt = promptOf(p);
  const gen = new Generation(
    engine,
    { prompt, maxTokens: MAX_TOKENS, temperature: 0, seed: 0 },
    {
      think,
      promptOpensThought: prompt[prompt.length - 1] === think!.start,
      codec: model.tokenizer,
      effort: level === null ? undefined : { effort: resolveEffort(level, calibration).effort, cap: MAX_TOKENS },
    },
  );
  let content = "";
  for await (const e of gen.stream()) {
    if (e.kind === "error") throw e.error;
    content += e.content;
  }
  await gen.settled();
  const r = gen.effortReport()[0];
  return {
    right: ok(extractAnswer(content), p),
    completion: gen.completionTokens,
    reasoning: gen.reasoningTokens,
    probes: r?.probes ?? 0,
    dropped: r?.droppedTokens ?? 0,
    exited: r?.exit != null,
  };
}

const test = problemSet({ split: "test", n: N, seed: 1 });
const rows: Array<{
  policy: string;
  repeat: number;
  accuracy: number;
  meanCompletion: number;
  meanReasoning: number;
  meanProbes: number;
  meanDropped: number;
  exits: number;
}> = [];
for (let rep = 0; rep < REPEATS; rep++)
  for (const level of [null, ...EFFORT_LEVELS] as const) {
    const t0 = Date.now();
    const out = await pool(test, CONC, (p) => decode(p, level));
    const mean = (f: (o: Outcome) => number): number => out.reduce((t, o) => t + f(o), 0) / N;
    const row = {
      policy: level ?? "plain",
      repeat: rep + 1,
      accuracy: out.filter((o) => o.right).length / N,
      meanCompletion: mean((o) => o.completion),
      meanReasoning: mean((o) => o.reasoning),
      meanProbes: mean((o) => o.probes),
      meanDropped: mean((o) => o.dropped),
      exits: out.filter((o) => o.exited).length,
    };
    rows.push(row);
    log(
      `  ${row.policy} #${row.repeat}: accuracy ${(row.accuracy * 100).toFixed(1)}%, ${row.meanCompletion.toFixed(1)} completion tokens (${row.meanReasoning.toFixed(1)} reasoning, ${row.meanProbes.toFixed(2)} probes, ${row.meanDropped.toFixed(2)} dropped), ${row.exits} early exits, ${((Date.now() - t0) / 1000).toFixed(0)} s, load ${load()}`,
    );
  }
await engine.dispose();
const report = {
  date: new Date().toISOString(),
  machine: machine(),
  load: { min: Math.min(...loads), max: Math.max(...loads) },
  command: `npm run bench:certaindex-effort -- ${process.argv.slice(2).join(" ")}`,
  calibration: calFile,
  effort: Object.fromEntries(EFFORT_LEVELS.map((l) => [l, resolveEffort(l, calibration)])),
  n: N,
  rows,
  wallSeconds: (Date.now() - started) / 1000,
};
if (values.json) process.stdout.write(`${JSON.stringify(report, null, 2)}\n`);
else log(`wall ${report.wallSeconds.toFixed(0)} s, load ${report.load.min}–${report.load.max}`);
