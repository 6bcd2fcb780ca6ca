// `deliberate probe train --model DIR --task arith`: trains DUCHESS's correctness probe (a layer sweep, AUROC per
// block, tau from the validation predictions) and its difficulty classifier on traces the model samples itself,
// and writes probe.safetensors + probe.json into <model>/probe (or --out), where `run --program duchess` finds them.
import { join } from "node:path";
import type { Command } from "commander";
import {
  bundledModelDir,
  Engine,
  getTask,
  isProbeLabel,
  loadModel,
  modelHash,
  PROBE_LABELS,
  PROBE_SUBDIR,
  saveProbe,
  trainProbe,
  type ProbeTrainResult,
} from "../../index.js";
import { progressBar } from "../progress.js";
import { describeQuantize, quantizeGroupOption, quantizeOption, quantizeOptions } from "../quantizeOption.js";

interface ProbeTrainCliOptions {
  model: string;
  task: string;
  out?: string;
  train: string;
  validation: string;
  test: string;
  branches: string;
  interval?: string;
  maxTokens: string;
  tauPercentile: string;
  label: string;
  epochs: string;
  seed: string;
  device: string;
  quantize?: string;
  quantizeGroup?: string;
  json?: boolean;
}

function int(name: string, raw: string, min: number): number {
  const v = Number(raw);
  if (raw.trim() === "" || !Number.isInteger(v) || v < min)
    throw new Error(`--${name} must be an integer >= ${min}, got '${raw}'`);
  return v;
}

/** The paper's intervals: 16 tokens for short traces (GSM8K; the arithmetic task's are shorter still), 80 otherwise. */
const DEFAULT_INTERVAL: Record<string, number> = { arith: 16, gsm8k: 80 };

function report(r: ProbeTrainResult, out: string): string {
  const m = r.probe.meta;
  const lines = [
    `examples:    train ${r.examples.train}, validation ${r.examples.validation}, test ${r.examples.test} checkpoints (every ${m.correctness.interval} tokens; label ${m.correctness.label ?? "correct"}, ${(r.positiveRate * 100).toFixed(1)}% positive; CoT probes right ${(r.probeAccuracy * 100).toFixed(1)}%)`,
    "block  validation AUROC  validation accuracy  best epoch",
    ...r.layers.map(
      (l) =>
        `${String(l.layer).padStart(5)}  ${l.validationAuroc.toFixed(4).padStart(16)}  ${l.validationAccuracy.toFixed(4).padStart(19)}  ${String(l.bestEpoch + 1).padStart(10)}`,
    ),
    `chosen:      block ${m.correctness.layer}; tau ${m.correctness.tau.toFixed(4)} (${m.correctness.tauPercentile}th percentile of validation predictions); test AUROC ${m.correctness.testAuroc.toFixed(4)}`,
  ];
  if (m.difficulty) {
    lines.push(
      `difficulty:  classes ${m.difficulty.classes.join("/")}, mean tokens ${m.difficulty.meanTokens.map((t) => t.toFixed(0)).join("/")}; test accuracy ${m.difficulty.testAccuracy.toFixed(3)}, Spearman ${m.difficulty.testSpearman.toFixed(3)}`,
    );
  }
  lines.push(`wrote:       ${join(out, "probe.safetensors")}, ${join(out, "probe.json")}`);
  return lines.join("\n");
}

export function registerProbe(program: Command): void {
  const probe = program.command("probe").description("DUCHESS activation probes");
  probe
    .command("train")
    .description(
      "sample reasoning traces, label checkpoints with CoT probes, train the correctness probe (layer sweep) and the difficulty classifier",
    )
    .option("--model <dir>", "model folder", bundledModelDir)
    .option("--task <name>", "task with train / validation / test splits", "arith")
    .option("--out <dir>", `where to write probe.safetensors and probe.json (default: <model>/${PROBE_SUBDIR})`)
    .option("--train <n>", "train problems", "400")
    .option("--validation <n>", "validation problems (early stopping, tau, the layer choice)", "100")
    .option("--test <n>", "test problems (reported AUROC and classifier accuracy)", "200")
    .option("--branches <n>", "branches sampled per problem (T = 0.8)", "8")
    .option("--interval <n>", "generated tokens between checkpoints (default: 16 for arith, 80 otherwise)")
    .option("--max-tokens <n>", "most generated tokens per branch", "256")
    .option("--tau-percentile <q>", "tau = this percentile of the validation predictions", "70")
    .option(
      "--label <kind>",
      "positive checkpoints: 'correct' (the paper's: the next 3 CoT probes give the right answer) or 'settled' (they give the answer the branch ends with)",
      "correct",
    )
    .option("--epochs <n>", "most training epochs", "15")
    .option("--seed <s>", "problems, sampling, initialisation, shuffling and dropout", "1")
    .option("--device <device>", "cpu or cuda", "cpu")
    .addOption(quantizeOption())
    .addOption(quantizeGroupOption())
    .option("--json", "print the result as one JSON object")
    .action(async (opts: ProbeTrainCliOptions) => {
      const task = getTask(opts.task);
      if (opts.device !== "cpu" && opts.device !== "cuda")
        throw new Error(`--device must be cpu or cuda, got '${opts.device}'`);
      const quantize = quantizeOptions(opts.quantize, opts.quantizeGroup);
      // A probe reads the hidden states of the weights it was trained on; one trained on quantized weights must not
      // replace the model's own probe, which `run --program duchess` reads for the weights as stored.
      if (quantize.quantize !== undefined && opts.out === undefined)
        throw new Error(
          `--quantize trains the probe on the quantized model; name where it goes with --out DIR (${join(opts.model, PROBE_SUBDIR)} is the probe of the weights as stored)`,
        );
      const out = opts.out ?? join(opts.model, PROBE_SUBDIR);
      const problems = {
        train: int("train", opts.train, 1),
        validation: int("validation", opts.validation, 1),
        test: int("test", opts.test, 1),
      };
      const interval =
        opts.interval === undefined ? (DEFAULT_INTERVAL[task.name] ?? 80) : int("interval", opts.interval, 1);
      const tauPercentile = Number(opts.tauPercentile);
      if (!isProbeLabel(opts.label))
        throw new Error(`--label must be one of ${PROBE_LABELS.join(", ")}, got '${opts.label}'`);
      if (!(tauPercentile >= 0 && tauPercentile <= 100))
        throw new Error(`--tau-percentile must be in [0, 100], got '${opts.tauPercentile}'`);
      const model = await loadModel(opts.model, {
        device: opts.device,
        ...quantize,
      });
      // Batch-invariant kernels: a trace's tokens do not depend on what else is in the batch, so the files are
      // reproducible whatever the concurrency.
      const engine = new Engine({ models: { model }, kernelMode: "batch-invariant" });
      const tty = !opts.json && process.stderr.isTTY;
      let bar: ReturnType<typeof progressBar> | null = null;
      let stage = "";
      try {
        const result = await trainProbe({
          engine,
          encodeChat: (messages) => model.tokenizer.encodeChat(messages, { addGenerationPrompt: true }),
          encodeText: (text) => model.tokenizer.encode(text, { addSpecialTokens: false }),
          createDetokenizer: () => model.tokenizer.createDetokenizer(),
          model: {
            hash: await modelHash(opts.model),
            hiddenSize: model.config.hiddenSize,
            numLayers: model.config.numLayers,
            name:
              quantize.quantize === undefined ? opts.model : `${opts.model} (${describeQuantize(quantize)} weights)`,
          },
          task,
          problems,
          branches: int("branches", opts.branches, 1),
          interval,
          maxTokens: int("max-tokens", opts.maxTokens, 1),
          tauPercentile,
          label: opts.label,
          epochs: int("epochs", opts.epochs, 1),
          seed: int("seed", opts.seed, 0),
          onProgress: (s, done, total) => {
            if (!tty) return;
            if (s !== stage) {
              bar?.stop();
              stage = s;
              bar = progressBar(total, s);
            }
            bar?.update(done);
          },
        });
        (bar as ReturnType<typeof progressBar> | null)?.stop();
        await saveProbe(out, result.probe);
        if (opts.json)
          console.log(
            JSON.stringify({
              out,
              meta: result.probe.meta,
              layers: result.layers,
              examples: result.examples,
              probeAccuracy: result.probeAccuracy,
              positiveRate: result.positiveRate,
              meanBranchTokens: result.meanBranchTokens,
            }),
          );
        else console.log(report(result, out));
      } finally {
        await engine.dispose();
        model.dispose();
      }
    });
}
