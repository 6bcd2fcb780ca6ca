// `deliberate determinism`: a regression check that the same prompt, seed and parameters give the same bytes
// whatever else the engine runs. Runs every prompt alone and under background loads, hashes each output,
// reports per prompt whether all runs agree, the first divergent position and the rollback/recompute cost;
// --record writes golden hashes, --check compares against them. Exit status 1 on any divergence (CI gate).
import { readFile, writeFile } from "node:fs/promises";
import { basename, join, resolve } from "node:path";
import type { Command } from "commander";
import {
  bundledModelDir,
  checkGolden,
  checkProvenance,
  compareProvenance,
  DEFAULT_VERIFY_GROUP,
  DEFAULT_VERIFY_WINDOW,
  FIXED_SCHEDULE,
  describeDevice,
  Engine,
  kernelKnobs,
  listDevices,
  loadModel,
  loadProbe,
  PROBE_SUBDIR,
  makeGolden,
  modelHash,
  parseGolden,
  parsePromptsFile,
  runDeterminismCheck,
  summarize,
  type CheckParams,
  type PromptReport,
  type Provenance,
} from "../../index.js";

interface DeterminismOptions {
  model?: string;
  prompts: string;
  load: string;
  runs: string;
  maxTokens: string;
  temperature: string;
  seed: string;
  deterministic: boolean;
  record?: string;
  check?: string;
  json?: boolean;
  device: string;
  verifyWindow?: string;
  verifyGroup?: string;
  separateVerify?: boolean;
  allowDeviceChange?: boolean;
}

function int(flag: string, raw: string, min: number): number {
  const v = Number(raw);
  if (raw.trim() === "" || !Number.isInteger(v) || v < min)
    throw new Error(`--${flag} must be an integer >= ${min}, got '${raw}'`);
  return v;
}

/** A file named on the command line, or an Error naming the flag, the absolute path tried and what it should hold. */
async function readInput(file: string, flag: string, what: string): Promise<string> {
  try {
    return await readFile(file, "utf8");
  } catch (e) {
    const code = (e as NodeJS.ErrnoException).code;
    const why = code === "ENOENT" ? "file not found" : code === "EISDIR" ? "is a folder" : (e as Error).message;
    throw new Error(`${flag} ${resolve(file)}: ${why}; give ${what}`);
  }
}

function parseLoads(raw: string): number[] {
  const loads = raw.split(",").map((s, i) => {
    const v = Number(s.trim());
    if (s.trim() === "" || !Number.isInteger(v) || v < 1)
      throw new Error(`--load entry ${i} is '${s}'; expected comma-separated concurrencies >= 1, e.g. 1,8,32`);
    return v;
  });
  return [...new Set(loads)];
}

function describe(r: PromptReport): string {
  const cost = `rollbacks ${r.rollbacks}, recomputed ${r.recomputedTokens} of ${r.generatedTokens} tokens, ${r.exactTokens} exact`;
  if (r.agree) return `prompt ${r.index}: agree over ${r.runs} runs (${cost})`;
  const at = r.program ? `character ${r.firstDivergence} of its program report` : `token ${r.firstDivergence}`;
  return `prompt ${r.index}: DIVERGES at ${at} under load ${r.divergentLoads.join(",")} (${r.distinct} distinct outputs in ${r.runs} runs; ${cost})`;
}

export function registerDeterminism(program: Command): void {
  program
    .command("determinism")
    .description("check that outputs are identical alone and under load (exit 1 on any divergence)")
    .option(
      "--model <dir>",
      "model folder: config.json, *.safetensors, tokenizer.json (default: the bundled models/tiny-reasoner)",
    )
    .requiredOption(
      "--prompts <file>",
      'one prompt per line, or JSONL with "prompt" or "promptIds" (and "program": "sc" with "programOptions" {cap, interval, maxTokens, shortM, beamWidth, variant} to run a reasoning program, compared by its answer, certaindex trace, rounds and token counts)',
    )
    .option("--load <list>", "background concurrencies to run under (1 = alone)", "1,8,32")
    .option("--runs <n>", "repetitions of the whole sweep", "1")
    .option("--max-tokens <n>", "tokens to generate per prompt", "32")
    .option("--temperature <t>", "0 = greedy; > 0 samples with --seed", "0")
    .option("--seed <s>", "sampling seed of prompt 0 (prompt i uses seed + i)", "0")
    .option("--no-deterministic", "plain fast decoding (shows the divergence the flag removes)")
    .option("--record <file>", "write the outputs' golden hashes to FILE")
    .option("--check <file>", "compare the outputs with golden hashes in FILE")
    .option(
      "--json",
      "one JSON report per prompt, then a last line {prompts, runs, divergences, rollbacks, recomputedTokens, recomputedFraction, exactFraction}",
    )
    .option("--device <device>", "cpu or cuda", "cpu")
    .option("--verify-window <n>", "tokens per verify row (engine verifyWindow)")
    .option("--verify-group <n>", "rows per verify pass with --separate-verify (engine verifyGroup)")
    .option("--separate-verify", "verify in passes of their own (engine fuseVerify: false) instead of inside the steps")
    .option(
      "--allow-device-change",
      "with --check: compare even though the golden was recorded on another device or kernel configuration (never across models)",
    )
    .action(async (opts: DeterminismOptions) => {
      if (opts.record !== undefined && opts.check !== undefined)
        throw new Error("give at most one of --record FILE and --check FILE");
      if (opts.device !== "cpu" && opts.device !== "cuda")
        throw new Error(`--device must be cpu or cuda, got '${opts.device}'`);
      const temperature = Number(opts.temperature);
      if (opts.temperature.trim() === "" || !Number.isFinite(temperature) || temperature < 0) {
        throw new Error(`--temperature must be a number >= 0, got '${opts.temperature}'`);
      }
      const params: CheckParams = {
        maxTokens: int("max-tokens", opts.maxTokens, 1),
        temperature,
        seed: int("seed", opts.seed, 0),
        deterministic: opts.deterministic,
      };
      const loads = parseLoads(opts.load);
      const runs = int("runs", opts.runs, 1);
      const prompts = parsePromptsFile(
        await readInput(opts.prompts, "--prompts", "one prompt per line, or JSONL"),
        opts.prompts,
      );
      const golden =
        opts.check === undefined
          ? null
          : parseGolden(await readInput(opts.check, "--check", "a golden file written by --record"), opts.check);

      const verifyWindow =
        opts.verifyWindow === undefined ? DEFAULT_VERIFY_WINDOW : int("verify-window", opts.verifyWindow, 2);
      const verifyGroup =
        opts.verifyGroup === undefined ? DEFAULT_VERIFY_GROUP : int("verify-group", opts.verifyGroup, 1);
      const fuseVerify = opts.separateVerify !== true;
      if (golden && golden.outputs.length !== prompts.length) {
        throw new Error(
          `${opts.check} holds ${golden.outputs.length} outputs but ${opts.prompts} has ${prompts.length} prompts; use the prompts it was recorded with, or re-record`,
        );
      }
      const model = await loadModel(opts.model ?? bundledModelDir, { device: opts.device });
      let result;
      let provenance: Provenance;
      try {
        // What the outputs depend on besides the parameters: the weights, the device, and every setting that orders a
        // reduction or rounds a stored value. Checked before the run (hashing the weights costs a read of them; the
        // run costs far more).
        const report = listDevices();
        provenance = {
          modelHash: await modelHash(model.dir),
          device: describeDevice(model.device, report),
          kernels: {
            kernelMode: "fast",
            fixedGemmSplitK: FIXED_SCHEDULE.gemmSplitK,
            fixedKvSplits: FIXED_SCHEDULE.kvSplits,
            kvDtype: model.kv.dtype,
            pageSize: model.kv.pageSize,
            ...kernelKnobs(report, process.env, model.device),
          },
          verify: { verifyWindow, verifyGroup, fuseVerify },
        };
        if (golden) {
          const allowDeviceChange = opts.allowDeviceChange === true;
          checkProvenance(golden, provenance, { ...params }, opts.check!, { allowDeviceChange });
          const across = compareProvenance(golden.provenance, provenance).what;
          if (across.length > 0)
            console.error(`[determinism] --allow-device-change: comparing across ${across.join("; ")}`);
        }
        await using engine = new Engine({ models: { model }, verifyWindow, verifyGroup, fuseVerify });
        const progress = opts.json ? undefined : (m: string) => console.error(`[determinism] ${m}`);
        // duchess program prompts read the model's trained probe (<model>/probe), checked against its weights.
        const probe = prompts.some((p) => p.program?.kind === "duchess")
          ? await loadProbe(join(model.dir, PROBE_SUBDIR), {
              hash: provenance.modelHash,
              hiddenSize: model.config.hiddenSize,
              numLayers: model.config.numLayers,
              name: model.dir,
            })
          : undefined;
        result = await runDeterminismCheck(engine, prompts, { ...params, loads, runs, probe }, progress);
      } finally {
        model.dispose();
      }

      const goldenParams = { ...params };
      const modelName = basename(resolve(opts.model ?? bundledModelDir));
      if (golden) {
        const allowDeviceChange = opts.allowDeviceChange === true;
        for (const bad of checkGolden(golden, provenance, goldenParams, result.baseOutputs, opts.check!, {
          allowDeviceChange,
        })) {
          const r = result.reports[bad.index];
          r.agree = false;
          r.firstDivergence =
            r.firstDivergence === null
              ? bad.firstDivergence
              : Math.min(r.firstDivergence, bad.firstDivergence ?? Infinity);
          if (!r.divergentLoads.includes(0)) r.divergentLoads.unshift(0); // 0 = the golden file
        }
      }
      if (opts.record !== undefined)
        await writeFile(
          opts.record,
          JSON.stringify(makeGolden(modelName, provenance, goldenParams, result.baseOutputs), null, 1) + "\n",
        );

      const summary = summarize(result.reports);
      for (const r of result.reports) console.log(opts.json ? JSON.stringify(r) : describe(r));
      if (opts.json) console.log(JSON.stringify(summary));
      else {
        console.log(
          `${summary.prompts} prompts, ${summary.runs} runs: ${summary.divergences} diverge; rollbacks ${summary.rollbacks}, ` +
            `recomputed ${summary.recomputedTokens} tokens (${(100 * summary.recomputedFraction).toFixed(2)}% of generated), ` +
            `${(100 * summary.exactFraction).toFixed(1)}% committed exact (no verify row)` +
            (opts.check ? `; checked against ${opts.check} (load 0 = the golden file)` : "") +
            (opts.record ? `; golden hashes written to ${opts.record}` : ""),
        );
      }
      if (summary.divergences > 0) process.exitCode = 1;
    });
}
