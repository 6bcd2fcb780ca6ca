import type { Command } from "commander";
import {
  buildReport,
  bundledModelDir,
  engineGenerator,
  formatReport,
  getTask,
  parseProgram,
  programName,
  runEval,
} from "../../index.js";
import { progressBar } from "../progress.js";
import { quantizeGroupOption, quantizeOption, quantizeOptions } from "../quantizeOption.js";

interface EvalOptions {
  model: string;
  task: string;
  split: string;
  n: string;
  program: string;
  seed: string;
  problemSeed: string;
  temperature: string;
  maxTokens: string;
  concurrency?: string;
  device: string;
  quantize?: string;
  quantizeGroup?: string;
  json?: boolean;
}

function int(name: string, raw: string, min: number): number {
  const v = Number(raw);
  if (!Number.isInteger(v) || v < min) throw new Error(`--${name} must be an integer >= ${min}, got '${raw}'`);
  return v;
}

export function registerEval(program: Command): void {
  program
    .command("eval")
    .description("evaluate a model on a reasoning task: accuracy per difficulty level, tokens and latency per problem")
    .option("--model <dir>", "model folder", bundledModelDir)
    .option("--task <name>", "task", "arith")
    .option("--split <split>", "train, validation or test", "test")
    .option("--n <n>", "problems (levels cycle 1..5)", "100")
    .option("--program <spec>", "greedy, or sc:K (self-consistency, K samples, majority vote)", "greedy")
    .option("--seed <s>", "sampling seed", "0")
    .option("--problem-seed <s>", "which problems are drawn from the split", "0")
    .option("--temperature <t>", "sampling temperature for sc:K", "0.8")
    .option("--max-tokens <n>", "most generated tokens per sample", "448")
    .option("--concurrency <n>", "problems in flight (default: enough for about 256 sequences)")
    .option("--device <device>", "cpu or cuda", "cpu")
    .addOption(quantizeOption())
    .addOption(quantizeGroupOption())
    .option("--json", "print the report as one JSON object on the last line")
    .action(async (opts: EvalOptions) => {
      const task = getTask(opts.task, opts.split);
      const prog = parseProgram(opts.program, Number(opts.temperature));
      if (opts.device !== "cpu" && opts.device !== "cuda")
        throw new Error(`--device must be cpu or cuda, got '${opts.device}'`);
      const n = int("n", opts.n, 1);
      const concurrency = opts.concurrency
        ? int("concurrency", opts.concurrency, 1)
        : Math.max(1, Math.floor(256 / prog.samples));
      const problems = task.problems({ split: opts.split, n, seed: int("problem-seed", opts.problemSeed, 0) });
      const generator = await engineGenerator(opts.model, {
        device: opts.device,
        maxConcurrentSequences: concurrency * prog.samples,
        ...quantizeOptions(opts.quantize, opts.quantizeGroup),
      });
      const bar = progressBar(problems.length, `eval ${task.name} ${programName(prog)}`);
      const started = performance.now();
      try {
        const results = await runEval({
          generator,
          task,
          problems,
          program: prog,
          seed: int("seed", opts.seed, 0),
          maxTokens: int("max-tokens", opts.maxTokens, 1),
          concurrency,
          onProblemDone: (done) => bar.update(done),
        });
        bar.stop();
        const report = buildReport(
          task.name,
          opts.split,
          programName(prog),
          results,
          (performance.now() - started) / 1000,
        );
        console.log(opts.json ? JSON.stringify(report) : formatReport(report));
      } finally {
        bar.stop();
        await generator.dispose();
      }
    });
}
