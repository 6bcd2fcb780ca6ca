// The tasks by name (`deliberate run --task`, `eval --task`, `run --verifier`), and the Task interface they implement.
import type { RewardSource } from "../programs/rewards.js";
import { arithTask } from "./arith/task.js";
import { gsm8kTask } from "./gsm8k.js";
import type { Task } from "./task.js";

export type { Task, TaskProblem } from "./task.js";
export { arithTask, gsm8kTask };

const TASKS: Readonly<Record<string, Task>> = { arith: arithTask, gsm8k: gsm8kTask };
export const TASK_NAMES: readonly string[] = Object.keys(TASKS);

/** The task called `name` (and, when given, with labelled problems in `split`); throws naming the known ones. */
export function getTask(name: string, split?: string): Task {
  const task = TASKS[name];
  if (!task) throw new Error(`unknown task '${name}'; known tasks: ${TASK_NAMES.join(", ")}`);
  if (split !== undefined && !task.splits.includes(split)) {
    const has =
      task.splits.length > 0
        ? `use one of ${task.splits.join(", ")}`
        : "it ships no problems (it is an answer format for your own data)";
    throw new Error(`task ${name} has no split '${split}'; ${has}`);
  }
  return task;
}

/** The tasks that check their own steps, by name: the programmatic verifiers of `deliberate run --verifier`. */
export const VERIFIER_NAMES: readonly string[] = TASK_NAMES.filter((n) => TASKS[n].stepVerifier !== undefined);

export function parseVerifier(name: string): RewardSource {
  const v = TASKS[name]?.stepVerifier;
  if (v === undefined)
    throw new Error(
      `verifier "${name}" is unknown; expected one of ${VERIFIER_NAMES.join(", ")} (or --prm DIR for a process reward model)`,
    );
  return v;
}
