// One command to reproduce models/tiny-reasoner on a CPU:
//   npx tsx scripts/train-reasoner/train.ts [--out DIR] [--steps N] [--train-problems N] [--batch N] [--lr X]
//                                          [--threads N] [--seed S]
// Compiles the C++ trainer, writes the HF files, tokenises the train/validation splits, trains, and writes
// model.safetensors and training-curve.csv next to them. Defaults are the committed recipe (recipe.ts).
import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { parseArgs } from "node:util";
import { buildDir, buildTrainer } from "./buildTrainer.js";
import { loadChatTokenizer } from "./chatTokenizer.js";
import { curveSvg } from "./plotCurve.js";
import { prepareSet } from "./prepare.js";
import { modelRecipe, trainRecipe, type ModelRecipe, type TrainRecipe } from "./recipe.js";
import { modelFlags, runTrainer } from "./trainerCli.js";
import { writeModelFiles } from "./writeModelFiles.js";

async function main(): Promise<void> {
  const { values } = parseArgs({
    options: {
      out: { type: "string", default: "models/tiny-reasoner" },
      steps: { type: "string" },
      "train-problems": { type: "string" },
      batch: { type: "string" },
      lr: { type: "string" },
      threads: { type: "string" },
      seed: { type: "string" },
      "steps-only-share": { type: "string" },
      hidden: { type: "string" },
      layers: { type: "string" },
      ffn: { type: "string" },
    },
  });
  const num = (v: string | undefined, d: number) => (v === undefined ? d : Number(v));
  const m: ModelRecipe = {
    ...modelRecipe,
    hidden: num(values.hidden, modelRecipe.hidden),
    layers: num(values.layers, modelRecipe.layers),
    ffn: num(values.ffn, modelRecipe.ffn),
  };
  const t: TrainRecipe = {
    ...trainRecipe,
    steps: num(values.steps, trainRecipe.steps),
    trainProblems: num(values["train-problems"], trainRecipe.trainProblems),
    batch: num(values.batch, trainRecipe.batch),
    lr: num(values.lr, trainRecipe.lr),
    threads: num(values.threads, trainRecipe.threads),
    seed: num(values.seed, trainRecipe.seed),
    stepsOnlyShare: num(values["steps-only-share"], trainRecipe.stepsOnlyShare),
  };
  const started = Date.now();
  const out = resolve(values.out!);
  const work = join(buildDir, "work");
  mkdirSync(work, { recursive: true });

  console.log("building trainer ...");
  const bin = buildTrainer("release");
  writeModelFiles(out, m);
  const tok = loadChatTokenizer(out);
  console.log(`tokenising ${t.trainProblems} train + ${t.validationProblems} validation problems ...`);
  const train = prepareSet(
    tok,
    "train",
    t.trainProblems,
    t.seed,
    m.maxPos,
    join(work, "train.bin"),
    t.probeShare,
    t.stepsOnlyShare,
  );
  const val = prepareSet(tok, "validation", t.validationProblems, t.seed, m.maxPos, join(work, "val.bin"));
  console.log(
    `train: ${train.sequences} sequences (${train.probes} probe examples), ${train.tokens} tokens (max ${train.maxLength}); validation: ${val.sequences}`,
  );

  await runTrainer(bin, [
    "train",
    "--data",
    train.path,
    "--val",
    val.path,
    "--out",
    join(out, "model.safetensors"),
    "--log",
    join(out, "training-curve.csv"),
    ...modelFlags(m),
    "--steps",
    String(t.steps),
    "--batch",
    String(t.batch),
    "--lr",
    String(t.lr),
    "--warmup",
    String(t.warmup),
    "--min-lr-frac",
    String(t.minLrFrac),
    "--wd",
    String(t.weightDecay),
    "--beta2",
    String(t.beta2),
    "--clip",
    String(t.clip),
    "--seed",
    String(t.seed),
    "--threads",
    String(t.threads),
    "--eval-every",
    String(Math.max(1, Math.round(t.steps / 20))),
    "--save-every",
    String(Math.max(1, Math.round(t.steps / 10))),
    "--log-every",
    String(Math.max(1, Math.round(t.steps / 160))),
  ]);
  const wallSeconds = Math.round((Date.now() - started) / 1000);
  writeFileSync(
    join(out, "training-curve.svg"),
    curveSvg(
      readFileSync(join(out, "training-curve.csv"), "utf8"),
      "tiny-reasoner: cross-entropy on the assistant turn",
    ),
  );
  writeFileSync(join(out, "recipe.json"), JSON.stringify({ model: m, train: t, wallSeconds }, null, 2) + "\n");
  console.log(`done in ${wallSeconds} s: ${out}`);
}

main().catch((e: unknown) => {
  console.error(`train-reasoner: ${e instanceof Error ? e.message : String(e)}`);
  process.exit(1);
});
