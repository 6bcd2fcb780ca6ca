// The one public entry: named exports only.

// Devices and the native surface
export { listDevices, formatDevices } from "./device/devices.js";
export type { DeviceReport } from "./device/devices.js";
export { loadAddon } from "./native/loadAddon.js";
export type { Addon, DType, DeviceKind, NativeOps, NativeTensor } from "./native/addonTypes.js";

// Models: Hugging Face checkpoints, tokenizers, chat templates, single-sequence generation
export { loadModel, Model } from "./model/model.js";
export type { LoadModelOptions, GenerateInput } from "./model/model.js";
export type { GenerateParams, GenerateResult } from "./model/generate.js";
export { openModelFiles } from "./model/modelFiles.js";
export { readModelConfig, parseModelConfig, computeInvFreq } from "./model/config.js";
export type { ModelConfig } from "./model/config.js";
export { openSafetensors } from "./model/safetensors.js";
export { writeSafetensors } from "./model/safetensorsWriter.js";
export { ModelTokenizer } from "./model/tokenizer.js";
export { ByteLevelDetokenizer, IncrementalDetokenizer } from "./model/detokenizer.js";
export type { ChatMessage } from "./model/chatTemplate.js";

// Engine: continuous batching over paged KV, fork/truncate, prefix cache, preemption, streaming, abort
export * from "./engine/index.js";
export * from "./sched/index.js";

// Determinism regression tooling (what `deliberate determinism` runs): golden files carry their provenance
export { hashTokens, firstDivergence, makeGolden, parseGolden, checkGolden } from "./determinism/golden.js";
export type { GoldenFile, GoldenMismatch, CheckGoldenOptions } from "./determinism/golden.js";
export { modelHash, describeDevice, kernelEnvironment, compareProvenance } from "./determinism/provenance.js";
export type { Provenance, ProvenanceMismatch } from "./determinism/provenance.js";
export { parsePromptsFile } from "./determinism/prompts.js";
export { summarize } from "./determinism/report.js";
export type { PromptReport } from "./determinism/report.js";
export { runDeterminismCheck } from "./determinism/runner.js";
export type { CheckParams } from "./determinism/runner.js";

// The arithmetic reasoning task and its answer checking
export * as arith from "./tasks/arith/index.js";

// Reasoning programs and certaindex
export * from "./programs/index.js";

// Reasoning tasks and the evaluation harness (issue 7).
export { answersEquivalent, completionOf, extractAnswer, problemSet, splitOf, verifyStepLine, verifyThought } from "./tasks/arith/index.js";
export type { ArithProblem, Level, Split, Step } from "./tasks/arith/index.js";
export { arithTask, getTask } from "./eval/task.js";
export type { EvalProblem, EvalTask } from "./eval/task.js";
export { majorityVote } from "./eval/vote.js";
export type { AnswerCluster as VoteCluster, Vote } from "./eval/vote.js";
export { engineGenerator } from "./eval/generator.js";
export type { Completion, CompletionRequest, EvalGenerator } from "./eval/generator.js";
export { parseProgram } from "./eval/program.js";
export type { EvalProgram } from "./eval/program.js";
export { runEval } from "./eval/runEval.js";
export type { ProblemResult, RunEvalOptions } from "./eval/runEval.js";
export { buildReport, formatReport } from "./eval/report.js";
export type { EvalReport, LevelReport } from "./eval/report.js";
export { bundledModelDir } from "./eval/bundledModel.js";
