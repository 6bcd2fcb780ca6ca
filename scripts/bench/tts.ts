// FlashTTS benchmark (issue 22): verifier-guided beam search with the bundled tiny PRM on the arithmetic task.
//   npm run bench:tts -- [--json] [--n-list 8,16,32,64] [--problems 12] [--beam-width 4] [--repeats 3]
//     [--configs baseline,P,PM,PMS] [--kv-budget 16] [--ratios 0.5,0.85] [--kv-budgets 8,32] [--max-tokens 200]
//     [--device cpu] [--model DIR] [--prm DIR] [--out bench] [--compare 100 [--methods "SC,beam + PRM"]]
//     [--preemption recompute|swap] [--scale qwen2.5-1.5b [--prm-scale qwen2.5-7b]]
// One question at a time (batch size 1, the paper's interactive edge setting), the same questions and seeds for
// every configuration, configurations interleaved within each repeat (so drift hits all alike):
//   baseline: every FlashTTS switch off (continuations are new requests in random order, no speculation), the KV
//   budget (--kv-budget MiB, both models' pools together) split evenly; +P: prefix-aware forks grouped by parent;
//   +P+M: and the roofline-guided split of the same budget (kvSplit "auto", profiles cached per model and device);
//   +P+M+S: and speculative beam extension with LookAhead verification, its rows capped at the generator's free
//   decode batch (KvSplitPlan.speculativeRows, from the measured profile); PMSfull (+P+M+S full batch): speculation
//   keeps the batch at N rows as the paper's GPU does.
// Per configuration and N: precise goodput (mean tokens of a finished solution / mean time to finish it, as the
// paper defines it), mean and P90 latency of a question, the verifier's share of the search time, accuracy
// (score-weighted vote), speculation used / wasted, prefix-cache hit rate; the median over --repeats with min-max.
// Sweeps at the largest N: --ratios (duplicate-then-truncate R, on +P+M+S) and --kv-budgets (MiB), each against the
// baseline at the same budget.
// --compare Q: accuracy against generated tokens on Q questions (4 at a time; --split test | validation, tune on
// validation) for beam search, DVTS, best-of-N, Rebase and MCTS + PRM, beam + the task's step checker (the exact
// verifier), self-consistency and DUCHESS (the bundled probe's tuned settings, at most 12 branches), at --caps
// (default 4,8,16), the searches at their programs' defaults (`--set key=value,...` overrides them: aggregate,
// temperature, beamWidth, stepMaxTokens, dedupe, balanceTemperature, ...), --seeds K sampling seeds (mean and
// min–max), with the oracle replay of every search (scripts/bench/ttsOracle.ts). --append keeps the rows already in
// the output's tts-compare.json (methods run with other --seeds). Writes tts-compare.{md,svg,json} to --out (default
// bench for the test split, .scratch/tts-validation for validation: a tuning run does not overwrite the results).
// --scale PRESET: the generator and the PRM at a preset's layer shapes (make-fixture PRESETS) with random weights and
// the bundled models' tokenizer (scripts/make-fixture.ts scaleModel; written once to the temp dir): the search's
// speed where a step costs what a 1.5B model's does (on a GPU; accuracy is meaningless with random weights, and the
// KV budget must grow with the model: --kv-budget in MiB). --prm-scale PRESET: the PRM at another preset's shapes
// (default --scale's): e.g. qwen2.5-1.5b with qwen2.5-7b is the paper's verifier-heavy 1.5B + 7B pair (13 GB of
// random PRM weights written on first use; a GPU with room for both).

// --quantize int8|int4 [--quantize-group 32|64|128]: both models quantized at load.

// Writes bench/tts.{md,json}.
import { existsSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { loadavg, tmpdir } from "node:os";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { Engine } from "../../ts/engine/engine.js";
import { loadSplitModels } from "../../ts/engine/kvSplit.js";
import { loadModel, type Model } from "../../ts/model/model.js";
import { modelHash } from "../../ts/model/modelHash.js";
import { loadProbe, PROBE_SUBDIR } from "../../ts/probe/probeFile.js";
import { BestOfN } from "../../ts/programs/bestOfN.js";
import { Mcts } from "../../ts/programs/mcts.js";
import { Rebase } from "../../ts/programs/rebase.js";
import { Duchess } from "../../ts/programs/duchess.js";
import type { Program } from "../../ts/programs/program.js";
import { SelfConsistency } from "../../ts/programs/selfConsistency.js";
import { lineChart } from "./svg.js";
import { bundledModelDir, bundledPrmDir } from "../../ts/model/bundled.js";
import { readPrmConfig } from "../../ts/model/prmConfig.js";
import { BeamSearch, type FlashTtsSwitches } from "../../ts/programs/beam.js";
import { ProgramRuntime } from "../../ts/programs/runtime.js";
import { prmReward } from "../../ts/programs/rewards.js";
import { arithTask } from "../../ts/tasks/index.js";
import { machine, pool } from "./benchModel.js";
import { benchQuantize, QUANTIZE_PARSE_ARGS } from "./quantizeArgs.js";
import { formatSpread, median, percentileNearestRank } from "./stats.js";
import { PRESETS, scaleModel } from "../make-fixture.js";
import { replay, summarizeReplays, type OracleSummary, type Replay } from "./ttsOracle.js";

const { values } = parseArgs({
  options: {
    json: { type: "boolean", default: false },
    "n-list": { type: "string", default: "8,16,32,64" },
    problems: { type: "string", default: "12" },
    "beam-width": { type: "string", default: "4" },
    repeats: { type: "string", default: "3" },
    configs: { type: "string", default: "baseline,P,PM,PMS" },
    "kv-budget": { type: "string", default: "16" },
    ratios: { type: "string", default: "" },
    "kv-budgets": { type: "string", default: "" },
    "max-tokens": { type: "string", default: "200" },
    device: { type: "string", default: "cpu" },
    model: { type: "string" },
    prm: { type: "string" },
    seed: { type: "string", default: "1" },
    out: { type: "string" },
    compare: { type: "string", default: "0" },
    methods: { type: "string" },
    split: { type: "string", default: "test" },
    seeds: { type: "string", default: "1" },
    caps: { type: "string", default: "4,8,16" },
    set: { type: "string" },
    append: { type: "boolean", default: false },
    merge: { type: "string" },
    label: { type: "string" },
    preemption: { type: "string", default: "recompute" },
    scale: { type: "string" },
    "prm-scale": { type: "string" },
    ...QUANTIZE_PARSE_ARGS,
  },
});
// --quantize / --quantize-group: the generator and the PRM both load quantized (the command line in the results says so)
const quantize = benchQuantize(values);
const list = (s: string) =>
  s
    .split(",")
    .filter((x) => x.trim() !== "")
    .map(Number);
const nList = list(values["n-list"]!);
const M = Number(values["beam-width"]);
const repeats = Number(values.repeats);
const maxTokens = Number(values["max-tokens"]);
const device = values.device as "cpu" | "cuda";
type Split = "even" | "auto";
interface Config {
  sw: FlashTtsSwitches;
  split: Split;
  /** Speculation keeps the batch full (N rows: the paper's) instead of the generator's free decode batch. */
  fullBatch?: boolean;
}
const CONFIGS: Record<string, Config> = {
  baseline: { sw: { prefixAware: false, speculative: false, lookahead: false }, split: "even" },
  P: { sw: { prefixAware: true, speculative: false, lookahead: false }, split: "even" },
  PM: { sw: { prefixAware: true, speculative: false, lookahead: false }, split: "auto" },
  PMS: { sw: { prefixAware: true, speculative: true, lookahead: true }, split: "auto" },
  PMSfull: { sw: { prefixAware: true, speculative: true, lookahead: true }, split: "auto", fullBatch: true },
};
const LABEL: Record<string, string> = {
  baseline: "baseline",
  P: "+P",
  PM: "+P+M",
  PMS: "+P+M+S",
  PMSfull: "+P+M+S full batch",
};
const MiB = 1024 * 1024;
// bench/ holds the test split's results; a tuning run on another split writes beside the scratch work, so it never
// overwrites them unless --out says so.
if (values.split !== "test" && values.split !== "validation")
  throw new Error(`--split must be test or validation, not ${JSON.stringify(values.split)}`);
const outDir =
  values.out ??
  (Number(values.compare) > 0 && values.split !== "test" ? join(".scratch", `tts-${values.split}`) : "bench");
const configs = values.configs!.split(",");
for (const c of configs)
  if (!(c in CONFIGS)) throw new Error(`--configs: unknown "${c}"; expected ${Object.keys(CONFIGS).join(", ")}`);
const log = (m: string) => process.stderr.write(m + "\n");

interface Run {
  latencyMs: number;
  goodputTokens: number;
  goodputMs: number;
  verifierMs: number;
  searchMs: number;
  correct: boolean;
  specUsed: number;
  specWasted: number;
  tokens: number;
}

const problems = arithTask.problems({ split: "test", n: Number(values.problems), seed: Number(values.seed) });
let genDir = values.model ?? bundledModelDir;
let prmDir = values.prm ?? bundledPrmDir;
if (values["prm-scale"] !== undefined && values.scale === undefined)
  throw new Error("--prm-scale needs --scale (the generator's preset)");
const scaled = values.scale === undefined ? null : { gen: values.scale, prm: values["prm-scale"] ?? values.scale };
if (scaled !== null) {
  const presetOf = (name: string, flag: string) => {
    const preset = PRESETS[name];
    if (!preset) throw new Error(`${flag} ${name}: expected one of ${Object.keys(PRESETS).join(", ")}`);
    return preset;
  };
  const [genPreset, prmPreset] = [presetOf(scaled.gen, "--scale"), presetOf(scaled.prm, "--prm-scale")];
  const base = join(tmpdir(), "deliberate-bench", "tts-scaled");
  log(
    `--scale ${scaled.gen}${scaled.prm === scaled.gen ? "" : ` --prm-scale ${scaled.prm}`}: random-weight generator and PRM in ${base}-{${scaled.gen}-gen,${scaled.prm}-prm} (written once) ...`,
  );
  genDir = await scaleModel(genDir, `${base}-${scaled.gen}-gen`, genPreset, 1);
  prmDir = await scaleModel(prmDir, `${base}-${scaled.prm}-prm`, prmPreset, 2);
}
const prmConfig = readPrmConfig(prmDir);
if (prmConfig === null)
  throw new Error(
    `${prmDir} has no prm.json and its config.json names no score head (Qwen2ForPrmModel, Qwen2ForProcessRewardModel)`,
  );

const splitNote: string[] = [];
type Pair = { gen: Model; prm: Model; speculativeRows: number };
async function load(budgetMiB: number, split: Split, n: number): Promise<Pair> {
  const r = await loadSplitModels(genDir, prmDir, {
    device,
    ...quantize.load,
    budgetBytes: budgetMiB * MiB,
    n,
    kvSplit: split === "even" ? { generator: 0.5, verifier: 0.5 } : "auto",
    generatorTokens: 40 + maxTokens,
    stepTokens: 16,
    verifierTokens: 40 + maxTokens,
  });
  const note =
    `${budgetMiB} MiB, N=${n}, ${split}: generator ${r.generator.kv.numPages} pages, verifier ${r.verifier.kv.numPages} pages` +
    (r.plan
      ? ` (planned decode batch ${r.plan.decodeBatch}, prefill batch ${r.plan.prefillBatch}; free decode batch ${r.plan.speculativeRows}: speculation's rows)`
      : "");
  if (!splitNote.includes(note)) splitNote.push(note);
  return { gen: r.generator, prm: r.verifier, speculativeRows: r.plan?.speculativeRows ?? n };
}

/** Every problem once with one configuration; engine metrics over the pass. */
type PassResult = {
  runs: Run[];
  hitRate: number;
  preemptions: number;
  verifierHitRate: number;
  verifierPreemptions: number;
};
async function pass(models: Pair, n: number, sw: FlashTtsSwitches, seed: number): Promise<PassResult> {
  const engine = new Engine({
    models: [
      { name: "gen", model: models.gen },
      { name: "prm", model: models.prm },
    ],
    preemption: values.preemption as "recompute" | "swap",
  });
  const reward = prmReward(prmConfig!, "prm");
  const runs: Run[] = [];
  try {
    for (const [i, p] of problems.entries()) {
      const question = p.messages[0].content;
      const program = new BeamSearch({
        prompt: models.gen.tokenizer.encodeChat(p.messages),
        question,
        task: arithTask,
        reward,
        model: "gen",
        n,
        beamWidth: Math.min(M, n),
        seed: seed * 1000 + i,
        temperature: 1,
        maxTokens,
        speculativeRows: models.speculativeRows,
        ...sw,
      });
      const r = await new ProgramRuntime(engine).run(program);
      const f = program.finished;
      const st = program.stats;
      runs.push({
        latencyMs: r.elapsedMs,
        goodputTokens: f.reduce((a, x) => a + x.pathTokens, 0),
        goodputMs: f.reduce((a, x) => a + x.finishedMs, 0),
        verifierMs: st.verificationMs,
        searchMs: st.generationMs + st.verificationMs,
        correct: arithTask.equivalent(r.answer, p.answer),
        specUsed: st.speculativeUsed,
        specWasted: st.speculativeWasted,
        tokens: r.tokensUsed,
      });
    }
    const m = engine.metrics();
    const gm = m.models.find((x) => x.name === "gen");
    const vm = m.models.find((x) => x.name === "prm");
    return {
      runs,
      hitRate: gm?.prefixCacheHitRate ?? m.prefixCacheHitRate,
      preemptions: gm?.preemptions ?? 0,
      verifierHitRate: vm?.prefixCacheHitRate ?? 0,
      verifierPreemptions: vm?.preemptions ?? 0,
    };
  } finally {
    await engine.dispose();
  }
}

interface Summary {
  goodput: number;
  meanLatencyMs: number;
  p90LatencyMs: number;
  verifierShare: number;
  accuracy: number;
  specUsed: number;
  specWasted: number;
  tokens: number;
  hitRate: number;
  preemptions: number;
  verifierHitRate: number;
  verifierPreemptions: number;
}

function summarize(p: PassResult): Summary {
  const r = p.runs;
  const sum = (f: (x: Run) => number) => r.reduce((a, x) => a + f(x), 0);
  const lat = r.map((x) => x.latencyMs);
  return {
    goodput:
      (1000 * sum((x) => x.goodputTokens)) /
      Math.max(
        1,
        sum((x) => x.goodputMs),
      ),
    meanLatencyMs: sum((x) => x.latencyMs) / r.length,
    p90LatencyMs: percentileNearestRank(lat, 90),
    verifierShare:
      sum((x) => x.verifierMs) /
      Math.max(
        1,
        sum((x) => x.searchMs),
      ),
    accuracy: sum((x) => (x.correct ? 1 : 0)) / r.length,
    specUsed: sum((x) => x.specUsed),
    specWasted: sum((x) => x.specWasted),
    tokens: sum((x) => x.tokens) / r.length,
    hitRate: p.hitRate,
    preemptions: p.preemptions,
    verifierHitRate: p.verifierHitRate,
    verifierPreemptions: p.verifierPreemptions,
  };
}

interface Point {
  median: Summary;
  min: Summary;
  max: Summary;
}
function combine(ss: Summary[]): Point {
  const keys = Object.keys(ss[0]) as (keyof Summary)[];
  const pick = (f: (xs: number[]) => number) =>
    Object.fromEntries(keys.map((k) => [k, f(ss.map((s) => s[k]))])) as unknown as Summary;
  return { median: pick(median), min: pick((xs) => Math.min(...xs)), max: pick((xs) => Math.max(...xs)) };
}

async function grid(
  budgetMiB: number,
  ns: number[],
  cfgs: Array<{ key: string } & Config>,
): Promise<Record<string, Record<number, Point>>> {
  const acc: Record<string, Record<number, Summary[]>> = {};
  for (const n of ns) {
    // One loaded pair per split for this N (the auto split depends on N), reused by every repeat.
    const pairs = new Map<Split, Pair>();
    try {
      for (const c of cfgs) if (!pairs.has(c.split)) pairs.set(c.split, await load(budgetMiB, c.split, n));
      for (let rep = 0; rep < repeats; rep++) {
        // Alternate the order each repeat so neither configuration always runs first.
        const order = rep % 2 === 0 ? cfgs : [...cfgs].reverse();
        for (const c of order) {
          const t0 = Date.now();
          const s = summarize(
            await pass(
              pairs.get(c.split)!,
              n,
              c.fullBatch ? { ...c.sw, speculativeRows: n } : c.sw,
              Number(values.seed),
            ),
          );
          ((acc[c.key] ??= {})[n] ??= []).push(s);
          log(
            `kv ${budgetMiB} MiB repeat ${rep + 1}/${repeats} N=${n} ${c.key}: goodput ${s.goodput.toFixed(0)} tok/s, latency ${s.meanLatencyMs.toFixed(0)} ms, verifier ${(100 * s.verifierShare).toFixed(0)}%, acc ${(100 * s.accuracy).toFixed(0)}% (${((Date.now() - t0) / 1000).toFixed(0)} s)`,
          );
        }
      }
    } finally {
      for (const p of pairs.values()) (p.gen.dispose(), p.prm.dispose());
    }
  }
  return Object.fromEntries(
    Object.entries(acc).map(([k, byN]) => [
      k,
      Object.fromEntries(Object.entries(byN).map(([n, ss]) => [n, combine(ss)])),
    ]),
  );
}

const fmt = (p: Point, k: keyof Summary, f: (v: number) => string) =>
  formatSpread({ median: p.median[k], min: p.min[k], max: p.max[k] }, f);
const ms = (v: number) => v.toFixed(0);
const pct = (v: number) => (100 * v).toFixed(0) + "%";

/** What hiding verification could win at most, per N (`ceilings`: [N, 1 / (1 − v)]), and what it does not bound. */
function ceilingParagraph(ceilings: [number, number][]): string {
  return [
    "Ceiling of hiding verification (LookAhead, speculation while steps are scored): with the baseline's verifier share v,",
    `a search whose verification cost nothing would reach at most 1 / (1 − v) × the baseline's goodput: ${ceilings.map(([n, c]) => `N = ${n} ${c.toFixed(2)}×`).join(", ")}.`,
    "Speculation in the slots stragglers leave idle, +P and +M act on the generator's time instead (idle rows, cache hits, preemptions).",
  ].join(" ");
}

function table(
  res: Record<string, Record<number, Point>>,
  keys: string[],
  label: (k: string) => string,
  ns: number[],
): string[] {
  const lines = [
    "| N | config | goodput tok/s | vs baseline | mean latency ms | P90 latency ms | verifier share | accuracy | spec used / wasted | prefix hit gen / verifier | preemptions gen / verifier |",
    "|---|---|---|---|---|---|---|---|---|---|---|",
  ];
  for (const n of ns) {
    const b = res.baseline?.[n];
    for (const k of keys) {
      const p = res[k]?.[n];
      if (!p) continue;
      const ratio = b ? `${(p.median.goodput / b.median.goodput).toFixed(2)}×` : "";
      lines.push(
        `| ${n} | ${label(k)} | ${fmt(p, "goodput", ms)} | ${ratio} | ${fmt(p, "meanLatencyMs", ms)} | ${fmt(p, "p90LatencyMs", ms)} | ${fmt(p, "verifierShare", pct)} | ${pct(p.median.accuracy)} | ${p.median.specUsed} / ${p.median.specWasted} | ${pct(p.median.hitRate)} / ${pct(p.median.verifierHitRate)} | ${p.median.preemptions} / ${p.median.verifierPreemptions} |`,
      );
    }
  }
  return lines;
}

/** `--set key=value,...`: settings for the search programs (beam, dvts, best-of-N, Rebase, MCTS), each taking the
 * keys it knows (numbers and true / false parsed; anything else a string): what a tuning sweep varies. */
function parseSettings(raw: string | undefined): Record<string, string | number | boolean> {
  const out: Record<string, string | number | boolean> = {};
  for (const kv of (raw ?? "").split(",").filter((x) => x.trim() !== "")) {
    const [k, v] = kv.split("=").map((x) => x.trim());
    if (!k || v === undefined) throw new Error(`--set ${raw}: expected key=value pairs separated by commas`);
    out[k] = v === "true" ? true : v === "false" ? false : Number.isFinite(Number(v)) ? Number(v) : v;
  }
  return out;
}

/** One method at one cap over the questions with one sampling seed. */
interface CompareRun {
  accuracy: number;
  tokens: number;
  rewardTokens: number;
  seconds: number;
  oracle: OracleSummary | null;
}

/**
 * Accuracy vs generated tokens at matched budgets: beam / DVTS / best-of-N / Rebase / MCTS + PRM (and beam + the
 * task's step checker, the exact verifier) against SC and DUCHESS on the same questions, --seeds sampling seeds
 * (mean and min–max), with the oracle replay of every search (ttsOracle.ts): the accuracy of a perfect picker and of
 * a plain majority among the solutions it finished, and where right paths were lost.
 */
async function compare(q: number): Promise<void> {
  const split = values.split as "test" | "validation"; // checked at the start
  const seeds = Number(values.seeds);
  if (!Number.isInteger(seeds) || seeds < 1) throw new Error(`--seeds ${values.seeds}: expected an integer >= 1`);
  const caps = list(values.caps!);
  const settings = parseSettings(values.set);
  const qs = arithTask.problems({ split, n: q, seed: Number(values.seed) + 1 });
  const gen = await loadModel(genDir, { device, ...quantize.load });
  const prm = await loadModel(prmDir, { device, ...quantize.load });
  const probe = await loadProbe(join(genDir, PROBE_SUBDIR), {
    hash: await modelHash(genDir),
    hiddenSize: gen.config.hiddenSize,
    numLayers: gen.config.numLayers,
  });
  const engine = new Engine({
    models: [
      { name: "gen", model: gen },
      { name: "prm", model: prm },
    ],
  });
  const reward = prmReward(prmConfig!, "prm");
  // The search programs at their own defaults (what `deliberate run --program ...` gives), --set on top.
  const search = { model: "gen", maxTokens, task: arithTask, ...settings };
  const voting = { model: "gen", maxTokens, task: arithTask, temperature: 0.8 };
  type Make = (prompt: number[], question: string, seed: number) => Program;
  const at = (name: string, make: (cap: number) => Make, cs = caps) =>
    cs.map((cap) => ({ name, cap, make: make(cap) }));
  const checker = arithTask.stepVerifier!;
  const methods: Array<{ name: string; cap: number; make: Make }> = [
    ...at(
      "beam + PRM",
      (n) => (prompt, question, seed) => new BeamSearch({ ...search, prompt, question, reward, n, seed }),
    ),
    ...at(
      "beam + step checker",
      (n) => (prompt, question, seed) => new BeamSearch({ ...search, prompt, question, reward: checker, n, seed }),
    ),
    ...at(
      "DVTS + PRM",
      (n) => (prompt, question, seed) =>
        new BeamSearch({ ...search, variant: "dvts", prompt, question, reward, n, seed }),
    ),
    ...at(
      "best-of-N + PRM",
      (n) => (prompt, question, seed) => new BestOfN({ ...search, prompt, question, reward, n, seed }),
    ),
    ...at(
      "Rebase + PRM",
      (n) => (prompt, question, seed) => new Rebase({ ...search, prompt, question, reward, width: n, seed }),
    ),
    ...at(
      "MCTS + PRM",
      (n) => (prompt, question, seed) => new Mcts({ ...search, prompt, question, reward, maxSimulations: n, seed }),
    ),
    ...at(
      "SC",
      (c) => (prompt, _q, seed) =>
        new SelfConsistency({ ...voting, prompt, maxBranches: c, branchesPerRound: c, seed }),
    ),
    ...at(
      "DUCHESS",
      (c) => (prompt, _q, seed) => new Duchess({ ...voting, prompt, probe, branches: c, seed }),
      caps.map((c) => Math.min(c, 12)),
    ),
  ];
  const only = values.methods?.split(",").map((x) => x.trim());
  for (const o of only ?? [])
    if (!methods.some((m) => m.name === o))
      throw new Error(`--methods: unknown "${o}"; expected ${[...new Set(methods.map((m) => m.name))].join(", ")}`);
  const runs = new Map<string, CompareRun[]>();
  const loadAtStart = loadavg()[0];
  const mean = (xs: number[]) => xs.reduce((a, b) => a + b, 0) / xs.length;
  const rowsNow = () =>
    [...runs.entries()].map(([key, rs]): CompareRow => {
      const [name, cap] = key.split("|");
      const acc = rs.map((r) => r.accuracy);
      const os = rs.map((r) => r.oracle).filter((o): o is OracleSummary => o !== null);
      const om = (f: (o: OracleSummary) => number) => (os.length === 0 ? null : mean(os.map(f)));
      const lostAt: Record<number, number> = {};
      for (const o of os) for (const [d, c] of Object.entries(o.lostAt)) lostAt[+d] = (lostAt[+d] ?? 0) + c / os.length;
      return {
        name: name + (values.label ?? ""),
        cap: Number(cap),
        seeds: rs.length,
        command: `npm run bench:tts -- ${process.argv.slice(2).join(" ")}`,
        date: new Date().toISOString(),
        loadAtStart,
        prm: prmDir === bundledPrmDir ? "models/tiny-prm (bundled)" : prmDir,
        settings: values.set ?? "",
        maxTokens,
        accuracy: mean(acc),
        accuracyMin: Math.min(...acc),
        accuracyMax: Math.max(...acc),
        accuracyBySeed: acc,
        tokens: mean(rs.map((r) => r.tokens)),
        rewardTokens: mean(rs.map((r) => r.rewardTokens)),
        seconds: rs.reduce((a, r) => a + r.seconds, 0),
        oracle: om((o) => o.oracle),
        majority: om((o) => o.majority),
        outcomes:
          os.length === 0
            ? null
            : Object.fromEntries(
                (["right", "pick", "pruned", "cut", "none"] as const).map((k) => [
                  k,
                  mean(os.map((o) => o.outcomes[k])),
                ]),
              ),
        lostAt,
        finished: om((o) => o.finished),
        distinct: om((o) => o.distinct),
      };
    });
  // --append: the rows already in the output's JSON stay (this run's rows replace theirs, method and cap alike), so
  // methods run with different --seeds (or at different times) make one table; each row names its command.
  const jsonPath = join(outDir, "tts-compare.json");
  const earlier = values.append && existsSync(jsonPath) ? readCompareFile(jsonPath) : null;
  // Written after every method and seed (a long run stopped early keeps what it measured), printed at the end.
  const report = (print: boolean) => {
    const rows = rowsNow();
    const all = earlier === null ? rows : [...mergeable(jsonPath, split, qs.length, rows, earlier), ...rows];
    writeCompare(all, { split, questions: qs.length, seeds }, print);
  };
  try {
    for (let s = 0; s < seeds; s++) {
      for (const m of methods.filter((x) => only === undefined || only.includes(x.name))) {
        const t0 = Date.now();
        let right = 0;
        let tokens = 0;
        let rewardTokens = 0;
        const replays: Replay[] = [];
        await pool(qs, 4, async (p, i) => {
          const question = p.messages[0].content;
          // Seed 0 keeps the sampling seeds of the runs before --seeds (7000 + question index).
          const prog = m.make(gen.tokenizer.encodeChat(p.messages), question, 7000 + i + 100_003 * s);
          const r = await new ProgramRuntime(engine).run(prog, { policy: { kind: "baseline-even" } });
          const ok = arithTask.equivalent(r.answer, p.answer);
          right += ok ? 1 : 0;
          tokens += r.tokensUsed - (r.tokensByPurpose.reward ?? 0);
          rewardTokens += r.tokensByPurpose.reward ?? 0;
          const rp = replay(prog, ok, question, p.answer, (a, b) => arithTask.equivalent(a, b));
          if (rp !== null) replays.push(rp);
        });
        const key = `${m.name}|${m.cap}`;
        const run: CompareRun = {
          accuracy: right / qs.length,
          tokens: tokens / qs.length,
          rewardTokens: rewardTokens / qs.length,
          seconds: (Date.now() - t0) / 1000,
          oracle: replays.length === 0 ? null : summarizeReplays(replays),
        };
        runs.set(key, [...(runs.get(key) ?? []), run]);
        report(false);
        const o = run.oracle;
        log(
          `compare seed ${s} ${m.name} ${m.cap}: ${(100 * run.accuracy).toFixed(1)}%, ${run.tokens.toFixed(0)} tokens` +
            (o ? `, oracle ${(100 * o.oracle).toFixed(1)}%, majority ${(100 * o.majority).toFixed(1)}%` : "") +
            ` (${run.seconds.toFixed(0)} s, load ${loadavg()[0].toFixed(2)})`,
        );
      }
    }
  } finally {
    await engine.dispose();
    gen.dispose();
    prm.dispose();
  }
  report(true);
}

/** One method at one cap: its figures over the seeds, and what produced them. */
interface CompareRow {
  name: string;
  cap: number;
  seeds: number;
  command: string;
  date: string;
  loadAtStart: number;
  prm: string;
  settings: string;
  maxTokens: number;
  accuracy: number;
  accuracyMin: number;
  accuracyMax: number;
  accuracyBySeed: number[];
  tokens: number;
  rewardTokens: number;
  seconds: number;
  oracle: number | null;
  majority: number | null;
  outcomes: Record<string, number> | null;
  lostAt: Record<number, number>;
  finished: number | null;
  distinct: number | null;
}

interface CompareFile {
  date: string;
  split: string;
  questions: number;
  /** Files written before rows carried them: the run's PRM folder and --set settings. */
  prm?: string;
  settings?: Record<string, unknown>;
  rows: CompareRow[];
}

/** A tts-compare.json, its rows given what files of the first --seeds runs kept only once per file. */
function readCompareFile(path: string): CompareFile {
  const file = JSON.parse(readFileSync(path, "utf8")) as CompareFile;
  for (const r of file.rows) {
    r.date ??= file.date;
    r.prm ??= file.prm === undefined || file.prm === bundledPrmDir ? "models/tiny-prm (bundled)" : file.prm;
    r.settings ??= Object.entries(file.settings ?? {})
      .map(([k, v]) => `${k}=${String(v)}`)
      .join(",");
    r.maxTokens ??= Number(/--max-tokens (\d+)/.exec(r.command)?.[1] ?? 200);
  }
  return file;
}

/** The rows of an earlier tts-compare.json that `rows` do not replace (same method and cap), on the same questions. */
function mergeable(
  path: string,
  split: string,
  questions: number,
  rows: readonly CompareRow[],
  before = readCompareFile(path),
): CompareRow[] {
  if (before.split !== split || before.questions !== questions)
    throw new Error(`${path} has ${before.questions} ${before.split} questions, this table ${questions} ${split}`);
  const mine = new Set(rows.map((r) => `${r.name}|${r.cap}`));
  return before.rows.filter((r) => !mine.has(`${r.name}|${r.cap}`));
}

/** --merge a.json,b.json,...: one table from earlier --compare runs (later files' rows replace earlier ones'). */
function mergeCompare(files: readonly string[]): void {
  let rows: CompareRow[] = [];
  let first: CompareFile | null = null;
  for (const f of files) {
    const file = readCompareFile(f);
    first ??= file;
    const replaced = new Set(file.rows.map((r) => `${r.name}|${r.cap}`));
    rows = [...rows.filter((r) => !replaced.has(`${r.name}|${r.cap}`)), ...file.rows];
    if (file.split !== first.split || file.questions !== first.questions)
      throw new Error(
        `--merge: ${f} has ${file.questions} ${file.split} questions, ${files[0]} ${first.questions} ${first.split}`,
      );
  }
  if (first === null) throw new Error("--merge: give the tts-compare.json files to merge");
  writeCompare(rows, { split: first.split, questions: first.questions, seeds: Math.max(...rows.map((r) => r.seeds)) });
}

/** tts-compare.{md,svg,json} in --out from the rows (each row carries its command, date, load, PRM and settings). */
function writeCompare(
  rows: readonly CompareRow[],
  meta: { split: string; questions: number; seeds: number },
  print = true,
): void {
  const commands = [...new Set(rows.map((r) => r.command))];
  const prms = [...new Set(rows.filter((r) => r.rewardTokens > 0).map((r) => r.prm))];
  const names = [...new Set(rows.map((r) => r.name))];
  const svg = lineChart(
    names.map((name) => ({
      name,
      points: rows.filter((r) => r.name === name).map((r) => [r.tokens, 100 * r.accuracy] as const),
    })),
    {
      title: `Accuracy vs generated tokens (${meta.questions} ${meta.split} questions${meta.seeds > 1 ? `, mean over seeds` : ""})`,
      xLabel: "generated tokens per question (generator)",
      yLabel: "accuracy %",
      logX: true,
    },
  );
  const p1 = (v: number | null) => (v === null ? "–" : (100 * v).toFixed(1) + "%");
  const p0 = (v: number | undefined) => (v === undefined ? "–" : (100 * v).toFixed(0) + "%");
  const accCell = (r: CompareRow) =>
    r.seeds > 1 ? `${p1(r.accuracy)} (${p1(r.accuracyMin)}–${p1(r.accuracyMax)})` : p1(r.accuracy);
  const lostCell = (r: CompareRow) =>
    Object.entries(r.lostAt)
      .sort((a, b) => +a[0] - +b[0])
      .map(([d, c]) => `${d}:${c.toFixed(r.seeds > 1 ? 1 : 0)}`)
      .join(" ") || "–";
  const settings = [...new Set(rows.map((r) => r.settings).filter((x) => x !== ""))];
  const setNote = settings.length === 0 ? "" : ` (with --set ${settings.join("; ")})`;
  const dates = [...new Set(rows.map((r) => r.date.slice(0, 10)))];
  const md = [
    `# bench:tts --compare — verifier-guided search against SC and DUCHESS at equal tokens`,
    "",
    `${dates.join(", ")}, ${machine()}, device ${device}; load at each row's start in the table. ` +
      `Command${commands.length > 1 ? "s" : ""}: ${commands.map((c) => `\`${c}\``).join("; ")}. ` +
      `${meta.questions} ${meta.split}-split questions (4 at a time), the same questions and seeds for every method; with several sampling seeds, accuracy is their mean (min–max); ` +
      `the searches at their programs' defaults${setNote}, steps scored by the PRM ${prms.join(" / ") || "–"} ` +
      `(its 1-token passes are in "PRM tokens", not in "tokens") or by the task's exact step checker; SC and DUCHESS at T = 0.8; max ${[...new Set(rows.map((r) => r.maxTokens))].join(" / ")} tokens a solution.`,
    "",
    "| method | N / branches | seeds | accuracy | tokens / question | PRM tokens / question | wall s (all seeds) | load at start |",
    "|---|---|---|---|---|---|---|---|",
    ...rows.map(
      (r) =>
        `| ${r.name} | ${r.cap} | ${r.seeds} | ${accCell(r)} | ${r.tokens.toFixed(0)} | ${r.rewardTokens.toFixed(0)} | ${r.seconds.toFixed(0)} | ${r.loadAtStart.toFixed(1)} |`,
    ),
    "",
    "![accuracy vs tokens](tts-compare.svg)",
    "",
    "## Oracle replay",
    "",
    "Among the solutions each search finished: *oracle* = some finished solution is right (what a perfect picker gets), " +
      "*majority* = the plain majority of their answers is right, *pick* = the program's own answer. Where the pick is " +
      "wrong: *aggregation* = a right solution was finished but not picked; *pruned* = right prefixes were generated " +
      "and the last one was pruned (steps: how many questions lost it at each step, a mean over seeds); *cut* = a right " +
      "prefix hit the depth / token cap; *none* = no right prefix survived its own children (or, for best-of-N / SC / " +
      "MCTS, no right solution). A prefix is right when every line is on track (scripts/bench/ttsOracle.ts: right " +
      "arithmetic on a value the question's solution computes). Distinct = distinct finished texts / finished solutions.",
    "",
    "| method | N | pick | oracle | majority | aggregation | pruned | cut | none | pruned at step | distinct / finished |",
    "|---|---|---|---|---|---|---|---|---|---|---|",
    ...rows
      .filter((r) => r.outcomes !== null)
      .map(
        (r) =>
          `| ${r.name} | ${r.cap} | ${p1(r.accuracy)} | ${p1(r.oracle)} | ${p1(r.majority)} | ${p0(r.outcomes?.pick)} | ${p0(r.outcomes?.pruned)} | ${p0(r.outcomes?.cut)} | ${p0(r.outcomes?.none)} | ${lostCell(r)} | ${r.distinct!.toFixed(1)} / ${r.finished!.toFixed(1)} |`,
      ),
    "",
  ].join("\n");
  mkdirSync(outDir, { recursive: true });
  writeFileSync(join(outDir, "tts-compare.md"), md);
  writeFileSync(join(outDir, "tts-compare.svg"), svg);
  writeFileSync(
    join(outDir, "tts-compare.json"),
    JSON.stringify(
      { date: new Date().toISOString(), machine: machine(), split: meta.split, questions: meta.questions, rows },
      null,
      2,
    ) + "\n",
  );
  if (print) console.log(md);
}

async function main(): Promise<void> {
  if (values.merge !== undefined) return mergeCompare(values.merge.split(","));
  const q = Number(values.compare);
  if (q > 0) return compare(q);
  const started = new Date();
  const budget = Number(values["kv-budget"]);
  const cfgs = configs.map((key) => ({ key, ...CONFIGS[key] }));
  const main = await grid(budget, nList, cfgs);
  const nMax = Math.max(...nList);
  const ratios = list(values.ratios!);
  const ratioRes =
    ratios.length === 0
      ? null
      : await grid(
          budget,
          [nMax],
          [
            { key: "baseline", ...CONFIGS.baseline },
            ...ratios.map((r) => ({
              key: `R=${r}`,
              sw: { ...CONFIGS.PMS.sw, truncateRatio: r },
              split: "auto" as const,
            })),
          ],
        );
  const kvRes: Record<number, Record<string, Record<number, Point>>> = {};
  for (const kv of list(values["kv-budgets"]!))
    kvRes[kv] = await grid(
      kv,
      [nMax],
      [
        { key: "baseline", ...CONFIGS.baseline },
        { key: "PMS", ...CONFIGS.PMS },
      ],
    );

  // 1 / (1 - v) for the baseline's median verifier share v at each N: what hiding verification could win at most
  // (speculation into stragglers' idle rows is not bounded by it).
  const ceilings: [number, number][] = nList.flatMap((n) => {
    const v = main.baseline?.[n]?.median.verifierShare;
    return v === undefined || v >= 1 ? [] : [[n, 1 / (1 - v)] as [number, number]];
  });
  const head = [
    `# bench:tts — FlashTTS beam search with the tiny PRM`,
    "",
    ...(scaled === null
      ? []
      : [
          `Models scaled to layer shapes with random weights (--scale: generator ${scaled.gen}, PRM ${scaled.prm}): speed only; accuracy is meaningless.`,
          "",
        ]),
    `${started.toISOString().slice(0, 10)}, ${machine()}, device ${device}, load ${loadavg()[0].toFixed(2)} at start.`,
    `Command: \`npm run bench:tts -- ${process.argv.slice(2).join(" ")}\`. ${problems.length} test-split questions one at a time, beam width ${M}, ` +
      `max ${maxTokens} tokens a solution, T = 1, ${repeats} repeats (median, min–max), configurations interleaved; KV budget ${budget} MiB for both pools.`,
    "",
    "Goodput = precise goodput (mean tokens of a finished solution / mean time until it finished). Verifier share = time in verification / search time.",
    "",
    ...table(main, configs, (k) => LABEL[k], nList),
    ...(ceilings.length === 0 ? [] : ["", ceilingParagraph(ceilings)]),
    "",
    "KV pools:",
    "",
    ...splitNote.map((x) => `- ${x}`),
  ];
  if (ratioRes)
    head.push(
      "",
      `## Duplicate-then-truncate ratio R (+P+S, N = ${nMax})`,
      "",
      ...table(
        ratioRes,
        ["baseline", ...ratios.map((r) => `R=${r}`)],
        (k) => (k === "baseline" ? "baseline" : `+P+M+S ${k}`),
        [nMax],
      ),
    );
  for (const [kv, res] of Object.entries(kvRes))
    head.push(
      "",
      `## KV budget ${kv} MiB (N = ${nMax})`,
      "",
      ...table(res, ["baseline", "PMS"], (k) => LABEL[k], [nMax]),
    );
  const md = head.join("\n") + "\n";
  mkdirSync(outDir, { recursive: true });
  writeFileSync(join(outDir, "tts.md"), md);
  const json = {
    date: started.toISOString(),
    machine: machine(),
    device,
    argv: process.argv.slice(2),
    problems: problems.length,
    beamWidth: M,
    repeats,
    kvBudgetMiB: budget,
    pools: splitNote,
    main,
    verifierCeiling: Object.fromEntries(ceilings),
    ratios: ratioRes,
    kv: kvRes,
  };
  writeFileSync(join(outDir, "tts.json"), JSON.stringify(json, null, 2) + "\n");
  if (values.json) console.log(JSON.stringify(json));
  else console.log(md);
}

main().catch((e: unknown) => {
  console.error(`bench:tts: ${e instanceof Error ? e.message : String(e)}`);
  process.exit(1);
});
