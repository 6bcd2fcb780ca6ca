// One command to reproduce models/tiny-prm (checker labels, the default) or models/tiny-prm-mc on a CPU:
//   npx tsx scripts/train-prm/train.ts [--labels checker|on-track|mc-soft|mc-hard|pairwise] [--out DIR] [--generator DIR]
//        [--init DIR] [--train-problems N] [--validation-problems N] [--samples K] [--rollouts K] [--temperature T]
//        [--steps N] [--lr X] [--seed S] [--threads N] [--pair-weight W] [--target-weight W] [--group-size N]
//        [--corrupt on|off]
// Samples solutions from the generator (the tiny reasoner) on the train / validation splits with the trainer's own
// forward, labels every step, and fine-tunes a copy of the generator into a process reward model (Math-Shepherd
// style: after each step and the step tag it predicts "+" or "-"), loss on the tags only. Labels: "mc-soft" /
// "mc-hard" roll the generator out from every step (mcLabels.ts; cached under .scratch/train-prm/) and train
// towards the fraction of rollouts that reach the answer (soft) or "some did" (hard); "checker" is the previous
// model's recipe, the arithmetic task's step checker (prmRecipe, unchanged); "on-track" the exact process labels of
// ts/tasks/arith/onTrack.ts (the prefix still on the question's own solution, the answer line by the answer;
// onTrackRecipe, fine-tuned from the checker PRM); "pairwise" samples k solutions of each
// question at the search's temperature and trains the last step's score to rank a question's right solutions above
// its wrong ones (groups.ts, the trainer's TRD4 Bradley-Terry loss), the checker labels on every tag as an
// auxiliary term (pairRecipe). Writes the HF files, prm.json,
// model.safetensors, training-curve.csv/svg and recipe.json.
import { copyFileSync, mkdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { parseArgs } from "node:util";
import { PRM_FILE, type TaggedStepsPrm as PrmConfig } from "../../ts/model/prmConfig.js";
import { arithTask } from "../../ts/tasks/index.js";
import { buildDir, buildTrainer } from "../train-reasoner/buildTrainer.js";
import { loadChatTokenizer, type ChatTokenizer } from "../train-reasoner/chatTokenizer.js";
import { curveSvg } from "../train-reasoner/plotCurve.js";
import { generateWithTrainer, modelFlags, recipeOfConfig, runTrainer } from "../train-reasoner/trainerCli.js";
import { Rng } from "../../ts/tasks/arith/rng.js";
import { corruptSolution, labelSolution, writePrmSet, type LabelledSolution } from "./data.js";
import { cachedLabels, fileDigest, mcLabelSolutions, sampleTraces } from "./mcLabels.js";
import { groupsOf, mixedGroups, writeGroupSet, type WrittenGroupSet } from "./groups.js";

export const TINY_PRM: PrmConfig = {
  format: "tagged-steps",
  prefix: "<|bos|>",
  stepTag: "#",
  goodTokens: ["+"],
  badTokens: ["-"],
};

export const prmRecipe = {
  seed: 1,
  trainProblems: 4000,
  validationProblems: 400,
  samples: 4,
  temperature: 1.0,
  /** Each sampled solution also gives a copy with one step's result corrupted (corruptSolution). */
  corruptedCopies: true,
  steps: 1500,
  batch: 32,
  lr: 1e-3,
  warmup: 50,
  minLrFrac: 0.1,
  weightDecay: 0.1,
  beta2: 0.98,
  clip: 1,
  threads: 2,
};

/**
 * Exact process labels (issue 48: what the Monte-Carlo labels estimate, and what the checker's labels miss): the
 * checker recipe's samples and corrupted copies, each step labelled "the prefix through it is still on the
 * question's own solution" (a right line on the wrong sub-expression is bad, and so is every step after it) and the
 * answer line "the answer is right"; fine-tuned from the checker PRM (models/tiny-prm), which already reads the
 * arithmetic.
 */
export const onTrackRecipe = {
  ...prmRecipe,
  labels: "on-track" as const,
  steps: 800,
  lr: 5e-4,
  init: "models/tiny-prm",
};

/**
 * Monte-Carlo labels (Math-Shepherd): fewer solutions than the checker recipe, since every step of each costs
 * `rollouts` continuations (the whole recipe fits an hour of the 2-core box), so fewer optimiser steps too (about
 * 5 epochs, where the checker recipe's 1500 steps were about 2). The rest is the checker recipe's.
 */
export const mcRecipe = {
  ...prmRecipe,
  labels: "mc-soft" as "mc-soft" | "mc-hard",
  trainProblems: 500,
  validationProblems: 40,
  samples: 2,
  rollouts: 8,
  maxNew: 448,
  steps: 300,
};

/**
 * Within-question ranking (issue 48: the pick is where search lost to voting): 16 samples of each of 800 train
 * questions at T = 0.8 (the searches' temperature), the questions with both right and wrong answers kept (their
 * distinct solutions, at most groupSize, right and wrong alternating), Bradley-Terry on the last tag's log-odds
 * within each question plus the checker labels' cross-entropy on every tag, fine-tuned from the checker PRM.
 * Validation: the validation split's first 100 questions as bench:tts draws them (seed 2).
 */
export const pairRecipe = {
  ...prmRecipe,
  labels: "pairwise" as const,
  corruptedCopies: false, // the sampled solutions only: a corrupted copy's outcome is the question's, not a sample's
  trainProblems: 800,
  validationProblems: 100,
  validationSeed: 2,
  samples: 16,
  temperature: 0.8,
  seed: 11,
  maxNew: 256,
  groupSize: 16,
  pairWeight: 1,
  targetWeight: 1,
  steps: 300,
  batch: 32,
  lr: 3e-4,
  init: "models/tiny-prm",
};

const labelCache = resolve(new URL(".", import.meta.url).pathname, "../../.scratch/train-prm");

/** Samples `samples` solutions per problem and labels their steps; identical solutions of a problem kept once. */
export async function sampleSolutions(
  bin: string,
  dir: string,
  tok: ChatTokenizer,
  split: string,
  n: number,
  o: { samples: number; temperature: number; seed: number; threads: number; corrupt: boolean; onTrack?: boolean },
): Promise<LabelledSolution[]> {
  const problems = arithTask.problems({ split, n, seed: o.seed });
  const prompts = problems.map((p) => tok.encodeChat(p.messages as never, true));
  const outs = await generateWithTrainer(bin, dir, recipeOfConfig(dir), prompts, {
    samples: o.samples,
    temperature: o.temperature,
    seed: o.seed,
    maxNew: 448,
    eos: tok.tokenId("<|eos|>"),
    threads: o.threads,
  });
  const out: LabelledSolution[] = [];
  const rng = new Rng(o.seed).fork(`prm-corrupt/${split}`);
  problems.forEach((p, i) => {
    const seen = new Set<string>();
    for (const ids of outs.slice(i * o.samples, (i + 1) * o.samples)) {
      const text = tok.decode(ids);
      if (seen.has(text)) continue;
      seen.add(text);
      const how = o.onTrack ? ({ kind: "on-track", answer: p.answer } as const) : undefined;
      const s = labelSolution(p.messages[0].content, text, how);
      out.push(s);
      const bad = o.corrupt ? corruptSolution(s, () => rng.next(), how) : null;
      if (bad) out.push(bad);
    }
  });
  return out;
}

/** The trainer's optimiser flags of a recipe. */
function optimiserFlags(r: typeof prmRecipe, valSequences: number): string[] {
  return [
    "--steps",
    String(r.steps),
    "--batch",
    String(r.batch),
    "--lr",
    String(r.lr),
    "--warmup",
    String(r.warmup),
    "--min-lr-frac",
    String(r.minLrFrac),
    "--wd",
    String(r.weightDecay),
    "--beta2",
    String(r.beta2),
    "--clip",
    String(r.clip),
    "--seed",
    String(r.seed),
    "--threads",
    String(r.threads),
    "--val-seqs",
    String(Math.min(2000, valSequences)),
    "--eval-every",
    String(Math.max(1, Math.round(r.steps / 20))),
    "--log-every",
    String(Math.max(1, Math.round(r.steps / 100))),
  ];
}

/** Writes the served folder's other files (the tokenizer's from the generator, config.json from the initial
 * weights: a grown PRM has more layers; prm.json, the curve's SVG). */
function finishFolder(gen: string, init: string, out: string, title: string): void {
  for (const f of ["generation_config.json", "tokenizer.json", "tokenizer_config.json"])
    copyFileSync(join(gen, f), join(out, f));
  copyFileSync(join(init, "config.json"), join(out, "config.json"));
  writeFileSync(join(out, PRM_FILE), JSON.stringify(TINY_PRM, null, 2) + "\n");
  writeFileSync(
    join(out, "training-curve.svg"),
    curveSvg(readFileSync(join(out, "training-curve.csv"), "utf8"), title),
  );
}

/** --labels pairwise: pairRecipe (groups.ts; the trainer's TRD4 within-question loss). */
async function trainPairwise(
  values: Record<string, string | boolean | undefined>,
  num: (v: string | undefined, d: number) => number,
): Promise<void> {
  const str = (k: string) => values[k] as string | undefined;
  const r = {
    ...pairRecipe,
    trainProblems: num(str("train-problems"), pairRecipe.trainProblems),
    validationProblems: num(str("validation-problems"), pairRecipe.validationProblems),
    samples: num(str("samples"), pairRecipe.samples),
    temperature: num(str("temperature"), pairRecipe.temperature),
    steps: num(str("steps"), pairRecipe.steps),
    lr: num(str("lr"), pairRecipe.lr),
    seed: num(str("seed"), pairRecipe.seed),
    threads: num(str("threads"), pairRecipe.threads),
    groupSize: num(str("group-size"), pairRecipe.groupSize),
    pairWeight: num(str("pair-weight"), pairRecipe.pairWeight),
    targetWeight: num(str("target-weight"), pairRecipe.targetWeight),
    init: str("init") ?? pairRecipe.init,
  };
  const started = Date.now();
  const gen = resolve(str("generator")!);
  const out = resolve(str("out")!);
  const work = join(buildDir, `prm-work-${process.pid}`);
  mkdirSync(work, { recursive: true });
  mkdirSync(out, { recursive: true });
  const bin = buildTrainer("release");
  const tok = loadChatTokenizer(gen);
  const init = resolve(r.init);
  const m = recipeOfConfig(init); // the PRM's shape is its initial weights' (grow.ts)
  const digest = fileDigest(join(gen, "model.safetensors"));
  // Key order as GroupSampling's (the cache hashes the JSON).
  const o = (seed: number) => ({
    samples: r.samples,
    temperature: r.temperature,
    seed,
    maxNew: r.maxNew,
    threads: r.threads,
  });
  console.log(
    `sampling ${r.samples} solutions (T=${r.temperature}) of ${r.trainProblems} train + ${r.validationProblems} validation questions ...`,
  );
  const t = await groupsOf(labelCache, bin, gen, digest, tok, "train", r.trainProblems, o(r.seed));
  const v = await groupsOf(labelCache, bin, gen, digest, tok, "validation", r.validationProblems, o(r.validationSeed));
  const sampleSeconds = t.seconds + v.seconds; // cached or not: what the samples took when they were made
  const train = writeGroupSet(tok, TINY_PRM, mixedGroups(t.groups, r.groupSize), m.maxPos, join(work, "train.bin"));
  const val = writeGroupSet(tok, TINY_PRM, mixedGroups(v.groups, r.groupSize), m.maxPos, join(work, "val.bin"));
  const share = (w: WrittenGroupSet) =>
    `${w.groups} mixed questions, ${w.sequences} solutions, ${w.pairs} right/wrong pairs, ${w.steps} steps, ${w.tokens} tokens (max ${w.maxLength})`;
  console.log(`train: ${share(train)}; validation: ${share(val)}`);
  const trainStart = Date.now();
  await runTrainer(bin, [
    "train",
    "--data",
    train.path,
    "--val",
    val.path,
    "--out",
    join(out, "model.safetensors"),
    "--init",
    join(init, "model.safetensors"),
    "--log",
    join(out, "training-curve.csv"),
    ...modelFlags(m),
    ...optimiserFlags(r, val.sequences),
    "--pair-weight",
    String(r.pairWeight),
    "--target-weight",
    String(r.targetWeight),
  ]);
  finishFolder(gen, init, out, "pairwise PRM: weighted loss (checker cross-entropy + within-question Bradley-Terry)");
  const trainSeconds = Math.round((Date.now() - trainStart) / 1000);
  const wallSeconds =
    Math.round((Date.now() - started) / 1000) + (t.cached ? t.seconds : 0) + (v.cached ? v.seconds : 0);
  const { path: _t, ...trainData } = train;
  const { path: _v, ...valData } = val;
  const data = { train: trainData, validation: valData };
  writeFileSync(
    join(out, "recipe.json"),
    JSON.stringify(
      { generator: "tiny-reasoner", prm: TINY_PRM, train: r, data, sampleSeconds, trainSeconds, wallSeconds },
      null,
      2,
    ) + "\n",
  );
  rmSync(work, { recursive: true, force: true });
  console.log(`done in ${wallSeconds} s: ${out}`);
}

async function main(): Promise<void> {
  const { values } = parseArgs({
    options: {
      labels: { type: "string", default: "checker" },
      out: { type: "string", default: "models/tiny-prm" },
      generator: { type: "string", default: "models/tiny-reasoner" },
      // The weights fine-tuned (default: the generator's).
      init: { type: "string" },
      "train-problems": { type: "string" },
      "validation-problems": { type: "string" },
      samples: { type: "string" },
      rollouts: { type: "string" },
      temperature: { type: "string" },
      steps: { type: "string" },
      lr: { type: "string" },
      seed: { type: "string" },
      threads: { type: "string" },
      "pair-weight": { type: "string" },
      "target-weight": { type: "string" },
      "group-size": { type: "string" },
      corrupt: { type: "string" },
    },
  });
  const num = (v: string | undefined, d: number) => (v === undefined ? d : Number(v));
  const labels = values.labels!;
  if (labels === "pairwise") {
    if (values.corrupt !== undefined)
      throw new Error(
        "--corrupt applies to the checker, on-track and Monte-Carlo recipes; pairwise trains on sampled solutions only",
      );
    return trainPairwise(values, num);
  }
  if (labels !== "checker" && labels !== "on-track" && labels !== "mc-soft" && labels !== "mc-hard")
    throw new Error(`--labels must be checker, on-track, mc-soft, mc-hard or pairwise, not ${JSON.stringify(labels)}`);
  if (values.corrupt !== undefined && values.corrupt !== "on" && values.corrupt !== "off")
    throw new Error(`--corrupt must be on or off, not ${JSON.stringify(values.corrupt)}`);
  const base = labels === "checker" ? prmRecipe : labels === "on-track" ? onTrackRecipe : { ...mcRecipe, labels };
  const r = {
    ...base,
    trainProblems: num(values["train-problems"], base.trainProblems),
    validationProblems: num(values["validation-problems"], base.validationProblems),
    samples: num(values.samples, base.samples),
    temperature: num(values.temperature, base.temperature),
    steps: num(values.steps, base.steps),
    lr: num(values.lr, base.lr),
    seed: num(values.seed, base.seed),
    threads: num(values.threads, base.threads),
    corruptedCopies: values.corrupt === undefined ? base.corruptedCopies : values.corrupt === "on",
  };
  // Monte-Carlo recipes: rollouts per step and the solutions' token budget (null: checker labels).
  const mcr =
    labels === "checker" || labels === "on-track"
      ? null
      : { rollouts: num(values.rollouts, mcRecipe.rollouts), maxNew: mcRecipe.maxNew };
  Object.assign(r, mcr ?? {}, values.init ? { init: values.init } : {}); // recorded in recipe.json (init: the weights fine-tuned)
  const started = Date.now();
  const gen = resolve(values.generator!);
  const out = resolve(values.out!);
  const work = join(buildDir, `prm-work-${process.pid}`); // two recipes may train at once
  mkdirSync(work, { recursive: true });
  mkdirSync(out, { recursive: true });
  const bin = buildTrainer("release");
  const tok = loadChatTokenizer(gen);
  // The PRM's shape is its initial weights' (a grown PRM, grow.ts, has more layers than the generator).
  const init = resolve((r as { init?: string }).init ?? gen);
  const m = recipeOfConfig(init);

  console.log(
    `sampling ${r.samples} solutions per problem (T=${r.temperature}) for ${r.trainProblems} train + ${r.validationProblems} validation problems ...`,
  );
  const s = {
    samples: r.samples,
    temperature: r.temperature,
    seed: r.seed,
    threads: r.threads,
    corrupt: r.corruptedCopies,
    onTrack: labels === "on-track",
  };
  let trainSolutions: LabelledSolution[], valSolutions: LabelledSolution[];
  let labelSeconds: number | undefined;
  let cachedSeconds = 0; // label time spent before this run (cached labels)
  if (mcr === null) {
    trainSolutions = await sampleSolutions(bin, gen, tok, "train", r.trainProblems, s);
    valSolutions = await sampleSolutions(bin, gen, tok, "validation", r.validationProblems, s);
  } else {
    // Monte-Carlo labels of one split, cached by everything that decides them.
    const mc = async (split: string, n: number) => {
      const o = { ...s, ...mcr };
      const key = { generator: fileDigest(join(gen, "model.safetensors")), split, n, ...o };
      return cachedLabels(labelCache, key, async () => {
        const traces = await sampleTraces(bin, gen, tok, split, n, o);
        console.log(`${split}: ${traces.length} solutions sampled; rolling out ${mcr.rollouts} per step ...`);
        return mcLabelSolutions(bin, gen, tok, traces, o, new Rng(r.seed).fork(`prm-corrupt/${split}`), console.log);
      });
    };
    const t = await mc("train", r.trainProblems);
    const v = await mc("validation", r.validationProblems);
    trainSolutions = t.solutions;
    valSolutions = v.solutions;
    labelSeconds = t.seconds + v.seconds;
    cachedSeconds = (t.cached ? t.seconds : 0) + (v.cached ? v.seconds : 0);
    console.log(`labels: ${labelSeconds} s${t.cached ? " (cached: " + t.path + ")" : ""}`);
  }
  const sampleSeconds = Math.round((Date.now() - started) / 1000);
  const target = "labels" in r && r.labels === "mc-soft" ? "soft" : "hard";
  const train = writePrmSet(tok, TINY_PRM, trainSolutions, m.maxPos, join(work, "train.bin"), target);
  const val = writePrmSet(tok, TINY_PRM, valSolutions, m.maxPos, join(work, "val.bin"), target);
  const share = (w: typeof train) =>
    `${w.sequences} solutions, ${w.steps} steps (${((100 * (w.steps - w.goodSteps)) / w.steps).toFixed(1)}% bad), ${w.tokens} tokens (max ${w.maxLength})`;
  console.log(`train: ${share(train)}; validation: ${share(val)}; sampled in ${sampleSeconds} s`);

  await runTrainer(bin, [
    "train",
    "--data",
    train.path,
    "--val",
    val.path,
    "--out",
    join(out, "model.safetensors"),
    "--init",
    join(init, "model.safetensors"),
    "--log",
    join(out, "training-curve.csv"),
    ...modelFlags(m),
    "--steps",
    String(r.steps),
    "--batch",
    String(r.batch),
    "--lr",
    String(r.lr),
    "--warmup",
    String(r.warmup),
    "--min-lr-frac",
    String(r.minLrFrac),
    "--wd",
    String(r.weightDecay),
    "--beta2",
    String(r.beta2),
    "--clip",
    String(r.clip),
    "--seed",
    String(r.seed),
    "--threads",
    String(r.threads),
    "--val-seqs",
    String(Math.min(400, val.sequences)),
    "--eval-every",
    String(Math.max(1, Math.round(r.steps / 20))),
    "--log-every",
    String(Math.max(1, Math.round(r.steps / 100))),
  ]);
  finishFolder(
    gen,
    init,
    out,
    `${labels === "on-track" ? "tiny-prm-ontrack" : "tiny-prm"}: cross-entropy on the step tags`,
  );
  // With cached labels, the wall time the labels took when they were made counts too.
  const wallSeconds = Math.round((Date.now() - started) / 1000) + cachedSeconds;
  const data = {
    train: {
      solutions: train.sequences,
      steps: train.steps,
      badSteps: train.steps - train.goodSteps,
      tokens: train.tokens,
    },
    validation: { solutions: val.sequences, steps: val.steps, badSteps: val.steps - val.goodSteps, tokens: val.tokens },
  };
  writeFileSync(
    join(out, "recipe.json"),
    JSON.stringify(
      { generator: "tiny-reasoner", prm: TINY_PRM, train: r, data, sampleSeconds, labelSeconds, wallSeconds },
      null,
      2,
    ) + "\n",
  );
  rmSync(work, { recursive: true, force: true });
  console.log(`done in ${wallSeconds} s: ${out}`);
}

if (process.argv[1] && resolve(process.argv[1]) === resolve(new URL(import.meta.url).pathname)) {
  main().catch((e: unknown) => {
    console.error(`train-prm: ${e instanceof Error ? e.message : String(e)}`);
    process.exit(1);
  });
}
