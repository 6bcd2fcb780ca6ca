// The determinism check behind `deliberate determinism`: every prompt alone, then under background loads of
// given concurrencies with shuffled companions (plain, non-deterministic traffic), repeated `runs` times on one
// engine (so later runs also meet prefix-cache hits). Per prompt, the runs' outputs are compared (report.ts).
import type { Engine } from "../engine/engine.js";
import type { GenerationOutput } from "../engine/outputs.js";
import type { GenerateRequest } from "../engine/request.js";
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
}

export interface CheckResult {
  reports: PromptReport[];
  /** Each prompt's first output (alone, run 0): what --record stores and --check compares. */
  baseOutputs: number[][];
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
  const targets = prompts.map((p, i) => requestOf(p, i, options));
  const records: RunRecord[][] = prompts.map(() => []);
  const loads = [1, ...options.loads.filter((l) => l !== 1)];
  for (let run = 0; run < options.runs; run++) {
    for (const load of loads) {
      onProgress?.(`run ${run + 1}/${options.runs}, load ${load}`);
      const outs =
        load === 1 ? await alone(engine, targets) : await underLoad(engine, targets, load, run * 7919 + load);
      outs.forEach((o, i) => {
        const d = o.determinism;
        records[i].push({
          load,
          tokens: o.tokens,
          rollbacks: d?.rollbacks ?? 0,
          recomputedTokens: d?.recomputedTokens ?? 0,
          exactTokens: d?.exactTokens ?? 0,
        });
      });
    }
  }
  return { reports: records.map((r, i) => comparePromptRuns(i, r)), baseOutputs: records.map((r) => r[0].tokens) };
}

async function alone(engine: Engine, targets: readonly GenerateRequest[]): Promise<GenerationOutput[]> {
  const outs: GenerationOutput[] = [];
  for (const t of targets) outs.push(await engine.submit(t).result);
  return outs;
}

/**
 * Keeps `load` requests in flight until every target finished: the targets and load - 1 companions in a shuffled
 * submission order, then more companions while targets still run. Companions are the prompts again as plain
 * requests, so they add batch-shape variation but no verification work of their own.
 */
async function underLoad(
  engine: Engine,
  targets: readonly GenerateRequest[],
  load: number,
  seed: number,
): Promise<GenerationOutput[]> {
  const companions = shuffled(targets, seed).map((t) => ({ ...t, deterministic: false, seed: (t.seed ?? 0) + 1 }));
  type Job = { target: number } | { companion: number };
  const queue: Job[] = shuffled(
    [...targets.map((_, target) => ({ target })), ...Array.from({ length: load - 1 }, (_, i) => ({ companion: i }))],
    seed + 1,
  );
  const outs = new Array<GenerationOutput>(targets.length);
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
      const req = "target" in job ? targets[job.target] : companions[job.companion % companions.length];
      engine
        .submit(req)
        .result.then(
          (o) => {
            if ("target" in job) {
              outs[job.target] = o;
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
