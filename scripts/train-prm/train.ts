// One command to reproduce models/tiny-prm on a CPU:
//   npx tsx scripts/train-prm/train.ts [--out DIR] [--generator DIR] [--train-problems N] [--samples K]
//                                      [--temperature T] [--steps N] [--lr X] [--seed S] [--threads N]
// Samples solutions from the generator (the tiny reasoner) on the train / validation splits with the trainer's own
// forward, labels every step with the arithmetic task's step checker, and fine-tunes a copy of the generator into a
// process reward model (Math-Shepherd style: after each step and the step tag it predicts "+" or "-"), loss on the
// tags only. Writes the HF files, prm.json, model.safetensors, training-curve.csv/svg and recipe.json.
import { copyFileSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
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

/** Samples `samples` solutions per problem and labels their steps; identical solutions of a problem kept once. */
export async function sampleSolutions(
  bin: string,
  dir: string,
  tok: ChatTokenizer,
  split: string,
  n: number,
  o: { samples: number; temperature: number; seed: number; threads: number; corrupt: boolean },
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
      const s = labelSolution(p.messages[0].content, text);
      out.push(s);
      const bad = o.corrupt ? corruptSolution(s, () => rng.next()) : null;
      if (bad) out.push(bad);
    }
  });
  return out;
}

async function main(): Promise<void> {
  const { values } = parseArgs({
    options: {
      out: { type: "string", default: "models/tiny-prm" },
      generator: { type: "string", default: "models/tiny-reasoner" },
      "train-problems": { type: "string" },
      samples: { type: "string" },
      temperature: { type: "string" },
      steps: { type: "string" },
      lr: { type: "string" },
      seed: { type: "string" },
      threads: { type: "string" },
    },
  });
  const num = (v: string | undefined, d: number) => (v === undefined ? d : Number(v));
  const r = {
    ...prmRecipe,
    trainProblems: num(values["train-problems"], prmRecipe.trainProblems),
    samples: num(values.samples, prmRecipe.samples),
    temperature: num(values.temperature, prmRecipe.temperature),
    steps: num(values.steps, prmRecipe.steps),
    lr: num(values.lr, prmRecipe.lr),
    seed: num(values.seed, prmRecipe.seed),
    threads: num(values.threads, prmRecipe.threads),
  };
  const started = Date.now();
  const gen = resolve(values.generator!);
  const out = resolve(values.out!);
  const work = join(buildDir, "prm-work");
  mkdirSync(work, { recursive: true });
  mkdirSync(out, { recursive: true });
  const bin = buildTrainer("release");
  const tok = loadChatTokenizer(gen);
  const m = recipeOfConfig(gen);

  console.log(
    `sampling ${r.samples} solutions per problem (T=${r.temperature}) for ${r.trainProblems} train + ${r.validationProblems} validation problems ...`,
  );
  const s = {
    samples: r.samples,
    temperature: r.temperature,
    seed: r.seed,
    threads: r.threads,
    corrupt: r.corruptedCopies,
  };
  const trainSolutions = await sampleSolutions(bin, gen, tok, "train", r.trainProblems, s);
  const valSolutions = await sampleSolutions(bin, gen, tok, "validation", r.validationProblems, s);
  const sampleSeconds = Math.round((Date.now() - started) / 1000);
  const train = writePrmSet(tok, TINY_PRM, trainSolutions, m.maxPos, join(work, "train.bin"));
  const val = writePrmSet(tok, TINY_PRM, valSolutions, m.maxPos, join(work, "val.bin"));
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
    join(gen, "model.safetensors"),
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
  for (const f of ["config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json"])
    copyFileSync(join(gen, f), join(out, f));
  writeFileSync(join(out, PRM_FILE), JSON.stringify(TINY_PRM, null, 2) + "\n");
  writeFileSync(
    join(out, "training-curve.svg"),
    curveSvg(readFileSync(join(out, "training-curve.csv"), "utf8"), "tiny-prm: cross-entropy on the step tags"),
  );
  const wallSeconds = Math.round((Date.now() - started) / 1000);
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
    JSON.stringify({ generator: "tiny-reasoner", prm: TINY_PRM, train: r, data, sampleSeconds, wallSeconds }, null, 2) +
      "\n",
  );
  console.log(`done in ${wallSeconds} s: ${out}`);
}

if (process.argv[1] && resolve(process.argv[1]) === resolve(new URL(import.meta.url).pathname)) {
  main().catch((e: unknown) => {
    console.error(`train-prm: ${e instanceof Error ? e.message : String(e)}`);
    process.exit(1);
  });
}
