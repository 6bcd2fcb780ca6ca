// The evaluation harness's tasks are the library's tasks (ts/tasks); eval needs their labelled problems.
export { arithTask, getTask } from "../tasks/index.js";
export type { Task as EvalTask, TaskProblem as EvalProblem } from "../tasks/index.js";
