// Runs an evaluation program over a task's problems on an EvalGenerator, keeping `concurrency` problems in
// flight so the engine can batch them, and scores every problem. Both programs are the library's
// SelfConsistency, run to its cap in one round: `sc:K` samples K branches and takes their majority vote, `greedy`
// is one branch at temperature 0. The task reads and compares the answers.
import { SelfConsistency } from "../programs/selfConsistency.js";
import type { Task, TaskProblem } from "../tasks/task.js";
import type { EvalGenerator } from "./generator.js";
import type { EvalProgram } from "./program.js";

export interface ProblemResult {
  id: string;
  level: number;
  answer: string;
  /** The program's answer (the majority for sc), or null if no sample had one. */
  predicted: string | null;
  correct: boolean;
  /** Samples an answer could be extracted from, out of `samples`. */
  extracted: number;
  samples: number;
  generatedTokens: number;
  latencyMs: number;
}

export interface RunEvalOptions {
  generator: EvalGenerator;
  task: Task;
  problems: readonly TaskProblem[];
  program: EvalProgram;
  seed: number;
  maxTokens: number;
  /** Problems in flight at once. */
  concurrency: number;
  onProblemDone?: (done: number, total: number) => void;
  signal?: AbortSignal;
}

export async function runEval(o: RunEvalOptions): Promise<ProblemResult[]> {
  const results: ProblemResult[] = new Array(o.problems.length);
  const k = o.program.samples;
  let next = 0;
  let done = 0;
  const worker = async (): Promise<void> => {
    while (next < o.problems.length) {
      o.signal?.throwIfAborted();
      const index = next++;
      const p = o.problems[index];
      const prompt = o.generator.encodeChat(p.messages);
      const maxTokens = Math.min(o.maxTokens, o.generator.contextTokens - prompt.length);
      // Sample i of problem `index` uses seed + index * k + i: no two samples share a seed.
      const sc = new SelfConsistency({
        prompt,
        task: o.task,
        maxBranches: k,
        branchesPerRound: k,
        temperature: o.program.temperature,
        seed: o.seed + index * k,
        maxTokens,
      });
      const started = performance.now();
      const r = await o.generator.run(sc, { policy: { kind: "baseline-even" }, signal: o.signal });
      const latencyMs = performance.now() - started;
      o.signal?.throwIfAborted();
      const branches = sc.state.branches;
      results[index] = {
        id: p.id,
        level: p.level,
        answer: p.answer,
        predicted: r.answer,
        correct: o.task.equivalent(r.answer, p.answer),
        extracted: branches.filter((b) => b.answer !== null).length,
        samples: branches.length,
        generatedTokens: r.tokensUsed,
        latencyMs,
      };
      o.onProblemDone?.(++done, o.problems.length);
    }
  };
  await Promise.all(Array.from({ length: Math.max(1, Math.min(o.concurrency, o.problems.length)) }, worker));
  return results;
}
