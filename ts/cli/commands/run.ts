// `deliberate run "What is 7*(8+5)-19?"`: the main job. Runs one reasoning program (default: self-consistency
// with certaindex on the bundled tiny reasoner), shows progress on a TTY, prints the answer, its certaindex, the
// rounds and the tokens used against the budget (or one JSON object with --json). The program's policy and
// settings come from the model's certaindex calibration (ts/certaindex/calibrationFile.ts) when there is one;
// `--task` says how answers are read (arith: `\boxed{}`, gsm8k: `#### N`); rebase and mcts score steps with a reward
// source: the task's own step verifier (default; arith has one) or a process reward model; beam, dvts and
// best-of-n score with the bundled PRM (models/tiny-prm) unless told otherwise.
import { existsSync } from "node:fs";
import type { Command } from "commander";
import {
  bundledModelDir,
  bundledPrmDir,
  Engine,
  getTask,
  loadModel,
  modelProcessReward,
  prmReward,
  PROBE_SUBDIR,
  readPrmConfig,
  STEP_SCORED_PROGRAMS,
  parseProgramKind,
  parseVerifier,
  PROGRAM_KINDS,
  ProgramFactory,
  ProgramRuntime,
  RECALIBRATE_COMMAND,
  TASK_NAMES,
  VERIFIER_NAMES,
  loadSplitModels,
  freeDecodeBatch,
  profileThroughput,
  type KvSplitPlan,
  type KvSplitSpec,
  type Model,
  type PolicySpec,
  type ProgramKind,
  type ProgramRequest,
  type ProgramResult,
  type RewardSource,
  type Task,
} from "../../index.js";
import { quantizeGroupOption, quantizeOption, quantizeOptions } from "../quantizeOption.js";

interface RunOptions {
  program: string;
  model?: string;
  json?: boolean;
  cap?: string;
  maxTokens?: string;
  seed?: string;
  temperature?: string;
  policy?: string;
  threshold?: string;
  device?: string;
  quantize?: string;
  quantizeGroup?: string;
  interval?: string;
  verifier?: string;
  prm?: string;
  prmGood?: string;
  prmBad?: string;
  prmTag?: string;
  calibration?: string | false;
  task: string;
  probe?: string;
  variant?: string;
  offline?: boolean;
  beamWidth?: string;
  kvBudget?: string;
  kvSplit?: string;
  truncateRatio?: string;
  speculative?: boolean;
  speculativeRows?: string;
  prefixAware?: boolean;
  lookahead?: boolean;
}

function num(name: string, raw: string | undefined, integer: boolean): number | undefined {
  if (raw === undefined) return undefined;
  const v = Number(raw);
  if (raw.trim() === "" || !Number.isFinite(v) || (integer && !Number.isInteger(v)))
    throw new Error(`--${name} must be ${integer ? "an integer" : "a number"}, got '${raw}'`);
  return v;
}

function policyOf(opts: RunOptions): PolicySpec | undefined {
  if (opts.policy === undefined) return undefined;
  if (opts.policy === "baseline-even") return { kind: "baseline-even" };
  if (opts.policy === "threshold")
    return { kind: "threshold", threshold: num("threshold", opts.threshold, false) ?? 0.6, detectAt: 1 };
  throw new Error(`--policy must be threshold or baseline-even, got '${opts.policy}'`);
}

/** The reward source of the step-scored programs: --prm DIR (a second model on the same engine; its prm.json says
 * how it scores, else --prm-good / --prm-bad / --prm-tag), --verifier NAME, or the default: the bundled PRM for
 * beam / dvts / best-of-n, the task's step verifier for rebase / mcts. null for programs that score no steps
 * (giving either flag to them is an error). */
function rewardOf(kind: ProgramKind, opts: RunOptions, task: Task): { reward: RewardSource | null; prmDir?: string } {
  if (opts.prm !== undefined && opts.verifier !== undefined)
    throw new Error("--prm and --verifier both choose the reward source; give one");
  if (!STEP_SCORED_PROGRAMS.includes(kind)) {
    if (opts.prm !== undefined || opts.verifier !== undefined)
      throw new Error(
        `--${opts.prm !== undefined ? "prm" : "verifier"} scores the steps of ${STEP_SCORED_PROGRAMS.join(", ")}; --program ${kind} uses no reward source`,
      );
    return { reward: null };
  }
  const flashTts = kind === "beam" || kind === "dvts" || kind === "best-of-n";
  const prmDir = opts.prm ?? (opts.verifier === undefined && flashTts ? bundledPrmDir : undefined);
  if (prmDir !== undefined) {
    if (!existsSync(prmDir))
      throw new Error(
        opts.prm === undefined
          ? `the bundled process reward model is missing at ${prmDir}; pass --prm DIR or --verifier NAME`
          : `--prm ${prmDir}: folder not found`,
      );
    const config = readPrmConfig(prmDir);
    const flags = opts.prmGood !== undefined || opts.prmBad !== undefined || opts.prmTag !== undefined;
    if (config?.format === "score-head" && flags)
      throw new Error(
        `--prm ${prmDir} scores steps with its ${config.head} head (config.json's architectures); --prm-good / --prm-bad / --prm-tag apply to token-labelled PRMs only`,
      );
    if (config !== null && (!flags || config.format === "score-head"))
      return { reward: prmReward(config, "prm"), prmDir };
    const list = (raw: string): string[] => raw.split(",").filter((t) => t !== "");
    const goodTokens = list(opts.prmGood ?? config?.goodTokens.join(",") ?? "+");
    if (goodTokens.length === 0) throw new Error("--prm-good needs at least one token");
    const badTokens = list(opts.prmBad ?? config?.badTokens.join(",") ?? "-");
    const stepTag = (opts.prmTag ?? config?.stepTag ?? "\\n").replace(/\\n/g, "\n");
    return { reward: modelProcessReward({ model: "prm", goodTokens, badTokens, stepTag }), prmDir };
  }
  if (opts.verifier !== undefined) return { reward: parseVerifier(opts.verifier) };
  if (task.stepVerifier === undefined)
    throw new Error(
      `task ${task.name} has no step verifier: --program ${kind} needs --prm DIR (a process reward model) or --verifier NAME`,
    );
  return { reward: task.stepVerifier };
}

/** The FlashTTS switches and beam width of beam / dvts (an error on other programs). */
function flashTtsOf(kind: ProgramKind, opts: RunOptions): Pick<ProgramRequest, "beamWidth" | "flashTts"> {
  const given =
    opts.beamWidth !== undefined ||
    opts.truncateRatio !== undefined ||
    opts.speculative === true ||
    opts.speculativeRows !== undefined ||
    opts.prefixAware === false ||
    opts.lookahead === false;
  if (kind !== "beam" && kind !== "dvts") {
    if (given)
      throw new Error(
        `--beam-width, --truncate-ratio, --speculative, --speculative-rows, --no-prefix-aware and --no-lookahead are options of --program beam and dvts`,
      );
    return {};
  }
  if (opts.speculativeRows !== undefined && opts.speculative !== true)
    throw new Error("--speculative-rows caps speculative beam extension; give --speculative too");
  return {
    beamWidth: num("beam-width", opts.beamWidth, true),
    flashTts: {
      speculative: opts.speculative,
      speculativeRows: num("speculative-rows", opts.speculativeRows, true),
      prefixAware: opts.prefixAware,
      lookahead: opts.lookahead,
      truncateRatio: num("truncate-ratio", opts.truncateRatio, false),
    },
  };
}

/** The generator and the PRM (if any); with --kv-budget their KV pools share that many MiB as --kv-split says. */
async function loadModels(
  dir: string,
  prmDir: string | undefined,
  opts: RunOptions,
  n: number,
): Promise<{ model: Model; prm: Model | null; plan: KvSplitPlan | null }> {
  const device = opts.device as "cpu" | "cuda";
  if (readPrmConfig(dir)?.format === "score-head")
    throw new Error(
      `--model ${dir}: a process reward model (its config.json names a score head) scores steps and writes no text; give it as --prm DIR and a language model as --model`,
    );
  // --quantize applies to the generator and the PRM alike
  const quantize = quantizeOptions(opts.quantize, opts.quantizeGroup);
  if (opts.kvBudget === undefined) {
    if (opts.kvSplit !== undefined) throw new Error("--kv-split divides --kv-budget; give the budget too");
    const model = await loadModel(dir, { device, ...quantize });
    const prm =
      prmDir === undefined
        ? null
        : await loadModel(prmDir, { device, ...quantize }).catch((e: unknown) => {
            model.dispose();
            throw e;
          });
    return { model, prm, plan: null };
  }
  if (prmDir === undefined)
    throw new Error(
      "--kv-budget splits the KV memory between the generator and a process reward model; use it with --prm DIR or --program beam, dvts or best-of-n",
    );
  const budget = num("kv-budget", opts.kvBudget, false)!;
  let kvSplit: KvSplitSpec = "auto";
  if (opts.kvSplit !== undefined && opts.kvSplit !== "auto") {
    const [g, v] = opts.kvSplit.split(",").map(Number);
    if (!(g > 0 && v > 0))
      throw new Error(`--kv-split must be auto or two fractions GEN,VERIFIER such as 0.7,0.3; got '${opts.kvSplit}'`);
    kvSplit = { generator: g, verifier: v };
  }
  const maxTokens = num("max-tokens", opts.maxTokens, true) ?? 256;
  // --kv-budget is the KV pools' memory alone: the split needs each model's KV bytes per token and its measured
  // step times, both taken from the models as loaded (quantized), never the weights' bytes.
  const r = await loadSplitModels(dir, prmDir, {
    device,
    ...quantize,
    budgetBytes: Math.floor(budget * 1024 * 1024),
    n,
    kvSplit,
    generatorTokens: 64 + maxTokens,
    stepTokens: 16,
    verifierTokens: 64 + maxTokens,
  });
  return { model: r.generator, prm: r.verifier, plan: r.plan };
}

/** What each program's knob counts (the compute a round spends), as `run --help` says. */
const KNOB_UNITS: Record<string, string> = {
  sc: "branches",
  "cot-probe": "probes",
  rebase: "width",
  mcts: "simulations",
  beam: "iterations",
  dvts: "iterations",
  "best-of-n": "rounds",
  duchess: "branches",
  "short-m@k": "branches",
  deepconf: "traces",
};

function report(r: ProgramResult): string {
  const saved =
    r.tokenBudget > 0 ? ` (${Math.round((1 - r.tokensUsed / r.tokenBudget) * 100)}% of the budget unused)` : "";
  return [
    `answer:      ${r.answer ?? "(none)"}`,
    `certaindex:  ${r.certaindex.toFixed(3)}  (how sure the program is, 0..1 — certainty, not correctness; stopped: ${r.stopReason})`,
    `program:     ${r.program}, ${r.rounds} round${r.rounds === 1 ? "" : "s"}, knob ${r.knob.used}/${r.knob.max} (${KNOB_UNITS[r.program] ?? "compute units"} used / cap)`,
    `tokens:      ${r.tokensUsed} / ${r.tokenBudget} budget${saved}`,
  ].join("\n");
}

/** Tokens a program generates per branch / thought unless --max-tokens says otherwise. */
const DEFAULT_MAX_TOKENS = 448;
/** Room kept after a thought for the CoT probe suffix and its short answer (≤ 20 tokens). */
const PROBE_RESERVE_TOKENS = 24;

export function registerRun(program: Command): void {
  program
    .command("run")
    .description(
      "answer a question with a reasoning program (default: self-consistency with certaindex on the bundled tiny reasoner). " +
        "Prints the answer; its certaindex (how sure the program is, 0..1: agreement of the branches or probes — certainty, not correctness) and why it stopped " +
        "(certain / curve: the policy saw enough certainty; cap: the knob ran out; done: the program ended by itself); the rounds and the knob " +
        "(the compute the program spends: branches for sc, duchess and short-m@k, probes for cot-probe, width for rebase, simulations for mcts, traces for deepconf) " +
        "used against its cap; and the tokens generated against the token budget.",
    )
    .argument("<question>", 'the question, e.g. "What is 7*(8+5)-19?"')
    .option("--program <name>", `one of ${PROGRAM_KINDS.join(", ")}`, "sc")
    .option("--model <dir>", "model folder (default: the bundled models/tiny-reasoner)")
    .option(
      "--cap <n>",
      "the program's knob cap: branches (sc, duchess; k of short-m@k; the trace budget of deepconf), width (rebase), simulations (mcts)",
    )
    .option("--max-tokens <n>", "tokens per branch (sc) or for the whole thought (cot-probe)")
    .option("--seed <s>", "sampling seed", "0")
    .option("--temperature <t>", "sampling temperature")
    .option("--policy <name>", "threshold or baseline-even (default: the program's certaindex policy)")
    .option("--threshold <x>", "certaindex threshold for --policy threshold")
    .option("--device <device>", "cpu or cuda", "cpu")
    .addOption(quantizeOption())
    .addOption(quantizeGroupOption())
    .option("--interval <n>", "cot-probe: generated tokens between probes (default: calibrated, else 64)")
    .option("--task <name>", `how answers are read and compared (${TASK_NAMES.join(", ")})`, "arith")
    .option(
      "--verifier <name>",
      `rebase/mcts reward source: a programmatic step checker (${VERIFIER_NAMES.join(", ")}; default: the task's)`,
    )
    .option(
      "--prm <dir>",
      "reward source of rebase, mcts, beam, dvts and best-of-n: a process reward model (a second model on the same engine; default for beam, dvts and best-of-n: the bundled models/tiny-prm)",
    )
    .option(
      "--prm-good <tokens>",
      "with --prm: comma-separated tokens meaning a good step (default: the PRM's prm.json, else +)",
    )
    .option(
      "--prm-bad <tokens>",
      "with --prm: comma-separated tokens meaning a bad step (empty: reward = P(good); default: prm.json, else -)",
    )
    .option(
      "--prm-tag <text>",
      "with --prm: text after a step where the PRM predicts its tag (\\n = newline; default: prm.json, else \\n)",
    )
    .option(
      "--beam-width <m>",
      "beam / dvts: continuations per kept path (default: beam 1, dvts 4; must divide --cap, the N candidates)",
    )
    .option(
      "--speculative",
      "beam / dvts: speculative beam extension (FlashTTS; off by default), filling the rows a decode step gets for free on this device (measured once, cached)",
    )
    .option(
      "--speculative-rows <n>",
      "beam / dvts with --speculative: most rows (continuations and speculation) in flight while speculating (default: the measured free decode batch; the cap n: the paper's full batch)",
    )
    .option(
      "--no-prefix-aware",
      "beam / dvts: continuations as new requests in random order instead of forks grouped by parent",
    )
    .option(
      "--no-lookahead",
      "beam / dvts with --speculative: verify speculative steps next iteration instead of with their parent",
    )
    .option(
      "--kv-budget <MiB>",
      "with a PRM: the KV memory the generator and the PRM share (default: each its own default pool)",
    )
    .option(
      "--kv-split <auto|G,V>",
      "with --kv-budget: auto (roofline-guided, profiled once per model and device) or fractions such as 0.7,0.3 (default auto)",
    )
    .option(
      "--truncate-ratio <r>",
      "beam / dvts: duplicates of a kept path reuse its speculative step cut to r (0 = off, exact; default 0)",
    )
    .option(
      "--calibration <file>",
      `certaindex calibration JSON (default: the model's own, written by ${RECALIBRATE_COMMAND})`,
    )
    .option("--no-calibration", "ignore any calibration: the programs' built-in policies and settings")
    .option("--variant <low|high>", "deepconf: keep the most confident 10% (low, default) or 90% (high) of the traces")
    .option(
      "--offline",
      "deepconf: run every trace to the end, then filter (default: online, with the engine's confidence stop)",
    )
    .option(
      "--probe <dir>",
      `duchess: the trained probe (default: <model>/${PROBE_SUBDIR}, written by deliberate probe train)`,
    )
    .option("--json", "print one JSON object with the result")
    .action(async (question: string, opts: RunOptions) => {
      if (question.trim() === "")
        throw new Error('the question is empty; ask one, e.g. deliberate run "What is 7*(8+5)-19?"');
      const kind = parseProgramKind(opts.program);
      const task = getTask(opts.task);
      const dir = opts.model ?? bundledModelDir;
      if (!existsSync(dir)) {
        throw new Error(
          opts.model === undefined
            ? `the bundled tiny reasoner is missing at ${dir}; pass --model DIR`
            : `--model ${dir}: folder not found`,
        );
      }
      if (opts.device !== "cpu" && opts.device !== "cuda")
        throw new Error(`--device must be cpu or cuda, got '${opts.device}'`);
      const { reward, prmDir } = rewardOf(kind, opts, task);
      const search = flashTtsOf(kind, opts);
      const cap = num("cap", opts.cap, true);
      const interval = num("interval", opts.interval, true);
      if (interval !== undefined && kind !== "cot-probe")
        throw new Error(`--interval sets the probe interval of cot-probe; --program ${kind} has none`);
      if ((opts.variant !== undefined || opts.offline) && kind !== "deepconf")
        throw new Error(`--${opts.variant !== undefined ? "variant" : "offline"} is an option of --program deepconf`);
      if (opts.variant !== undefined && opts.variant !== "low" && opts.variant !== "high")
        throw new Error(`--variant must be low or high, got '${opts.variant}'`);
      if (opts.probe !== undefined && kind !== "duchess")
        throw new Error(`--probe is the trained probe of --program duchess; --program ${kind} uses none`);
      const { model, prm, plan } = await loadModels(dir, prmDir, opts, cap ?? 16);
      // Speculation fills only the rows a decode step gets for free on this device (the generator's measured profile,
      // cached per model and device) unless --speculative-rows says how many.
      if (search.flashTts?.speculative && search.flashTts.speculativeRows === undefined) {
        search.flashTts.speculativeRows = plan?.speculativeRows ?? freeDecodeBatch(await profileThroughput(model));
      }
      const factory = ProgramFactory.open({
        modelDir: dir,
        hiddenSize: model.config.hiddenSize,
        numLayers: model.config.numLayers,
        calibration: opts.calibration,
        bundledDir: bundledModelDir,
        probeDir: opts.probe,
      });
      const cal = factory.calibration;
      if (cal?.stale)
        process.stderr.write(
          `deliberate: ${cal.file} was calibrated on other weights than ${dir}; rerun \`${RECALIBRATE_COMMAND}\`\n`,
        );
      const engine = new Engine({
        models:
          prm === null
            ? { model }
            : [
                { name: "policy", model },
                { name: "prm", model: prm },
              ],
      });
      try {
        const prompt =
          model.tokenizer.chatTemplate === null
            ? question
            : model.tokenizer.encodeChat([{ role: "user", content: question }]);
        // Default generation length: the programs' 256, or what the context leaves after the prompt if less.
        const promptTokens = typeof prompt === "string" ? model.tokenizer.encode(prompt).length : prompt.length;
        const contextLeft = model.contextLength - promptTokens - PROBE_RESERVE_TOKENS;
        if (contextLeft < 1)
          throw new Error(
            `the question takes ${promptTokens} tokens, leaving no room in the model's ${model.contextLength}-token context`,
          );
        const request: ProgramRequest = {
          question,
          prompt,
          cap,
          maxTokens: num("max-tokens", opts.maxTokens, true) ?? Math.min(DEFAULT_MAX_TOKENS, contextLeft),
          seed: num("seed", opts.seed, true),
          temperature: num("temperature", opts.temperature, false),
          interval,
          model: prm === null ? undefined : "policy",
          task,
        };
        if (reward !== null) request.reward = reward;
        Object.assign(request, search);
        if (opts.variant !== undefined) request.deepconfVariant = opts.variant as "low" | "high";
        if (opts.offline) request.deepconfOffline = true;
        const built = await factory.build(kind, request);
        const prog = built.program;
        const policy = policyOf(opts) ?? built.policy;
        const tty = !opts.json && process.stderr.isTTY;
        const ac = new AbortController();
        const onSigint = (): void => ac.abort();
        process.once("SIGINT", onSigint);
        const result = await new ProgramRuntime(engine).run(prog, {
          policy,
          signal: ac.signal,
          onRound: (rec) => {
            if (tty)
              process.stderr.write(
                `\rround ${rec.round}  certaindex ${rec.certaindex.toFixed(2)}  tokens ${rec.tokensUsed}/${prog.tokenBudget}  answer ${rec.answer ?? "-"}   `,
              );
          },
        });
        process.off("SIGINT", onSigint);
        if (tty) process.stderr.write("\n");
        if (opts.json) {
          const { history, ...rest } = result;
          const calibration = cal === null ? null : { file: cal.file, stale: cal.stale, applied: built.calibrated };
          console.log(
            JSON.stringify({
              question,
              model: dir,
              task: task.name,
              ...rest,
              reward: reward?.name ?? null,
              calibration,
              history,
            }),
          );
        } else {
          console.log(report(result));
          if (reward !== null) console.log(`reward:      ${reward.name}`);
          console.log(
            `policy:      ${JSON.stringify(result.policy, (_k, v: unknown) => (typeof v === "number" ? Number(v.toFixed(3)) : v))}${built.calibrated && policyOf(opts) === undefined ? ` (calibrated: ${cal!.file}${cal!.stale ? ", STALE" : ""})` : ""}`,
          );
        }
      } finally {
        await engine.dispose();
        model.dispose();
        prm?.dispose();
      }
    });
}
