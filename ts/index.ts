// The one public entry: named exports only.
export { listDevices, formatDevices } from "./device/devices.js";
export type { DeviceReport } from "./device/devices.js";
export { loadAddon } from "./native/loadAddon.js";
export type { Addon, DType, DeviceKind, NativeOps, NativeTensor } from "./native/addonTypes.js";
// Reasoning tasks and the evaluation harness (issue 7).
export { answersEquivalent, completionOf, extractAnswer, problemSet, splitOf, verifyStepLine, verifyThought } from "./tasks/arith/index.js";
export type { ArithProblem, Level, Split, Step } from "./tasks/arith/index.js";
export { arithTask, getTask } from "./eval/task.js";
export type { EvalProblem, EvalTask } from "./eval/task.js";
export { majorityVote } from "./eval/vote.js";
export type { AnswerCluster, Vote } from "./eval/vote.js";
export { engineGenerator } from "./eval/generator.js";
export type { Completion, CompletionRequest, EvalGenerator } from "./eval/generator.js";
export { parseProgram } from "./eval/program.js";
export type { EvalProgram } from "./eval/program.js";
export { runEval } from "./eval/runEval.js";
export type { ProblemResult, RunEvalOptions } from "./eval/runEval.js";
export { buildReport, formatReport } from "./eval/report.js";
export type { EvalReport, LevelReport } from "./eval/report.js";
export { bundledModelDir } from "./eval/bundledModel.js";
