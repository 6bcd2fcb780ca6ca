// Evaluation tasks: labelled problems as chats, plus how to read and compare answers. One registry, by name.
import type { ChatMessage } from "../model/chatTemplate.js";
import { answersEquivalent, extractAnswer, problemSet, splits, type Split } from "../tasks/arith/index.js";

export interface EvalProblem {
  /** Stable within a task, e.g. the canonical expression. */
  id: string;
  /** Difficulty level (tasks without levels use 1). */
  level: number;
  messages: ChatMessage[];
  answer: string;
}

export interface EvalTask {
  name: string;
  splits: readonly string[];
  problems(opts: { split: string; n: number; seed: number }): EvalProblem[];
  extractAnswer(text: string): string | null;
  equivalent(a: string | null, b: string | null): boolean;
}

export const arithTask: EvalTask = {
  name: "arith",
  splits,
  problems({ split, n, seed }) {
    return problemSet({ split: split as Split, n, seed }).map((p) => ({
      id: p.expression,
      level: p.level,
      messages: [{ role: "user", content: p.question }],
      answer: p.answer,
    }));
  },
  extractAnswer,
  equivalent: answersEquivalent,
};

const registry: Record<string, EvalTask> = { arith: arithTask };

/** The task called `name` with `split` checked; throws naming the known tasks/splits. */
export function getTask(name: string, split?: string): EvalTask {
  const task = registry[name];
  if (!task) throw new Error(`unknown task '${name}'; known tasks: ${Object.keys(registry).join(", ")}`);
  if (split !== undefined && !task.splits.includes(split)) {
    throw new Error(`task ${name} has no split '${split}'; use one of ${task.splits.join(", ")}`);
  }
  return task;
}
