// A reasoning task as programs and the evaluation harness see it: how to read, compare and probe for answers,
// optionally how to check a step (the programmatic verifier of Rebase / MCTS), and labelled problems (eval).
// Programs never import a task: the caller injects one (a program's `task` option, `buildProgram(kind, { task })`,
// `deliberate run --task`, `runEval({ task })`), so a program runs on any task that implements this.
import type { ChatMessage } from "../model/chatTemplate.js";
import type { ProgramTask } from "../programs/task.js";

export interface TaskProblem {
  /** Stable within a task, e.g. the canonical expression. */
  id: string;
  /** Difficulty level (tasks without levels use 1). */
  level: number;
  messages: ChatMessage[];
  answer: string;
}

/** A task: what programs need (ProgramTask: answers, the CoT probe, step checks) plus labelled problems for eval. */
export interface Task extends ProgramTask {
  name: string;
  /** Splits with labelled problems (empty: the task brings none, e.g. an answer format for your own data). */
  splits: readonly string[];
  /** Labelled problems of a split (throws for a task with none). */
  problems(opts: { split: string; n: number; seed: number }): TaskProblem[];
}
