// The library's entry, `deliberate`: what an app embedding the engine needs, named exports only. The HTTP server
// and the cluster are entries of their own (`deliberate/server`, `deliberate/cluster`: ts/server/index.ts,
// ts/cluster/index.ts), so importing the library loads neither fastify nor NATS. Nothing inside ts/ imports this file.

// Devices and the native surface
export { listDevices, formatDevices } from "./device/devices.js";
export type { DeviceReport } from "./device/devices.js";
export { describeModelWeights, formatWeightsReport } from "./model/quantized/weightsReport.js";
export type { WeightsReport, WeightFormatBytes } from "./model/quantized/weightsReport.js";
export type { Addon, DType, DeviceKind, NativeOps, NativeTensor } from "./native/addonTypes.js";

// Models: Hugging Face checkpoints, tokenizers, chat templates, single-sequence generation
export { loadModel, Model } from "./model/model.js";
export type { LoadModelOptions, GenerateInput } from "./model/model.js";
export type { GenerateParams, GenerateResult } from "./model/generate.js";
export { readModelConfig } from "./model/config.js";
export { readPrmConfig, PRM_FILE } from "./model/prmConfig.js";
export type { PrmConfig } from "./model/prmConfig.js";
export type { ModelConfig } from "./model/config.js";
export { ModelTokenizer } from "./model/tokenizer.js";
export { ByteLevelDetokenizer, IncrementalDetokenizer } from "./model/detokenizer.js";
export type { ChatMessage } from "./model/chatTemplate.js";

// Engine: continuous batching over paged KV, fork/truncate, prefix cache, preemption, streaming, abort
export * from "./engine/index.js";
export * from "./sched/index.js";

// Determinism regression tooling (what `deliberate determinism` runs): golden files carry their provenance
export {
  hashTokens,
  firstDivergence,
  makeGolden,
  parseGolden,
  checkProvenance,
  checkGolden,
} from "./determinism/golden.js";
export type { GoldenFile, GoldenMismatch, CheckGoldenOptions } from "./determinism/golden.js";
export { modelHash, describeDevice, kernelKnobs, compareProvenance } from "./determinism/provenance.js";
export type { Provenance, ProvenanceMismatch } from "./determinism/provenance.js";
export { parsePromptsFile } from "./determinism/prompts.js";
export { summarize } from "./determinism/report.js";
export type { PromptReport } from "./determinism/report.js";
export { runDeterminismCheck } from "./determinism/runner.js";
export type { CheckParams } from "./determinism/runner.js";

// Reasoning programs and certaindex
export * from "./programs/index.js";

// Tasks, injected into programs (how answers are read, compared and probed, how steps are checked) and into eval
// (labelled problems): the Task interface, the two built-in tasks, and lookup by name (CLI --task / --verifier)
export { arithTask, gsm8kTask, getTask, parseVerifier, TASK_NAMES, VERIFIER_NAMES } from "./tasks/index.js";
export type { Task, TaskProblem } from "./tasks/index.js";

// The evaluation harness (`deliberate eval`): a task's problems through SelfConsistency, scored per level
export { engineGenerator } from "./eval/generator.js";
export type { EngineGeneratorOptions, EvalGenerator } from "./eval/generator.js";
export { parseProgram, programName } from "./eval/program.js";
export type { EvalProgram } from "./eval/program.js";
export { runEval } from "./eval/runEval.js";
export type { ProblemResult, RunEvalOptions } from "./eval/runEval.js";
export { buildReport, formatReport } from "./eval/report.js";
export type { EvalReport, LevelReport } from "./eval/report.js";

// The bundled tiny reasoner (models/tiny-reasoner in the installed package)
export { bundledModelDir, bundledPrmDir } from "./bundledModel.js";

// DUCHESS probes: the MLPs, their file (checked against the model it steers) and their training (`deliberate probe train`)
export {
  loadProbe,
  saveProbe,
  correctnessOf,
  predictedTokensOf,
  isProbeLabel,
  PROBE_LABELS,
  PROBE_SUBDIR,
  PROBE_FILE_VERSION,
} from "./probe/probeFile.js";
export type {
  DuchessProbe,
  ProbeLabel,
  ProbeMeta,
  ProbeTarget,
  CorrectnessMeta,
  DifficultyMeta,
  OrchestrationMeta,
} from "./probe/probeFile.js";
export { trainProbe } from "./eval/probeTrain.js";
export type { ProbeTrainOptions, ProbeTrainResult, LayerReport } from "./eval/probeTrain.js";

// Errors: every library error is a DeliberateError with a stable code and the field at fault (docs/errors.md)
export * from "./errors/index.js";
