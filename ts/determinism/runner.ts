// The determinism check behind `deliberate determinism`: every prompt alone, then under background loads of
// given concurrencies with shuffled companions (plain, non-deterministic traffic), repeated `runs` times on one
// engine (so later runs also meet prefix-cache hits). Per prompt, the runs' outputs are compared (report.ts).
// A program prompt (prompts.ts) runs its program (RunOptions.deterministic as the check's deterministic) and is
// compared by the program's replayable report (programReplay): answer, certaindex trace, rounds, token counts.
import type { Engine } from "../engine/engine.js";
import type { GenerateRequest } from "../engine/request.js";
import type { Program, ProgramResult } from "../programs/program.js";
import { buildProgram } from "../programs/registry.js";
import type { DuchessProbe } from "../probe/probeFile.js";
import { checkDeterministic, ProgramRuntime } from "../programs/runtime.js";
import { arithTask } from "../tasks/index.js";
import type { RunOutput } from "./golden.js";
import type { PromptSpec } from "./prompts.js";
import { comparePromptRuns, shuffled, type PromptReport, type RunRecord } from "./report.js";

export interface CheckParams {
  maxTokens: number;
  temperature: number;
  /** Prompt i uses seed + i. */
  seed: number;
  deterministic: boolean;
}

export interface CheckOptions extends CheckParams {
  /** Concurrencies; 1 (alone) always runs first. */
  loads: number[];
  runs: number;
  /** The model's trained DUCHESS probe, for duchess program prompts (loadProbe). */
  probe?: DuchessProbe;
}

export interface CheckResult {
  reports: PromptReport[];
  /** Each prompt's first output (alone, run 0): what --record stores and --check compares (a program prompt's: its
   *  report). */
  baseOutputs: RunOutput[];
}

/** One run of one prompt: what a RunRecord holds but its load. */
type RunParts = Omit<RunRecord, "load">;

/**
 * A program prompt's program, built as `deliberate run` builds one (answers read as \boxed{}; rebase, beam and
 * best-of-n score steps with the arithmetic task's verifier): the prompt is the question, prompt i's seed is
 * seed + i, the CLI's temperature and max tokens unless the line sets them.
 */
export function programOf(p: PromptSpec, i: number, params: CheckParams, probe?: DuchessProbe): Program {
  const { kind, options: o } = p.program!;
  return buildProgram(kind, {
    question: p.text ?? "",
    prompt: p.promptIds ?? p.text,
    cap: o.cap,
    maxTokens: o.maxTokens ?? params.maxTokens,
    seed: params.seed + i,
    temperature: params.temperature,
    interval: o.interval,
    shortM: o.shortM,
    beamWidth: o.beamWidth,
    deepconfVariant: o.variant,
    task: arithTask,
    reward: arithTask.stepVerifier,
    probe,
  });
}

/** What a program run must repeat exactly: everything in its result but the wall clock, the id and the cost. */
export function programReplay(r: ProgramResult): string {
  const { answer, certaindex, rounds, knob, stopReason, tokensUsed, tokensByPurpose, history } = r;
  return JSON.stringify({ answer, certaindex, rounds, knob, stopReason, tokensUsed, tokensByPurpose, history });
}

async function runProgram(engine: Engine, program: Program, deterministic: boolean): Promise<RunParts> {
  const r = await new ProgramRuntime(engine).run(program, { deterministic });
  const d = r.determinism;
  return {
    tokens: [],
    replay: programReplay(r),
    generatedTokens: r.tokensUsed,
    rollbacks: d?.rollbacks ?? 0,
    recomputedTokens: d?.recomputedTokens ?? 0,
    exactTokens: d?.exactTokens ?? 0,
  };
}

export function requestOf(p: PromptSpec, i: number, params: CheckParams): GenerateRequest {
  return {
    prompt: p.promptIds ?? p.text,
    maxTokens: params.maxTokens,
    temperature: params.temperature,
    seed: params.seed + i,
    deterministic: params.deterministic,
  };
}

export async function runDeterminismCheck(
  engine: Engine,
  prompts: readonly PromptSpec[],
  options: CheckOptions,
  onProgress?: (message: string) => void,
): Promise<CheckResult> {
  const requests = prompts.map((p, i) => requestOf(p, i, options));
  // Programs are built (and a deterministic check's refusals raised) before anything runs.
  prompts.forEach((p, i) => {
    if (p.program === undefined) return;
    const program = programOf(p, i, options, options.probe);
    if (options.deterministic) checkDeterministic(program);
  });
  const targets: Target[] = prompts.map((p, i) =>
    p.program === undefined
      ? async () => {
          const o = await engine.submit(requests[i]).result;
          const d = o.determinism;
          return {
            tokens: o.tokens,
            rollbacks: d?.rollbacks ?? 0,
            recomputedTokens: d?.recomputedTokens ?? 0,
            exactTokens: d?.exactTokens ?? 0,
          };
        }
      : () => runProgram(engine, programOf(p, i, options, options.probe), options.deterministic),
  );
  const records: RunRecord[][] = prompts.map(() => []);
  const loads = [1, ...options.loads.filter((l) => l !== 1)];
  for (let run = 0; run < options.runs; run++) {
    for (const load of loads) {
      onProgress?.(`run ${run + 1}/${options.runs}, load ${load}`);
      const outs =
        load === 1 ? await alone(targets) : await underLoad(engine, targets, requests, load, run * 7919 + load);
      outs.forEach((o, i) => records[i].push({ load, ...o }));
    }
  }
  return {
    reports: records.map((r, i) => comparePromptRuns(i, r)),
    baseOutputs: records.map((r) => r[0].replay ?? r[0].tokens),
  };
}

/** One prompt's run: a request, or a program. */
type Target = () => Promise<RunParts>;

async function alone(targets: readonly Target[]): Promise<RunParts[]> {
  const outs: RunParts[] = [];
  for (const t of targets) outs.push(await t());
  return outs;
}

/**
 * Keeps `load` requests in flight until every target finished: the targets and load - 1 companions in a shuffled
 * submission order, then more companions while targets still run. Companions are the prompts again as plain
 * requests (a program prompt's: its prompt), so they add batch-shape variation but no verification work of their own.
 */
async function underLoad(
  engine: Engine,
  targets: readonly Target[],
  requests: readonly GenerateRequest[],
  load: number,
  seed: number,
): Promise<RunParts[]> {
  const companions = shuffled(requests, seed).map((t) => ({ ...t, deterministic: false, seed: (t.seed ?? 0) + 1 }));
  type Job = { target: number } | { companion: number };
  const queue: Job[] = shuffled(
    [...targets.map((_, target) => ({ target })), ...Array.from({ length: load - 1 }, (_, i) => ({ companion: i }))],
    seed + 1,
  );
  const outs = new Array<RunParts>(targets.length);
  let nextCompanion = load - 1;
  let targetsLeft = targets.length;
  let failure: unknown = null;
  await new Promise<void>((resolve) => {
    let inFlight = 0;
    const launch = (): void => {
      const job: Job | undefined = queue.shift() ?? (targetsLeft > 0 ? { companion: nextCompanion++ } : undefined);
      if (job === undefined) {
        if (inFlight === 0) resolve();
        return;
      }
      inFlight++;
      const running =
        "target" in job ? targets[job.target]() : engine.submit(companions[job.companion % companions.length]).result;
      running
        .then(
          (o) => {
            if ("target" in job) {
              outs[job.target] = o as RunParts;
              targetsLeft--;
            }
          },
          (e: unknown) => {
            failure ??= e;
            if ("target" in job) targetsLeft--;
          },
        )
        .finally(() => {
          inFlight--;
          launch();
        });
    };
    for (let i = 0; i < load; i++) launch();
  });
  if (failure !== null) throw failure;
  return outs;
}
