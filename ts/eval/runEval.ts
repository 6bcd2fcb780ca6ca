// Runs an evaluation program over a task's problems on an EvalGenerator, keeping `concurrency` problems in
// flight so the engine can batch them, and scores every problem.
import type { EvalGenerator } from "./generator.js";
import type { EvalProgram } from "./program.js";
import type { EvalProblem, EvalTask } from "./task.js";
import { majorityVote } from "../certaindex/signals.js";

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
  task: EvalTask;
  problems: readonly EvalProblem[];
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
  let next = 0;
  let done = 0;
  const worker = async (): Promise<void> => {
    while (next < o.problems.length) {
      o.signal?.throwIfAborted();
      const index = next++;
      const p = o.problems[index];
      const prompt = o.generator.encodeChat(p.messages);
      const maxTokens = Math.min(o.maxTokens, o.generator.contextTokens - prompt.length);
      const started = performance.now();
      // Sample i of problem `index` uses seed + index * samples + i: no two samples share a seed.
      const c = await o.generator.complete({ prompt, n: o.program.samples, temperature: o.program.temperature, seed: o.seed + index * o.program.samples, maxTokens });
      const latencyMs = performance.now() - started;
      const answers = c.texts.map((t) => o.task.extractAnswer(t));
      const vote = majorityVote(answers, (a, b) => o.task.equivalent(a, b));
      results[index] = {
        id: p.id,
        level: p.level,
        answer: p.answer,
        predicted: vote.answer,
        correct: o.task.equivalent(vote.answer, p.answer),
        extracted: answers.filter((a) => a !== null).length,
        samples: c.texts.length,
        generatedTokens: c.generatedTokens,
        latencyMs,
      };
      o.onProblemDone?.(++done, o.problems.length);
    }
  };
  await Promise.all(Array.from({ length: Math.max(1, Math.min(o.concurrency, o.problems.length)) }, worker));
  return results;
}
